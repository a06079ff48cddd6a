"""Writing final images to the target: create the tables at their final schema, then rows in parallel.

The tables are created first (`prepare_target`, on the driver), at their schema as of stop-ts:
    MySQL   CREATE DATABASE IF NOT EXISTS, CREATE TABLE IF NOT EXISTS with the store's column
            declarations (`common.sql.values.mysql_decl`), primary / unique / plain keys,
            InnoDB, the table's charset and collation mapped to the target's
            (`common.sql.collation`: utf8mb4_bin becomes the NO PAD binary collation where the
            server has one, so keys differing only in case or trailing spaces stay apart)
    sqlite  the upstream sqlite store's own layout (`SqliteDialect.create_table_sql`)
A table that already exists must have the final columns (a re-run of the same replay finds its own
tables); anything else is an error naming the table, before any row is written.

Then every Spark partition of the compacted rows (`write_partition`) opens its own connection and
writes its rows table by table in batches: live rows as multi-row REPLACE (`common.sql.render.Renderer`,
at most `batch_rows` rows / about `batch_bytes` bytes per statement), tombstones as
`DELETE ... WHERE <key> IN (...)`; one commit per batch.  REPLACE and DELETE by key make the write
idempotent: running the replay again gives the same tables.  A deadlock or lock wait timeout
(partitions write to the same tables) rolls the batch back and retries it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from common.backoff import Backoff, retry
from common.events import DML, DMLType, TableShape
from common.schema.defaults import default_value
from common.schema.model import HIDDEN_HANDLE, TableInfo, table_from_dict, table_to_dict
from common.sql.collation import DEFAULT_CHARSET, DEFAULT_COLLATE, downstream_collation
from common.sql.dialect import index_clause
from common.sql.values import mysql_decl, to_mysql, to_sqlite
from spark_jobs.errors import TargetError
from spark_jobs.replay.target import MySQLTarget, SqliteTarget, Target
from spark_jobs.rowjson import decode_row, decode_value, key_columns

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "FinalTable",
    "WritePlan",
    "connect_mysql",
    "prepare_target",
    "write_partition",
]

log = logging.getLogger(__name__)

DEFAULT_BATCH_ROWS: Final = 500
DEFAULT_BATCH_BYTES: Final = 1 << 20
CONNECT_TIMEOUT: Final = 10.0
RETRIES: Final = 5
_RETRY_ERRORS: Final = frozenset({1205, 1213})  # lock wait timeout, deadlock


@dataclass(frozen=True)
class FinalTable:
    """A table as it is at stop-ts: its logical database, name and info (as JSON-ready dict)."""

    table_id: int
    db: str
    name: str
    info_doc: dict[str, Any]

    @staticmethod
    def of(db: str, info: TableInfo) -> FinalTable:
        return FinalTable(info.id, db, info.name, table_to_dict(info))

    def info(self) -> TableInfo:
        return table_from_dict(self.info_doc, f"{self.db}.{self.name}")

    @property
    def full_name(self) -> str:
        return f"{self.db}.{self.name}"


@dataclass(frozen=True)
class WritePlan:
    target: Target
    tables: dict[int, FinalTable]
    batch_rows: int = DEFAULT_BATCH_ROWS
    batch_bytes: int = DEFAULT_BATCH_BYTES


# ------------------------------------------------------------------------------------------ connect
def connect_mysql(t: MySQLTarget) -> Any:
    """A pymysql connection (UTC session, utf8mb4, no autocommit); TargetError naming the server."""
    import pymysql

    try:
        conn = pymysql.connect(
            host=t.host,
            port=t.port,
            user=t.user,
            password=t.password,
            charset="utf8mb4",
            connect_timeout=CONNECT_TIMEOUT,
            autocommit=False,
        )
    except pymysql.MySQLError as exc:
        raise TargetError(f"cannot connect to {t.describe()}: {exc.args[-1] if exc.args else exc}") from None
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute("SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'")
    return conn


def _connect_sqlite(t: SqliteTarget) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(t.path, timeout=60.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
    except sqlite3.Error as exc:
        raise TargetError(f"cannot open {t.describe()}: {exc}") from None
    return conn


def _q(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# ------------------------------------------------------------------------------------------ tables
def mysql_create_table(physical_db: str, info: TableInfo, collations: Mapping[str, str] | None = None) -> str:
    """CREATE TABLE IF NOT EXISTS of `info` in MySQL (no hidden handle: rows are found by their key);
    `collations` are the server's (name -> charset), None = only utf8mb4_bin known."""

    choice = downstream_collation(info.charset, info.collate, collations or {DEFAULT_COLLATE: DEFAULT_CHARSET})
    if choice.warning:
        log.warning("table %s.%s: %s", physical_db, info.name, choice.warning)
    parts = [mysql_decl(c) for c in info.columns] + [index_clause(ix) for ix in info.indices]
    return (
        f"CREATE TABLE IF NOT EXISTS {_q(physical_db)}.{_q(info.name)} ({', '.join(parts)}) "
        f"ENGINE=InnoDB DEFAULT CHARSET={choice.charset} COLLATE={choice.collate}"
    )


