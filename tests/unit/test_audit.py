"""The audit library (common/audit.py) on two sqlite files laid out like the writer's sqlite store."""

from __future__ import annotations

import datetime
import itertools
import sqlite3
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common.audit import (
    AuditResult,
    KeyChoice,
    MySQLServer,
    TableDiff,
    audit_schema,
    choose_key,
    compare_rows,
    sqlite_reader,
)
from common.errors import ConfigError
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, TableInfo
from common.sql.dialect import SqliteDialect
from upstream.ddl import Column, Planner

DB = "shop"


class Sides:
    """A schema and two sqlite files (upstream, downstream) holding its tables."""

    def __init__(self, tmp: Path) -> None:
        self.schema = InfoSchema()
        self.ids = itertools.count(1)
        self.dialect = SqliteDialect()
        self.up = sqlite3.connect(tmp / "up.db", isolation_level=None)
        self.down = sqlite3.connect(tmp / "down.db", isolation_level=None)
        self.ddl("create_database", DB)
        self.ddl(
            "create_table", DB, "items",
            [Column("id", "BIGINT"), Column("name", "VARCHAR(20)"), Column("price", "DECIMAL(10,2)"),
             Column("at", "DATETIME(3)")],
            primary_key=["id"],
        )  # fmt: skip
        people = [Column("email", "VARCHAR(40)"), Column("age", "INT")]
        self.ddl("create_table", DB, "people", people, unique_keys=[["email"]])
        self.ddl("create_table", DB, "log", [Column("n", "INT"), Column("msg", "TEXT")])

    def ddl(self, fn: str, *args: Any, **kw: Any) -> Job:
        job: Job = getattr(Planner(self.schema, lambda n: next(self.ids), start_ts=1), fn)(*args, **kw)
        for conn in (self.up, self.down):
            for sql in self.dialect.ddl_statements(job, self.schema):
                conn.execute(sql)
        self.schema.apply(job)
        return job

    def table(self, name: str) -> TableInfo:
        return self.schema.table(DB, name)

    def insert(self, conn: sqlite3.Connection, name: str, *rows: Sequence[Any]) -> None:
        t = self.table(name)
        d = self.dialect
        cols = ", ".join(d.quote(c.name) for c in t.columns)
        marks = ", ".join("?" for _ in t.columns)
        for row in rows:
            values = [d.to_store(c, v) for c, v in zip(t.columns, row, strict=True)]
            conn.execute(f"INSERT INTO {d.table(DB, name)} ({cols}) VALUES ({marks})", values)

    def both(self, name: str, *rows: Sequence[Any]) -> None:
        self.insert(self.up, name, *rows)
        self.insert(self.down, name, *rows)

    def audit(self) -> AuditResult:
        return audit_schema(self.schema, sqlite_reader(self.up, "up"), sqlite_reader(self.down, "down"))

    def close(self) -> None:
        self.up.close()
        self.down.close()


AT = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000)


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[Sides]:
    s = Sides(tmp_path)
    s.both("items", (1, "pen", Decimal("1.50"), AT), (2, "ink", None, None), (3, "pad", Decimal("3.00"), AT))
    s.both("people", ("a@x", 30), (None, 40), (None, 40))
    s.both("log", (1, "hello"), (1, "hello"), (2, "bye"))
    yield s
    s.close()


def by_name(result: AuditResult) -> dict[str, TableDiff]:
    return {t.table: t for t in result.tables}


def test_equal_tables_pass(sides: Sides) -> None:
    result = sides.audit()
    assert result.ok
    assert result.problems() == []
    assert result.rows == 9
    assert result.headline() == "audit OK: 3 tables, 9 rows, all equal"
    t = by_name(result)
    assert (t["items"].key, t["people"].key, t["log"].key) == (
        "primary key (id)",
        "unique key uk_email (email)",
        "whole row",
    )
    text = result.render()
    assert "shop.items: upstream 3 rows, downstream 3: equal (by primary key (id))" in text


