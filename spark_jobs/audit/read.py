"""Both sides of the audit: where they are, what tables they have, and a chunk's rows (I/O).

A side is an :class:`Endpoint`:

    sqlite:///abs/path.db, sqlite:rel.db, /a/path.db   the writer's sqlite store or the drainer's
                                                       sqlite sink: tables "db.t"; opened read-only
    mysql://user:pass@host:port                        every database but the system ones and
                                                       ``tidb_binlog`` (the drainer's checkpoint)
    mysql://user:pass@host:port/db                     only database ``db``

A MySQL side may have a database prefix (``--upstream-db-prefix``: the writer's MySQL store keeps
logical database ``d`` as ``<prefix>d``); tables are always named by their logical ``db.table``.
MySQL sessions run with ``time_zone = '+00:00'``, as the writer's and the drainer's do, so
TIMESTAMP values read back as the UTC the sqlite store keeps.

Table discovery is ``common.audit.DialectReader.table_names``; table definitions come from the store
(``information_schema`` / ``PRAGMA``) into ``meta.StoreTable``; values are read with the dialect's
``select_expr`` and converted with its ``from_store`` (``common/sql/values.py``), as
``common/audit.py`` reads them.

Chunks are read by Spark tasks (:func:`read_partition`): one partition per chunk and side, each
opening its own connection, so both sides and all chunks are read in parallel.  Pass 1 yields a
chunk's row count and checksum (``compare.CHUNK_DDL``), pass 2 the rows of differing chunks
(``compare.ROW_DDL``).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import pymysql
import pymysql.cursors

from common.audit import DialectReader, MySQLServer
from common.dsn import MySQLDSN, parse_dsn
from common.errors import BinlogError, ConfigError
from common.sql.dialect import Dialect, MySQLDialect, SqliteDialect
from spark_jobs.audit import hashing
from spark_jobs.audit.compare import DOWN, UP
from spark_jobs.audit.meta import AuditTable, StoreColumn, StoreIndex, StoreTable
from spark_jobs.audit.plan import Chunk, Param, range_predicate
from spark_jobs.errors import InputError

__all__ = [
    "SYSTEM_DATABASES",
    "Endpoint",
    "ReadTask",
    "Side",
    "describe_table",
    "list_tables",
    "query_all",
    "read_partition",
]

SYSTEM_DATABASES: Final = frozenset({"information_schema", "mysql", "performance_schema", "sys", "tidb_binlog"})
"""Never audited when a whole MySQL server is given (tidb_binlog: the drainer's checkpoint table)."""
CONNECT_TIMEOUT: Final = 10.0
SQLITE_BUSY_TIMEOUT: Final = 30.0
_FORMS: Final = "use sqlite:///abs/path.db, sqlite:rel.db, a file path, or mysql://user:pass@host:port[/db]"
_JSON_CHECK: Final = re.compile(r"^json_valid\(`((?:[^`]|``)+)`\)$", re.IGNORECASE)

Side = Literal["up", "down"]
Connection = Any
"""An sqlite3 or pymysql connection."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One side of the audit (picklable: Spark tasks connect with it)."""

    kind: Literal["sqlite", "mysql"]
    path: str = ""
    host: str = ""
    port: int = 3306
    user: str = ""
    password: str = field(default="", repr=False)
    database: str = ""
    """MySQL: the only logical database looked at ("" = every one)."""
    prefix: str = ""
    """MySQL: the physical database of logical database d is prefix + d."""

    @classmethod
    def parse(cls, text: str, *, prefix: str = "") -> Endpoint:
        """ConfigError (one line) for a DSN that is not one of the module's forms; nothing is connected."""
        try:
            return cls._parse(text.strip(), prefix)
        except ConfigError as exc:  # common.dsn names its DSNs after the txn-status store
            raise ConfigError(str(exc).replace("txn-status DSN ", "DSN ", 1)) from None

    @classmethod
    def _parse(cls, text: str, prefix: str) -> Endpoint:
        scheme, sep, _ = text.partition(":")
        if sep and scheme.lower() == "mysql":
            if urlsplit(text).path.strip("/"):
                dsn = parse_dsn(text)
                assert isinstance(dsn, MySQLDSN)
                return cls("mysql", "", dsn.host, dsn.port, dsn.user, dsn.password, dsn.database, prefix)
            server = MySQLServer.parse(text)
            return cls("mysql", "", server.host, server.port, server.user, server.password, "", prefix)
        if prefix:
            raise ConfigError(f"{text!r}: a database prefix only applies to a MySQL side")
        if sep and "://" in text and scheme.lower() != "sqlite":
            raise ConfigError(f"{text!r}: unsupported scheme {scheme!r}; {_FORMS}")
        sqlite = parse_dsn(text)
        assert not isinstance(sqlite, MySQLDSN)  # mysql: was handled above
        path = str(sqlite.path)
        if path.startswith("//") and not path.startswith("///"):
            path = path[1:]  # sqlite:///<absolute path> gives //abs/path: the same file, shown once
        return cls("sqlite", path)

    def describe(self) -> str:
        if self.kind == "sqlite":
            return f"sqlite:{self.path}"
        db = f"/{self.database}" if self.database else ""
        prefix = f" (database prefix {self.prefix!r})" if self.prefix else ""
        return f"mysql://{self.user}@{self.host}:{self.port}{db}{prefix}"

    def dialect(self) -> Dialect:
        return SqliteDialect() if self.kind == "sqlite" else MySQLDialect(self.prefix)

    def connect(self) -> Connection:
        """A read connection; InputError naming the side when it cannot be opened."""
        if self.kind == "sqlite":
            path = Path(self.path)
            if not path.is_file():
                raise InputError(f"{self.describe()}: no such sqlite file")
            try:
                return sqlite3.connect(
                    f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise InputError(f"{self.describe()}: cannot open: {exc}") from None
        try:
            return pymysql.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                charset="utf8mb4",
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT,
                init_command="SET SESSION time_zone = '+00:00'",
            )
        except pymysql.MySQLError as exc:
            raise InputError(f"cannot connect to {self.describe()}: {exc}") from None


def query_all(conn: Connection, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Every row of one statement (the cursor is closed before returning)."""
    cur = conn.cursor()
    try:
        cur.execute(sql, tuple(params) or (None if isinstance(conn, pymysql.connections.Connection) else ()))
        return [tuple(r) for r in cur.fetchall()]
    finally:
        cur.close()


# ------------------------------------------------------------------------------------ discovery
def _reader(ep: Endpoint, conn: Connection) -> DialectReader:
    return DialectReader(ep.describe(), ep.dialect(), lambda sql, params: query_all(conn, sql, params))


def _databases(ep: Endpoint, conn: Connection) -> list[str]:
    """The logical databases of a side."""
    if ep.kind == "sqlite":
        names = [str(r[0]) for r in query_all(conn, "SELECT name FROM sqlite_master WHERE type = 'table'")]
        dbs = {n.partition(".")[0] for n in names if "." in n}
        return sorted(d for d in dbs if d.lower() not in SYSTEM_DATABASES)
    if ep.database:
        return [ep.database]
    rows = query_all(conn, "SELECT schema_name FROM information_schema.schemata")
    physical = [str(r[0]) for r in rows if str(r[0]).startswith(ep.prefix)]
    return sorted(p[len(ep.prefix) :] for p in physical if p[len(ep.prefix) :].lower() not in SYSTEM_DATABASES)


def list_tables(ep: Endpoint, conn: Connection) -> list[tuple[str, str]]:
    """Every (db, table) of a side, sorted."""
    reader = _reader(ep, conn)
    out = [(db, t) for db in _databases(ep, conn) for t in reader.table_names(db)]
    return sorted(out)


def _mysql_table(ep: Endpoint, conn: Connection, db: str, table: str) -> StoreTable | None:
    schema = ep.prefix + db
    rows = query_all(
        conn,
        "SELECT column_name, column_type, is_nullable, collation_name FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    )
    if not rows:
        return None
    json_columns: set[str] = set()
    with contextlib.suppress(pymysql.MySQLError):  # MariaDB: JSON is LONGTEXT CHECK (json_valid(`c`))
        for (clause,) in query_all(
            conn,
            "SELECT check_clause FROM information_schema.check_constraints "
            "WHERE constraint_schema = %s AND table_name = %s",
            (schema, table),
        ):
            m = _JSON_CHECK.match(str(clause).strip())
            if m:
                json_columns.add(m.group(1).replace("``", "`").lower())
    columns = []
    for name, ctype, nullable, collation in rows:
        text = str(ctype)
        if str(name).lower() in json_columns and text.lower() == "longtext":
            text = "json"
        binary = collation is None or str(collation).lower().endswith("_bin") or str(collation).lower() == "binary"
        columns.append(StoreColumn(str(name), text, str(nullable).upper() == "YES", binary))
    keys: dict[str, list[str]] = {}
    for ix, col in query_all(
        conn,
        "SELECT index_name, column_name FROM information_schema.statistics "
        "WHERE table_schema = %s AND table_name = %s AND non_unique = 0 ORDER BY index_name, seq_in_index",
        (schema, table),
    ):
        keys.setdefault(str(ix), []).append(str(col))
    unique = tuple(StoreIndex(n, tuple(c), n == "PRIMARY") for n, c in keys.items())
    return StoreTable(db, table, True, tuple(columns), unique)


def _sqlite_table(conn: Connection, db: str, table: str) -> StoreTable | None:
    d = SqliteDialect()
    quoted = d.table(db, table)
    info = query_all(conn, f"PRAGMA table_info({quoted})")
    if not info:
        return None
    columns = tuple(StoreColumn(str(r[1]), str(r[2]), not r[3] and not r[5]) for r in info)
    unique: list[StoreIndex] = []
    pk = [str(r[1]) for r in sorted((r for r in info if r[5]), key=lambda r: int(r[5]))]
    if pk:
        unique.append(StoreIndex("PRIMARY", tuple(pk), True))
    for _seq, name, is_unique, origin, partial in query_all(conn, f"PRAGMA index_list({quoted})"):
        if not is_unique or partial or origin == "pk":
            continue
        cols = [str(r[2]) for r in query_all(conn, f"PRAGMA index_info({d.quote(str(name))})")]
        unique.append(StoreIndex(str(name), tuple(cols)))
    unique[len(pk) > 0 :] = sorted(unique[len(pk) > 0 :], key=lambda ix: ix.name)
    return StoreTable(db, table, False, columns, tuple(unique))


def describe_table(ep: Endpoint, conn: Connection, db: str, table: str) -> StoreTable | None:
    """A side's description of logical table db.table, None when it has no such table."""
    if ep.kind == "sqlite":
        return _sqlite_table(conn, db, table)
    return _mysql_table(ep, conn, db, table)


# --------------------------------------------------------------------------------------- chunks
def order_exprs(ep: Endpoint, t: AuditTable, side: Side) -> list[str]:
    """The chunk key expressions of one side: byte-wise for MySQL strings with another collation."""
    d = ep.dialect()
    store = t.up if side == UP else t.down
    out = []
    for pos in t.chunk_key:
        name = t.info.columns[pos].name
        col = store.column(name)
        quoted = d.quote(col.name if col is not None else name)
        out.append(f"BINARY {quoted}" if ep.kind == "mysql" and col is not None and not col.binary_order else quoted)
    return out


def store_params(ep: Endpoint, t: AuditTable, params: Iterable[Param]) -> list[Any]:
    """Canonical bound values as this side stores them."""
    d = ep.dialect()
    if not t.typed:
        return [v for _, v in params]
    return [d.to_store(t.info.columns[t.chunk_key[i]], v) for i, v in params]


def chunk_sql(ep: Endpoint, t: AuditTable, side: Side, chunk: Chunk) -> tuple[str, list[Any]]:
    """The SELECT of one chunk's rows on one side, and its parameters."""
    d = ep.dialect()
    cols = ", ".join(d.select_expr(c) for c in t.info.columns)
    where, params = range_predicate(chunk, order_exprs(ep, t, side), d.placeholder)
    sql = f"SELECT {cols} FROM {d.table(t.db, t.name)}" + (f" WHERE {where}" if where else "")
    return sql, store_params(ep, t, params)


def convert(ep: Endpoint, t: AuditTable, raw: Sequence[Any], columns: Sequence[int] | None = None) -> tuple[Any, ...]:
    """Canonical values of a raw row (of the columns at `columns`, default all)."""
    positions = range(len(t.info.columns)) if columns is None else columns
    if not t.typed:
        return tuple(bytes(v) if isinstance(v, memoryview) else v for v in raw)
    d = ep.dialect()
    return tuple(d.from_store(t.info.columns[p], v) for p, v in zip(positions, raw, strict=True))


@dataclass(frozen=True, slots=True)
class ReadTask:
    """One chunk of one side for one Spark task; `rows`: yield the rows (pass 2), else the chunk's sum."""

    side: Side
    endpoint: Endpoint
    table: AuditTable
    chunk: Chunk
    rows: bool = False


def _iter_rows(conn: Connection, sql: str, params: Sequence[Any]) -> Iterator[tuple[Any, ...]]:
    if isinstance(conn, sqlite3.Connection):
        cur: Any = conn.cursor()
    else:
        cur = conn.cursor(pymysql.cursors.SSCursor)  # unbuffered: a chunk is streamed, not held
    try:
        cur.execute(sql, tuple(params) or (None if not isinstance(conn, sqlite3.Connection) else ()))
        while batch := cur.fetchmany(1000):
            yield from (tuple(r) for r in batch)
    finally:
        cur.close()


def _row_record(task: ReadTask, values: tuple[Any, ...]) -> tuple[Any, ...]:
    t = task.table
    cols = t.columns_for_values()
    names = t.column_names
    data = hashing.row_bytes(values, cols)
    h = hashing.row_hash(data)
    positions = t.key.positions
    key_values = [values[p] for p in positions]
    if positions and None not in key_values:
        key_cols = [cols[p] for p in positions]
        kid = hashing.key_id(hashing.row_bytes(key_values, key_cols))
        ktext = hashing.key_text([names[p] for p in positions], key_values, key_cols)
    else:  # no usable key: the whole row is the key
        kid = "row:" + hashing.key_id(data)
        ktext = hashing.key_text(names, values, cols)
    cells = [hashing.show(v, c) for v, c in zip(values, cols, strict=True)]
    return (t.full_name, task.chunk.index, task.side, kid, ktext, h, cells, hashing.cell_hashes(values, cols))


def _run_task(task: ReadTask, conn: Connection) -> Iterator[tuple[Any, ...]]:
    sql, params = chunk_sql(task.endpoint, task.table, task.side, task.chunk)
    if task.rows:
        for raw in _iter_rows(conn, sql, params):
            yield _row_record(task, convert(task.endpoint, task.table, raw))
        return
    s = hashing.ChunkSum()
    cols = task.table.columns_for_values()
    for raw in _iter_rows(conn, sql, params):
        s.add(hashing.row_hash(hashing.row_bytes(convert(task.endpoint, task.table, raw), cols)))
    yield (task.table.full_name, task.chunk.index, task.side, s.rows, s.checksum, None)


def read_partition(tasks: Iterable[ReadTask]) -> Iterator[tuple[Any, ...]]:
    """Run a partition's tasks, one connection per side; a chunk that cannot be read is a row with
    its error in pass 1 (the audit reports it) and an exception in pass 2."""
    conns: dict[Endpoint, Connection] = {}
    try:
        for task in tasks:
            try:
                conn = conns.get(task.endpoint)
                if conn is None:
                    conn = conns[task.endpoint] = task.endpoint.connect()
                yield from _run_task(task, conn)
            except (BinlogError, sqlite3.Error, pymysql.MySQLError) as exc:
                side = "upstream" if task.side == UP else "downstream" if task.side == DOWN else task.side
                message = f"{side} {task.endpoint.describe()}: {task.chunk.describe()}: {exc}"
                if task.rows:
                    raise InputError(f"cannot read {task.table.full_name} {message}") from None
                yield (task.table.full_name, task.chunk.index, task.side, 0, None, message)
    finally:
        for c in conns.values():
            with contextlib.suppress(Exception):
                c.close()
