"""The MySQL sink (real MariaDB) and the sqlite sink end to end: DDL, DML, column types, errors, budget.

Each test builds its upstream schema with the writer's DDL planner, sends the DDL and DML
transactions through a sink and compares the downstream tables with a sequential model.
"""

from __future__ import annotations

import datetime as dt
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from common.events import DDL, DML, DMLType, Row, TableShape, Txn
from common.schema.defaults import default_value
from common.schema.types import check_value
from common.sql.dialect import SqliteDialect
from common.sql.render import where_key
from common.sql.values import from_mysql, from_sqlite, mysql_select_expr
from drainer.sinks.base import Sink, SinkError
from drainer.sinks.mysql import MySQLSink
from drainer.sinks.sqlite import SqliteSink
from tests.harness.mysql import MySQLDSN
from tests.unit.test_drainer_sql import Schema, dele, ins, upd
from upstream.ddl import Column
from upstream.workloads.gen import TYPES_COLUMNS, types_changes, types_row

pytestmark = pytest.mark.functional
DEADLINE = 60.0


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


class Down:
    """One downstream (MariaDB database or sqlite file): makes sinks, reads tables back."""

    def __init__(self, kind: str, db: str, mysql: MySQLDSN | None = None, path: Path | None = None) -> None:
        self.kind = kind
        self.db = db
        self.mysql = mysql
        self.path = path
        self.schema = Schema()
        self.ts = 100
        self.sinks: list[Sink] = []

    def sink(self, **kw: Any) -> Sink:
        s: Sink
        if self.kind == "mysql":
            assert self.mysql is not None
            m = self.mysql
            s = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password, **kw)
        else:
            kw.pop("worker_count", None)
            assert self.path is not None
            s = SqliteSink(self.path, **kw)
        self.sinks.append(s)
        return s

    def next_ts(self) -> int:
        self.ts += 1
        return self.ts

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "mysql":
            assert self.mysql is not None
            conn = self.mysql.connect()
            try:
                with conn.cursor() as cur:
                    cur.execute("SET time_zone = '+00:00'")
                    cur.execute(sql, params or None)
                    return list(cur.fetchall())
            finally:
                conn.close()
        assert self.path is not None
        sconn = sqlite3.connect(self.path)
        try:
            scur = sconn.execute(sql, params)
            try:
                return list(scur.fetchall())
            finally:
                scur.close()
        finally:
            sconn.close()

    def rows(self, shape: TableShape) -> list[Row]:
        cols = shape.columns
        if self.kind == "mysql":
            exprs = ", ".join(mysql_select_expr(c) for c in cols)
            raw = self.query(f"SELECT {exprs} FROM `{shape.db}`.`{shape.table}`")
            out = [tuple(from_mysql(c, v) for c, v in zip(cols, r, strict=True)) for r in raw]
        else:
            d = SqliteDialect()
            raw = self.query(f"SELECT {', '.join(d.quote(c.name) for c in cols)} FROM {d.table(shape.db, shape.table)}")
            out = [tuple(from_sqlite(c, v) for c, v in zip(cols, r, strict=True)) for r in raw]
        return sorted(out, key=repr)

    def apply(self, sink: Sink, *txns: Txn) -> None:
        for t in txns:
            sink.add(t)
        sink.flush(DEADLINE)

    def ddl(self, sink: Sink, ddl: DDL) -> None:
        self.apply(sink, Txn(commit_ts=self.next_ts(), ddl=ddl))


