"""Audit: every upstream table equals its downstream table, row by row (visible columns only).

The upstream writer's tables are read through its own store; the downstream ones through a
MySQL connection (tables made by the drainer from the DDL query text, so a table without an
integer primary key has no hidden ``_tidb_rowid`` there) or an sqlite file laid out like the
writer's sqlite store.  Rows are compared as multisets of value tuples, each value converted
back to the canonical Python value of its column type, so a type mapping bug shows up as a
difference too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from common.schema.infoschema import InfoSchema
from common.schema.model import TableInfo
from upstream.database import Database
from upstream.store.base import Dialect
from upstream.store.mysql import MySQLDialect
from upstream.store.sqlite import SqliteDialect

QueryAll = Callable[[str], Sequence[Sequence[Any]]]


def table_rows(dialect: Dialect, query_all: QueryAll, db: str, t: TableInfo) -> Counter[str]:
    cols = ", ".join(dialect.select_expr(c) for c in t.columns)
    rows = query_all(f"SELECT {cols} FROM {dialect.table(db, t.name)}")
    return Counter(repr(tuple(dialect.from_store(c, v) for c, v in zip(t.columns, r, strict=True))) for r in rows)


def upstream_rows(up: Database, db: str, t: TableInfo) -> Counter[str]:
    s = up.store.session()
    try:
        return table_rows(up.store.dialect(), s.query_all, db, t)
    finally:
        s.close()


def diff(
    schema: InfoSchema, up: Callable[[str, TableInfo], Counter[str]], down: Callable[[str, TableInfo], Counter[str]]
) -> list[str]:
    """Every difference, one line each (empty when equal)."""
    problems: list[str] = []
    for ref in schema.tables():
        a, b = up(ref.db.name, ref.table), down(ref.db.name, ref.table)
        if a == b:
            continue
        missing, extra = a - b, b - a
        problems.append(
            f"{ref.db.name}.{ref.table.name}: upstream {sum(a.values())} rows, downstream {sum(b.values())}; "
            f"missing downstream {sum(missing.values())} e.g. {list(missing)[:2]}, "
            f"extra downstream {sum(extra.values())} e.g. {list(extra)[:2]}"
        )
    return problems


def mysql_query_all(conn: Any) -> QueryAll:
    def query_all(sql: str) -> Sequence[Sequence[Any]]:
        with conn.cursor() as cur:
            cur.execute(sql)
            rows: Sequence[Sequence[Any]] = cur.fetchall()
        conn.commit()
        return rows

    return query_all


def audit_mysql(up: Database, conn: Any) -> list[str]:
    """`conn`: a pymysql connection to the downstream (tables under their logical database names)."""
    dialect = MySQLDialect(prefix="")
    q = mysql_query_all(conn)
    return diff(up.schema, lambda db, t: upstream_rows(up, db, t), lambda db, t: table_rows(dialect, q, db, t))


def audit_sqlite(up: Database, conn: Any) -> list[str]:
    """`conn`: an sqlite3 connection to the sqlite sink's file."""
    dialect = SqliteDialect()

    def q(sql: str) -> Sequence[Sequence[Any]]:
        cur = conn.execute(sql)
        try:
            rows: Sequence[Sequence[Any]] = cur.fetchall()
            return rows
        finally:
            cur.close()

    return diff(up.schema, lambda db, t: upstream_rows(up, db, t), lambda db, t: table_rows(dialect, q, db, t))
