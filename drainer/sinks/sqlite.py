"""The sqlite sink: transactions -> one embedded sqlite file laid out as the upstream sqlite store.

Tables are ``"db.table"``; a table without an integer primary key has the hidden
``_tidb_rowid INTEGER PRIMARY KEY``, which DMLs do not carry (sqlite assigns it on insert).
The file is in WAL mode with ``synchronous = FULL``; there is one writer connection (the
loader runs one worker) and each chunk of DMLs is one ``BEGIN IMMEDIATE`` .. ``COMMIT``.

A DDL runs the statements :meth:`SqliteDialect.ddl_statements` plans for its job in one
transaction.  Its "exists / does not exist" errors (:data:`IGNORABLE_DDL_ERRORS`) mean the
DDL was applied before (replay after a crash): the transaction is rolled back and the DDL
ignored, as the MySQL sink ignores the same error family.  A locked database is retriable.
Cursors are closed right after use, never left to the garbage collector.

Table routing (`router`): DMLs come with routed names (drainer/sinks/routing.py); DDL statements are
planned with :class:`RoutedSqliteDialect`, which names every table and index by its routed table.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from common.events import DDL, DML
from common.sql.dialect import SqliteDialect
from common.sql.render import Renderer
from common.table_rules import Router
from drainer.loader import DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_TXN_BATCH, ExecError, Executor, Loader, LoaderSink
from drainer.sinks.base import SinkError, SinkObserver

log = logging.getLogger(__name__)

__all__ = ["BUSY_TIMEOUT", "IGNORABLE_DDL_ERRORS", "SqliteSink"]

BUSY_TIMEOUT = 30.0
IGNORABLE_DDL_ERRORS = re.compile(
    r"already exists|no such table|no such index|no such column|duplicate column name", re.IGNORECASE
)
_RETRIABLE = re.compile(r"locked|busy", re.IGNORECASE)


def connect(path: Path) -> sqlite3.Connection:
    """A connection as the sink uses it: autocommit (explicit BEGIN), WAL, synchronous FULL, 30 s busy timeout."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False)
    try:
        for pragma in ("journal_mode = WAL", "synchronous = FULL", f"busy_timeout = {int(BUSY_TIMEOUT * 1000)}"):
            conn.execute(f"PRAGMA {pragma}").close()
    except BaseException:
        conn.close()
        raise
    return conn


class RoutedSqliteDialect(SqliteDialect):
    """The sqlite dialect with every table and index named by its routed table (`common.table_rules.Router`):
    the DDL statements planned from a job then run against the routed tables."""

    def __init__(self, router: Router) -> None:
        self._router = router

    def table(self, db: str, table: str) -> str:
        return super().table(*self._router.route(db, table))

    def index_name(self, db: str, table: str, index: str) -> str:
        return super().index_name(*self._router.route(db, table), index)


class _SqliteExecutor:
    def __init__(self, path: Path, observer: SinkObserver, router: Router | None = None) -> None:
        self._conn = connect(path)
        self._observer = observer
        self._renderer = Renderer("sqlite")
        self._dialect = SqliteDialect() if router is None else RoutedSqliteDialect(router)

    def _run(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Run statements in one write transaction; the cursor is closed whatever happens."""
        conn = self._conn
        cur = conn.cursor()
        observer, clock = self._observer, time.perf_counter
        started = clock()
        try:
            cur.execute("BEGIN IMMEDIATE")
            for sql, params in statements:
                cur.execute(sql, params)
            executed = clock()
            observer.query_exec(executed - started)
            cur.execute("COMMIT")
            observer.query_commit(clock() - executed)
            observer.executed(clock() - started)
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        finally:
            cur.close()

    def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        stmts = self._renderer.render(dmls, safe_mode)
        try:
            self._run(stmts)
        except sqlite3.Error as exc:
            raise ExecError(f"sqlite: {exc}", retriable=bool(_RETRIABLE.search(str(exc)))) from exc

    def execute_ddl(self, ddl: DDL, commit_ts: int) -> None:
        stmts = self._dialect.ddl_statements(ddl.job, ddl.before)
        try:
            self._run([(sql, ()) for sql in stmts])
        except sqlite3.Error as exc:
            text = str(exc)
            if isinstance(exc, sqlite3.OperationalError) and IGNORABLE_DDL_ERRORS.search(text):
                log.warning("ignored DDL error commit_ts=%d query=%r: sqlite: %s", commit_ts, ddl.query, text)
                return
            raise ExecError(
                f"{ddl.query!r} ({'; '.join(stmts)}) failed: sqlite: {text}", retriable=bool(_RETRIABLE.search(text))
            ) from exc
        log.info("executed DDL commit_ts=%d db=%s query=%r", commit_ts, ddl.db, ddl.query)

    def close(self) -> None:
        self._conn.close()


class SqliteSink(LoaderSink):
    """Replicates into one sqlite file (the upstream sqlite store's layout)."""

    name = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        txn_batch: int = DEFAULT_TXN_BATCH,
        safe_mode: bool = False,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        router: Router | None = None,
    ) -> None:
        self.path = Path(path)
        self.router = router
        self.loader = Loader(
            self._executor,
            worker_count=1,
            txn_batch=txn_batch,
            max_inflight_bytes=max_inflight_bytes,
            safe_mode=safe_mode,
            name=f"sqlite-sink {self.path}",
        )

    def _executor(self, index: int) -> Executor:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return _SqliteExecutor(self.path, self.observer, self.router)
        except (OSError, sqlite3.Error) as exc:
            raise SinkError(f"sqlite sink: cannot open {self.path}: {exc}") from exc
