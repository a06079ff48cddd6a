"""The embedded store: one sqlite file (WAL), tables named ``"db.table"``.

sqlite has one writer at a time: a data transaction takes the write lock at ``BEGIN
IMMEDIATE``, so prewrites serialize and commit order equals commit_ts order.  The
txn-status row of a transaction is therefore written outside its data transaction, before
it opens (``parallel_status = False``).

Write turns: this process's writers (data transactions from ``BEGIN IMMEDIATE`` to their
``COMMIT`` / ``ROLLBACK``, and each txn-status write) take the write lock in turn, first come
first served (:class:`WriteTurns`), and the next one is woken as soon as a turn ends.  Left to
sqlite's busy handler, a waiter polls with sleeps growing to 100 ms, and under four writer
threads one could wait a second or more while the others kept taking the lock.  A transaction
whose prewrite binlog is already on a pump holds that pump's output back while it waits, so
`bench/e2e_lag.py --breakdown` showed prewrite-to-commit holds of up to 1.5 s at the writer's
maximum rate.  Other processes (the pumps resolving transactions) still meet the busy handler.

Status sessions (:meth:`SqliteStore.status_session`) run with ``synchronous = NORMAL``: a
pending or rolled-back row is not fsynced on its own.  In WAL mode a power loss can only
lose a suffix of such commits, and the next data commit (``synchronous = FULL``) makes every
earlier one durable, so a lost row belongs to a transaction whose data never committed;
the pump then finds no row and drops the prewrite once its start_ts is the status-row TTL old
(:data:`common.txnstatus.DEFAULT_STATUS_ROW_TTL`, docs/architecture.md#transaction-status).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.sql.dialect import Dialect, SqliteDialect, StoreError
from upstream.store.base import DuplicateKeyError, LockConflictError, Session, Store

BUSY_TIMEOUT = 30.0


def _translate(exc: BaseException) -> BaseException | None:
    if isinstance(exc, sqlite3.IntegrityError):
        text = str(exc)
        if "UNIQUE" in text or "PRIMARY KEY" in text:
            return DuplicateKeyError(f"duplicate key: {text}")
        return StoreError(f"constraint violated: {text}")
    if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        return LockConflictError(f"sqlite: {exc} (waited {BUSY_TIMEOUT:.0f}s for the write lock)")
    if isinstance(exc, sqlite3.Error):
        return StoreError(f"sqlite: {exc}")
    return None


class WriteTurns:
    """First come, first served turns at one sqlite file's write lock, within this process (see the
    module doc).  A waiter is woken by the end of the turn before it, not by polling."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[threading.Event] = deque()  # the head holds the turn

    def acquire(self, timeout: float) -> None:
        """Wait for this thread's turn; LockConflictError (retriable) after `timeout` seconds."""
        mine = threading.Event()
        with self._lock:
            self._queue.append(mine)
            if len(self._queue) == 1:
                mine.set()
        try:
            got = mine.wait(timeout)
        except BaseException:  # interrupted (KeyboardInterrupt): leave the queue, passing on a turn that came
            self._leave(mine)
            raise
        if got:
            return
        with self._lock:
            if mine.is_set():  # the turn came as the wait ended
                return
            self._queue.remove(mine)
        raise LockConflictError(f"sqlite: waited {timeout:.0f}s for the write lock (other writers of this process)")

    def _leave(self, mine: threading.Event) -> None:
        with self._lock:
            if not mine.is_set():
                self._queue.remove(mine)
                return
        self.release()

    def release(self) -> None:
        with self._lock:
            self._queue.popleft()
            if self._queue:
                self._queue[0].set()

    @contextlib.contextmanager
    def turn(self, timeout: float) -> Iterator[None]:
        self.acquire(timeout)
        try:
            yield
        finally:
            self.release()


class SqliteSession(Session):
    supports_for_update = False  # BEGIN IMMEDIATE already holds the one write lock

    def __init__(self, dialect: Dialect, conn: Any, turns: WriteTurns) -> None:
        super().__init__(dialect, conn, _translate)
        self._turns = turns
        self._has_turn = False

    def _begin(self) -> None:
        self._turns.acquire(BUSY_TIMEOUT)
        self._has_turn = True
        try:
            self.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._end_turn()
            raise

    def _commit(self) -> None:
        try:
            self.execute("COMMIT")
        finally:  # a COMMIT that failed leaves sqlite's lock to sqlite: later writers meet its busy handler
            self._end_turn()

    def _rollback(self) -> None:
        try:
            self.execute("ROLLBACK")
        finally:
            self._end_turn()

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self._end_turn()

    def _end_turn(self) -> None:
        if self._has_turn:
            self._has_turn = False
            self._turns.release()


class SqliteStore(Store):
    kind = "sqlite"
    parallel_status = False
    exact_string_keys = True
    transactional_ddl = True

    def __init__(self, path: Path, dsn: str) -> None:
        self.path = path
        self.dsn = dsn
        self._dialect = SqliteDialect()
        self._init_lock = threading.Lock()
        self._turns = WriteTurns()
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = self._connect()
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()

    def _connect(self, synchronous: str = "FULL") -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        return conn

    def dialect(self) -> Dialect:
        return self._dialect

    def session(self) -> Session:
        return SqliteSession(self._dialect, self._connect(), self._turns)

    def status_session(self) -> Session:
        return SqliteSession(self._dialect, self._connect("NORMAL"), self._turns)

    def status_write(self) -> contextlib.AbstractContextManager[object]:
        return self._turns.turn(BUSY_TIMEOUT)
