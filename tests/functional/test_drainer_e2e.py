"""The drainer end to end: etcd, pd-server, 2-3 pumps, the writer, a drainer process, MariaDB (issue 5).

Every test ends with an audit: each upstream table equals its downstream table row by row.
"""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster, run_side_by_side
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = pytest.mark.functional


def assert_equal(cluster: Cluster, db: Database) -> None:
    conn = cluster.mysql_conn()
    try:
        problems = audit_mysql(db, conn)
    finally:
        conn.close()
    assert problems == [], "\n".join(problems)


def catch_up(cluster: Cluster, drainer: Any, db: Database) -> None:
    cluster.wait_applied(drainer, cluster.now())
    assert_equal(cluster, db)


# ------------------------------------------------------------------------------------ workloads
@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_sysbench_and_ddl_workloads_replicate_exactly(cluster: Cluster) -> None:
    drainer = cluster.drainer("--syncer.worker-count", "16")
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("sb"), tables=2, table_size=200))
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname("ddl"), ddl_ratio=0.15))
    results = run_side_by_side(db, {"sb": sb, "ddl": ddl}, threads=3, seed=7, txns=300)
    for name in ("sb", "ddl"):
        r = results[name]
        assert r.crashed == [], r.summary()
        assert r.stats.committed > 200, r.summary()
    catch_up(cluster, drainer, db)
    assert sb.check(db) == []


# ---------------------------------------------------------------------------- keys and conflicts
def _key_tables(db: Database, name: str) -> None:
    db.create_database(name)
    cols = [Column("id", "INT"), Column("k", "INT"), Column("v", "VARCHAR(32)")]
    db.create_table(name, "int_pk", [Column("id", "INT", nullable=False), *cols[1:]], primary_key=["id"])
    db.create_table(
        name,
        "composite",
        [Column("a", "INT", nullable=False), Column("b", "VARCHAR(8)", nullable=False), Column("v", "INT")],
        primary_key=["a", "b"],
    )
    db.create_table(name, "uniq", cols, unique_keys=[["k"]])
    db.create_table(name, "nokey", cols)


def _churn(db: Database, name: str, seed: int, rounds: int) -> None:
    """PK changes, delete + re-insert of one key inside a txn and across txns, unique-key changes.

    Each thread has its own key space, so threads never conflict upstream; downstream the same
    keys are touched by many consecutive transactions, which is what causality has to order."""
    rng = random.Random(seed)
    base = seed * 1000
    uniq: dict[int, int] = {}  # unique k -> handle
    nokey: list[int] = []
    ti, tc, tu, tn = (f"{name}.{t}" for t in ("int_pk", "composite", "uniq", "nokey"))
    for i in range(rounds):

        def body(txn: Transaction, i: int = i) -> tuple[dict[int, int | None], list[int], list[int]]:
            a, b = base + rng.randrange(8), base + rng.randrange(8)
            if txn.get(ti, a) is None:
                txn.insert(ti, {"id": a, "k": i, "v": f"r{i}"})
            elif rng.random() < 0.5 and txn.get(ti, b) is None:
                txn.update(ti, a, {"id": b, "k": i})  # primary key change
            else:
                txn.delete(ti, a)
                txn.insert(ti, {"id": a, "k": -i, "v": "again"})  # same key, same txn
            ck = (seed * 10 + a % 3, f"b{b % 3}")
            if txn.get(tc, ck) is None:
                txn.insert(tc, {"a": ck[0], "b": ck[1], "v": i})
            else:
                txn.delete(tc, ck)
            changes: dict[int, int | None] = {}
            k = base + rng.randrange(6)
            h = uniq.get(k)
            if h is None:
                changes[k] = txn.insert(tu, {"id": i, "k": k, "v": "u"})
            elif rng.random() < 0.3:
                txn.delete(tu, h)
                changes[k] = txn.insert(tu, {"id": i, "k": k, "v": "re"})  # same unique key, same txn
            elif rng.random() < 0.5 and k + 500 not in uniq:
                txn.update(tu, h, {"k": k + 500})  # unique key change
                changes[k], changes[k + 500] = None, h
            else:
                txn.update(tu, h, {"v": f"u{i}"})
            added = [txn.insert(tn, {"id": a, "k": None if i % 4 == 0 else i, "v": None})]
            gone = [nokey[0]] if nokey and i % 5 == 0 else []
            for g in gone:
                txn.delete(tn, g)
            return changes, added, gone

        changes, added, gone = db.run(body)
        for k, h in changes.items():
            if h is None:
                uniq.pop(k, None)
            else:
                uniq[k] = h
        nokey.extend(added)
        for g in gone:
            nokey.remove(g)


