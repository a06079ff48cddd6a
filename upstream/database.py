"""The TiDB-like upstream writer: tables in a store, transactions and DDL with binlog.

    db = Database("http://127.0.0.1:2379", "sqlite:///tmp/upstream.db")
    db.create_database("bank")
    db.create_table("bank", "accounts", [Column("id", "BIGINT"), Column("balance", "DECIMAL(20,2)")],
                    primary_key=["id"])
    with db.begin() as txn:
        txn.insert("bank.accounts", {"id": 1, "balance": 100})

Start timestamps and commit timestamps come from pd-server (found through etcd), binlogs go
to the pumps through :class:`pump_client.PumpsClient`, DDL jobs are published in etcd
(:mod:`common.schema.history`).  The commit protocol is in :mod:`upstream.commit`.

Concurrency: a Database is shared by many threads, each running its own transactions.  DDL
is exclusive with the commit phase of transactions in this process; a DDL from another
process is picked up through a watch on the schema version, and a transaction that changed
a table altered meanwhile fails with SchemaChangedError (retriable).
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from common import tso
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
from pump_client import DEFAULT_ATTEMPT_TIMEOUT, MAX_HEADER_SIZE, EncodedBinlog
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
MAX_LOCK_TTL = 120.0
LOCK_TTL_FACTOR_MS = 6000
"""TiDB's lock TTL grows with sqrt(transaction MB) by this factor."""
PREWRITE_THREADS = 64
DEFAULT_MAX_BINLOG_SIZE = 2 * 1024**3 - 4 * 1024**2 - MAX_HEADER_SIZE
"""The largest prewrite binlog when the client does not say (the pumps' default max-message-size less
the request header; pump_client.transport.DEFAULT_MAX_MESSAGE_SIZE)."""

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
            self._idle_status: list[Session] = []
            self._pending: dict[int, int] = {}  # start_ts -> ttl_ms, while the lock TTL matters
            self._keepalive_stop = threading.Event()
            self.schema = InfoSchema()
            self._refresh_schema()
            self._watcher = self.etcd.watch_prefix(SCHEMA_VERSION_KEY, self._on_version)
            self._exit.callback(self._watcher.stop)
            self._exit.callback(self._close_sessions)
            self.client: Any = None
            if binlog:
                self.status.ensure_schema()
                if client is None:
                    from pump_client import PumpsClient

                    client = PumpsClient(
                        etcd_urls,
                        strategy=strategy,
                        write_timeout=write_timeout,
                        attempt_timeout=attempt_timeout,
                        tls=tls,
                    )
                    self._own_client = True
                self.client = client
                self._prewrite_pool = ThreadPoolExecutor(PREWRITE_THREADS, thread_name_prefix="prewrite-binlog")
                self._exit.callback(self._prewrite_pool.shutdown)
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
                time.sleep(min(0.002 * 2**attempt, 0.2))
            except BaseException:
                txn.rollback()
                raise
        raise AssertionError("unreachable")

    def _session(self) -> Session:
        with self._pool_lock:
            if self._idle:
                return self._idle.pop()
        return self.store.session()

    def _release(self, txn: Transaction) -> None:
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
            sessions, self._idle = self._idle + self._idle_status, []
            self._idle_status = []
        for s in sessions:
            with contextlib.suppress(Exception):
                s.close()

    # ------------------------------------------------------------------ binlog plumbing used by upstream.commit
    def lock_ttl_ms(self, txn_bytes: int) -> int:
        size_ms = LOCK_TTL_FACTOR_MS * math.sqrt(txn_bytes / (1 << 20))
        return int(min(max(self._lock_ttl_ms, size_ms), MAX_LOCK_TTL * 1000))

    def submit_prewrite(self, fn: Callable[[], None]) -> Future[None]:
        return self._prewrite_pool.submit(fn)

    def client_write(self, binlog: binlog_pb2.Binlog | EncodedBinlog) -> None:
        if isinstance(binlog, EncodedBinlog):
            write_encoded = getattr(self.client, "write_encoded_binlog", None)
            if write_encoded is not None:
                write_encoded(binlog)
                return
            binlog = binlog_pb2.Binlog.FromString(binlog.join())  # a client of another kind: a message
        self.client.write_binlog(binlog)

    @property
    def max_binlog_size(self) -> int:
        """The largest prewrite binlog the pumps take (the client's max message size less its header)."""
        size = getattr(self.client, "max_binlog_size", None)
        return size if isinstance(size, int) else DEFAULT_MAX_BINLOG_SIZE

    def client_write_async(self, binlog: binlog_pb2.Binlog) -> None:
        self.client.write_binlog_async(binlog)

    def _with_status_session(self, fn: Callable[[Session], None]) -> None:
        with self._pool_lock:
            s = self._idle_status.pop() if self._idle_status else None
        if s is None:
            s = self.store.status_session()
        try:
            fn(s)
        except BaseException:
            with contextlib.suppress(Exception):
                s.close()
            raise
        with self._pool_lock:
            self._idle_status.append(s)

    def status_begin(self, start_ts: int, ttl_ms: int, *, not_after_ms: int | None = None) -> None:
        """The transaction's status row, ``pending`` with a lock TTL, committed on a status session.

        StatusRowTooLateError (nothing written) when the clock is past `not_after_ms`."""
        self._with_status_session(
            lambda s: s.call(lambda: self.status.begin_pending(s.conn, start_ts, ttl_ms, not_after_ms=not_after_ms))
        )

    def status_row_first(self, start_ts: int) -> bool:
        """True when `start_ts` is already half its status-row TTL old: its row goes before its P-binlog."""
        age_ms = time.time() * 1000 - tso.physical(start_ts)
        return age_ms >= self.status_row_ttl * 500

    def status_rollback(self, start_ts: int) -> None:
        try:
            self._with_status_session(lambda s: s.call(lambda: self.status.mark_rolled_back(s.conn, start_ts)))
        except Exception as exc:  # the pump resolves it through the TTL
            log.warning("start_ts=%s: cannot record the rollback in the txn-status table: %s", start_ts, exc)

    def track_pending(self, start_ts: int, ttl_ms: int) -> None:
        with self._pool_lock:
            self._pending[start_ts] = ttl_ms

    def untrack_pending(self, start_ts: int) -> None:
        with self._pool_lock:
            self._pending.pop(start_ts, None)

    def _keepalive_loop(self) -> None:
        """Extend the lock TTL of transactions still in their commit phase (stores with a second writer)."""
        interval = self._lock_ttl_ms / 3000
        while not self._keepalive_stop.wait(interval):
            if not self.store.parallel_status:
                continue
            with self._pool_lock:
                pending = dict(self._pending)
            for start_ts, ttl_ms in pending.items():
                try:
                    self._with_status_session(
                        lambda s, ts=start_ts, ttl=ttl_ms: s.call(  # type: ignore[misc]
                            lambda: self.status.extend_ttl(s.conn, ts, ttl)
                        )
                    )
                except Exception as exc:
                    log.debug("start_ts=%s: lock keepalive failed: %s", start_ts, exc)

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
