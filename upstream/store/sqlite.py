"""The embedded store: one sqlite file (WAL), tables named ``"db.table"``.

sqlite has one writer at a time: a data transaction takes the write lock at ``BEGIN
IMMEDIATE``, so prewrites serialize and commit order equals commit_ts order.  The
txn-status row of a transaction is therefore written outside its data transaction, before
it opens (``parallel_status = False``).

Status sessions (:meth:`SqliteStore.status_session`) run with ``synchronous = NORMAL``: a
pending or rolled-back row is not fsynced on its own.  In WAL mode a power loss can only
lose a suffix of such commits, and the next data commit (``synchronous = FULL``) makes every
earlier one durable, so a lost row belongs to a transaction whose data never committed;
the pump then finds no row and drops the prewrite once its start_ts is the status-row TTL old
(:data:`common.txnstatus.DEFAULT_STATUS_ROW_TTL`, docs/architecture.md#transaction-status).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

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


class SqliteSession(Session):
    supports_for_update = False  # BEGIN IMMEDIATE already holds the one write lock

    def _begin(self) -> None:
        self.execute("BEGIN IMMEDIATE")


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
        return SqliteSession(self._dialect, self._connect(), _translate)

    def status_session(self) -> Session:
        return SqliteSession(self._dialect, self._connect("NORMAL"), _translate)
