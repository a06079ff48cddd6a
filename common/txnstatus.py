"""Transaction status: our stand-in for TiKV's lock resolver (docs/formats.md#status-rows).

The upstream writer keeps one row per transaction in its own store (an sqlite
file or a MySQL database), in the same storage transaction as its data.  The
pump reads it to decide the fate of a prewrite whose commit binlog never came.

Table `tidb_binlog_txn_status` (sqlite: main schema; MySQL: the DSN's database):

    start_ts      BIGINT PRIMARY KEY    the transaction's start timestamp (TSO)
    state         VARCHAR(16) NOT NULL  'pending' | 'committed' | 'rolled_back'
    commit_ts     BIGINT NOT NULL = 0   the commit timestamp once committed, else 0
    ttl_deadline  BIGINT NOT NULL       wall-clock ms since the epoch after which a
                                        pending transaction's lock has expired
                                        (0 on rows written directly as terminal)
    pump_node_id  VARCHAR(255) NOT NULL the node id of the pump that took the
                  = ''                  P-binlog, written with 'committed' ('' when
                                        the writer did not say, and on older rows)

sqlite declares `start_ts INTEGER PRIMARY KEY` (a 64-bit rowid alias, the
fastest key sqlite has); both dialects CHECK `state`.  No secondary index:
every read and update goes by primary key, and `purge_before` scans a key range.

Protocol.  The writer calls the helpers on *its own* connection, so each one
joins whatever transaction the writer has open there:

1. `begin_pending(conn, start_ts, ttl_ms, not_after_ms=...)` in a short
   transaction committed while (or before) the P-binlog is sent, so the pump can
   see that the transaction lives.  A row written concurrently with the P-binlog
   must exist by `start_ts`'s physical time + the *status-row TTL*
   (`DEFAULT_STATUS_ROW_TTL`): `not_after_ms` makes `begin_pending` refuse a
   later one (StatusRowTooLateError, retriable): nothing is written, or a row
   whose write waited past it for a lock is marked rolled back at once.
2. `extend_ttl(conn, start_ts, ttl_ms)` (committed) while the transaction works:
   a transaction that keeps its lock alive waits as long as it takes — the
   original dropped commits slower than 10 minutes (its issue #1024).
3. `mark_committed(conn, start_ts, commit_ts, pump_node_id=...)` in the same
   storage transaction as the data, so "data visible" and "status committed" are
   one atomic fact; or `mark_rolled_back(conn, start_ts)` when the transaction
   aborts.  `pump_node_id` names the pump whose copy of the P-binlog counts: a
   prewrite attempt that timed out may still have been stored by a slow pump
   before the client failed over, and that pump must roll its copy back rather
   than commit it a second time (pump/resolver.py).

`ensure_schema` adds `pump_node_id` to a table created before it existed;
readers select every column and take them by name, so a pump reads a table with
or without it (or with columns an operator added).

The pump reads with `get(start_ts)`.  When it gives a transaction up (pending
with an expired lock, or no row once `start_ts` is older than the status-row
TTL) it calls `rollback_abandoned(start_ts, now_ms)`, which atomically turns the
expired pending row into `rolled_back` or writes a `rolled_back` tombstone for a
missing row, as TiKV's resolver rolls back an expired lock.  A writer that comes
back later then fails in `begin_pending` / `extend_ttl` / `mark_committed` with
TxnStatusConflictError (retriable: the transaction was rolled back) and must roll
its data transaction back: the pump never drops a transaction that the upstream
then commits.  The primary key decides a race between the writer's row and the
pump's tombstone (whichever INSERT comes second fails and re-reads the row), and
row locks (MySQL) or the write lock (sqlite) held by an open writer transaction
make the pump's roll-back wait (bounded by the store's timeout, then retried
later), so the two sides serialize.  The pump therefore needs write access to
this table.

Clocks: `ttl_deadline` is written with the writer's clock and compared with the
pump's, and the status-row TTL is counted from `start_ts` (pd-server's clock) by
both the writer's and the pump's clocks, so keep hosts NTP-synchronized and TTLs
well above the expected skew.  Skew costs at most a needless roll-back (the
store, not the clocks, decides every race), never a lost commit.

`purge_before(start_ts)` deletes terminal rows below `start_ts` in batches and
keeps pending ones.  sqlite stores are switched to WAL (a reader never blocks
the writer) and opened with a busy timeout; MySQL connections have connect and
read timeouts, a session `innodb_lock_wait_timeout`, and reconnect once when
the connection was dropped.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, TypeAlias, TypeVar

import pymysql

from common import tso
from common.dsn import MySQLDSN, SqliteDSN, TxnStatusDSN, parse_dsn
from common.errors import BinlogError, CodecError, ConfigError, StorageClosedError, UnavailableError

log = logging.getLogger(__name__)

TABLE = "tidb_binlog_txn_status"
MAX_NODE_ID = 255
"""The longest pump node id the table stores (`pump_node_id VARCHAR(255)`)."""
DEFAULT_TIMEOUT = 5.0
"""Seconds for connecting, reading, sqlite's busy wait and MySQL's lock wait."""
PURGE_BATCH = 10_000
"""Rows deleted per statement by purge_before (keeps each lock short)."""
DEFAULT_STATUS_ROW_TTL = 10.0
"""Seconds, counted from a transaction's start_ts (its TSO physical time), within which its
status row exists if the pumps can have its P-binlog: the writer refuses to write the row any
later (StatusRowTooLateError) and writes it before the P-binlog for a transaction already half
that old at commit; a pump that still finds no row after this long rolls the transaction back
(a tombstone), as TiKV resolves a lock whose TTL expired.  The pumps' `[upstream] status-row-ttl`
must be at least the writers' (a shorter one only costs needless, retried roll-backs)."""