@pytest.mark.parametrize("safe_mode", [False, True], ids=["normal", "safe-mode"])
def test_key_changes_and_reinserts_with_16_workers(cluster: Cluster, safe_mode: bool) -> None:
    drainer = cluster.drainer("--syncer.worker-count", "16", "--syncer.safe-mode", str(safe_mode).lower())
    db = cluster.writer()
    name = cluster.dbname("keys")
    _key_tables(db, name)
    threads = [threading.Thread(target=_churn, args=(db, name, seed, 60)) for seed in range(1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    catch_up(cluster, drainer, db)


# ------------------------------------------------------------------------------------ kill -9
def test_drainer_kill9_five_times_loses_nothing(cluster: Cluster) -> None:
    """kill -9 at random points of a running workload; the checkpoint is never ahead of the data."""
    db = cluster.writer()
    name = cluster.dbname("kill")
    db.create_database(name)
    db.create_table(
        name, "ledger", [Column("id", "BIGINT", nullable=False), Column("v", "VARCHAR(64)")], primary_key=["id"]
    )
    sb = make_workload("sysbench", WorkloadOptions(database=name, tables=1, table_size=100))
    sb.setup(db)
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname("killddl"), ddl_ratio=0.1))
    ddl.setup(db)
    committed: list[tuple[int, int]] = []  # (ledger id, commit_ts)
    stop = threading.Event()

    def ledger() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            txn = db.begin()
            txn.insert(f"{name}.ledger", {"id": i, "v": f"row {i}"})
            committed.append((i, txn.commit()))

    writers = [threading.Thread(target=ledger)]
    writers.append(threading.Thread(target=lambda: run(db, sb, threads=2, seed=3, stop=stop, duration=3600)))
    writers.append(threading.Thread(target=lambda: run(db, ddl, threads=1, seed=4, stop=stop, duration=3600)))
    for t in writers:
        t.start()
    rng = random.Random(5)
    # safe mode forced after every start (the default): replay after a kill is idempotent
    drainer = cluster.drainer("--syncer.worker-count", "8", "--syncer.safe-mode-duration", "5m", start=False)
    try:
        for _ in range(5):
            drainer.start()
            before = cluster.checkpoint_row()
            before_ts = 0 if before is None else int(before["commitTS"])

            def moved(before_ts: int = before_ts) -> bool:
                cp = cluster.checkpoint_row()
                return cp is not None and int(cp["commitTS"]) > before_ts

            wait_for(moved, 60, "checkpoint moves")
            threading.Event().wait(rng.uniform(0.0, 1.5))  # a random point of the run, not a condition
            drainer.kill9()
            cp = cluster.checkpoint_row()
            assert cp is not None
            ts = int(cp["commitTS"])
            must = {i for i, c in list(committed) if c <= ts}
            conn = cluster.mysql_conn(name)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT id FROM ledger")
                    have = {int(r[0]) for r in cur.fetchall()}
            finally:
                conn.close()
            assert must <= have, f"checkpoint {ts} is ahead of the data: missing {sorted(must - have)[:10]}"
    finally:
        stop.set()
        for t in writers:
            t.join()
    drainer.start()
    catch_up(cluster, drainer, db)


# ------------------------------------------------------------------------------ pump membership
def test_idle_paused_and_new_pumps(cluster: Cluster) -> None:
    """All writes go to pump0: pump1 is idle (fake binlogs keep the merge going); pausing pump1 pauses
    the merge, restarting it resumes without loss; a pump added later is merged after Notify."""
    from tests.functional.drainerutil import SinglePumpClient

    drainer = cluster.drainer()
    db = cluster.writer(SinglePumpClient(cluster.pumps[0], cluster.cluster_id))
    name = cluster.dbname("members")
    db.create_database(name)
    db.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "INT")], primary_key=["id"])

    def write(lo: int, hi: int, db: Database = db) -> None:
        for i in range(lo, hi):

            def body(txn: Transaction, i: int = i) -> None:
                txn.insert(f"{name}.t", {"id": i, "v": i})

            db.run(body)

    write(0, 50)
    catch_up(cluster, drainer, db)  # pump1 never got a binlog: only its fake binlogs moved the merge

    pump1 = cluster.pumps[1]
    with urlopen_put(f"http://{pump1.status_addr}/state/{pump1.node_id}/pause"):
        pass
    wait_for(lambda: not pump1.process.alive, 30, "pump1 exits paused")
    write(50, 80)
    paused_at = cluster.now()
    p0 = cluster.pumps[0].node_id
    wait_for(
        lambda: drainer.http_json("GET", "/status")["PumpPos"].get(p0, 0) > paused_at,
        30,
        "drainer received pump0's writes",
    )
    assert int(drainer.http_json("GET", "/commit_ts")["data"]["ts"]) < paused_at
    conn = cluster.mysql_conn(name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t WHERE id >= 50")
            assert cur.fetchone() == (0,), "the merge went on while a pump was paused"
    finally:
        conn.close()
    pump1.start()
    write(80, 100)
    catch_up(cluster, drainer, db)

    pump2 = cluster.add_pump()
    db2 = cluster.writer(SinglePumpClient(pump2, cluster.cluster_id))
    write(100, 130, db2)
    catch_up(cluster, drainer, db)
    assert pump2.node_id in drainer.http_json("GET", "/status")["PumpPos"]


def urlopen_put(url: str) -> Any:
    import urllib.request

    return urllib.request.urlopen(urllib.request.Request(url, method="PUT"), timeout=10)
