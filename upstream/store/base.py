"""What the writer needs from a store; the SQL both stores share is in :mod:`common.sql.dialect`.

A logical table ``db.t`` is one real table (sqlite: ``"db.t"`` in the one file; MySQL:
`` `<prefix>db`.`t` ``).  Its key column is the integer primary key when the table uses it
as the handle, else a hidden ``_tidb_rowid`` column; the declared primary key of such a
table becomes a unique index.  The writer reads and writes rows by handle only; unique
indexes are enforced by the store (a violation is :class:`DuplicateKeyError`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, Job, JobType, TableInfo
from common.sql.dialect import Dialect, StoreError

Row = dict[str, Any]
_T = TypeVar("_T")


class DuplicateKeyError(StoreError):
    """A row with the same primary or unique key exists."""


class LockConflictError(StoreError):
    """Another transaction holds a lock this one needs (deadlock or lock wait timeout); run it again."""

    retriable = True


class Session(abc.ABC):
    """One store connection used by one thread at a time: row access by handle inside a transaction."""

    def __init__(self, dialect: Dialect, conn: Any, translate: Callable[[BaseException], BaseException | None]) -> None:
        self.dialect = dialect
        self.conn = conn
        self._translate = translate
        self._sql_cache: dict[tuple[object, ...], str] = {}
        self.in_txn = False

    # -------------------------------------------------------------- transaction
    def begin(self) -> None:
        self._begin()
        self.in_txn = True

    def commit(self) -> None:
        self._commit()
        self.in_txn = False

    def rollback(self) -> None:
        self.in_txn = False
        self._rollback()

    @abc.abstractmethod
    def _begin(self) -> None: ...

    def _commit(self) -> None:
        self.execute("COMMIT")

    def _rollback(self) -> None:
        self.execute("ROLLBACK")

    def close(self) -> None:
        self.conn.close()

    def _run(self, sql: str, params: Sequence[Any], fetch: Callable[[Any], Any]) -> Any:
        """Run one statement and fetch from it; the cursor is closed before returning, always.

        A cursor left to the garbage collector is dangerous with sqlite: the collector may run
        in another thread and block on this connection's mutex while this connection waits
        for the write lock (e.g. in a prewrite thread that the lock holder is waiting for).
        An open cursor also pins sqlite's read snapshot."""
        cur = self.conn.cursor()
        try:
            cur.execute(sql, tuple(params))
            return fetch(cur)
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            cur.close()

    def call(self, fn: Callable[[], _T]) -> _T:
        """Run `fn` (e.g. a txn-status helper on this connection), mapping driver errors as statements do."""
        try:
            return fn()
        except Exception as exc:
            mapped = self._translate(exc)
            if mapped is None:
                raise
            raise mapped from exc

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._run(sql, params, lambda cur: None)

    def query_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of a query, or None."""
        return self._run(sql, params, lambda cur: cur.fetchone())

    def query_all(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        rows: list[Any] = self._run(sql, params, lambda cur: cur.fetchall())
        return rows

    # -------------------------------------------------------------- rows
    def _sql(self, kind: str, db: str, t: TableInfo, build: Callable[[str, str, list[str]], str]) -> str:
        key = (kind, db, t.name, t.id, t.max_column_id, len(t.columns))  # changes with every column job
        sql = self._sql_cache.get(key)
        if sql is None or len(self._sql_cache) > 4096:
            d = self.dialect
            sql = build(d.table(db, t.name), d.quote(d.key_column(t)), [d.quote(c.name) for c in t.columns])
            if len(self._sql_cache) > 4096:
                self._sql_cache.clear()
            self._sql_cache[key] = sql
        return sql

    def get_row(self, db: str, t: TableInfo, handle: int, *, lock: bool = False) -> Row | None:
        ph = self.dialect.placeholder
        suffix = " FOR UPDATE" if lock and self.supports_for_update else ""
        kind = "get-lock" if suffix else "get"
        exprs = ", ".join(self.dialect.select_expr(c) for c in t.columns)
        sql = self._sql(kind, db, t, lambda tbl, key, cols: f"SELECT {exprs} FROM {tbl} WHERE {key} = {ph}")
        row = self.query_one(sql + suffix, (self._handle_param(t, handle),))
        if row is None:
            return None
        d = self.dialect
        return {c.lname: d.from_store(c, raw) for c, raw in zip(t.columns, row, strict=True)}

    def find_handle(self, db: str, t: TableInfo, columns: Sequence[ColumnInfo], values: Sequence[Any]) -> int | None:
        """The handle of the row whose `columns` equal `values` (a unique key), or None."""
        d = self.dialect
        ph = d.placeholder
        where = " AND ".join(f"{d.quote(c.name)} = {ph}" for c in columns)
        sql = f"SELECT {d.quote(d.key_column(t))} FROM {d.table(db, t.name)} WHERE {where}"
        row = self.query_one(sql, [d.to_store(c, v) for c, v in zip(columns, values, strict=True)])
        if row is None:
            return None
        h = t.handle_column
        return int(row[0]) if h is None else int(d.from_store(h, row[0]))

    def insert_row(self, db: str, t: TableInfo, handle: int, row: Row) -> None:
        ph = self.dialect.placeholder
        d = self.dialect
        params = [d.to_store(c, row[c.lname]) for c in t.columns]
        if t.pk_is_handle:
            sql = self._sql(
                "insert",
                db,
                t,
                lambda tbl, key, cols: f"INSERT INTO {tbl} ({', '.join(cols)}) VALUES ({', '.join([ph] * len(cols))})",
            )
        else:
            sql = self._sql(
                "insert",
                db,
                t,
                lambda tbl, key, cols: (
                    f"INSERT INTO {tbl} ({key}, {', '.join(cols)}) VALUES ({', '.join([ph] * (len(cols) + 1))})"
                ),
            )
            params.insert(0, handle)
        self.execute(sql, params)

    def update_row(self, db: str, t: TableInfo, handle: int, row: Row) -> None:
        ph = self.dialect.placeholder
        d = self.dialect
        sql = self._sql(
            "update",
            db,
            t,
            lambda tbl, key, cols: f"UPDATE {tbl} SET {', '.join(f'{c} = {ph}' for c in cols)} WHERE {key} = {ph}",
        )
        params = [d.to_store(c, row[c.lname]) for c in t.columns]
        params.append(self._handle_param(t, handle))
        self.execute(sql, params)

    def delete_row(self, db: str, t: TableInfo, handle: int) -> None:
        ph = self.dialect.placeholder
        sql = self._sql("delete", db, t, lambda tbl, key, cols: f"DELETE FROM {tbl} WHERE {key} = {ph}")
        self.execute(sql, (self._handle_param(t, handle),))

    def _handle_param(self, t: TableInfo, handle: int) -> Any:
        h = t.handle_column
        return handle if h is None else self.dialect.to_store(h, handle)

    supports_for_update = True


class Store(abc.ABC):
    """A place that keeps the writer's tables and its txn-status table."""

    kind: str
    dsn: str
    parallel_status: bool
    """True when a second connection can write the txn-status row while a data transaction is open."""
    exact_string_keys: bool
    """True when string keys compare byte for byte: ``'a'`` and ``'a '`` are two keys (sqlite's BINARY).
    False when trailing spaces are ignored (MySQL's PAD SPACE ``utf8mb4_bin``); case matters in both."""

    @abc.abstractmethod
    def session(self) -> Session: ...

    def status_session(self) -> Session:
        """A session for txn-status rows written outside a data transaction (autocommit)."""
        return self.session()

    def status_write(self) -> contextlib.AbstractContextManager[object]:
        """Held around each txn-status write of a status session (sqlite: its turn for the one write
        lock, see upstream.store.sqlite); nothing by default."""
        return contextlib.nullcontext()

    @abc.abstractmethod
    def dialect(self) -> Dialect: ...

    def apply_ddl(self, job: Job, before: InfoSchema) -> None:
        """Run a job's statements; on failure undo what ran (sqlite: one transaction; MySQL: drop a new table)."""
        d = self.dialect()
        stmts = d.ddl_statements(job, before)
        s = self.session()
        try:
            if self.transactional_ddl:
                s.begin()
            try:
                for sql in stmts:
                    s.execute(sql)
            except BaseException:
                if s.in_txn:
                    s.rollback()
                elif job.type == JobType.CREATE_TABLE and job.table is not None:
                    with contextlib.suppress(StoreError):
                        s.execute(f"DROP TABLE IF EXISTS {d.table(job.schema_name, job.table.name)}")
                raise
            if s.in_txn:
                s.commit()
        finally:
            s.close()

    transactional_ddl = False

    def scan(self, db: str, t: TableInfo) -> Iterator[tuple[int, Row]]:
        """Every row of a table with its handle, in handle order (for audits and tests)."""
        d = self.dialect()
        s = self.session()
        try:
            key = d.quote(d.key_column(t))
            cols = ", ".join([key] + [d.select_expr(c) for c in t.columns])
            for raw in s.query_all(f"SELECT {cols} FROM {d.table(db, t.name)} ORDER BY {key}"):
                row = {c.lname: d.from_store(c, v) for c, v in zip(t.columns, raw[1:], strict=True)}
                h = raw[0] if t.handle_column is None else row[t.handle_column.lname]
                yield int(h), row
        finally:
            s.close()

    def close(self) -> None:
        return None
