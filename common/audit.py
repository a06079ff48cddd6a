"""Audit: every upstream table equals its downstream table, row by row.

The tables are those of a schema (the upstream writer's: ``Database.schema.tables()``), visible
columns only (never ``_tidb_rowid``).  Both sides are read through a store :class:`Dialect`
and every value is converted back with the dialect's ``from_store``, so a type mapping bug
shows up as a difference too.  Downstream is a MySQL server (``MySQLDialect(prefix="")``:
the drainer creates the tables under their logical database names) or an sqlite file laid
out like the writer's sqlite store (tables ``"db.t"``, the drainer's sqlite sink).

Rows are matched by the primary key, else by the first unique key (a row with a NULL in it
is matched as a whole), else as a multiset of whole rows.  Per table the result says how
many rows each side has and how many are missing downstream, extra downstream, or present
on both sides with different values, with the first few examples of each.  A table missing
downstream is reported, and so is a downstream table the upstream schema does not have.

The comparison (:func:`compare_rows`) is pure: it takes rows and returns a :class:`TableDiff`.
Reading is at the edges (:class:`DialectReader`).  Auditing a running writer against its downstream,
and the ``python -m tools.audit`` command, are in :mod:`tools.audit`.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pymysql

from common.errors import BinlogError, ConfigError
from common.schema.infoschema import InfoSchema
from common.schema.model import HIDDEN_HANDLE, TableInfo
from common.sql.dialect import Dialect, MySQLDialect, SqliteDialect

Values = tuple[Any, ...]
QueryAll = Callable[[str, Sequence[Any]], Sequence[Sequence[Any]]]

EXAMPLES = 3
"""Examples shown per kind of difference and table."""
VALUE_TEXT = 40
"""Characters of one value in an example (longer ones are cut with an ellipsis)."""


# ------------------------------------------------------------------------------------ pure core
@dataclass(frozen=True)
class KeyChoice:
    """How rows of a table are matched: by the values at `positions`, or as whole rows (no positions)."""

    description: str
    positions: tuple[int, ...] = ()


def choose_key(t: TableInfo) -> KeyChoice:
    """The primary key, else the first unique key, else whole rows."""
    for ix in t.unique_keys:
        positions = tuple(t.column(name).offset for name in ix.columns)
        kind = "primary key" if ix.primary else f"unique key {ix.name}"
        return KeyChoice(f"{kind} ({', '.join(ix.columns)})", positions)
    return KeyChoice("whole row")


@dataclass
class TableDiff:
    """The comparison of one table."""

    db: str
    table: str
    key: str
    upstream_rows: int = 0
    downstream_rows: int = 0
    missing: int = 0
    """Rows upstream that are not downstream."""
    extra: int = 0
    """Rows downstream that are not upstream."""
    different: int = 0
    """Keys on both sides whose rows differ."""
    missing_examples: list[str] = field(default_factory=list)
    extra_examples: list[str] = field(default_factory=list)
    different_examples: list[str] = field(default_factory=list)
    problem: str = ""
    """Why the table could not be compared (e.g. "missing downstream"); empty when it was."""

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def ok(self) -> bool:
        return not self.problem and not (self.missing or self.extra or self.different)

    def line(self) -> str:
        """One line: the counts, or the problem."""
        head = f"{self.name}: upstream {self.upstream_rows} rows, downstream {self.downstream_rows}"
        if self.problem:
            return f"{self.name}: {self.problem}"
        if self.ok:
            return f"{head}: equal (by {self.key})"
        return (
            f"{head}: missing downstream {self.missing}, extra downstream {self.extra}, "
            f"different {self.different} (by {self.key})"
        )

    def details(self) -> list[str]:
        lines = [f"  missing: {e}" for e in self.missing_examples]
        lines += [f"  extra: {e}" for e in self.extra_examples]
        lines += [f"  different: {e}" for e in self.different_examples]
        return lines


def _digest(row: Values) -> bytes:
    return hashlib.blake2b(repr(row).encode("utf-8", "backslashreplace"), digest_size=16).digest()


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= VALUE_TEXT else text[: VALUE_TEXT - 1] + "…"


def _show_row(columns: Sequence[str], row: Values) -> str:
    return "(" + ", ".join(f"{c}={_show(v)}" for c, v in zip(columns, row, strict=True)) + ")"


def _show_key(columns: Sequence[str], positions: Sequence[int], row: Values) -> str:
    return ", ".join(f"{columns[p]}={_show(row[p])}" for p in positions)


class _Side:
    """One side's rows: by key (a repr of the key values) and, for rows without a usable key, as a multiset."""

    def __init__(self, rows: Iterable[Values], positions: tuple[int, ...]) -> None:
        self.count = 0
        self.keyed: dict[str, tuple[bytes, Values]] = {}
        self.loose: Counter[bytes] = Counter()
        self.loose_rows: dict[bytes, Values] = {}
        for row in rows:
            self.count += 1
            digest = _digest(row)
            if positions:
                key_values = tuple(row[p] for p in positions)
                key = repr(key_values)
                if None not in key_values and key not in self.keyed:
                    self.keyed[key] = (digest, row)
                    continue
            self.loose[digest] += 1  # no key, a NULL in a unique key, or a duplicate key
            self.loose_rows.setdefault(digest, row)