def test_missing_row(sides: Sides) -> None:
    sides.insert(sides.up, "items", (4, "cup", Decimal("9.99"), AT))
    result = sides.audit()
    t = by_name(result)["items"]
    assert not result.ok
    assert (t.upstream_rows, t.downstream_rows, t.missing, t.extra, t.different) == (4, 3, 1, 0, 0)
    assert t.missing_examples == ["(id=4, name='cup', price=Decimal('9.99'), at=" + repr(AT)[:39] + "…)"]
    assert result.headline() == "audit FAILED: 1 of 3 tables differ"
    [problem] = result.problems()
    assert problem.startswith("shop.items: upstream 4 rows, downstream 3: missing downstream 1, extra downstream 0")
    assert "\n  missing: (id=4, name='cup'" in problem


def test_extra_row(sides: Sides) -> None:
    sides.insert(sides.down, "items", (9, "bag", None, None))
    t = by_name(sides.audit())["items"]
    assert (t.missing, t.extra, t.different) == (0, 1, 0)
    assert t.extra_examples == ["(id=9, name='bag', price=None, at=None)"]


def test_different_row_names_the_columns(sides: Sides) -> None:
    d = sides.dialect
    sides.down.execute(f"UPDATE {d.table(DB, 'items')} SET price = '1.5', name = 'PEN' WHERE id = 1")
    t = by_name(sides.audit())["items"]
    assert (t.missing, t.extra, t.different) == (0, 0, 1)
    [example] = t.different_examples
    assert example.startswith("id=1: name upstream 'pen' downstream 'PEN'")


def test_a_type_mapping_bug_shows_as_a_difference(sides: Sides) -> None:
    """A DATETIME(3) that lost its fraction downstream reads back as another value."""
    d = sides.dialect
    col = sides.table("items").column("at")
    sides.down.execute(
        f"UPDATE {d.table(DB, 'items')} SET at = ? WHERE id = 3", (d.to_store(col, AT.replace(microsecond=0)),)
    )
    t = by_name(sides.audit())["items"]
    assert t.different == 1
    assert "at upstream" in t.different_examples[0]


def test_no_key_table_compares_duplicates_as_a_multiset(sides: Sides) -> None:
    d = sides.dialect
    sides.down.execute(f"DELETE FROM {d.table(DB, 'log')} WHERE rowid = (SELECT MIN(rowid) FROM {d.table(DB, 'log')})")
    sides.insert(sides.down, "log", (2, "bye"), (2, "bye"))
    t = by_name(sides.audit())["log"]
    assert (t.upstream_rows, t.downstream_rows, t.missing, t.extra, t.different) == (3, 4, 1, 2, 0)
    assert t.missing_examples == ["(n=1, msg='hello')"]
    assert t.extra_examples == ["(n=2, msg='bye') x2"]


def test_unique_key_with_null_rows_matched_whole(sides: Sides) -> None:
    sides.insert(sides.down, "people", (None, 40))
    d = sides.dialect
    sides.down.execute(f"UPDATE {d.table(DB, 'people')} SET age = 31 WHERE email = 'a@x'")
    t = by_name(sides.audit())["people"]
    assert (t.missing, t.extra, t.different) == (0, 1, 1)
    assert t.different_examples == ["email='a@x': age upstream 30 downstream 31"]
    assert t.extra_examples == ["(email=None, age=40)"]


def test_table_missing_downstream(sides: Sides) -> None:
    sides.down.execute(f"DROP TABLE {sides.dialect.table(DB, 'log')}")
    result = sides.audit()
    t = by_name(result)["log"]
    assert not t.ok
    assert t.problem == "missing downstream (upstream has 3 rows)"
    assert "shop.log: missing downstream (upstream has 3 rows)" in result.problems()
    assert by_name(result)["items"].ok


def test_extra_table_downstream(sides: Sides) -> None:
    sides.down.execute(f"CREATE TABLE {sides.dialect.table(DB, 'stale')} (x INTEGER)")
    sides.down.execute('CREATE TABLE "other.t" (x INTEGER)')  # a database upstream does not have: not ours
    result = sides.audit()
    assert result.extra_tables == ["shop.stale"]
    assert not result.ok
    assert result.problems() == ["shop.stale: extra table downstream (not in the upstream schema)"]


