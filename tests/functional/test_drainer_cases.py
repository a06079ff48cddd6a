"""Drainer end to end, continued: filters, the sqlite and file sinks, bad input, clean shutdown (issue 5)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from common.codec import encode_row
from common.codec.datum import Datum, Kind
from common.pb import binlog_pb2, gogo, pb_binlog_pb2
from common.pbfile import read_pb_binlogs
from common.registry import NodeKind, NodeState, Registry
from tests.functional.audit import audit_sqlite
from tests.functional.drainerutil import Cluster, unique_name
from tests.functional.pumputil import PumpClient
from tests.functional.test_drainer_e2e import assert_equal, catch_up, urlopen_put
from tools.localcluster import DrainerProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = pytest.mark.functional


def simple_table(db: Database, name: str, table: str = "t") -> None:
    if not db.schema.has_db(name):
        db.create_database(name)
    db.create_table(name, table, [Column("id", "INT", nullable=False), Column("v", "INT")], primary_key=["id"])


def insert(db: Database, table: str, ids: range) -> None:
    for i in ids:

        def body(txn: Transaction, i: int = i) -> None:
            txn.insert(table, {"id": i, "v": i})

        db.run(body)


def downstream_count(cluster: Cluster, db: str, table: str) -> int | None:
    """Rows in a downstream table, or None when the table does not exist."""
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                (db, table),
            )
            row = cur.fetchone()
            if row is None or row[0] == 0:
                return None
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
            got = cur.fetchone()
            assert got is not None
            return int(got[0])
    finally:
        conn.close()


def wait_exit(d: DrainerProcess, timeout: float = 60) -> int | None:
    wait_for(lambda: not d.process.alive, timeout, f"{d.name} exits")
    return d.process.stop()


# -------------------------------------------------------------------------------------- filters
def test_filters_and_checkpoint_over_filtered_txns(cluster: Cluster, tmp_path: Path) -> None:
    keep, other = cluster.dbname("keep"), cluster.dbname("other")
    config = tmp_path / "drainer.toml"
    config.write_text(
        f"""
[syncer]
replicate-do-db = ["{keep}"]

[[syncer.ignore-table]]
db-name = "{keep}"
tbl-name = "~^skip"

[[syncer.event-filter]]
schema-pattern = "{keep}"
table-pattern = "nodel"
ignore-event = ["delete"]