def compare_rows(
    diff: TableDiff,
    columns: Sequence[str],
    key: KeyChoice,
    upstream: Iterable[Values],
    downstream: Iterable[Values],
    *,
    examples: int = EXAMPLES,
) -> TableDiff:
    """Fill `diff` with the comparison of two sides' rows (tuples of converted values, in `columns` order)."""
    up, down = _Side(upstream, key.positions), _Side(downstream, key.positions)
    diff.upstream_rows, diff.downstream_rows = up.count, down.count
    for k, (digest, row) in up.keyed.items():
        other = down.keyed.get(k)
        if other is None:
            diff.missing += 1
            if len(diff.missing_examples) < examples:
                diff.missing_examples.append(_show_row(columns, row))
        elif other[0] != digest:
            diff.different += 1
            if len(diff.different_examples) < examples:
                diff.different_examples.append(_show_change(columns, key.positions, row, other[1]))
    for k, (_, row) in down.keyed.items():
        if k not in up.keyed:
            diff.extra += 1
            if len(diff.extra_examples) < examples:
                diff.extra_examples.append(_show_row(columns, row))
    for digest, n in (up.loose - down.loose).items():
        diff.missing += n
        if len(diff.missing_examples) < examples:
            diff.missing_examples.append(_show_row(columns, up.loose_rows[digest]) + (f" x{n}" if n > 1 else ""))
    for digest, n in (down.loose - up.loose).items():
        diff.extra += n
        if len(diff.extra_examples) < examples:
            diff.extra_examples.append(_show_row(columns, down.loose_rows[digest]) + (f" x{n}" if n > 1 else ""))
    return diff


def _show_change(columns: Sequence[str], positions: Sequence[int], up: Values, down: Values) -> str:
    changed = [
        f"{c} upstream {_show(a)} downstream {_show(b)}"
        for c, a, b in zip(columns, up, down, strict=True)
        if repr(a) != repr(b)
    ]
    return f"{_show_key(columns, positions, up)}: " + "; ".join(changed)


@dataclass
class AuditResult:
    upstream: str
    downstream: str
    tables: list[TableDiff]
    extra_tables: list[str] = field(default_factory=list)
    """Downstream tables in a database the upstream schema has, but not in that schema."""

    @property
    def ok(self) -> bool:
        return not self.extra_tables and all(t.ok for t in self.tables)

    @property
    def rows(self) -> int:
        return sum(t.upstream_rows for t in self.tables)

    def problems(self) -> list[str]:
        """One entry per unequal table, its line and then its examples (empty when everything is equal)."""
        lines = ["\n".join([t.line(), *t.details()]) for t in self.tables if not t.ok]
        lines += [f"{name}: extra table downstream (not in the upstream schema)" for name in self.extra_tables]
        return lines

    def headline(self) -> str:
        if self.ok:
            return f"audit OK: {len(self.tables)} tables, {self.rows} rows, all equal"
        bad = sum(not t.ok for t in self.tables) + len(self.extra_tables)
        return f"audit FAILED: {bad} of {len(self.tables) + len(self.extra_tables)} tables differ"

    def render(self, *, all_tables: bool = True) -> str:
        """The headline, then one line per table (with examples under each unequal one)."""
        lines = [self.headline(), f"  upstream {self.upstream}, downstream {self.downstream}"]
        for t in self.tables:
            if all_tables or not t.ok:
                lines.append("  " + t.line())
                lines += ["  " + d for d in t.details()]
        lines += [f"  {name}: extra table downstream (not in the upstream schema)" for name in self.extra_tables]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- edges
class DialectReader:
    """Reads logical tables through a dialect and a query function (one side of the audit)."""

    def __init__(self, description: str, dialect: Dialect, query_all: QueryAll) -> None:
        self.description = description
        self.dialect = dialect
        self.query_all = query_all

    def table_names(self, db: str) -> set[str]:
        """The tables of logical database `db` on this side."""
        d = self.dialect
        if isinstance(d, MySQLDialect):
            sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            return {str(r[0]) for r in self.query_all(sql, (d.physical_db(db),))}
        rows = self.query_all("SELECT name FROM sqlite_master WHERE type = 'table'", ())
        prefix = f"{db}."
        return {str(r[0])[len(prefix) :] for r in rows if str(r[0]).startswith(prefix)}

    def column_names(self, db: str, table: str) -> list[str]:
        """The columns of a table on this side, hidden handle included."""
        d = self.dialect
        if isinstance(d, MySQLDialect):
            sql = (
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "ORDER BY ordinal_position"
            )
            return [str(r[0]) for r in self.query_all(sql, (d.physical_db(db), table))]
        return [str(r[1]) for r in self.query_all(f"PRAGMA table_info({d.table(db, table)})", ())]

    def read(self, db: str, t: TableInfo) -> list[Values]:
        d = self.dialect
        cols = ", ".join(d.select_expr(c) for c in t.columns)
        raw = self.query_all(f"SELECT {cols} FROM {d.table(db, t.name)}", ())
        return [tuple(d.from_store(c, v) for c, v in zip(t.columns, r, strict=True)) for r in raw]


