"""The TiDB-like upstream writer: tables in a store, transactions and DDL with binlog.

    db = Database("http://127.0.0.1:2379", "sqlite:///tmp/upstream.db")
    db.create_database("bank")
    db.create_table("bank", "accounts", [Column("id", "BIGINT"), Column("balance", "DECIMAL(20,2)")],
                    primary_key=["id"])
    with db.begin() as txn:
        txn.insert("bank.accounts", {"id": 1, "balance": 100})

Start timestamps and commit timestamps come from pd-server (found through etcd), binlogs go
to the pumps through :class:`pump_client.PumpsClient`, DDL jobs are published in etcd
(:mod:`common.schema.history`).  The commit protocol is :class:`upstream.commit.Committer`, which the
database builds with its collaborators and hands to its transactions (``Database.committer``).

Concurrency: a Database is shared by many threads, each running its own transactions.  DDL
is exclusive with the commit phase of transactions in this process; a DDL from another
process is picked up through a watch on the schema version, and a transaction that changed
a table altered meanwhile fails with SchemaChangedError (retriable).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from common.backoff import Backoff
from common.dsn import parse_dsn
from common.errors import BinlogError
from common.etcd import EtcdClient, WatchEvent
from common.pb import binlog_pb2
from common.pd_client import TSOClient
from common.schema.history import SCHEMA_VERSION_KEY, DDLHistory, RowIDAllocator
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, SchemaState, TableInfo
from common.tls import TLS, TLSFiles
from common.txnstatus import DEFAULT_STATUS_ROW_TTL, TxnStatusStore
from pump_client import DEFAULT_ATTEMPT_TIMEOUT, EncodedBinlog, PumpsClient
from upstream.commit import Committer
from upstream.ddl import Column, Planner
from upstream.errors import WriterError
from upstream.store import Store, open_store
from upstream.store.base import Row, Session
from upstream.txn import Transaction

log = logging.getLogger(__name__)

DEFAULT_STORE = "sqlite:upstream.db"
"""A sqlite file in the current directory."""
DEFAULT_LOCK_TTL = 10.0
"""Seconds a pending transaction's lock lives without renewal (TiDB: 3 s with heartbeats)."""
PREWRITE_THREADS = 64
RETRY_FIRST_DELAY = 0.004
"""Seconds `Database.run` waits before its second attempt; each next wait doubles, up to RETRY_MAX_DELAY."""
RETRY_MAX_DELAY = 0.2
RETRY_JITTER = 0.5
"""Each retry wait is spread by this fraction either way, so transactions that conflicted on the same rows
do not all retry at the same moment and conflict again."""


def retry_backoff() -> Backoff:
    """The waits between attempts of one transaction (`Database.run`, the workloads' `run_txn`)."""
    return Backoff(RETRY_FIRST_DELAY, 2.0, RETRY_MAX_DELAY, jitter=RETRY_JITTER)


_T = TypeVar("_T")