def test_columns_that_differ_downstream_are_a_problem(sides: Sides) -> None:
    """sqlite reads a missing "column" as a string literal: the columns are checked before the rows."""
    d = sides.dialect
    sides.down.execute(f"ALTER TABLE {d.table(DB, 'log')} DROP COLUMN msg")
    sides.down.execute(f"ALTER TABLE {d.table(DB, 'items')} ADD COLUMN stale INT")
    t = by_name(sides.audit())
    assert t["log"].problem == "columns missing downstream: msg"
    assert t["items"].problem == "extra columns downstream: stale"
    assert t["people"].ok


def test_compare_rows_is_pure_and_limits_examples() -> None:
    up = [(i, f"v{i}") for i in range(10)]
    down = [(i, f"w{i}") for i in range(5)]
    diff = compare_rows(TableDiff("d", "t", "pk"), ["id", "v"], KeyChoice("pk", (0,)), up, down, examples=2)
    assert (diff.missing, diff.extra, diff.different) == (5, 0, 5)
    assert diff.missing_examples == ["(id=5, v='v5')", "(id=6, v='v6')"]
    assert diff.different_examples == ["id=0: v upstream 'v0' downstream 'w0'", "id=1: v upstream 'v1' downstream 'w1'"]


def test_long_values_are_cut_in_examples() -> None:
    diff = compare_rows(TableDiff("d", "t", "row"), ["b"], KeyChoice("whole row"), [(b"x" * 1000,)], [])
    assert diff.missing_examples[0].endswith("…)")
    assert len(diff.missing_examples[0]) < 60


def test_composite_primary_key(tmp_path: Path) -> None:
    s = Sides(tmp_path)
    try:
        s.ddl("create_table", DB, "pairs", [Column("a", "INT"), Column("b", "VARCHAR(5)"), Column("v", "INT")],
              primary_key=["a", "b"])  # fmt: skip
        assert choose_key(s.table("pairs")) == KeyChoice("primary key (a, b)", (0, 1))
        s.insert(s.up, "pairs", (1, "x", 1), (1, "y", 2))
        s.insert(s.down, "pairs", (1, "x", 1), (1, "y", 3))
        t = by_name(s.audit())["pairs"]
        assert t.different_examples == ["a=1, b='y': v upstream 2 downstream 3"]
    finally:
        s.close()


def test_mysql_server_url() -> None:
    m = MySQLServer.parse("mysql://bob:s%40cret@db.local:3307")
    assert (m.host, m.port, m.user, m.password) == ("db.local", 3307, "bob", "s@cret")
    assert m.describe() == "mysql://bob@db.local:3307"
    assert "s@cret" not in repr(m)
    assert MySQLServer.parse("mysql://127.0.0.1/").user == "root"
    for bad in ("postgres://h", "mysql:///x", "mysql://h/db", "mysql://h:99999"):
        with pytest.raises(ConfigError):
            MySQLServer.parse(bad)


def test_string_keys_merged_downstream_are_missing_rows(tmp_path: Path) -> None:
    """Keys that differ only in case or trailing spaces are compared exactly, not by any collation:
    a downstream that merged them (a case-insensitive or PAD SPACE key) fails the audit."""
    s = Sides(tmp_path)
    try:
        s.ddl("create_table", DB, "skey", [Column("k", "VARCHAR(8)"), Column("v", "INT")], primary_key=["k"])
        s.insert(s.up, "skey", ("a", 1), ("A", 2), ("a ", 3))
        s.insert(s.down, "skey", ("a", 3))  # what a folding key leaves: one row, the last write
        t = by_name(s.audit())["skey"]
        assert (t.upstream_rows, t.downstream_rows, t.missing, t.different) == (3, 1, 2, 1)
        assert not t.ok
    finally:
        s.close()