def audit_schema(
    schema: InfoSchema, upstream: DialectReader, downstream: DialectReader, *, examples: int = EXAMPLES
) -> AuditResult:
    """Compare every table of `schema` as `upstream` has it with the same table as `downstream` has it."""
    result = AuditResult(upstream.description, downstream.description, [])
    down_names: dict[str, set[str]] = {}
    for ref in schema.tables():
        t = ref.table
        key = choose_key(t)
        diff = TableDiff(ref.db.name, t.name, key.description)
        result.tables.append(diff)
        try:
            if ref.db.name not in down_names:
                down_names[ref.db.name] = downstream.table_names(ref.db.name)
            up_rows = upstream.read(ref.db.name, t)
            if t.name not in down_names[ref.db.name]:
                diff.upstream_rows = len(up_rows)
                diff.problem = f"missing downstream (upstream has {diff.upstream_rows} rows)"
                continue
            columns = column_mismatch(t, downstream.column_names(ref.db.name, t.name))
            if columns:
                diff.upstream_rows = len(up_rows)
                diff.problem = columns
                continue
            down_rows = downstream.read(ref.db.name, t)
        except (BinlogError, sqlite3.Error, pymysql.MySQLError) as exc:
            diff.problem = f"cannot read: {exc}"
            continue
        compare_rows(diff, [c.name for c in t.columns], key, up_rows, down_rows, examples=examples)
    for db in schema.databases():
        try:
            names = down_names[db.name] if db.name in down_names else downstream.table_names(db.name)
        except (sqlite3.Error, pymysql.MySQLError):
            continue
        known = {r.table.name for r in schema.tables(db.name)}
        result.extra_tables += [f"{db.name}.{n}" for n in sorted(names - known)]
    return result


def column_mismatch(t: TableInfo, names: Sequence[str]) -> str:
    """Why the downstream columns are not the table's visible columns ("" when they are)."""
    have = {n.lower() for n in names} - {HIDDEN_HANDLE}
    want = {c.lname for c in t.columns}
    parts = []
    if want - have:
        parts.append(f"columns missing downstream: {', '.join(sorted(want - have))}")
    if have - want:
        parts.append(f"extra columns downstream: {', '.join(sorted(have - want))}")
    return "; ".join(parts)


def sqlite_reader(conn: sqlite3.Connection, description: str = "sqlite") -> DialectReader:
    """A reader of an sqlite file laid out like the writer's sqlite store (the drainer's sqlite sink)."""

    def query_all(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        cur = conn.execute(sql, tuple(params))
        try:
            rows: list[Any] = cur.fetchall()
            return rows
        finally:
            cur.close()

    return DialectReader(description, SqliteDialect(), query_all)


def mysql_reader(conn: Any, description: str = "mysql") -> DialectReader:
    """A reader of a MySQL downstream (a pymysql connection; tables under their logical database names).

    The session's time zone is set to UTC, as the writer's and the drainer's sessions have it."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")

    def query_all(sql: str, params: Sequence[Any]) -> Sequence[Sequence[Any]]:
        with conn.cursor() as cur:
            cur.execute(sql, tuple(params) or None)
            rows: Sequence[Sequence[Any]] = cur.fetchall()
        conn.commit()  # a fresh snapshot for the next statement
        return rows

    return DialectReader(description, MySQLDialect(prefix=""), query_all)


@dataclass(frozen=True)
class MySQLServer:
    """Where a MySQL downstream is: ``mysql://user:pass@host:port`` (no database: tables keep logical names)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)

    @classmethod
    def parse(cls, url: str) -> MySQLServer:
        """ConfigError naming the problem for anything but ``mysql://[user[:pass]@]host[:port][/]``."""
        parts = urlsplit(url)
        if parts.scheme.lower() != "mysql" or not parts.hostname:
            raise ConfigError(f"{url!r}: expected mysql://user:pass@host:port")
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise ConfigError(
                f"{parts.scheme}://{parts.hostname}: give no database, query or fragment: "
                "tables are replicated under their own database names"
            )
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise ConfigError(f"mysql://{parts.hostname}: bad port: {exc}") from None
        return cls(parts.hostname, port, unquote(parts.username or "root"), unquote(parts.password or ""))

    def describe(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}"

    def connect(self, timeout: float = 5.0) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            charset="utf8mb4",
            connect_timeout=timeout,
            autocommit=True,
        )