@pytest.fixture(params=["mysql", "sqlite"])
def down(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Down]:
    if request.param == "mysql":
        m: MySQLDSN = request.getfixturevalue("mysql_db")
        assert m.database is not None
        conn = m.connect()
        try:
            with conn.cursor() as cur:  # TiDB's default collation: strings compare case-sensitively
                cur.execute(f"ALTER DATABASE `{m.database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        finally:
            conn.close()
        d = Down("mysql", m.database, mysql=m)
    else:
        d = Down("sqlite", "d_sqlite", path=tmp_path / "down.db")
    yield d
    for s in d.sinks:
        s.close()


# ----------------------------------------------------------------------------- random DML vs a model


class Model:
    """A table as SQL sees it: rows found by the first non-NULL unique key, else by all columns."""

    def __init__(self, shape: TableShape) -> None:
        self.shape = shape
        self.rows: list[Row] = []

    def find(self, row: Row) -> int | None:
        key = where_key(self.shape, row) or tuple(range(len(row)))
        return next((i for i, r in enumerate(self.rows) if all(r[k] == row[k] for k in key)), None)

    def conflicts(self, row: Row, skip: int | None = None) -> bool:
        for key in self.shape.unique_keys:
            if any(row[k] is None for k in key):
                continue
            if any(i != skip and all(r[k] == row[k] for k in key) for i, r in enumerate(self.rows)):
                return True
        return False

    def apply(self, dml: DML) -> None:
        if dml.tp == DMLType.INSERT:
            assert dml.values is not None
            self.rows.append(dml.values)
            return
        assert dml.old_values is not None
        i = self.find(dml.old_values)
        assert i is not None
        if dml.tp == DMLType.DELETE:
            del self.rows[i]
        else:
            assert dml.values is not None
            self.rows[i] = dml.values


TABLES: dict[str, tuple[list[Column], list[str], list[list[str]]]] = {
    "t_int": ([Column("id", "INT"), Column("v", "VARCHAR(20)"), Column("n", "INT")], ["id"], []),
    "t_comp": ([Column("a", "INT"), Column("b", "VARCHAR(8)"), Column("v", "INT")], ["a", "b"], []),
    "t_uk": ([Column("u", "INT"), Column("w", "VARCHAR(8)"), Column("v", "INT")], [], [["u"], ["w"]]),
    "t_none": ([Column("x", "INT"), Column("y", "VARCHAR(8)")], [], []),
}


def gen_row(rng: random.Random, shape: TableShape) -> Row:
    out: list[Any] = []
    for c in shape.columns:
        if c.nullable and rng.random() < 0.2:
            out.append(None)
        elif c.ctype.tp in (3,):  # INT
            out.append(rng.randint(0, 12))
        else:
            out.append(rng.choice(["a", "B", "cc", "Dd", "é", ""]))
    return tuple(out)


def random_history(rng: random.Random, models: list[Model], n: int) -> list[DML]:
    """n valid DMLs over the tables, with delete + re-insert of the same key right after each other."""
    out: list[DML] = []
    while len(out) < n:
        m = rng.choice(models)
        op = rng.random()
        if op < 0.4 or not m.rows:
            row = gen_row(rng, m.shape)
            if m.conflicts(row):
                continue
            dml = DML(DMLType.INSERT, m.shape, values=row, size=40)
        elif op < 0.75:
            i = rng.randrange(len(m.rows))
            new = tuple(o if rng.random() < 0.5 else g for o, g in zip(m.rows[i], gen_row(rng, m.shape), strict=True))
            if m.conflicts(new, skip=i):
                continue
            dml = DML(DMLType.UPDATE, m.shape, values=new, old_values=m.rows[i], size=80)
        else:
            old = m.rows[rng.randrange(len(m.rows))]
            dml = DML(DMLType.DELETE, m.shape, old_values=old, size=40)
            if rng.random() < 0.5:  # the same key again at once
                m.apply(dml)
                out.append(dml)
                dml = DML(DMLType.INSERT, m.shape, values=old, size=40)
        m.apply(dml)
        out.append(dml)
    return out


def make_tables(down: Down, sink: Sink) -> list[Model]:
    down.ddl(sink, down.schema.create_db(down.db))
    models = []
    for name, (cols, pk, uks) in TABLES.items():
        down.ddl(sink, down.schema.create_table(down.db, name, cols, primary_key=pk, unique_keys=uks))
        models.append(Model(down.schema.shape(down.db, name)))
    return models


def as_txns(down: Down, rng: random.Random, dmls: list[DML]) -> list[Txn]:
    txns = []
    i = 0
    while i < len(dmls):
        k = rng.randint(0, 8)
        txns.append(Txn(commit_ts=down.next_ts(), dmls=dmls[i : i + k], size=40 * k))
        i += k
    return txns


@pytest.mark.parametrize("safe_mode", [False, True])
def test_random_dml_matches_the_model(down: Down, safe_mode: bool) -> None:
    rng = random.Random(11)
    sink = down.sink(worker_count=16, txn_batch=3, safe_mode=safe_mode)
    reported: list[int] = []
    sink.start(reported.append)
    models = make_tables(down, sink)
    txns = as_txns(down, rng, random_history(rng, models, 600))
    down.apply(sink, *txns)
    for m in models:
        assert down.rows(m.shape) == sorted(m.rows, key=repr), m.shape.table
    assert reported == sorted(reported)
    assert len(reported) == len(set(reported)) == len(TABLES) + 1 + len(txns)


def test_safe_mode_replay_is_idempotent(down: Down) -> None:
    """Replaying a suffix of the history in safe mode (restart from an older checkpoint) changes nothing."""
    rng = random.Random(5)
    sink = down.sink(worker_count=16, txn_batch=4)
    sink.start(lambda ts: None)
    models = [m for m in make_tables(down, sink) if m.shape.table in ("t_int", "t_comp")]
    txns = as_txns(down, rng, random_history(rng, models, 400))
    down.apply(sink, *txns)
    sink.set_safe_mode(True)
    down.apply(sink, *[Txn(commit_ts=down.next_ts(), dmls=t.dmls) for t in txns[len(txns) // 2 :]])
    for m in models:
        assert down.rows(m.shape) == sorted(m.rows, key=repr)


def test_key_changes_and_reinserts(down: Down) -> None:
    sink = down.sink(worker_count=16, txn_batch=2)
    sink.start(lambda ts: None)
    models = make_tables(down, sink)
    t, c = models[0].shape, models[1].shape
    ts = down.next_ts
    down.apply(
        sink,
        Txn(ts(), [ins(t, 1, "a", 1), ins(t, 2, "b", 2), ins(c, 1, "x", 1)]),
        Txn(ts(), [upd(t, (1, "a", 1), (10, "a", 1)), upd(c, (1, "x", 1), (2, "y", 1))]),  # PK changes
        Txn(ts(), [dele(t, 2, "b", 2), ins(t, 2, "B", 3)]),  # delete + re-insert in one txn
        Txn(ts(), [dele(t, 10, "a", 1)]),
        Txn(ts(), [ins(t, 10, "again", 4), upd(t, (2, "B", 3), (1, "B", 3))]),  # across txns; the old PK reused
    )
    assert down.rows(t) == [(1, "B", 3), (10, "again", 4)]
    assert down.rows(c) == [(2, "y", 1)]


@pytest.mark.parametrize("safe_mode", [False, True])
def test_string_keys_differing_only_in_case_or_trailing_spaces_stay_distinct(down: Down, safe_mode: bool) -> None:
    """Upstream compares strings exactly, so 'a', 'A' and 'a ' are three keys; each sink keeps them three
    rows, and an UPDATE/DELETE by one of them touches that row only.  The MariaDB database's default here
    is utf8mb4_bin (PAD SPACE: 'a' = 'a '); the table must get a NO PAD binary collation all the same."""
    sink = down.sink(worker_count=4, txn_batch=2, safe_mode=safe_mode)
    sink.start(lambda ts: None)
    down.ddl(sink, down.schema.create_db(down.db))
    cols = [Column("k", "VARCHAR(8)"), Column("v", "INT")]
    down.ddl(sink, down.schema.create_table(down.db, "skey", cols, primary_key=["k"]))
    ccols = [Column("a", "VARCHAR(8)"), Column("b", "VARCHAR(8)"), Column("v", "INT")]
    down.ddl(sink, down.schema.create_table(down.db, "ckey", ccols, primary_key=["a", "b"]))
    s, c = down.schema.shape(down.db, "skey"), down.schema.shape(down.db, "ckey")
    ts = down.next_ts
    down.apply(
        sink,
        Txn(ts(), [ins(s, "a", 1), ins(s, "A", 2), ins(s, "a ", 3), ins(s, "b", 4)]),
        Txn(ts(), [ins(c, "x", "b", 1), ins(c, "x", "B", 2), ins(c, "X", "b", 3), ins(c, "x", "b ", 4)]),
        Txn(ts(), [upd(s, ("A", 2), ("A", 20)), dele(s, "a ", 3), upd(c, ("x", "b ", 4), ("x", "b ", 40))]),
        Txn(ts(), [dele(c, "X", "b", 3), ins(s, "b ", 5)]),
    )
    assert down.rows(s) == sorted([("a", 1), ("A", 20), ("b", 4), ("b ", 5)], key=repr)
    assert down.rows(c) == sorted([("x", "b", 1), ("x", "B", 2), ("x", "b ", 40)], key=repr)
    assert sink.error() is None


# ----------------------------------------------------------------------------- column types


def types_shape(down: Down, sink: Sink, name: str, primary_key: list[str]) -> TableShape:
    cols = [Column("id", "BIGINT"), *(col for col, _ in TYPES_COLUMNS)]
    down.ddl(sink, down.schema.create_table(down.db, name, cols, primary_key=primary_key))
    return down.schema.shape(down.db, name)


def typed_row(shape: TableShape, values: dict[str, Any]) -> Row:
    return tuple(check_value(c, values[c.name]) if c.name in values else default_value(c) for c in shape.columns)


@pytest.mark.parametrize("safe_mode", [False, True])
def test_every_column_type_round_trips(down: Down, safe_mode: bool) -> None:
    rng = random.Random(3)
    sink = down.sink(worker_count=4, txn_batch=5, safe_mode=safe_mode)
    sink.start(lambda ts: None)
    down.ddl(sink, down.schema.create_db(down.db))
    keyed = Model(types_shape(down, sink, "types", ["id"]))
    nokey = Model(types_shape(down, sink, "types_nokey", []))  # found by all columns: every type in WHERE
    dmls: list[DML] = []
    for m in (keyed, nokey):
        for i in range(40):
            dmls.append(DML(DMLType.INSERT, m.shape, values=typed_row(m.shape, types_row(rng, i))))
            m.apply(dmls[-1])
        for _ in range(40):
            old = m.rows[rng.randrange(len(m.rows))]
            vals = {c.name: v for c, v in zip(m.shape.columns, old, strict=True)} | types_changes(rng)
            dmls.append(DML(DMLType.UPDATE, m.shape, values=typed_row(m.shape, vals), old_values=old))
            m.apply(dmls[-1])
        for _ in range(10):
            dmls.append(DML(DMLType.DELETE, m.shape, old_values=m.rows[rng.randrange(len(m.rows))]))
            m.apply(dmls[-1])
    down.apply(sink, *as_txns(down, rng, dmls))
    for m in (keyed, nokey):
        assert down.rows(m.shape) == sorted(m.rows, key=repr)
    assert any(isinstance(v, Decimal) for r in keyed.rows for v in r)


# ----------------------------------------------------------------------------- DDL


def test_ddl_applies_and_ignorable_errors_are_ignored(down: Down) -> None:
    sink = down.sink()
    reported: list[int] = []
    sink.start(reported.append)
    s = down.schema
    created = s.create_db(down.db)
    down.ddl(sink, created)
    down.ddl(sink, created)  # database exists (MySQL 1007)
    table = s.create_table(down.db, "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    down.ddl(sink, table)
    down.ddl(sink, table)  # table exists (1050)
    added = s.ddl(lambda p: p.add_column(down.db, "t", Column("w", "VARCHAR(10)", default="z")))
    down.ddl(sink, added)
    down.ddl(sink, added)  # duplicate column (1060)
    shape = s.shape(down.db, "t")
    down.apply(sink, Txn(down.next_ts(), [ins(shape, 1, 2, "q")]))
    assert down.rows(shape) == [(1, 2, "q")]
    dropped = s.ddl(lambda p: p.drop_table(down.db, "t"))
    down.ddl(sink, dropped)
    down.ddl(sink, dropped)  # unknown table (1051)
    assert sink.error() is None
    assert len(reported) == 9


def test_skipped_ddl_is_not_executed(down: Down) -> None:
    sink = down.sink()
    sink.start(lambda ts: None)
    s = down.schema
    down.ddl(sink, s.create_db(down.db))
    down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT")], primary_key=["id"]))
    shape = s.shape(down.db, "t")
    drop = s.ddl(lambda p: p.drop_table(down.db, "t"))
    down.ddl(sink, DDL(drop.db, drop.table, drop.query, drop.job, drop.before, skip=True))
    down.apply(sink, Txn(down.next_ts(), [ins(shape, 1)]))
    assert down.rows(shape) == [(1,)]


def test_failing_ddl_stops_the_sink(down: Down) -> None:
    sink = down.sink()
    sink.start(lambda ts: None)
    s = down.schema
    down.ddl(sink, s.create_db(down.db))
    down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"]))
    shape = s.shape(down.db, "t")
    down.apply(sink, Txn(down.next_ts(), [ins(shape, 1, 5), ins(shape, 2, 5)]))
    bad = s.ddl(lambda p: p.add_index(down.db, "t", "uv", ["v"], unique=True))  # duplicates in v
    ts = down.next_ts()
    sink.add(Txn(ts, ddl=bad))
    pattern = rf"DDL at commit_ts {ts}: 'CREATE UNIQUE INDEX `uv`.*failed: (MySQL error 1062|sqlite: UNIQUE)"
    with pytest.raises(SinkError, match=pattern):
        sink.flush(DEADLINE)
    assert isinstance(sink.error(), SinkError)
    with pytest.raises(SinkError):
        sink.add(Txn(down.next_ts()))


def test_dml_error_names_commit_ts(down: Down) -> None:
    sink = down.sink()
    sink.start(lambda ts: None)
    s = down.schema
    down.ddl(sink, s.create_db(down.db))
    s.create_table(down.db, "missing", [Column("id", "INT")], primary_key=["id"])  # never sent downstream
    ts = down.next_ts()
    sink.add(Txn(ts, [ins(s.shape(down.db, "missing"), 1)]))
    with pytest.raises(SinkError, match=rf"commit_ts {ts}\.\.{ts}: .*(1146|no such table)"):
        sink.flush(DEADLINE)


# ----------------------------------------------------------------------------- contract


def test_success_is_reported_in_order_after_commit(down: Down) -> None:
    sink = down.sink(worker_count=16, txn_batch=2)
    s = down.schema
    seen: list[int] = []
    missing: list[int] = []
    ids: dict[int, int] = {}

    def on_success(ts: int) -> None:
        seen.append(ts)
        if ts in ids and not down.query(f"SELECT 1 FROM {table} WHERE id = {ids[ts]}"):
            missing.append(ts)

    sink.start(on_success)
    down.ddl(sink, s.create_db(down.db))
    down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT")], primary_key=["id"]))
    shape = s.shape(down.db, "t")
    table = f"`{down.db}`.`t`" if down.kind == "mysql" else SqliteDialect().table(down.db, "t")
    txns = []
    for i in range(120):
        ts = down.next_ts()
        if i % 7 == 3:
            txns.append(Txn(ts))  # empty txns are reported too
        else:
            ids[ts] = i
            txns.append(Txn(ts, [ins(shape, i)]))
    down.apply(sink, *txns)
    assert seen[2:] == [t.commit_ts for t in txns]
    assert missing == []


def test_byte_budget_blocks_add(down: Down) -> None:
    sink = down.sink(worker_count=2, max_inflight_bytes=1000)
    sink.start(lambda ts: None)
    s = down.schema
    down.ddl(sink, s.create_db(down.db))
    down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"]))
    shape = s.shape(down.db, "t")
    down.apply(sink, Txn(down.next_ts(), [ins(shape, 1, 0)]))
    blocker = Blocker(down)
    try:
        sink.add(Txn(down.next_ts(), [upd(shape, (1, 0), (1, 1))], size=900))  # waits for the blocker's lock
        added = threading.Event()

        def second() -> None:
            sink.add(Txn(down.next_ts(), [ins(shape, 2, 0)], size=900))
            added.set()

        th = threading.Thread(target=second)
        th.start()
        loader = sink.loader  # type: ignore[attr-defined]
        wait_until(lambda: loader.blocked_adds == 1, "add() to block on the byte budget")
        assert not added.is_set()
    finally:
        blocker.release()
    th.join(DEADLINE)
    assert added.is_set()
    sink.flush(DEADLINE)
    assert down.rows(shape) == [(1, 1), (2, 0)]


class Blocker:
    """Holds a lock the sink needs: a row lock in MariaDB, the write lock in sqlite."""

    def __init__(self, down: Down) -> None:
        self.mysql: pymysql.connections.Connection[Any] | None = None
        self.sqlite: sqlite3.Connection | None = None
        if down.kind == "mysql":
            assert down.mysql is not None
            self.mysql = down.mysql.connect()
            self.mysql.begin()
            with self.mysql.cursor() as cur:
                cur.execute(f"SELECT * FROM `{down.db}`.`t` WHERE id = 1 FOR UPDATE")
        else:
            assert down.path is not None
            self.sqlite = sqlite3.connect(down.path, isolation_level=None)
            self.sqlite.execute("BEGIN IMMEDIATE").close()

    def release(self) -> None:
        if self.mysql is not None:
            self.mysql.rollback()
            self.mysql.close()
        if self.sqlite is not None:
            self.sqlite.execute("ROLLBACK").close()
            self.sqlite.close()


def test_wrong_password_is_a_clear_error(mysql_server: MySQLDSN) -> None:
    m = mysql_server
    sink = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password + "-wrong", worker_count=2)
    with pytest.raises(
        SinkError, match=rf"cannot connect to {m.user}@{m.host}:{m.port}: MySQL error 1045: Access denied"
    ):
        sink.start(lambda ts: None)
    sink.close()


def test_bad_session_param_fails_at_start(mysql_server: MySQLDSN) -> None:
    m = mysql_server
    sink = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password, params={"no_such_var": "1"})
    with pytest.raises(SinkError, match="no_such_var"):
        sink.start(lambda ts: None)


def test_session_settings(mysql_server: MySQLDSN) -> None:
    m = mysql_server
    sink = MySQLSink(
        host=m.host,
        port=m.port,
        user=m.user,
        password=m.password,
        params={"time_zone": "+08:00", "innodb_lock_wait_timeout": "7"},
        sql_mode="STRICT_ALL_TABLES",
    )
    conn = sink.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@session.time_zone, @@session.innodb_lock_wait_timeout, @@session.sql_mode, "
                        "@@session.autocommit, @@character_set_client")  # fmt: skip
            assert cur.fetchone() == ("+08:00", 7, "STRICT_ALL_TABLES", 0, "utf8mb4")
    finally:
        conn.close()
    default = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password).connect()
    try:
        with default.cursor() as cur:
            cur.execute("SELECT @@session.time_zone")
            assert cur.fetchone() == ("+00:00",)
    finally:
        default.close()


def test_sqlite_unopenable_path(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    sink = SqliteSink(tmp_path / "file" / "down.db")
    with pytest.raises(SinkError, match="sqlite sink: cannot open"):
        sink.start(lambda ts: None)


def test_timestamps_with_a_session_time_zone(mysql_db: MySQLDSN) -> None:
    """With params time_zone = +08:00 TIMESTAMP values go out as +08:00 wall clock and read back unchanged."""
    m = mysql_db
    assert m.database is not None
    down = Down("mysql", m.database, mysql=m)
    sink = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password, params={"time_zone": "+08:00"})
    sink.start(lambda ts: None)
    try:
        s = down.schema
        down.ddl(sink, s.create_db(down.db))
        down.ddl(sink, s.create_table(down.db, "t", [Column("ts", "TIMESTAMP(3)"), Column("v", "INT")]))
        shape = s.shape(down.db, "t")
        when = dt.datetime(2020, 1, 1, 0, 0, 0, 123000, tzinfo=dt.UTC)
        down.apply(sink, Txn(down.next_ts(), [ins(shape, when, 1)]))
        down.apply(sink, Txn(down.next_ts(), [upd(shape, (when, 1), (when, 2))]))  # found by all columns
        assert down.rows(shape) == [(when, 2)]
        assert down.query(f"SELECT CAST(ts AS CHAR) FROM `{down.db}`.t") == [("2020-01-01 00:00:00.123",)]
    finally:
        sink.close()


def test_killed_connection_is_retried(mysql_db: MySQLDSN) -> None:
    m = mysql_db
    assert m.database is not None
    down = Down("mysql", m.database, mysql=m)
    sink = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password, worker_count=1)
    reported: list[int] = []
    sink.start(reported.append)
    try:
        s = down.schema
        down.ddl(sink, s.create_db(down.db))
        down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"]))
        shape = s.shape(down.db, "t")
        down.apply(sink, Txn(down.next_ts(), [ins(shape, 1, 1)]))
        victim = sink.loader._workers[0].executor._conn.thread_id()  # type: ignore[attr-defined]
        down.query(f"KILL CONNECTION {int(victim)}")
        down.apply(sink, Txn(down.next_ts(), [ins(shape, 2, 2), upd(shape, (1, 1), (1, 5))]))
        assert down.rows(shape) == [(1, 5), (2, 2)]
        assert sink.error() is None
        assert len(reported) == 4
    finally:
        sink.close()


def test_statement_larger_than_max_allowed_packet_fails_at_once(mysql_db: MySQLDSN) -> None:
    """A row too big for the downstream's max_allowed_packet: a clear, non-retried error (not 100 reconnects)."""
    m = mysql_db
    assert m.database is not None
    down = Down("mysql", m.database, mysql=m)
    sink = MySQLSink(host=m.host, port=m.port, user=m.user, password=m.password, worker_count=1)
    sink.start(lambda ts: None)
    try:
        s = down.schema
        down.ddl(sink, s.create_db(down.db))
        down.ddl(sink, s.create_table(down.db, "t", [Column("id", "INT"), Column("v", "LONGTEXT")], primary_key=["id"]))
        shape = s.shape(down.db, "t")
        sink.loader._workers[0].executor._packet = 100_000  # type: ignore[attr-defined] # as if the server said so
        ts = down.next_ts()
        started = time.monotonic()
        sink.add(Txn(ts, [ins(shape, 1, "x" * 200_000)]))
        with pytest.raises(SinkError, match=r"more than the downstream's max_allowed_packet \(100000\)"):
            sink.flush(DEADLINE)
        assert time.monotonic() - started < 30, "the oversized statement was retried"
        assert down.rows(shape) == []
    finally:
        sink.close()