def _mismatch(table: str, info: TableInfo, names: Sequence[str]) -> str:
    have = {n.lower() for n in names} - {HIDDEN_HANDLE}
    want = {c.lname for c in info.columns}
    if have == want:
        return ""
    parts = []
    if want - have:
        parts.append(f"lacks {', '.join(sorted(want - have))}")
    if have - want:
        parts.append(f"has extra {', '.join(sorted(have - want))}")
    return (
        f"table {table} exists in the target with other columns than its final schema ({'; '.join(parts)}): "
        "replay into an empty database or drop the table"
    )


def prepare_target(target: Target, tables: Iterable[FinalTable]) -> tuple[int, int]:
    """Create the databases and tables the replay writes (driver side); (created, already there)."""
    tables = list(tables)
    if isinstance(target, MySQLTarget):
        return _prepare_mysql(target, tables)
    if isinstance(target, SqliteTarget):
        return _prepare_sqlite(target, tables)
    return 0, 0


def _prepare_mysql(target: MySQLTarget, tables: list[FinalTable]) -> tuple[int, int]:
    import pymysql

    conn = connect_mysql(target)
    created = existing = 0
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW COLLATION")
            collations = {str(r[0]): str(r[1]) for r in cur.fetchall()}
            for db in sorted({t.db for t in tables}):
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {_q(target.physical_db(db))} DEFAULT CHARACTER SET utf8mb4")
            for t in tables:
                pdb = target.physical_db(t.db)
                info = t.info()
                cur.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s AND table_name = %s",
                    (pdb, t.name),
                )
                names = [str(r[0]) for r in cur.fetchall()]
                if names:
                    problem = _mismatch(f"{pdb}.{t.name}", info, names)
                    if problem:
                        raise TargetError(problem)
                    existing += 1
                    continue
                cur.execute(mysql_create_table(pdb, info, collations))
                created += 1
        conn.commit()
    except pymysql.MySQLError as exc:
        raise TargetError(f"{target.describe()}: cannot create the tables: {exc}") from None
    finally:
        conn.close()
    return created, existing


