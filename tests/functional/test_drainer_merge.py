"""`[syncer.to] merge = true` and `sync-mode = 2` through the MySQL sink into real MariaDB.

merge: random histories (key changes, delete + re-insert, a secondary unique key) applied with
merge on must leave the tables a sequential model gives, in normal and safe mode, and a replay must
change nothing.  sync-mode 2: a downstream table with fewer (or more) columns than upstream gets the
common columns; the dropped column's changes do not fail; DDL and "unknown column" refresh the
column cache; sync-mode 1 fails on the same table as before.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from common.events import Row, TableShape, Txn
from drainer.sinks.base import SinkError
from tests.functional.drainerutil import Cluster
from tests.functional.test_drainer_e2e import _churn, _key_tables, catch_up
from tests.functional.test_drainer_sinks import (
    DEADLINE,
    TABLES,
    Down,
    Model,
    as_txns,
    random_history,
    wait_until,
)
from tests.harness.mysql import MySQLDSN
from tests.unit.test_drainer_sql import dele, ins, upd
from upstream.ddl import Column
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = pytest.mark.functional

MERGE_TABLES: dict[str, tuple[list[Column], list[str], list[list[str]]]] = {
    **TABLES,
    # an integer primary key and a secondary unique key: merged, and REPLACE must resolve u collisions
    "m_uk": ([Column("id", "INT"), Column("u", "INT"), Column("v", "VARCHAR(8)")], ["id"], [["u"]]),
}


@pytest.fixture
def down(mysql_db: MySQLDSN) -> Iterator[Down]:
    assert mysql_db.database is not None
    conn = mysql_db.connect()
    try:
        with conn.cursor() as cur:  # TiDB's default collation: strings compare case-sensitively
            cur.execute(f"ALTER DATABASE `{mysql_db.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        conn.close()
    d = Down("mysql", mysql_db.database, mysql=mysql_db)
    yield d
    for s in d.sinks:
        s.close()


def make_tables(down: Down, sink: Any) -> list[Model]:
    down.ddl(sink, down.schema.create_db(down.db))
    models = []
    for name, (cols, pk, uks) in MERGE_TABLES.items():
        down.ddl(sink, down.schema.create_table(down.db, name, cols, primary_key=pk, unique_keys=uks))
        models.append(Model(down.schema.shape(down.db, name)))
    return models


def check(down: Down, models: list[Model]) -> None:
    for m in models:
        assert down.rows(m.shape) == sorted(m.rows, key=repr), m.shape.table


# ----------------------------------------------------------------------------- merge


@pytest.mark.parametrize("safe_mode", [False, True])
def test_merge_random_history_matches_the_model(down: Down, safe_mode: bool) -> None:
    rng = random.Random(23)
    sink = down.sink(worker_count=16, txn_batch=3, safe_mode=safe_mode, merge=True)
    reported: list[int] = []
    sink.start(reported.append)
    models = make_tables(down, sink)
    txns = as_txns(down, rng, random_history(rng, models, 1500))
    down.apply(sink, *txns)
    check(down, models)
    assert reported == sorted(reported)
    assert len(reported) == len(set(reported)) == len(MERGE_TABLES) + 1 + len(txns)


def test_merge_in_many_small_batches_and_a_safe_mode_replay(down: Down) -> None:
    """Transactions added one at a time (a batch each, many in flight), then a suffix replayed in safe mode."""
    rng = random.Random(7)
    sink = down.sink(worker_count=8, txn_batch=2, merge=True)
    sink.start(lambda ts: None)
    models = [m for m in make_tables(down, sink) if m.shape.table in ("t_int", "m_uk")]
    txns = as_txns(down, rng, random_history(rng, models, 800))
    for t in txns:
        sink.add(t)
    sink.flush(DEADLINE)
    check(down, models)
    sink.set_safe_mode(True)
    down.apply(sink, *[Txn(commit_ts=down.next_ts(), dmls=t.dmls) for t in txns[len(txns) // 2 :]])
    check(down, models)


def test_merge_key_changes_and_reinserts_in_one_batch(down: Down) -> None:
    sink = down.sink(worker_count=4, txn_batch=20, merge=True)
    sink.start(lambda ts: None)
    models = make_tables(down, sink)
    t, m = models[0].shape, models[-1].shape
    ts = down.next_ts
    down.apply(sink, Txn(ts(), [ins(t, 1, "a", 1), ins(t, 2, "b", 2), ins(m, 1, 5, "x"), ins(m, 2, 6, "y")]))
    txn = [
        upd(t, (1, "a", 1), (10, "a", 1)),  # key change
        dele(t, 2, "b", 2),
        ins(t, 2, "B", 3),  # delete + re-insert
        ins(t, 3, "c", 3),
        upd(t, (3, "c", 3), (3, "cc", 4)),
        dele(t, 3, "cc", 4),  # inserted and deleted in the batch
        upd(m, (1, 5, "x"), (1, 7, "x")),  # the unique value 5 moves from row 1 to row 2
        upd(m, (2, 6, "y"), (2, 5, "y")),
        ins(m, 3, 6, "z"),  # and 6 to a new row
    ]
    down.apply(sink, Txn(ts(), txn))
    assert down.rows(t) == sorted([(2, "B", 3), (10, "a", 1)], key=repr)
    assert down.rows(m) == [(1, 7, "x"), (2, 5, "y"), (3, 6, "z")]


# ----------------------------------------------------------------------------- sync-mode 2


def _alter(down: Down, sql: str) -> None:
    down.query(f"ALTER TABLE `{down.db}`.{sql}")


def project(rows: list[Row], shape: TableShape, names: tuple[str, ...]) -> list[Row]:
    keep = [i for i, c in enumerate(shape.columns) if c.name in names]
    return sorted((tuple(r[i] for i in keep) for r in rows), key=repr)


def down_rows(down: Down, table: str, names: tuple[str, ...]) -> list[Row]:
    cols = ", ".join(f"`{n}`" for n in names)
    return sorted((tuple(r) for r in down.query(f"SELECT {cols} FROM `{down.db}`.`{table}`")), key=repr)


@pytest.mark.parametrize("merge", [False, True])
def test_sync_mode_2_drops_the_values_of_columns_missing_downstream(down: Down, merge: bool) -> None:
    rng = random.Random(3)
    sink = down.sink(worker_count=8, txn_batch=3, sync_mode=2, merge=merge)
    sink.start(lambda ts: None)
    models = make_tables(down, sink)
    int_model, uk_model = models[0], models[-1]
    # downstream loses t_int.v and m_uk.v (m_uk.u is a unique key: rows are still found by id), and gets
    # a NOT NULL column without default that the rows do not carry (STRICT_TRANS_TABLES is relaxed)
    _alter(down, "t_int DROP COLUMN v")
    _alter(down, "m_uk DROP COLUMN v, ADD COLUMN extra INT NOT NULL")
    history = random_history(rng, [int_model, uk_model], 600)
    assert any(
        d.values and d.old_values and d.values[1] != d.old_values[1] for d in history if d.shape.table == "t_int"
    )
    down.apply(sink, *as_txns(down, rng, history))
    assert down_rows(down, "t_int", ("id", "n")) == project(int_model.rows, int_model.shape, ("id", "n"))
    assert down_rows(down, "m_uk", ("id", "u")) == project(uk_model.rows, uk_model.shape, ("id", "u"))
    assert {r[0] for r in down.query(f"SELECT DISTINCT extra FROM `{down.db}`.m_uk")} <= {0}
    assert sink.error() is None


def test_sync_mode_2_columns_are_read_again_after_a_ddl_and_an_unknown_column(down: Down) -> None:
    sink = down.sink(worker_count=2, txn_batch=2, sync_mode=2)
    sink.start(lambda ts: None)
    models = make_tables(down, sink)
    t = models[0].shape
    ts = down.next_ts
    _alter(down, "t_int DROP COLUMN n")
    down.apply(sink, Txn(ts(), [ins(t, 1, "a", 1)]))  # n dropped; the cache now says (id, v)
    # upstream adds a column: the DDL runs downstream too, and the next rows carry it
    down.ddl(sink, down.schema.ddl(lambda p: p.add_column(down.db, "t_int", Column("w", "INT"))))
    t2 = down.schema.shape(down.db, "t_int")
    down.apply(sink, Txn(ts(), [ins(t2, 2, "b", 2, 20)]))
    assert down_rows(down, "t_int", ("id", "v", "w")) == [(1, "a", None), (2, "b", 20)]
    # a column dropped behind the drainer's back: "unknown column", read again, the chunk goes through
    _alter(down, "t_int DROP COLUMN w")
    down.apply(sink, Txn(ts(), [upd(t2, (2, "b", 2, 20), (2, "bb", 3, 30)), ins(t2, 3, "c", 3, 30)]))
    assert down_rows(down, "t_int", ("id", "v")) == [(1, "a"), (2, "bb"), (3, "c")]
    assert sink.error() is None


def test_sync_mode_2_refuses_a_primary_key_column_missing_downstream(down: Down) -> None:
    sink = down.sink(worker_count=1, sync_mode=2)
    sink.start(lambda ts: None)
    models = make_tables(down, sink)
    c = models[1].shape  # t_comp, primary key (a, b)
    _alter(down, "t_comp DROP PRIMARY KEY, DROP COLUMN b")
    sink.add(Txn(down.next_ts(), [ins(c, 1, "x", 1)]))
    wait_until(lambda: sink.error() is not None, "the sink to fail")
    assert "column `b` of the primary key of" in str(sink.error())
    assert f"`{down.db}`.`t_comp` is missing downstream" in str(sink.error())
    with pytest.raises(SinkError, match="primary key"):
        sink.flush(DEADLINE)


def test_sync_mode_1_still_fails_on_a_column_missing_downstream(down: Down) -> None:
    sink = down.sink(worker_count=1)
    sink.start(lambda ts: None)
    t = make_tables(down, sink)[0].shape
    _alter(down, "t_int DROP COLUMN v")
    sink.add(Txn(down.next_ts(), [ins(t, 1, "a", 1)]))
    wait_until(lambda: sink.error() is not None, "the sink to fail")
    assert "1054" in str(sink.error())
    assert "Unknown column 'v'" in str(sink.error())


# ----------------------------------------------------------------------------- the drainer, end to end


def test_drainer_with_merge_and_sync_mode_2_replicates_exactly(cluster: Cluster) -> None:
    """Both settings were refused at start before; now a drainer with them replicates key changes,
    re-inserts, unique key moves, tables without keys and a sysbench load exactly (the audit)."""
    drainer = cluster.drainer("--syncer.worker-count", "16", "--syncer.to.merge", "true", "--syncer.to.sync-mode", "2")
    db = cluster.writer()
    name = cluster.dbname("keys")
    _key_tables(db, name)
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("sb"), tables=2, table_size=100))
    sb.setup(db)
    threads = [threading.Thread(target=_churn, args=(db, name, seed, 60)) for seed in range(1, 4)]
    for t in threads:
        t.start()
    r = run(db, sb, threads=2, seed=5, txns=150)
    for t in threads:
        t.join()
    assert r.crashed == [], r.summary()
    catch_up(cluster, drainer, db)
    assert sb.check(db) == []