SQLITE_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    start_ts     INTEGER PRIMARY KEY,
    state        VARCHAR(16) NOT NULL CHECK (state IN ('pending', 'committed', 'rolled_back')),
    commit_ts    BIGINT NOT NULL DEFAULT 0,
    ttl_deadline BIGINT NOT NULL,
    pump_node_id VARCHAR(255) NOT NULL DEFAULT ''
)"""

MYSQL_DDL = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    start_ts     BIGINT NOT NULL,
    state        VARCHAR(16) NOT NULL,
    commit_ts    BIGINT NOT NULL DEFAULT 0,
    ttl_deadline BIGINT NOT NULL,
    pump_node_id VARCHAR(255) NOT NULL DEFAULT '',
    PRIMARY KEY (start_ts),
    CONSTRAINT {TABLE}_state CHECK (state IN ('pending', 'committed', 'rolled_back'))
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""

# MySQL client/server errors that mean "this connection is gone": server has gone
# away, lost connection, commands out of sync, lost connection (no pending result),
# connection killed (MariaDB), server shutdown, disconnected for inactivity (MySQL 8).
_MYSQL_DISCONNECT_CODES = frozenset({2006, 2013, 2014, 2055, 1927, 1053, 4031})

WriterConnection: TypeAlias = "sqlite3.Connection | pymysql.connections.Connection[Any]"
_Row: TypeAlias = "tuple[object, ...]"
_T = TypeVar("_T")


class TxnState(StrEnum):
    PENDING = "pending"
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"


@dataclass(frozen=True)
class TxnStatus:
    start_ts: int
    state: TxnState
    commit_ts: int = 0
    ttl_deadline_ms: int = 0
    pump_node_id: str = ""
    """The pump whose P-binlog the commit belongs to; '' when unknown (any copy may commit)."""

    def lock_expired(self, now_ms: int) -> bool:
        """True for a pending transaction whose TTL deadline is in the past."""
        return self.state is TxnState.PENDING and self.ttl_deadline_ms < now_ms

    @classmethod
    def from_row(cls, row: Sequence[object]) -> TxnStatus:
        """Validate one `(start_ts, state, commit_ts, ttl_deadline[, pump_node_id])` row; CodecError if malformed."""
        if len(row) not in (4, 5):
            raise CodecError(f"{TABLE}: expected 4 or 5 columns, got {len(row)}: {row!r}")
        pump = row[4] if len(row) == 5 else ""
        if not isinstance(pump, str):
            raise CodecError(f"{TABLE}: pump_node_id must be a string, got {pump!r} in row {tuple(row)!r}")
        start_ts = _int_column("start_ts", row[0], row)
        commit_ts = _int_column("commit_ts", row[2], row)
        ttl = _int_column("ttl_deadline", row[3], row)
        state = row[1]
        if not isinstance(state, str) or state not in _STATES:
            raise CodecError(f"{TABLE}: start_ts={start_ts} has unknown state {state!r}")
        txn_state = TxnState(state)
        if start_ts == 0:
            raise CodecError(f"{TABLE}: start_ts must be positive, got row {row!r}")
        if txn_state is TxnState.COMMITTED and commit_ts <= start_ts:
            raise CodecError(f"{TABLE}: start_ts={start_ts} is committed with commit_ts={commit_ts} <= start_ts")
        return cls(start_ts, txn_state, commit_ts, ttl, pump)


_STATES = frozenset(state.value for state in TxnState)


def _int_column(name: str, value: object, row: Sequence[object]) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CodecError(f"{TABLE}: {name} must be a non-negative integer, got {value!r} in row {tuple(row)!r}")
    return value


class TxnStatusConflictError(BinlogError):
    """A state change the protocol forbids, e.g. committing a transaction the pump rolled back.

    The writer must roll back its storage transaction.  Retriable (with a new start_ts) when the
    row says rolled back: the pump resolved the transaction, nothing of it was applied.
    """

    def __init__(self, message: str, start_ts: int, current: TxnStatus | None) -> None:
        super().__init__(message)
        self.start_ts = start_ts
        self.current = current
        self.retriable = current is not None and current.state is TxnState.ROLLED_BACK


class StatusRowTooLateError(TxnStatusConflictError):
    """The status row would be written after start_ts + the status-row TTL, when a pump may already
    have rolled the transaction back: nothing was written; retry the transaction."""

    def __init__(self, message: str, start_ts: int) -> None:
        super().__init__(message, start_ts, None)
        self.retriable = True


# ---------------------------------------------------------------------------- SQL


@dataclass(frozen=True)
class _Sql:
    """The statements of one dialect (`p` = the driver's placeholder)."""

    begin: str
    select: str
    select_locked: str
    insert: str
    insert_finished: str
    finish: str
    extend: str
    expire: str
    purge: str
    ddl: str
    add_pump: str

    @classmethod
    def build(cls, *, p: str, greatest: str, begin: str, lock: str, purge: str, ddl: str) -> _Sql:
        cols = "start_ts, state, commit_ts, ttl_deadline"
        # Every column, in table order: a reader takes a table with or without pump_node_id.
        select = f"SELECT * FROM {TABLE} WHERE start_ts = {p}"
        pending = f"state = '{TxnState.PENDING}'"
        return cls(
            begin=begin,
            select=select,
            select_locked=select + lock,
            insert=f"INSERT INTO {TABLE} ({cols}) VALUES ({p}, {p}, {p}, {p})",
            insert_finished=f"INSERT INTO {TABLE} ({cols}, pump_node_id) VALUES ({p}, {p}, {p}, {p}, {p})",
            finish=(
                f"UPDATE {TABLE} SET state = {p}, commit_ts = {p}, pump_node_id = {p}"
                f" WHERE start_ts = {p} AND {pending}"
            ),
            extend=(
                f"UPDATE {TABLE} SET ttl_deadline = {greatest}(ttl_deadline, {p}) WHERE start_ts = {p} AND {pending}"
            ),
            expire=(
                f"UPDATE {TABLE} SET state = '{TxnState.ROLLED_BACK}'"
                f" WHERE start_ts = {p} AND {pending} AND ttl_deadline < {p}"
            ),
            purge=purge,
            ddl=ddl,
            add_pump=f"ALTER TABLE {TABLE} ADD COLUMN pump_node_id VARCHAR(255) NOT NULL DEFAULT ''",
        )


_TERMINAL = f"state <> '{TxnState.PENDING}'"
_SQLITE = _Sql.build(
    p="?",
    greatest="MAX",
    begin="BEGIN IMMEDIATE",
    lock="",
    purge=(
        f"DELETE FROM {TABLE} WHERE start_ts IN"
        f" (SELECT start_ts FROM {TABLE} WHERE start_ts < ? AND {_TERMINAL} ORDER BY start_ts LIMIT ?)"
    ),
    ddl=SQLITE_DDL,
)
_MYSQL = _Sql.build(
    p="%s",
    greatest="GREATEST",
    begin="START TRANSACTION",
    lock=" FOR UPDATE",
    purge=f"DELETE FROM {TABLE} WHERE start_ts < %s AND {_TERMINAL} ORDER BY start_ts LIMIT %s",
    ddl=MYSQL_DDL,
)


def _exec(conn: WriterConnection, sql: str, params: tuple[object, ...] = ()) -> tuple[int, _Row | None]:
    """Run one statement; (rowcount, first row or None).  The cursor is always closed."""
    cur = conn.cursor()
    try:
        cur.execute(sql, params)
        row = cur.fetchone() if cur.description else None
        return cur.rowcount, None if row is None else tuple(row)
    finally:
        cur.close()


_COLUMNS = ("start_ts", "state", "commit_ts", "ttl_deadline")


def _read_status(conn: WriterConnection, sql: str, start_ts: int) -> TxnStatus | None:
    """The row of `start_ts` read by column name (`SELECT *`: a table with or without pump_node_id, or with
    columns of the operator's own, reads the same); CodecError when it is malformed."""
    cur = conn.cursor()
    try:
        cur.execute(sql, (start_ts,))
        row = cur.fetchone()
        names = [str(d[0]).lower() for d in cur.description or ()]
    finally:
        cur.close()
    if row is None:
        return None
    values = dict(zip(names, row, strict=False))
    missing = [c for c in _COLUMNS if c not in values]
    if missing:
        raise CodecError(f"{TABLE}: no column {', '.join(missing)} (columns: {', '.join(names)})")
    status = TxnStatus.from_row((*(values[c] for c in _COLUMNS), values.get("pump_node_id", "")))
    if status.start_ts != start_ts:
        raise CodecError(f"{TABLE}: asked for start_ts={start_ts}, got row {tuple(row)!r}")
    return status


def _is_disconnect(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in _MYSQL_DISCONNECT_CODES


_DB_ERRORS = (sqlite3.Error, pymysql.err.MySQLError)
_INTEGRITY_ERRORS = (sqlite3.IntegrityError, pymysql.err.IntegrityError)


# ---------------------------------------------------------------------------- store


class TxnStatusStore:
    """The `tidb_binlog_txn_status` table of one store.

    Reader methods (`ensure_schema`, `get`, `rollback_abandoned`, `purge_before`)
    use one lazily opened connection under a lock, so the store is thread-safe;
    they raise UnavailableError (retriable) when the store cannot be reached and
    CodecError for a malformed row.  Writer helpers take the caller's connection
    and let its driver errors through, raising TxnStatusConflictError for a
    forbidden state change.
    """

    def __init__(
        self,
        dsn: TxnStatusDSN,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if timeout <= 0:
            raise ConfigError(f"txn-status store timeout must be positive, got {timeout}")
        self.dsn = dsn
        self._timeout = timeout
        self._clock = clock
        self._sql = _SQLITE if isinstance(dsn, SqliteDSN) else _MYSQL
        self._lock = threading.Lock()
        self._conn: WriterConnection | None = None
        self._closed = False

    @classmethod
    def open(
        cls, dsn: str, *, timeout: float = DEFAULT_TIMEOUT, clock: Callable[[], float] = time.time
    ) -> TxnStatusStore:
        """Parse `dsn` (ConfigError if bad); nothing is connected until first use."""
        return cls(parse_dsn(dsn), timeout=timeout, clock=clock)

    def describe(self) -> str:
        return self.dsn.describe()

    def __enter__(self) -> TxnStatusStore:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- writer side: run on the caller's connection, inside the caller's transaction

    def begin_pending(
        self, conn: WriterConnection, start_ts: int, ttl_ms: int, *, not_after_ms: int | None = None
    ) -> None:
        """Record `start_ts` as pending with a lock until now + ttl_ms (a live pending row is extended).

        `not_after_ms` (wall-clock ms, the status-row deadline): past it, StatusRowTooLateError.  Checked
        before writing (then nothing is written) and again after the write, which may have waited for a
        lock: a row that landed late is marked rolled back at once, so a writer never keeps a transaction
        alive on a row the pumps could have given up before it existed.  A row the pump tombstoned first
        raises TxnStatusConflictError (retriable)."""
        sql = self._writer_sql(conn)
        deadline = self._deadline(start_ts, ttl_ms)
        self._check_in_time(start_ts, deadline - ttl_ms, not_after_ms, "not written")
        try:
            _exec(conn, sql.insert, (start_ts, TxnState.PENDING.value, 0, deadline))
        except _INTEGRITY_ERRORS:
            current = self._read_locked(conn, sql, start_ts)
            if current is None:
                raise
            if current.state is not TxnState.PENDING:
                raise TxnStatusConflictError(
                    f"start_ts={start_ts} is already {current.state}; cannot begin it again", start_ts, current
                ) from None
            _exec(conn, sql.extend, (deadline, start_ts))
        if not_after_ms is not None:
            try:
                self._check_in_time(start_ts, int(self._clock() * 1000), not_after_ms, "marked rolled back")
            except StatusRowTooLateError:
                self.mark_rolled_back(conn, start_ts)
                raise

    @staticmethod
    def _check_in_time(start_ts: int, now_ms: int, not_after_ms: int | None, outcome: str) -> None:
        if not_after_ms is not None and now_ms > not_after_ms:
            raise StatusRowTooLateError(
                f"start_ts={start_ts}: its status row comes {now_ms - not_after_ms} ms after the status-row TTL, "
                f"when a pump may have rolled it back; {outcome}",
                start_ts,
            )

    def extend_ttl(self, conn: WriterConnection, start_ts: int, ttl_ms: int) -> None:
        """Push the lock deadline of pending `start_ts` to now + ttl_ms (never shortens it)."""
        sql = self._writer_sql(conn)
        rows, _ = _exec(conn, sql.extend, (self._deadline(start_ts, ttl_ms), start_ts))
        if rows == 1:
            return
        current = self._read_locked(conn, sql, start_ts)
        if current is not None and current.state is TxnState.PENDING:
            return  # already at or past that deadline (drivers may report 0 changed rows)
        raise TxnStatusConflictError(self._not_pending(start_ts, current, "extend its lock"), start_ts, current)

    def mark_committed(self, conn: WriterConnection, start_ts: int, commit_ts: int, *, pump_node_id: str = "") -> None:
        """Set `start_ts` committed at `commit_ts`; call in the same transaction as the data.

        `pump_node_id`: the pump that took the P-binlog ('' when unknown): a copy on any other pump
        is rolled back by that pump's resolver instead of committed a second time."""
        if commit_ts <= start_ts:
            raise ValueError(f"commit_ts={commit_ts} must be greater than start_ts={start_ts}")
        if len(pump_node_id) > MAX_NODE_ID:
            raise ValueError(f"pump_node_id is {len(pump_node_id)} characters, more than {MAX_NODE_ID}")
        self._finish(conn, start_ts, TxnState.COMMITTED, commit_ts, pump_node_id)

    def mark_rolled_back(self, conn: WriterConnection, start_ts: int) -> None:
        """Set `start_ts` rolled back (idempotent; a committed transaction cannot be rolled back)."""
        self._finish(conn, start_ts, TxnState.ROLLED_BACK, 0, "")

    def _finish(self, conn: WriterConnection, start_ts: int, state: TxnState, commit_ts: int, pump: str) -> None:
        sql = self._writer_sql(conn)
        _check_ts(start_ts)
        rows, _ = _exec(conn, sql.finish, (state.value, commit_ts, pump, start_ts))
        if rows == 1:
            return
        current = self._read_locked(conn, sql, start_ts)
        if current is None:
            try:
                _exec(conn, sql.insert_finished, (start_ts, state.value, commit_ts, 0, pump))
                return
            except _INTEGRITY_ERRORS:
                current = self._read_locked(conn, sql, start_ts)
                if current is None:
                    raise
        if current.state is state and current.commit_ts == commit_ts:
            return
        if current.state is TxnState.PENDING:  # a concurrent begin won the race; finish it now
            rows, _ = _exec(conn, sql.finish, (state.value, commit_ts, pump, start_ts))
            if rows == 1:
                return
        verb = "commit" if state is TxnState.COMMITTED else "roll back"
        raise TxnStatusConflictError(self._not_pending(start_ts, current, verb + " it"), start_ts, current)

    def _writer_sql(self, conn: WriterConnection) -> _Sql:
        expected = sqlite3.Connection if self._sql is _SQLITE else pymysql.connections.Connection
        if not isinstance(conn, expected):
            raise TypeError(f"txn-status store {self.describe()} needs a {expected.__name__}, got {type(conn)!r}")
        return self._sql

    def _deadline(self, start_ts: int, ttl_ms: int) -> int:
        _check_ts(start_ts)
        if ttl_ms <= 0:
            raise ValueError(f"ttl_ms must be positive, got {ttl_ms}")
        return int(self._clock() * 1000) + ttl_ms

    @staticmethod
    def _read_locked(conn: WriterConnection, sql: _Sql, start_ts: int) -> TxnStatus | None:
        return _read_status(conn, sql.select_locked, start_ts)

    @staticmethod
    def _not_pending(start_ts: int, current: TxnStatus | None, what: str) -> str:
        if current is None:
            return f"start_ts={start_ts} has no status row; cannot {what}"
        if current.state is TxnState.ROLLED_BACK:
            return f"start_ts={start_ts} was rolled back (lock expired or resolved by pump); cannot {what}"
        return f"start_ts={start_ts} is already {current.state} (commit_ts={current.commit_ts}); cannot {what}"

    # -- reader side: the store's own connection

    def ensure_schema(self) -> None:
        """Create the table if it does not exist (creates an sqlite file if needed); add `pump_node_id`
        to a table created without it."""
        self._run("create table", lambda conn: _exec(conn, self._sql.ddl), create=True)
        if "pump_node_id" not in self._run("read the table's columns", self._columns):
            try:
                self._run("add column pump_node_id", lambda conn: _exec(conn, self._sql.add_pump))
            except UnavailableError:
                if "pump_node_id" not in self._run("read the table's columns", self._columns):
                    raise
                # another writer added it first
            log.info("txn-status table %s: added column pump_node_id", self.describe())
        log.info("txn-status table ready in %s", self.describe())

    def _columns(self, conn: WriterConnection) -> set[str]:
        cur = conn.cursor()
        try:
            if isinstance(conn, sqlite3.Connection):
                cur.execute(f"PRAGMA table_info({TABLE})")
                return {str(row[1]) for row in cur.fetchall()}
            cur.execute(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS"
                " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
                (TABLE,),
            )
            return {str(row[0]) for row in cur.fetchall()}
        finally:
            cur.close()

    def get(self, start_ts: int) -> TxnStatus | None:
        """The current status of `start_ts`, or None if the store has no row for it."""
        _check_ts(start_ts)
        return self._run("read status", lambda conn: _read_status(conn, self._sql.select, start_ts))

    def rollback_abandoned(self, start_ts: int, now_ms: int) -> TxnStatus:
        """Atomically give up `start_ts`: expired pending → rolled_back; no row → rolled_back tombstone.

        Returns the row as it is afterwards (a live pending or terminal row is left alone).
        """
        _check_ts(start_ts)

        def txn(conn: WriterConnection) -> TxnStatus:
            _exec(conn, self._sql.expire, (start_ts, now_ms))
            found = _read_status(conn, self._sql.select_locked, start_ts)
            if found is not None:
                return found
            _exec(conn, self._sql.insert, (start_ts, TxnState.ROLLED_BACK.value, 0, 0))
            return TxnStatus(start_ts, TxnState.ROLLED_BACK)

        return self._run("roll back abandoned transaction", lambda conn: self._transaction(conn, txn))

    def purge_before(self, start_ts: int, *, batch: int = PURGE_BATCH) -> int:
        """Delete committed and rolled-back rows with start_ts < `start_ts`; the number deleted."""
        if batch <= 0:
            raise ValueError(f"batch must be positive, got {batch}")
        total = 0
        while True:
            rows, _ = self._run("purge", lambda conn: _exec(conn, self._sql.purge, (start_ts, batch)))
            total += max(rows, 0)
            if rows < batch:
                break
        log.log(
            logging.INFO if total else logging.DEBUG,
            "purged %d txn-status rows below start_ts=%d from %s",
            total,
            start_ts,
            self.describe(),
        )
        return total

    def close(self) -> None:
        """Close the store's connection. Idempotent."""
        with self._lock:
            self._closed = True
            self._discard()

    def _transaction(self, conn: WriterConnection, body: Callable[[WriterConnection], _T]) -> _T:
        _exec(conn, self._sql.begin)
        try:
            result = body(conn)
            conn.commit()
        except BaseException:
            with contextlib.suppress(*_DB_ERRORS):
                conn.rollback()
            raise
        return result

    def _run(self, what: str, fn: Callable[[WriterConnection], _T], *, create: bool = False) -> _T:
        with self._lock:
            if self._closed:
                raise StorageClosedError(f"txn-status store {self.describe()} is closed")
            for attempt in (1, 2):
                if self._conn is None:
                    self._conn = self._open(create)
                try:
                    return fn(self._conn)
                except _DB_ERRORS as exc:
                    if not _is_disconnect(exc):
                        raise UnavailableError(f"txn-status store {self.describe()}: {what} failed: {exc}") from exc
                    self._discard()
                    if attempt == 2:
                        raise UnavailableError(f"txn-status store {self.describe()}: {what} failed: {exc}") from exc
                    log.info("txn-status store %s: connection lost (%s); reconnecting", self.describe(), exc)
            raise AssertionError("unreachable")

    def _open(self, create: bool) -> WriterConnection:
        try:
            if isinstance(self.dsn, SqliteDSN):
                return self._open_sqlite(self.dsn, create)
            return self._open_mysql(self.dsn)
        except (*_DB_ERRORS, OSError) as exc:
            raise UnavailableError(f"txn-status store {self.describe()}: cannot connect: {exc}") from exc

    def _open_sqlite(self, dsn: SqliteDSN, create: bool) -> sqlite3.Connection:
        # mode=rw: a reader with a wrong path fails instead of creating an empty database.
        uri = f"{dsn.path.resolve().as_uri()}?mode={'rwc' if create else 'rw'}"
        conn = sqlite3.connect(uri, uri=True, timeout=self._timeout, isolation_level=None, check_same_thread=False)
        try:
            _, row = _exec(conn, "PRAGMA journal_mode")
            if row is None or str(row[0]).lower() != "wal":
                _, row = _exec(conn, "PRAGMA journal_mode = WAL")
                mode = None if row is None else row[0]
                if str(mode).lower() != "wal":
                    log.warning("txn-status store %s: journal_mode is %s, not wal", self.describe(), mode)
        except sqlite3.OperationalError as exc:
            log.warning("txn-status store %s: cannot switch to WAL: %s", self.describe(), exc)
        except BaseException:
            conn.close()
            raise
        return conn

    def _open_mysql(self, dsn: MySQLDSN) -> pymysql.connections.Connection[Any]:
        lock_wait = max(1, math.ceil(self._timeout))
        return pymysql.connect(
            host=dsn.host,
            port=dsn.port,
            user=dsn.user,
            password=dsn.password,
            database=dsn.database,
            autocommit=True,
            charset="utf8mb4",
            connect_timeout=self._timeout,
            read_timeout=self._timeout + lock_wait,
            write_timeout=self._timeout,
            init_command=f"SET SESSION innodb_lock_wait_timeout = {lock_wait}",
        )

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(*_DB_ERRORS):
                conn.close()


def status_row_deadline_ms(start_ts: int, status_row_ttl: float) -> int:
    """Wall-clock ms by which the status row of `start_ts` exists: its TSO physical time + the TTL."""
    _check_ts(start_ts)
    return tso.physical(start_ts) + int(status_row_ttl * 1000)


def _check_ts(start_ts: int) -> None:
    if start_ts <= 0:
        raise ValueError(f"start_ts must be positive, got {start_ts}")
