"""The test harness itself: MySQL discovery, per-test databases, process management."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.mysql import MySQLDSN, find_mysql
from tools.procs import ManagedProcess, ProcessError, free_port

pytestmark = pytest.mark.functional
ROOT = Path(__file__).resolve().parents[2]
RECORD_DB_ENV = "HARNESS_TEST_RECORD_DB"
"""A file the child test below writes its database's name to (set by the test that checks the drop)."""


def test_mysql_db_is_a_fresh_database_that_works(mysql_db: MySQLDSN) -> None:
    assert mysql_db.database is not None
    assert mysql_db.database.startswith("t_")
    if record := os.environ.get(RECORD_DB_ENV):
        Path(record).write_text(mysql_db.database)
    conn = mysql_db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW TABLES")
            assert cur.fetchall() == ()
            cur.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(10))")
            cur.execute("INSERT INTO t VALUES (1, 'a')")
            cur.execute("SELECT v FROM t WHERE id = 1")
            assert cur.fetchone() == ("a",)
    finally:
        conn.close()


def test_each_test_database_is_dropped_afterwards(mysql_server: MySQLDSN, tmp_path: Path) -> None:
    # run a test that uses mysql_db in a child pytest, then check its own database is gone (other
    # tests, on the other xdist worker, create and drop databases of their own meanwhile)
    marker = ROOT / "tests" / "functional" / "test_harness.py::test_mysql_db_is_a_fresh_database_that_works"
    record = tmp_path / "database"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
        env={**os.environ, RECORD_DB_ENV: str(record)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    name = record.read_text()
    assert name.startswith("t_")
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE %s", (name,))
            assert cur.fetchall() == ()
    finally:
        conn.close()


def _run_mysql_test_without_mysql(ci: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CI=ci, BINLOG_TEST_MYSQL_DSN=f"mysql://root@127.0.0.1:{free_port()}")
    target = "tests/functional/test_harness.py::test_mysql_db_is_a_fresh_database_that_works"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", target],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
        check=False,
    )


def test_missing_mysql_skips_with_reason_outside_ci() -> None:
    done = _run_mysql_test_without_mysql("false")
    assert done.returncode == 0, done.stdout
    assert "1 skipped" in done.stdout
    assert "no MySQL available" in done.stdout


def test_missing_mysql_fails_under_ci() -> None:
    done = _run_mysql_test_without_mysql("true")
    assert done.returncode != 0
    assert "CI=true but no MySQL is available" in done.stdout


def test_dsn_parsing() -> None:
    dsn = MySQLDSN.parse("mysql://u:p%40ss@db.example:3307/app")
    assert (dsn.host, dsn.port, dsn.user, dsn.password, dsn.database) == ("db.example", 3307, "u", "p@ss", "app")
    assert MySQLDSN.parse("root@127.0.0.1") == MySQLDSN()


def test_find_mysql_reports_why_an_env_dsn_is_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BINLOG_TEST_MYSQL_DSN", f"mysql://root@127.0.0.1:{free_port()}")
    dsn, reason, private = find_mysql()
    assert dsn is None
    assert private is None
    assert "127.0.0.1" in reason


def test_process_that_dies_during_start_reports_its_log(tmp_path: Path) -> None:
    proc = ManagedProcess("doomed", [sys.executable, "-c", "print('boom: bad flag'); raise SystemExit(3)"],
                          tmp_path / "doomed.log")  # fmt: skip
    proc.start()
    with pytest.raises(ProcessError, match=r"(?s)doomed exited with status 3.*boom: bad flag"):
        proc.wait_ready(lambda: False, timeout=30)
    proc.stop()


def test_stop_escalates_to_kill(tmp_path: Path) -> None:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(60)"
    proc = ManagedProcess("stubborn", [sys.executable, "-c", code], tmp_path / "stubborn.log")
    proc.start()
    proc.wait_ready(lambda: "up" in proc.log_tail(), timeout=30)
    proc.stop(timeout=0.5)
    assert not proc.alive


def test_failed_test_prints_the_server_logs(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_child.py").write_text(
        "def test_fails(etcd_server):\n    assert etcd_server.process.alive\n    assert False, 'intended failure'\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "intended failure" in done.stdout
    assert "===== etcd log" in done.stdout
    assert "--- start etcd" in done.stdout
