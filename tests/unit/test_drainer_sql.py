"""DML -> SQL rendering (common/sql/render.py) for MySQL and sqlite; also the schema helper other drainer tests use."""

from __future__ import annotations

import datetime as dt
import itertools
import random
import sqlite3
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pytest

from common.errors import ConfigError
from common.events import DDL, DML, DMLType, Row, TableShape
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobType
from common.schema.types import check_value
from common.sql.dialect import SqliteDialect
from common.sql.render import MYSQL_CONVERTED, Renderer, where_key
from common.sql.values import to_mysql
from drainer.sinks.mysql import session_time_zone
from upstream.ddl import Column, Planner
from upstream.workloads.gen import TYPES_COLUMNS

U64 = 2**64 - 1


class Schema:
    """An upstream schema built with the writer's DDL planner: DDL events and table shapes."""

    def __init__(self) -> None:
        self.info = InfoSchema()
        self._ids = itertools.count(1)

    def ddl(self, plan: Callable[[Planner], Job]) -> DDL:
        before = self.info.copy()
        job = plan(Planner(self.info, lambda n: next(self._ids), start_ts=1))
        self.info.apply(job)
        db = "" if job.type == JobType.CREATE_SCHEMA else job.schema_name
        return DDL(db=db, table=job.table_name, query=job.query, job=job, before=before)

    def create_db(self, name: str) -> DDL:
        return self.ddl(lambda p: p.create_database(name))

    def create_table(
        self,
        db: str,
        name: str,
        columns: Sequence[Column],
        primary_key: Sequence[str] = (),
        unique_keys: Sequence[Sequence[str]] = (),
    ) -> DDL:
        return self.ddl(lambda p: p.create_table(db, name, columns, primary_key=primary_key, unique_keys=unique_keys))

    def shape(self, db: str, name: str) -> TableShape:
        return TableShape.of(db, self.info.table(db, name))


def ins(shape: TableShape, *row: Any) -> DML:
    return DML(DMLType.INSERT, shape, values=_checked(shape, row), size=100)


def upd(shape: TableShape, old: Sequence[Any], new: Sequence[Any]) -> DML:
    return DML(DMLType.UPDATE, shape, values=_checked(shape, new), old_values=_checked(shape, old), size=200)


def dele(shape: TableShape, *row: Any) -> DML:
    return DML(DMLType.DELETE, shape, old_values=_checked(shape, row), size=100)


def _checked(shape: TableShape, row: Sequence[Any]) -> Row:
    assert len(row) == len(shape.columns)
    return tuple(check_value(c, v) for c, v in zip(shape.columns, row, strict=True))


@pytest.fixture
def schema() -> Schema:
    s = Schema()
    s.create_db("d")
    s.create_table("d", "t", [Column("id", "INT"), Column("v", "VARCHAR(20)")], primary_key=["id"])
    s.create_table(
        "d",
        "u",
        [Column("a", "INT"), Column("b", "VARCHAR(8)"), Column("c", "INT"), Column("v", "TEXT")],
        primary_key=["a", "b"],
        unique_keys=[["c"]],
    )
    s.create_table("d", "n", [Column("x", "INT"), Column("y", "VARCHAR(8)")])
    s.create_table("d", "k", [Column("x", "INT"), Column("y", "INT")], unique_keys=[["x"], ["y"]])
    return s


# ----------------------------------------------------------------------------- inserts


def test_insert_mysql_and_sqlite(schema: Schema) -> None:
    t = schema.shape("d", "t")
    assert Renderer("mysql").render([ins(t, 1, "a")]) == [("INSERT INTO `d`.`t` (`id`,`v`) VALUES (%s,%s)", [1, "a"])]
    assert Renderer("sqlite").render([ins(t, 1, "a")]) == [('INSERT INTO "d.t" ("id","v") VALUES (?,?)', [1, "a"])]