def _prepare_sqlite(target: SqliteTarget, tables: list[FinalTable]) -> tuple[int, int]:
    from common.sql.dialect import SqliteDialect

    dialect = SqliteDialect()
    conn = _connect_sqlite(target)
    created = existing = 0
    try:
        have = {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        conn.execute("BEGIN")
        for t in tables:
            info = t.info()
            physical = f"{t.db}.{t.name}"
            if physical in have:
                names = [str(r[1]) for r in conn.execute(f"PRAGMA table_info({dialect.table(t.db, t.name)})")]
                problem = _mismatch(physical, info, names)
                if problem:
                    raise TargetError(problem)
                existing += 1
                continue
            for stmt in dialect.create_table_sql(t.db, info):
                conn.execute(stmt)
            created += 1
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        raise TargetError(f"{target.describe()}: cannot create the tables: {exc}") from None
    finally:
        conn.close()
    return created, existing


# ------------------------------------------------------------------------------------------ rows
class _Table:
    """One final table in a writing task: its shape, row building and key statements."""

    def __init__(self, spec: FinalTable, target: Target) -> None:
        self.spec = spec
        self.info = spec.info()
        self.mysql = isinstance(target, MySQLTarget)
        db = target.physical_db(spec.db) if isinstance(target, MySQLTarget) else spec.db
        self.shape = TableShape.of(db, self.info)
        self.key_cols = key_columns(self.info)
        self.defaults = tuple(default_value(c) if c.default is not None else None for c in self.info.columns)
        if self.mysql:
            self.table = f"{_q(db)}.{_q(spec.name)}"
        else:
            self.table = '"' + f"{db}.{spec.name}".replace('"', '""') + '"'

    def row(self, values: str) -> tuple[object, ...]:
        got = decode_row(self.info, values)
        return tuple(got.get(c.name, d) for c, d in zip(self.info.columns, self.defaults, strict=True))

    def key_params(self, key: str) -> list[object]:
        import json

        raw = json.loads(key)
        if not isinstance(raw, list) or len(raw) != len(self.key_cols):
            raise TargetError(f"{self.spec.full_name}: key {key} does not match its key columns")
        conv = to_mysql if self.mysql else to_sqlite
        return [conv(c, decode_value(c, r)) for c, r in zip(self.key_cols, raw, strict=True)]

    def delete_sql(self, n: int) -> str:
        """DELETE of `n` keys (NULL-safe `<=>` on MySQL: a whole-row key may hold NULLs)."""
        ph = "%s" if self.mysql else "?"
        eq = "<=>" if self.mysql else "IS"
        cols = [_q(c.name) if self.mysql else '"' + c.name.replace('"', '""') + '"' for c in self.key_cols]
        one = "(" + " AND ".join(f"{c} {eq} {ph}" for c in cols) + ")"
        return f"DELETE FROM {self.table} WHERE " + " OR ".join([one] * n)


@dataclass
class _Counts:
    written: int = 0
    deleted: int = 0


class _Writer:
    """Batches per table, flushes through one connection."""

    def __init__(self, plan: WritePlan) -> None:
        from common.sql.render import Renderer

        self.plan = plan
        target = plan.target
        self.mysql = isinstance(target, MySQLTarget)
        if isinstance(target, MySQLTarget):
            self.conn: Any = connect_mysql(target)
        else:
            assert isinstance(target, SqliteTarget)
            self.conn = _connect_sqlite(target)
        self.renderer = Renderer(
            "mysql" if self.mysql else "sqlite", max_rows=plan.batch_rows, max_bytes=plan.batch_bytes
        )
        self.tables: dict[int, _Table] = {}
        self.upserts: dict[int, list[DML]] = {}
        self.upsert_bytes: dict[int, int] = {}
        self.deletes: dict[int, list[str]] = {}
        self.counts: dict[int, _Counts] = {}

    def table(self, tid: int) -> _Table:
        t = self.tables.get(tid)
        if t is None:
            t = self.tables[tid] = _Table(self.plan.tables[tid], self.plan.target)
            self.counts[tid] = _Counts()
        return t

    def add(self, tid: int, key: str, deleted: bool, values: str | None) -> None:
        t = self.table(tid)
        if deleted or values is None:
            keys = self.deletes.setdefault(tid, [])
            keys.append(key)
            if len(keys) >= self.plan.batch_rows:
                self._flush_deletes(tid)
            return
        dml = DML(DMLType.INSERT, t.shape, values=t.row(values), size=len(values))
        batch = self.upserts.setdefault(tid, [])
        batch.append(dml)
        self.upsert_bytes[tid] = self.upsert_bytes.get(tid, 0) + len(values)
        if len(batch) >= self.plan.batch_rows or self.upsert_bytes[tid] >= self.plan.batch_bytes:
            self._flush_upserts(tid)

    def _flush_upserts(self, tid: int) -> None:
        batch = self.upserts.pop(tid, [])
        self.upsert_bytes.pop(tid, None)
        if batch:
            self._run(self.renderer.render(batch, safe_mode=True))
            self.counts[tid].written += len(batch)

    def _flush_deletes(self, tid: int) -> None:
        keys = self.deletes.pop(tid, [])
        if keys:
            t = self.tables[tid]
            params: list[object] = []
            for k in keys:
                params.extend(t.key_params(k))
            self._run([(t.delete_sql(len(keys)), params)])
            self.counts[tid].deleted += len(keys)

    def _run(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        if self.mysql:
            self._run_mysql(statements)
        else:
            self._run_sqlite(statements)

    def _run_mysql(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        import pymysql

        def attempt() -> None:
            try:
                with self.conn.cursor() as cur:
                    for sql, params in statements:
                        cur.execute(sql, list(params))
                self.conn.commit()
            except pymysql.MySQLError:
                self.conn.rollback()
                raise

        def retriable(exc: Exception) -> bool:
            return isinstance(exc, pymysql.MySQLError) and (exc.args[0] if exc.args else None) in _RETRY_ERRORS

        try:
            retry(
                attempt,
                Backoff(0.05, factor=1.0, step=0.05),  # 50 ms, 100 ms, 150 ms, ...
                attempts=RETRIES + 1,
                retriable=retriable,
                on_retry=lambda exc, n, _delay: log.warning("write batch retried after %s (attempt %d)", exc, n),
            )
        except pymysql.MySQLError as exc:
            raise TargetError(f"{self.plan.target.describe()}: write failed: {exc}") from None

    def _run_sqlite(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                self.conn.execute(sql, list(params))
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise TargetError(f"{self.plan.target.describe()}: write failed: {exc}") from None

    def finish(self) -> Iterator[tuple[int, int, int]]:
        for tid in list(self.upserts):
            self._flush_upserts(tid)
        for tid in list(self.deletes):
            self._flush_deletes(tid)
        self.conn.close()
        for tid, c in self.counts.items():
            yield tid, c.written, c.deleted


def write_partition(rows: Iterable[Any], plan: WritePlan) -> Iterator[tuple[int, int, int]]:
    """Write one partition of compacted rows (`FINAL_COLUMNS`); (table_id, written, deleted) per table."""
    w = _Writer(plan)
    try:
        for r in rows:
            w.add(int(r["table_id"]), str(r["key"]), bool(r["deleted"]), r["values"])
    except BaseException:
        w.conn.close()
        raise
    yield from w.finish()