class RWLock:
    """Many readers or one writer; writers are not starved (new readers wait for a waiting writer)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class Database:
    def __init__(
        self,
        etcd_urls: str | Sequence[str],
        store: str = DEFAULT_STORE,
        *,
        binlog: bool = True,
        strategy: str = "range",
        lock_ttl: float = DEFAULT_LOCK_TTL,
        status_row_ttl: float = DEFAULT_STATUS_ROW_TTL,
        write_timeout: float = 15.0,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        mysql_db_prefix: str = "",
        client: Any = None,
        tls: TLS | TLSFiles | None = None,
    ) -> None:
        """`tls`: TLS to etcd, pd-server and the pumps (TiDB's `[security]`; paths are read here).

        `lock_ttl`: seconds a pending status row lives without renewal.  `status_row_ttl`: seconds after
        its start_ts by which a transaction's status row exists (common.txnstatus.DEFAULT_STATUS_ROW_TTL;
        the pumps' `[upstream] status-row-ttl` must be at least this)."""
        if lock_ttl <= 0:
            raise WriterError(f"lock_ttl must be positive, got {lock_ttl}")
        if status_row_ttl <= 0:
            raise WriterError(f"status_row_ttl must be positive, got {status_row_ttl}")
        self.binlog_enabled = binlog
        self._lock_ttl_ms = int(lock_ttl * 1000)
        self.status_row_ttl = status_row_ttl
        self._closed = False
        self._own_client = False
        if isinstance(tls, TLSFiles):
            tls = TLS.load(tls)
        self.etcd = EtcdClient(etcd_urls, tls=tls)
        self._exit = contextlib.ExitStack()
        try:
            self._exit.callback(self.etcd.close)
            self.tso = TSOClient(self.etcd)
            self._exit.callback(self.tso.close)
            self.history = DDLHistory(self.etcd)
            self.row_ids = RowIDAllocator(self.etcd)
            self.store: Store = open_store(store, mysql_db_prefix=mysql_db_prefix)
            self._exit.callback(self.store.close)
            self.status = TxnStatusStore(parse_dsn(store))
            self._exit.callback(self.status.close)
            self.ddl_guard = RWLock()
            self._ddl_mutex = threading.Lock()
            self._pool_lock = threading.Lock()
            self._idle: list[Session] = []
            self._keepalive_stop = threading.Event()
            self.schema = InfoSchema()
            self._refresh_schema()
            self._watcher = self.etcd.watch_prefix(SCHEMA_VERSION_KEY, self._on_version)
            self._exit.callback(self._watcher.stop)
            self._exit.callback(self._close_sessions)
            self.client: Any = None
            prewrite_pool: ThreadPoolExecutor | None = None
            if binlog:
                self.status.ensure_schema()
                if client is None:
                    client = PumpsClient(
                        etcd_urls,
                        strategy=strategy,
                        write_timeout=write_timeout,
                        attempt_timeout=attempt_timeout,
                        tls=tls,
                    )
                    self._own_client = True
                self.client = client
                prewrite_pool = ThreadPoolExecutor(PREWRITE_THREADS, thread_name_prefix="prewrite-binlog")
            self.committer = Committer(
                store=self.store,
                status=self.status,
                tso=self.tso,
                client=self.client,
                pool=prewrite_pool,
                schema_guard=self.ddl_guard.shared,
                schema=lambda: self.schema,
                lock_ttl_ms=self._lock_ttl_ms,
                status_row_ttl=status_row_ttl,
            )
            self._exit.callback(self.committer.close_sessions)
            if prewrite_pool is not None:
                self._exit.callback(prewrite_pool.shutdown)  # before the status sessions close: its tasks use them
            if binlog:
                self._keepalive = threading.Thread(target=self._keepalive_loop, name="lock-keepalive", daemon=True)
                self._keepalive.start()
        except BaseException:
            self._exit.close()
            raise
        log.info(
            "upstream writer ready: store=%s binlog=%s schema_version=%s", self.store.dsn, binlog, self.schema.version
        )

    # ------------------------------------------------------------------ transactions
    def begin(self) -> Transaction:
        if self._closed:
            raise WriterError("database is closed")
        start_ts = self.tso.get_ts()
        return Transaction(self, start_ts, self._session())

    def run(self, body: Callable[[Transaction], _T], *, attempts: int = 10) -> _T:
        """Run `body` in a transaction and commit; retry on retriable errors (conflicts, schema changes)."""
        backoff = retry_backoff()
        for attempt in range(1, attempts + 1):
            txn = self.begin()
            try:
                result = body(txn)
                if txn.state.value == "active":
                    txn.commit()
                return result
            except BinlogError as exc:
                txn.rollback()
                if not exc.retriable or attempt == attempts:
                    raise
                log.debug("start_ts=%s retrying after %s", txn.start_ts, exc)
                backoff.wait()
            except BaseException:
                txn.rollback()
                raise
        raise AssertionError("unreachable")

    def _session(self) -> Session:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        return self.store.session()

    def release(self, txn: Transaction) -> None:
        """Take back an ended transaction's session: idle for the next one, or closed if it cannot be reused."""
        s = txn.session
        if s.in_txn:
            try:
                s.rollback()
            except BinlogError as exc:
                log.warning("start_ts=%s: discarding a session whose rollback failed: %s", txn.start_ts, exc)
                with contextlib.suppress(Exception):
                    s.close()
                return
        with self._pool_lock:
            if not self._closed:
                self._idle.append(s)
                return
        s.close()

    def _close_sessions(self) -> None:
        with self._pool_lock:
            sessions, self._idle = self._idle, []
        for s in sessions:
            with contextlib.suppress(Exception):
                s.close()

    # ------------------------------------------------------------------ binlog plumbing (the committer's)
    def client_write(self, binlog: binlog_pb2.Binlog | EncodedBinlog) -> None:
        """Send one binlog to a pump and wait for it (DDL binlogs; the committer's ``write``)."""
        self.committer.write(binlog)

    @property
    def max_binlog_size(self) -> int:
        """The largest prewrite binlog the pumps take (the client's max message size less its header)."""
        return self.committer.max_binlog_size

    def status_row_first(self, start_ts: int) -> bool:
        """True when `start_ts` is already half its status-row TTL old: its row goes before its P-binlog."""
        return self.committer.status_row_first(start_ts)

    def _keepalive_loop(self) -> None:
        """Extend the lock TTL of transactions still in their commit phase (stores with a second writer)."""
        interval = self._lock_ttl_ms / 3000
        while not self._keepalive_stop.wait(interval):
            self.committer.keep_alive()

    # ------------------------------------------------------------------ schema
    def _refresh_schema(self) -> None:
        jobs = self.history.load()
        self.schema = InfoSchema.from_jobs(jobs)

    def _on_version(self, event: WatchEvent) -> None:
        try:
            version = int(event.value or b"0")
        except ValueError:
            return
        if version > self.schema.version:
            with self.ddl_guard.exclusive():
                if version > self.schema.version:
                    log.info("schema version %s published elsewhere: reloading the DDL history", version)
                    self._refresh_schema()

    def table(self, db: str, name: str) -> TableInfo:
        return self.schema.table(db, name)

    def rows(self, db: str, name: str) -> list[tuple[int, Row]]:
        """Every row of a table with its handle (reads the store directly)."""
        return list(self.store.scan(db, self.schema.table(db, name)))

    def _ddl(self, plan: Callable[[Planner], Job]) -> Job:
        if self._closed:
            raise WriterError("database is closed")
        with self._ddl_mutex, self.ddl_guard.exclusive():
            if self.history.schema_version() != self.schema.version:
                self._refresh_schema()
            start_ts = self.tso.get_ts()
            job = plan(Planner(self.schema, self.history.alloc_global_ids, start_ts))
            p = binlog_pb2.Binlog(
                tp=binlog_pb2.Prewrite,
                start_ts=start_ts,
                ddl_query=job.query.encode(),
                ddl_job_id=job.id,
                ddl_schema_state=int(SchemaState.PUBLIC),
            )
            if self.binlog_enabled:
                self.client_write(p)
            try:
                self.store.apply_ddl(job, self.schema)
                self.history.publish(job)
            except BaseException:
                if self.binlog_enabled:
                    self.client_write(_rollback_of(p))
                raise
            new = self.schema.copy()
            new.apply(job)
            self.schema = new
            if self.binlog_enabled:
                c = binlog_pb2.Binlog()
                c.CopyFrom(p)
                c.tp = binlog_pb2.Commit
                c.commit_ts = self.tso.get_ts()
                self.client_write(c)
            return job

    def create_database(self, name: str) -> Job:
        return self._ddl(lambda p: p.create_database(name))

    def drop_database(self, name: str) -> Job:
        return self._ddl(lambda p: p.drop_database(name))

    def create_table(
        self,
        db: str,
        name: str,
        columns: Sequence[Column],
        *,
        primary_key: Sequence[str] = (),
        unique_keys: Sequence[Sequence[str]] = (),
        indexes: Sequence[Sequence[str]] = (),
    ) -> Job:
        return self._ddl(
            lambda p: p.create_table(
                db, name, columns, primary_key=primary_key, unique_keys=unique_keys, indexes=indexes
            )
        )

    def drop_table(self, db: str, name: str) -> Job:
        return self._ddl(lambda p: p.drop_table(db, name))

    def truncate_table(self, db: str, name: str) -> Job:
        return self._ddl(lambda p: p.truncate_table(db, name))

    def rename_table(self, db: str, name: str, new_name: str, *, new_db: str | None = None) -> Job:
        return self._ddl(lambda p: p.rename_table(db, name, new_name, new_db))

    def add_column(self, db: str, table: str, column: Column) -> Job:
        return self._ddl(lambda p: p.add_column(db, table, column))

    def drop_column(self, db: str, table: str, column: str) -> Job:
        return self._ddl(lambda p: p.drop_column(db, table, column))

    def add_index(self, db: str, table: str, name: str, columns: Sequence[str], *, unique: bool = False) -> Job:
        return self._ddl(lambda p: p.add_index(db, table, name, columns, unique))

    def drop_index(self, db: str, table: str, name: str) -> Job:
        return self._ddl(lambda p: p.drop_index(db, table, name))

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        """Stop accepting work, deliver pending commit binlogs (bounded), release everything. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._keepalive_stop.set()
        if self._own_client and self.client is not None:
            self.client.close()
        self._exit.close()
        log.info("upstream writer closed")

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _rollback_of(p: binlog_pb2.Binlog) -> binlog_pb2.Binlog:
    r = binlog_pb2.Binlog()
    r.CopyFrom(p)
    r.tp = binlog_pb2.Rollback
    return r