[[syncer.event-filter]]
schema-pattern = "{keep}"
table-pattern = "t"
ignore-sql = ["DROP\\\\s+COLUMN"]
""",
        encoding="utf-8",
    )
    drainer = cluster.drainer("--config", str(config))
    db = cluster.writer()
    for t in ("t", "skip_me", "nodel"):
        simple_table(db, keep, t)
    simple_table(db, other)
    insert(db, f"{keep}.t", range(10))
    insert(db, f"{keep}.skip_me", range(10))
    insert(db, f"{keep}.nodel", range(10))
    insert(db, f"{other}.t", range(10))
    for i in range(5):
        db.run(lambda txn, i=i: txn.delete(f"{keep}.nodel", i))  # type: ignore[misc]
    db.add_column(keep, "t", Column("extra", "INT"))
    db.drop_column(keep, "t", "extra")  # ignored downstream by ignore-sql: the column stays there
    insert(db, f"{keep}.t", range(10, 20))
    catch_up_ts = cluster.now()
    cluster.wait_applied(drainer, catch_up_ts)

    assert downstream_count(cluster, keep, "t") == 20
    assert downstream_count(cluster, keep, "skip_me") is None
    assert downstream_count(cluster, keep, "nodel") == 10  # deletes filtered
    assert downstream_count(cluster, other, "t") is None
    conn = cluster.mysql_conn(keep)
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW COLUMNS FROM t")
            assert [r[0] for r in cur.fetchall()] == ["id", "v", "extra"]
    finally:
        conn.close()

    # only filtered writes from now on: the checkpoint still moves past them
    insert(db, f"{other}.t", range(10, 40))
    cluster.wait_applied(drainer, cluster.now())


# ----------------------------------------------------------------------------------------- sinks
def test_sqlite_sink_passes_the_audit(cluster: Cluster) -> None:
    drainer = cluster.drainer("--syncer.db-type", "sqlite", "--syncer.worker-count", "1", sink="sqlite")
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=unique_name("sb"), tables=2, table_size=100))
    ddl = make_workload("ddl", WorkloadOptions(database=unique_name("ddl"), ddl_ratio=0.15))
    sb.setup(db)
    ddl.setup(db)
    for w in (sb, ddl):
        r = run(db, w, threads=2, seed=11, txns=150)
        assert r.crashed == [], r.summary()
    cluster.wait_applied(drainer, cluster.now())
    conn = sqlite3.connect(drainer.data_dir / "downstream.db")
    try:
        problems = audit_sqlite(db, conn)
    finally:
        conn.close()
    assert problems == [], "\n".join(problems)


def test_file_sink_records_match_the_binlogs(cluster: Cluster) -> None:
    drainer = cluster.drainer("--syncer.db-type", "file", sink="file")
    db = cluster.writer()
    name = unique_name("files")
    simple_table(db, name)
    expected: dict[int, list[tuple[pb_binlog_pb2.EventType, list[str]]]] = {}
    for i in range(30):
        txn = db.begin()
        txn.insert(f"{name}.t", {"id": i, "v": i})
        if i % 3 == 0 and i:
            txn.update(f"{name}.t", i - 1, {"v": -i})
        expected[txn.commit()] = [(pb_binlog_pb2.Insert, ["id", "v"])] + (
            [(pb_binlog_pb2.Update, ["id", "v"])] if i % 3 == 0 and i else []
        )
    cluster.wait_applied(drainer, cluster.now())
    got = list(read_pb_binlogs(drainer.data_dir))
    ddls = [b.ddl_query.decode() for b in got if b.tp == pb_binlog_pb2.DDL]
    assert len(ddls) == 2, ddls
    assert ddls[0].startswith("CREATE DATABASE"), ddls
    assert ddls[1].startswith(f"use `{name}`; CREATE TABLE `t`"), ddls
    dml = {b.commit_ts: b for b in got if b.tp == pb_binlog_pb2.DML}
    assert sorted(dml) == sorted(expected)
    for ts, want in expected.items():
        events = dml[ts].dml_data.events
        assert [(e.tp, e.schema_name, e.table_name) for e in events] == [(tp, name, "t") for tp, _ in want]
        for e, (_, cols) in zip(events, want, strict=True):
            names = []
            for raw in e.row:
                c = pb_binlog_pb2.column()
                c.ParseFromString(raw)
                names.append(c.name)
            assert names == cols
    commit_ts = [b.commit_ts for b in got]
    assert commit_ts == sorted(commit_ts)


# ------------------------------------------------------------------------------------- bad input
def test_unknown_table_id_stops_the_drainer_before_it(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    db = cluster.writer()
    name = cluster.dbname("bad")
    simple_table(db, name)
    insert(db, f"{name}.t", range(5))
    good_ts = cluster.now()
    cluster.wait_applied(drainer, good_ts)

    pump = cluster.pumps[0]
    client = PumpClient(pump.addr, cluster.cluster_id)
    try:
        start_ts = cluster.now()
        pv = binlog_pb2.PrewriteValue(schema_version=db.schema.version)
        row = b"\x08\x02" + encode_row([1], [Datum(Kind.INT, 7)])
        pv.mutations.add(table_id=999_999, inserted_rows=[row], sequence=[binlog_pb2.Insert])
        key = b"t-bad"
        client.write(
            gogo.encode_binlog(binlog_pb2.Prewrite, start_ts, prewrite_key=key, prewrite_value=pv.SerializeToString())
        )
        bad_ts = cluster.now()
        client.write(gogo.encode_binlog(binlog_pb2.Commit, start_ts, bad_ts, prewrite_key=key))
    finally:
        client.close()
    insert(db, f"{name}.t", range(5, 10))  # after the bad one: must never be applied

    assert wait_exit(drainer) == 1
    log = drainer.process.log_tail(200)
    assert "999999" in log, log
    assert str(bad_ts) in log, log
    assert pump.node_id in log, log
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert good_ts <= int(cp["commitTS"]) < bad_ts
    assert downstream_count(cluster, name, "t") == 5
    drainer.process.start()  # it stops at the same place again: nothing is skipped
    assert wait_exit(drainer) == 1
    assert downstream_count(cluster, name, "t") == 5


def test_ddl_refused_downstream_stops_the_drainer(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    db = cluster.writer()
    name = cluster.dbname("ddlfail")
    simple_table(db, name)
    insert(db, f"{name}.t", range(3))
    cluster.wait_applied(drainer, cluster.now())
    conn = cluster.mysql_conn(name)
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO t VALUES (100, 1)")  # downstream drift: v=1 twice
        conn.commit()
    finally:
        conn.close()
    before_ddl = cluster.now()
    db.add_index(name, "t", "uk_v", ["v"], unique=True)
    assert wait_exit(drainer) == 1
    log = drainer.process.log_tail(200)
    assert "1062" in log, log
    assert "uk_v" in log, log
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert int(cp["commitTS"]) < before_ddl + (1 << 18) * 60_000  # stopped, not running on
    assert downstream_count(cluster, name, "t") == 4


def test_wrong_downstream_password_fails_at_start(cluster: Cluster) -> None:
    d = DrainerProcess(
        cluster.tmp,
        cluster.etcd_server.url,
        name="badpass",
        extra_args=["--initial-commit-ts", "0", *cluster.mysql_args(password="definitely-wrong")],
    )
    cluster.drainers.append(d)
    d.process.start()
    assert wait_exit(d) == 1
    log = d.process.log_tail(50)
    assert "Access denied" in log, log
    assert "root@" in log, log


# -------------------------------------------------------------------------------------- lifecycle
def test_sigterm_saves_consistent_and_close_goes_offline(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    db = cluster.writer()
    name = cluster.dbname("life")
    simple_table(db, name)
    insert(db, f"{name}.t", range(20))
    cluster.wait_applied(drainer, cluster.now())
    assert drainer.stop() == 0
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert cp["consistent"] is True
    reg = Registry(cluster.etcd)
    status = reg.get(NodeKind.DRAINER, drainer.node_id)
    assert status is not None
    assert status.state is NodeState.PAUSED
    assert_equal(cluster, db)

    drainer.start()  # resumes from the checkpoint; the next save is not consistent any more
    insert(db, f"{name}.t", range(20, 30))
    catch_up(cluster, drainer, db)
    with urlopen_put(f"http://{drainer.status_addr}/state/{drainer.node_id}/close") as resp:
        assert json.loads(resp.read())["code"] == 200
    assert wait_exit(drainer) == 0
    status = reg.get(NodeKind.DRAINER, drainer.node_id)
    assert status is not None
    assert status.state is NodeState.OFFLINE


def test_encrypted_downstream_password(cluster: Cluster) -> None:
    """`[syncer.to] encrypted_password` from `binlogctl encrypt` logs in as a user that has a password."""
    from common.encrypt import encrypt

    user = unique_name("enc")
    name = cluster.dbname("enc")
    admin = cluster.mysql_conn()
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE USER '{user}'@'%' IDENTIFIED BY 'S3cret-pw'")
            cur.execute(f"CREATE USER '{user}'@'localhost' IDENTIFIED BY 'S3cret-pw'")
            cur.execute(f"GRANT ALL ON *.* TO '{user}'@'%'")
            cur.execute(f"GRANT ALL ON *.* TO '{user}'@'localhost'")
        # after mysql_args: these win; encrypted_password wins over the (empty) password
        drainer = cluster.drainer("--syncer.to.user", user, "--syncer.to.encrypted_password", encrypt("S3cret-pw"))
        db = cluster.writer()
        simple_table(db, name)
        insert(db, f"{name}.t", range(5))
        cluster.wait_applied(drainer, cluster.now())
        assert downstream_count(cluster, name, "t") == 5
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP USER IF EXISTS '{user}'@'%'")
            cur.execute(f"DROP USER IF EXISTS '{user}'@'localhost'")
        admin.close()
