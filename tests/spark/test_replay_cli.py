"""`binlog-spark replay` / `export-ddl` on bad input: one clear line on stderr, non-zero exit, nothing written.

These run the real command as a process; every case fails before a Spark session starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.pb import binlog_pb2
from spark_jobs.readers.ddl import read_export, write_export
from tests.spark.historyutil import HistoryBuilder
from tests.spark.vlogutil import write_pump_dir
from upstream.ddl import Column

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def spark_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_jobs.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, str]:
    """A pump directory with one binlog and a DDL export with one table."""
    write_pump_dir(tmp_path / "pump", [binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=5, commit_ts=5)])
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    h.add(lambda p: p.create_table("d", "t", [Column("id", "INT", nullable=False)], primary_key=["id"]), ts=2)
    write_export(h.jobs, tmp_path / "ddl.json")
    return {"pump": str(tmp_path / "pump"), "ddl": str(tmp_path / "ddl.json"), "tmp": str(tmp_path)}


def test_not_a_pump_directory(inputs: dict[str, str]) -> None:
    empty = Path(inputs["tmp"]) / "empty"
    empty.mkdir()
    proc = spark_cli("replay", "--from-pumps", str(empty), "--to", "sqlite:///x.db", "--ddl-history", inputs["ddl"])
    assert proc.returncode == 1
    assert (
        one_line(proc) == f"binlog-spark replay: {empty} is not a pump data directory: no value/NNNNNN.vlog files in it"
    )
    assert not (ROOT / "x.db").exists()


def test_not_a_file_sink_directory(inputs: dict[str, str]) -> None:
    proc = spark_cli("replay", "--from-files", inputs["pump"], "--to", "sqlite:///x.db", "--ddl-history", inputs["ddl"])
    assert proc.returncode == 1
    assert "is not a drainer file-sink directory: no binlog-* files" in one_line(proc)


def test_dsn_that_cannot_connect(inputs: dict[str, str]) -> None:
    proc = spark_cli(
        "replay", "--from-pumps", inputs["pump"], "--to", "mysql://root@127.0.0.1:1", "--ddl-history", inputs["ddl"]
    )
    assert proc.returncode == 1
    line = one_line(proc)
    assert line.startswith("binlog-spark replay: cannot connect to mysql://root@127.0.0.1:1: "), line


def test_no_ddl_history_and_bad_export(inputs: dict[str, str]) -> None:
    proc = spark_cli("replay", "--from-pumps", inputs["pump"], "--to", "sqlite:///x.db")
    assert proc.returncode == 1
    assert "no DDL history: give --ddl-history FILE" in one_line(proc)
    bad = Path(inputs["tmp"]) / "bad.json"
    bad.write_text('{"format": "something else"}')
    proc = spark_cli("replay", "--from-pumps", inputs["pump"], "--to", "sqlite:///x.db", "--ddl-history", str(bad))
    assert proc.returncode == 1
    assert "not a binlog-spark-ddl-history file" in one_line(proc)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to", "postgres://h/db"], "expected mysql://user:pass@host:port or sqlite:///path.db"),
        (["--to", "mysql://h:3306/db"], "give no database"),
        (["--to", "sqlite:///a.db", "--to-parquet", "p"], "give exactly one of --to"),
        (["--to", "sqlite:///a.db", "--db-prefix", "x_"], "--db-prefix applies to a MySQL target only"),
        (["--to", "sqlite:///a.db", "--tables", "nodot"], "--tables 'nodot': expected db.table"),
        (["--to", "sqlite:///a.db", "--start-ts", "9", "--stop-ts", "3"], "--start-ts 9 is not below --stop-ts 3"),
    ],
)
def test_bad_flags(inputs: dict[str, str], args: list[str], message: str) -> None:
    proc = spark_cli("replay", "--from-pumps", inputs["pump"], "--ddl-history", inputs["ddl"], *args)
    assert proc.returncode == 1
    assert message in one_line(proc)


def test_usage_errors_exit_2() -> None:
    proc = spark_cli("replay", "--to", "sqlite:///a.db")
    assert proc.returncode == 2
    assert "one of the arguments --from-pumps --from-files --from-pump-addrs --from-cluster is required" in one_line(
        proc
    )
    proc = spark_cli("replay", "--from-files", "x", "--stop-ts", "soon")
    assert proc.returncode == 2
    assert "'soon' is not a TSO" in one_line(proc)


def test_export_ddl_unreachable_etcd(tmp_path: Path) -> None:
    out = tmp_path / "ddl.json"
    proc = spark_cli("export-ddl", "--pd-urls", "http://127.0.0.1:1", "--out", str(out))
    assert proc.returncode == 1
    assert "cannot read the DDL history from etcd http://127.0.0.1:1" in one_line(proc)
    assert not out.exists()


def test_export_round_trip(tmp_path: Path) -> None:
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    h.add(lambda p: p.create_table("d", "t", [Column("id", "INT", nullable=False)], primary_key=["id"]), ts=2)
    write_export(list(reversed(h.jobs)), tmp_path / "x.json")
    assert read_export(tmp_path / "x.json") == h.jobs
