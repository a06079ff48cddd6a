"""`binlog-spark audit-binlog` on pump data directories written through the pump's own value log.

Each finding is planted once (a prewrite without its commit, a commit without its prewrite, a
commit in two pumps, a wrong commit_ts, a shared commit_ts, a commit of a rolled-back
transaction) and must be reported for exactly that start_ts.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from common.pb import binlog_pb2
from common.txnstatus import TABLE, TxnStatusStore
from spark_jobs.audit.binlog import KINDS, run_audit_binlog
from spark_jobs.audit.cli import add_parsers
from tests.spark.vlogutil import txn_binlogs, write_pump_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="binlog-spark")
    add_parsers(p.add_subparsers(required=True))
    args = p.parse_args(argv)
    status: int = args.func(args)
    return status


def _fake(ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=ts, commit_ts=ts)


def _status(path: Path, rows: list[tuple[int, str, int]]) -> str:
    store = TxnStatusStore.open(str(path))
    store.ensure_schema()
    store.close()
    conn = sqlite3.connect(path)
    conn.executemany(f"INSERT INTO {TABLE} (start_ts, state, commit_ts, ttl_deadline) VALUES (?, ?, ?, 0)", rows)
    conn.commit()
    conn.close()
    return str(path)


def _clean(tmp: Path) -> tuple[list[str], str]:
    p1, p2 = tmp / "p1", tmp / "p2"
    write_pump_dir(p1, [*txn_binlogs(100, 105), *txn_binlogs(110, 115), _fake(117)], node_id="pump-1")
    write_pump_dir(p2, [*txn_binlogs(120, 125), _fake(130)], node_id="pump-2")
    rows = [(100, "committed", 105), (110, "committed", 115), (120, "committed", 125), (140, "rolled_back", 0)]
    return [str(p1), str(p2)], _status(tmp / "status.db", rows)


def test_consistent_streams_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pumps, status = _clean(tmp_path)
    assert _cli(["audit-binlog", "--pumps", *pumps, "--txn-status", status, "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == ("audit-binlog OK: 2 pumps, 3 commits, 3 prewrites, 0 rollbacks, 2 fake binlogs")
    assert "3 committed transactions checked" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["ok"] is True
    assert doc["pumps"] == ["pump-1", "pump-2"]
    assert doc["findings"] == dict.fromkeys(KINDS, 0)


def test_every_finding_is_reported_with_its_start_ts(spark: SparkSession, tmp_path: Path) -> None:
    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    prewrite_only, _ = txn_binlogs(200, 205)
    _, commit_only = txn_binlogs(210, 215)
    dup = txn_binlogs(220, 225)
    write_pump_dir(
        p1,
        [
            *txn_binlogs(100, 105),
            prewrite_only,  # committed upstream, commit record lost
            commit_only,  # no prewrite in this pump
            *dup,
            *txn_binlogs(230, 235),  # upstream says 236
            *txn_binlogs(240, 245),
            *txn_binlogs(260, 265),  # rolled back upstream
        ],
        node_id="pump-1",
    )
    write_pump_dir(p2, [*txn_binlogs(220, 225), *txn_binlogs(250, 245), _fake(270)], node_id="pump-2")
    status = _status(
        tmp_path / "status.db",
        [
            (100, "committed", 105),
            (200, "committed", 205),
            (220, "committed", 225),
            (230, "committed", 236),
            (240, "committed", 245),
            (250, "committed", 245),
            (260, "rolled_back", 0),
        ],
    )
    report = run_audit_binlog(spark, [str(p1), str(p2)], txn_status=status)
    assert report.exit_status == 1
    assert report.counts == {
        "missing_commit": 1,
        "commit_ts_mismatch": 1,
        "not_committed_upstream": 1,
        "duplicate_commit": 1,
        "orphan_commit": 1,  # 210 only: 220's second commit has its prewrite in pump-2
        "shared_commit_ts": 1,
    }
    found = {(e["kind"], e["start_ts"]) for e in report.examples}
    assert found == {
        ("missing_commit", 200),
        ("commit_ts_mismatch", 230),
        ("not_committed_upstream", 260),
        ("duplicate_commit", 220),
        ("orphan_commit", 210),
        ("shared_commit_ts", 240),
    }
    missing = next(e for e in report.examples if e["kind"] == "missing_commit")
    assert missing["pumps"] == ["pump-1"]
    assert missing["detail"] == "prewrite in pump-1, no commit record"
    assert missing["commit_ts"] == 205
    shared = next(e for e in report.examples if e["kind"] == "shared_commit_ts")
    assert shared["detail"] == "commit_ts used by start_ts 240, 250"
    assert report.unknown_commits == 1  # 210 has no status row
    text = report.render()
    assert "start_ts=200 commit_ts=205 pumps=pump-1: prewrite in pump-1, no commit record" in text
    # without the txn-status store: the stream checks only
    streams = run_audit_binlog(spark, [str(p1), str(p2)])
    assert {k for k, n in streams.counts.items() if n} == {"duplicate_commit", "orphan_commit", "shared_commit_ts"}
    # --since-ts leaves older transactions out of the txn-status checks
    later = run_audit_binlog(spark, [str(p1), str(p2)], txn_status=status, since_ts=201)
    assert later.counts["missing_commit"] == 0
    assert later.committed_checked == 4  # 220, 230, 240, 250


def test_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pumps, _ = _clean(tmp_path)
    not_pump = tmp_path / "empty"
    not_pump.mkdir()
    assert _cli(["audit-binlog", "--pumps", pumps[0], str(not_pump)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == f"binlog-spark audit-binlog: {not_pump} is not a pump data directory: no value/NNNNNN.vlog files in it"
    )
    assert _cli(["audit-binlog", "--pumps", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert _cli(["audit-binlog", "--pumps", *pumps, "--txn-status", str(tmp_path / "none.db")]) == 2
    assert capsys.readouterr().err.strip().endswith("none.db: no such sqlite file")
    assert not (tmp_path / "none.db").exists()
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    assert _cli(["audit-binlog", "--pumps", *pumps, "--txn-status", str(other)]) == 2
    assert f"cannot read {TABLE}: no such table" in capsys.readouterr().err
    assert _cli(["audit-binlog", "--pumps", *pumps, "--txn-status", "mysql://root@127.0.0.1:1/x"]) == 2
    assert "cannot connect to mysql://root@127.0.0.1:1/x" in capsys.readouterr().err
    assert _cli(["audit-binlog", "--pumps", *pumps, "--txn-status", "mysql://root@127.0.0.1:1"]) == 2
    assert "names its database" in capsys.readouterr().err
