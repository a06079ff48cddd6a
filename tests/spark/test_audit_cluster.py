"""End to end: a real cluster (etcd, pd-server, two pumps, a MariaDB drainer, the writer on an sqlite store).

After a workload the drainer's replica must equal the upstream under `binlog-spark audit`, and the
pumps' streams must be complete under `audit-binlog`.  Then one pump is stopped and one commit
record is cut out of its value log — the record's bytes removed from the `.vlog` file, everything
else (the LevelDB index, the other records, the file footer) left as it is; `audit-binlog` reads
the value logs only — and that transaction must be reported as a missing commit.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from common.pb import binlog_pb2
from common.vlog_record import HEADER_SIZE
from spark_jobs.audit.cli import add_parsers
from spark_jobs.readers.pump import find_pump_dirs, pump_ranges, scan_raw
from tests.functional.drainerutil import Cluster
from tests.harness.mysql import MySQLDSN
from upstream.ddl import Column
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.functional]


def _cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="binlog-spark")
    add_parsers(p.add_subparsers(required=True))
    args = p.parse_args(argv)
    status: int = args.func(args)
    return status


def _cut_commit(pump_dir: Path, start_ts: int) -> None:
    """Remove the commit record of `start_ts` from the pump's value log (bytes cut out, nothing else changed)."""
    (pd,) = find_pump_dirs([str(pump_dir)])
    for row in (row for r in pump_ranges([pd]) for row in scan_raw(r)):
        _, path, offset, tp, ts, _, _ = row
        if tp == binlog_pb2.Commit and ts == start_ts:
            data = Path(path).read_bytes()
            length = int.from_bytes(data[offset + 4 : offset + 12], "little")
            Path(path).write_bytes(data[:offset] + data[offset + HEADER_SIZE + length :])
            return
    raise AssertionError(f"no commit record of start_ts={start_ts} in {pump_dir}")


def test_drainer_replica_equals_upstream_and_a_cut_commit_is_found(
    spark: SparkSession, tmp_path: Path, mysql_server: MySQLDSN, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = Cluster(tmp_path, mysql_server, pumps=2)  # type: ignore[arg-type]  # same fields as common.dsn's
    try:
        drainer = cluster.drainer("--syncer.worker-count", "4")
        db = cluster.writer()
        name = cluster.dbname("spark_audit")
        sb = make_workload("sysbench", WorkloadOptions(database=name, tables=2, table_size=60))
        sb.setup(db)
        db.create_table(
            name, "by_text", [Column("k", "VARCHAR(16)", nullable=False), Column("v", "INT")], primary_key=["k"]
        )
        for i in range(40):
            txn = db.begin()
            txn.insert(f"{name}.by_text", {"k": f"key-{i:03d}", "v": i})
            last_start = txn.start_ts
            txn.commit()
        result = run(db, sb, threads=2, seed=11, txns=80)
        assert result.crashed == [], result.summary()
        cluster.wait_applied(drainer, cluster.now())

        up = ["--upstream", f"sqlite:{cluster.upstream_path}"]
        down = ["--downstream", mysql_server.with_database(name).url()]
        report = tmp_path / "audit.json"
        assert _cli(["audit", *up, *down, "--chunk-size", "25", "--json", str(report)]) == 0, capsys.readouterr()
        doc = json.loads(report.read_text())
        tables = {t["table"]: t for t in doc["tables"]}
        assert set(tables) == {f"{name}.sbtest1", f"{name}.sbtest2", f"{name}.by_text"}
        assert all(t["upstream_rows"] == t["downstream_rows"] > 0 for t in tables.values())
        assert all(t["chunks"] > 1 for t in tables.values())

        pumps = [str(p.data_dir) for p in cluster.pumps]
        status = ["--txn-status", str(cluster.upstream_path)]
        capsys.readouterr()
        assert _cli(["audit-binlog", "--pumps", *pumps, *status, "--format", "json"]) == 0
        clean = json.loads(capsys.readouterr().out)
        assert clean["committed_checked"] >= 40 + 80
        assert clean["records"]["commit"] >= clean["committed_checked"]

        owner = next(p for p in cluster.pumps if _has_commit(p.data_dir, last_start))
        owner.stop()
        _cut_commit(owner.data_dir, last_start)
        assert _cli(["audit-binlog", "--pumps", *pumps, *status, "--format", "json"]) == 1
        broken = json.loads(capsys.readouterr().out)
        assert {k: n for k, n in broken["findings"].items() if n} == {"missing_commit": 1}
        (example,) = broken["examples"]
        assert example["start_ts"] == last_start
        assert example["pumps"] == [owner.name]
        assert example["detail"] == f"prewrite in {owner.name}, no commit record"
    finally:
        cluster.close()


def _has_commit(pump_dir: Path, start_ts: int) -> bool:
    (pd,) = find_pump_dirs([str(pump_dir)])
    return any(row[3] == binlog_pb2.Commit and row[4] == start_ts for r in pump_ranges([pd]) for row in scan_raw(r))
