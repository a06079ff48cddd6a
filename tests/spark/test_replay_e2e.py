"""replay end to end: real etcd, pd-server, pumps, a file-sink drainer and a MySQL drainer, MariaDB.

One upstream (sysbench and the ddl workload: DDL churn and a table with every column type) feeds two
drainers.  The drainer's own MySQL replica equals the upstream; `replay --from-pumps` into empty
databases (prefix P) and `replay --from-files` (prefix F) each equal the upstream too, under the
audit (`common.audit`); a second `--from-pumps` run changes nothing and reports the same counts.
The replays run on the shared `local[2]` session (no second JVM): `run_replay` is what the command runs.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from common.audit import DialectReader, audit_schema, mysql_reader
from common.schema.model import Job
from common.sql.dialect import MySQLDialect
from spark_jobs.readers.ddl import read_export
from tests.functional.audit import audit_mysql, audit_sqlite
from tests.functional.drainerutil import Cluster, run_side_by_side
from tests.spark.test_replay_cli import spark_cli
from upstream.workloads import WorkloadOptions, make_workload

pytestmark = [pytest.mark.spark, pytest.mark.functional]


def audit_prefixed(cluster: Cluster, db: Any, prefix: str) -> list[str]:
    """Differences between the upstream and the downstream tables under `<prefix><db>`."""
    conn = cluster.mysql_conn()
    try:
        r = mysql_reader(conn, f"replay ({prefix})")
        side = DialectReader(r.description, MySQLDialect(prefix=prefix), r.query_all)
        s = db.store.session()
        try:
            up = DialectReader(db.store.dsn, db.store.dialect(), s.query_all)
            result = audit_schema(db.schema, up, side)
        finally:
            s.close()
    finally:
        conn.close()
    assert result.tables, "nothing was compared"
    return result.problems()


@pytest.fixture
def history(cluster: Cluster) -> dict[str, Any]:
    """Run the workloads through real pumps into both drainers; everything stopped once applied."""
    files = cluster.drainer("--syncer.db-type", "file", sink="file", name="fdrainer")
    mysql_drainer = cluster.drainer("--syncer.worker-count", "4", name="mdrainer")
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("ssb"), tables=2, table_size=60))
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname("sddl"), ddl_ratio=0.12))
    results = run_side_by_side(db, {"sb": sb, "ddl": ddl}, threads=2, seed=23, txns=120)
    for r in results.values():
        assert r.crashed == [], r.summary()
    end = cluster.now()
    cluster.wait_applied(files, end)
    cluster.wait_applied(mysql_drainer, end)
    files.stop()
    mysql_drainer.stop()
    for p in cluster.pumps:
        p.stop()  # the value logs are complete and still
    from common.schema.history import DDLHistory

    jobs: list[Job] = DDLHistory(cluster.etcd).load()
    for name in [d.name for d in db.schema.databases()]:
        for prefix in ("p_", "f_"):
            cluster.downstream_names.append(prefix + name)
    return {"db": db, "files": files.data_dir, "pumps": [str(p.data_dir) for p in cluster.pumps], "jobs": jobs}


def test_replays_equal_the_upstream(spark: Any, cluster: Cluster, history: dict[str, Any], tmp_path: Path) -> None:
    from spark_jobs.replay.job import ReplayOptions, run_replay
    from spark_jobs.replay.target import MySQLTarget, ParquetTarget, SqliteTarget

    db = history["db"]
    conn = cluster.mysql_conn()
    try:
        assert audit_mysql(db, conn) == []  # the drainer's own replica
    finally:
        conn.close()
    m = cluster.mysql
    assert m is not None
    lines: list[str] = []

    def target(prefix: str) -> MySQLTarget:
        return MySQLTarget(m.host, m.port, m.user, m.password, prefix)

    pumps = ReplayOptions(target("p_"), pump_dirs=tuple(history["pumps"]), split_size=64 << 10)
    first = run_replay(spark, pumps, history["jobs"], out=lines.append)
    assert first.written > 0
    assert first.damage.empty
    assert first.decode_errors.empty, first.decode_errors.lines()
    problems = audit_prefixed(cluster, db, "p_")
    assert problems == [], "\n".join(problems)
    assert any(line.startswith("[5/5] write:") for line in lines)
    assert "replay summary" in lines[-1]

    again = run_replay(spark, pumps, history["jobs"], out=lines.append)  # idempotent
    assert (again.tables, again.final_rows) == (first.tables, first.final_rows)
    assert audit_prefixed(cluster, db, "p_") == []

    export = tmp_path / "ddl.json"  # the file-sink replay reads the DDL history from an export
    proc = spark_cli("export-ddl", "--pd-urls", cluster.etcd_server.url, "--out", str(export))
    assert proc.returncode == 0, proc.stderr
    assert read_export(export) == sorted(history["jobs"], key=lambda j: (j.schema_version, j.id))
    files = ReplayOptions(target("f_"), files_dir=str(history["files"]), split_size=64 << 10)
    from_files = run_replay(spark, files, read_export(export), out=lines.append)
    assert from_files.decode_errors.empty, from_files.decode_errors.lines()
    problems = audit_prefixed(cluster, db, "f_")
    assert problems == [], "\n".join(problems)
    assert from_files.tables == first.tables

    path = tmp_path / "replica.db"
    run_replay(
        spark, ReplayOptions(SqliteTarget(path), pump_dirs=tuple(history["pumps"])), history["jobs"], out=lines.append
    )
    lite = sqlite3.connect(path)
    try:
        assert audit_sqlite(db, lite) == []
    finally:
        lite.close()

    # parquet, one table: the final images of exactly that table's rows
    types = next(r for r in db.schema.tables() if r.table.name == "types")
    name = f"{types.db.name}.types"
    out = tmp_path / "parquet"
    one = ReplayOptions(ParquetTarget(out), pump_dirs=tuple(history["pumps"]), tables=(name,))
    summary = run_replay(spark, one, history["jobs"], out=lines.append)
    assert [t[0] for t in summary.tables] == [name]
    snap = spark.read.parquet(str(out)).collect()
    assert {(r["schema"], r["table"]) for r in snap} == {(types.db.name, "types")}
    s = db.store.session()
    try:
        upstream_ids = sorted(
            row[0] for row in s.query_all(f"SELECT id FROM {db.store.dialect().table(types.db.name, 'types')}")
        )
    finally:
        s.close()
    assert sorted(json.loads(r["key"])[0] for r in snap) == upstream_ids