def test_consecutive_inserts_into_one_table_are_one_statement(schema: Schema) -> None:
    t, n = schema.shape("d", "t"), schema.shape("d", "n")
    dmls = [ins(t, 1, "a"), ins(t, 2, None), ins(n, 5, "x"), ins(t, 3, "c"), dele(t, 3, "c"), ins(t, 4, "d")]
    out = Renderer("mysql").render(dmls)
    assert [sql for sql, _ in out] == [
        "INSERT INTO `d`.`t` (`id`,`v`) VALUES (%s,%s),(%s,%s)",
        "INSERT INTO `d`.`n` (`x`,`y`) VALUES (%s,%s)",
        "INSERT INTO `d`.`t` (`id`,`v`) VALUES (%s,%s)",
        "DELETE FROM `d`.`t` WHERE `id`=%s LIMIT 1",
        "INSERT INTO `d`.`t` (`id`,`v`) VALUES (%s,%s)",
    ]
    assert out[0][1] == [1, "a", 2, None]
    assert out[3][1] == [3]


def test_safe_mode_insert_is_multi_row_replace(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = Renderer("sqlite").render([ins(t, 1, "a"), ins(t, 2, "b")], safe_mode=True)
    assert out == [('REPLACE INTO "d.t" ("id","v") VALUES (?,?),(?,?)', [1, "a", 2, "b"])]


def test_multi_row_caps(schema: Schema) -> None:
    t = schema.shape("d", "t")
    dmls = [ins(t, i, "v") for i in range(10)]
    assert [len(p) // 2 for _, p in Renderer("mysql", max_rows=4).render(dmls)] == [4, 4, 2]
    assert [len(p) // 2 for _, p in Renderer("sqlite", max_params=6).render(dmls)] == [3, 3, 3, 1]
    assert [len(p) // 2 for _, p in Renderer("mysql", max_bytes=250).render(dmls)] == [2, 2, 2, 2, 2]
    one = Renderer("mysql", max_bytes=10).render(dmls[:2])  # a row over the limit still goes, alone
    assert [len(p) // 2 for _, p in one] == [1, 1]


# ----------------------------------------------------------------------------- updates / deletes


def test_update_normal_and_safe_mode(schema: Schema) -> None:
    t = schema.shape("d", "t")
    dml = upd(t, (1, "a"), (2, "b"))
    assert Renderer("mysql").render([dml]) == [("UPDATE `d`.`t` SET `id`=%s,`v`=%s WHERE `id`=%s LIMIT 1", [2, "b", 1])]
    assert Renderer("sqlite").render([dml]) == [('UPDATE "d.t" SET "id"=?,"v"=? WHERE "id"=?', [2, "b", 1])]
    assert Renderer("mysql").render([dml], safe_mode=True) == [
        ("DELETE FROM `d`.`t` WHERE `id`=%s LIMIT 1", [1]),
        ("REPLACE INTO `d`.`t` (`id`,`v`) VALUES (%s,%s)", [2, "b"]),
    ]


def test_delete_same_in_both_modes(schema: Schema) -> None:
    t = schema.shape("d", "t")
    for safe in (False, True):
        assert Renderer("mysql").render([dele(t, 7, "x")], safe) == [("DELETE FROM `d`.`t` WHERE `id`=%s LIMIT 1", [7])]
        assert Renderer("sqlite").render([dele(t, 7, "x")], safe) == [('DELETE FROM "d.t" WHERE "id"=?', [7])]


def test_composite_primary_key_first(schema: Schema) -> None:
    u = schema.shape("d", "u")
    out = Renderer("mysql").render([dele(u, 1, "b", 3, "v")])
    assert out == [("DELETE FROM `d`.`u` WHERE `a`=%s AND `b`=%s LIMIT 1", [1, "b"])]


def test_first_unique_key_without_null(schema: Schema) -> None:
    k = schema.shape("d", "k")
    assert where_key(k, (None, 5)) == (1,)
    assert where_key(k, (4, 5)) == (0,)
    assert where_key(k, (None, None)) is None
    assert Renderer("mysql").render([dele(k, None, 5)]) == [("DELETE FROM `d`.`k` WHERE `y`=%s LIMIT 1", [5])]


def test_no_key_uses_all_columns_and_is_null(schema: Schema) -> None:
    n = schema.shape("d", "n")
    assert Renderer("mysql").render([dele(n, 1, None)]) == [
        ("DELETE FROM `d`.`n` WHERE `x`=%s AND `y` IS NULL LIMIT 1", [1])
    ]
    assert Renderer("sqlite").render([upd(n, (None, "a"), (2, "b"))]) == [
        (
            'UPDATE "d.n" SET "x"=?,"y"=? WHERE rowid = (SELECT rowid FROM "d.n" WHERE "x" IS NULL AND "y"=? LIMIT 1)',
            [2, "b", "a"],
        )
    ]


def test_quoting_of_odd_names() -> None:
    s = Schema()
    s.create_db("d%b")
    s.create_table("d%b", 'we`i"rd', [Column("c%s", "INT"), Column('q"`', "INT")], primary_key=["c%s"])
    shape = s.shape("d%b", 'we`i"rd')
    sql, _ = Renderer("mysql").render([upd(shape, (1, 2), (1, 3))])[0]
    assert sql == 'UPDATE `d%%b`.`we``i"rd` SET `c%%s`=%s,`q"```=%s WHERE `c%%s`=%s LIMIT 1'
    assert sql % ("1", "3", "1") == 'UPDATE `d%b`.`we``i"rd` SET `c%s`=1,`q"```=3 WHERE `c%s`=1 LIMIT 1'
    assert Renderer("sqlite").render([dele(shape, 1, 2)]) == [('DELETE FROM "d%b.we`i""rd" WHERE "c%s"=?', [1])]


def test_unknown_dialect_and_missing_rows(schema: Schema) -> None:
    with pytest.raises(ValueError, match="dialect"):
        Renderer("oracle")
    t = schema.shape("d", "t")
    with pytest.raises(ValueError, match="old values"):
        Renderer("mysql").render([DML(DMLType.DELETE, t, values=(1, "a"))])
    with pytest.raises(ValueError, match="new values"):
        Renderer("mysql").render([DML(DMLType.INSERT, t, old_values=(1, "a"))])


def test_new_shape_after_ddl_gets_new_sql(schema: Schema) -> None:
    r = Renderer("mysql")
    before = schema.shape("d", "t")
    assert r.render([ins(before, 1, "a")])[0][0].startswith("INSERT INTO `d`.`t` (`id`,`v`)")
    schema.ddl(lambda p: p.add_column("d", "t", Column("w", "INT")))
    after = schema.shape("d", "t")
    assert r.render([ins(after, 1, "a", 5)])[0][0] == "INSERT INTO `d`.`t` (`id`,`v`,`w`) VALUES (%s,%s,%s)"
    assert r.render([ins(before, 2, "b")])[0][0] == "INSERT INTO `d`.`t` (`id`,`v`) VALUES (%s,%s)"


# ----------------------------------------------------------------------------- values


def test_values_are_converted_per_column() -> None:
    s = Schema()
    s.create_db("d")
    cols = [Column("id", "INT"), Column("ts", "TIMESTAMP(3)"), Column("j", "JSON"), Column("b", "BIT(12)"),
            Column("tm", "TIME(2)"), Column("dec", "DECIMAL(6,2)"), Column("u", "BIGINT UNSIGNED")]  # fmt: skip
    s.create_table("d", "v", cols, primary_key=["id"])
    shape = s.shape("d", "v")
    plus2 = dt.timezone(dt.timedelta(hours=2))
    row = (1, dt.datetime(2020, 1, 1, 12, tzinfo=plus2), {"a": [1]}, b"\x01\x02", dt.timedelta(hours=-1),
           Decimal("1.5"), U64)  # fmt: skip
    dml = ins(shape, *row)
    ((_, mparams),) = Renderer("mysql").render([dml])
    assert mparams == [
        1,
        dt.datetime(2020, 1, 1, 10),
        '{"a": [1]}',
        258,
        "-01:00:00.000000",
        Decimal("1.50"),
        2**64 - 1,
    ]
    ((_, sparams),) = Renderer("sqlite").render([dml])
    assert sparams == [
        1,
        "2020-01-01 10:00:00.000",
        '{"a": [1]}',
        b"\x01\x02",
        "-01:00:00.00",
        "1.50",
        "18446744073709551615",
    ]
    ((_, wparams),) = Renderer("sqlite").render([dele(shape, *row)])
    assert wparams == [1]


def test_to_mysql_changes_only_the_listed_types() -> None:
    """The renderer skips to_mysql for types outside MYSQL_CONVERTED: it must be the identity there."""
    rng = random.Random(7)
    s = Schema()
    s.create_db("d")
    s.create_table("d", "types", [Column("id", "BIGINT"), *(c for c, _ in TYPES_COLUMNS)], primary_key=["id"])
    shape = s.shape("d", "types")
    gens = dict(TYPES_COLUMNS)
    for col in shape.columns[1:]:
        gen = next(g for c, g in gens.items() if c.name == col.name)
        for _ in range(20):
            v = check_value(col, gen(rng))
            if col.ctype.tp not in MYSQL_CONVERTED:
                assert to_mysql(col, v) is v, col.name


def test_rendered_sql_runs_on_sqlite(schema: Schema, tmp_path: Any) -> None:
    """The sqlite statements run against the upstream store's layout (hidden row id assigned by sqlite)."""
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    d = SqliteDialect()
    for ref in schema.info.tables("d"):
        for sql in d.create_table_sql("d", ref.table):
            conn.execute(sql)
    n, t = schema.shape("d", "n"), schema.shape("d", "t")
    dmls = [ins(n, 1, "a"), ins(n, 1, "a"), ins(n, None, "b"), upd(n, (1, "a"), (2, "a")), dele(n, None, "b"),
            ins(t, 1, "x"), upd(t, (1, "x"), (5, "y")), ins(t, 1, "z")]  # fmt: skip
    for sql, params in Renderer("sqlite").render(dmls):
        conn.execute(sql, params)
    assert sorted(conn.execute('SELECT x, y FROM "d.n"').fetchall()) == [(1, "a"), (2, "a")]
    assert sorted(conn.execute('SELECT id, v FROM "d.t"').fetchall()) == [(1, "z"), (5, "y")]
    conn.close()


def test_timestamps_in_a_session_time_zone() -> None:
    s = Schema()
    s.create_db("d")
    s.create_table("d", "z", [Column("id", "INT"), Column("ts", "TIMESTAMP")], primary_key=["id"])
    shape = s.shape("d", "z")
    when = dt.datetime(2020, 6, 1, 12, tzinfo=dt.UTC)
    plus8 = dt.timezone(dt.timedelta(hours=8))
    assert Renderer("mysql", tz=plus8).render([ins(shape, 1, when)])[0][1] == [1, dt.datetime(2020, 6, 1, 20)]
    assert Renderer("mysql").render([ins(shape, 1, when)])[0][1] == [1, dt.datetime(2020, 6, 1, 12)]


def test_session_time_zone_param() -> None:
    assert session_time_zone({}) is None
    assert session_time_zone({" TIME_ZONE": "'+08:00'"}) == dt.timezone(dt.timedelta(hours=8))
    assert session_time_zone({"time_zone": "-03:30"}) == dt.timezone(-dt.timedelta(hours=3, minutes=30))
    assert session_time_zone({"time_zone": "UTC"}) is not None
    with pytest.raises(ConfigError, match="SYSTEM"):
        session_time_zone({"time_zone": "SYSTEM"})
    with pytest.raises(ConfigError, match="unknown time zone"):
        session_time_zone({"time_zone": "Mars/Olympus"})
