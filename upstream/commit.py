"""Two-phase commit with binlog, as TiDB does it (docs/architecture.md#commit-protocol).

    1. at once, concurrently:
         P-binlog -> pump (through the client, on a prewrite thread; the longest leg, sent first)
         status row ``pending`` with a lock TTL, committed on a status session
         storage prewrite: lock every touched row, check it still holds what the transaction
         read, apply the net changes (not committed)
       any failing -> storage rollback, status ``rolled_back``, Rollback binlog; raise
    2. only when all three are done: commit_ts from pd-server; status ``committed`` + commit_ts
       in the same storage transaction as the data; storage commit
    3. C-binlog sent asynchronously (the pump's resolver covers a writer that dies here)

Why the status row may trail the P-binlog, and by how much: a pump that finds no row for a
prewrite waits until the transaction's start_ts is the *status-row TTL* old
(``Database.status_row_ttl``, :data:`common.txnstatus.DEFAULT_STATUS_ROW_TTL`), then writes a
``rolled_back`` tombstone, as TiKV resolves an expired lock.  So the writer never writes the row
later than that (``begin_pending(not_after_ms=...)`` refuses: StatusRowTooLateError, retriable),
and a transaction already half that old when it commits writes its row *before* sending the
P-binlog (a long transaction is never refused).  The primary key decides a race with the pump:
a ``begin_pending`` that comes after the tombstone fails (conflict, retriable) and the
transaction rolls back.  ``mark_committed`` runs only after ``begin_pending`` succeeded, in the
data's storage transaction, and is a conditional update of the ``pending`` row: if the pump
rolled the transaction back meanwhile (its lock expired) it fails and the data is not committed;
if it succeeds, the pump's roll-back can no longer happen.  So a committed storage transaction
always has a committed status row, and a dead writer holds the pumps back by at most
max(status-row TTL, lock TTL) + resolve-interval.

Why commit_ts comes last: it must be larger than every timestamp a pump has already passed
(the pump holds its watermark below a prewrite only once it has the P-binlog), and, with
every row locked first, two conflicting transactions get commit_ts in their storage commit
order (a commit_ts fetched before the locks are held could be older than that of a
transaction that still holds them and commits first).

With MySQL the status row is written on a second connection by another prewrite thread
(``parallel_status``); writing it on the caller thread before the storage prewrite measured
worse (bench/writer.py: +89-134% vs +69-85% p50 at 1 thread, +168% vs +90-96% at 8).

sqlite has one writer: the status row is written first, on the caller thread while the
P-binlog is in flight (tens of µs: not fsynced, see :mod:`upstream.store.sqlite`), then the
data transaction takes the write lock and keeps it while it waits for the pump.  Waiting for
the P-binlog before taking the lock when other threads want it measured worse (+340% vs
+130% p50 at 8 threads, with sqlite's busy handler, which slept in steps of 1-100 ms).  This
process's writers now take the lock in turn, first come first served
(:class:`upstream.store.sqlite.WriteTurns`).  That cut the longest wait of a transaction whose
P-binlog was already on a pump from 1.5 s to about 50 ms (bench/e2e_lag.py --breakdown), with
throughput unchanged (bench/writer.py --store sqlite: 223 / 259 txn/s at 1 / 8 threads, against
227 / 260 before).

Rows are locked in (table id, handle) order, so two prewrites never deadlock on each other.

The protocol is a :class:`Committer`, built by the database with its collaborators named (the store's
status sessions, the timestamp oracle, the pump client, the txn-status store, the prewrite thread pool,
the DDL guard and the schema), so the commit path can be run against fakes of each.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import struct
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager
from typing import Any, Final, Protocol

from common import tso
from common.pb import binlog_pb2
from common.pb.gogo import uvarint, varint
from common.schema.infoschema import InfoSchema
from common.sql.dialect import StoreError
from common.txnstatus import MAX_NODE_ID, TxnStatusStore, status_row_deadline_ms
from pump_client import MAX_HEADER_SIZE, EncodedBinlog
from upstream.errors import (
    BinlogWriteError,
    CommitUnknownError,
    SchemaChangedError,
    TxnTooLargeError,
    WriteConflictError,
)
from upstream.store.base import Session
from upstream.txn import Entry, Transaction

log = logging.getLogger(__name__)

CRASH_BEFORE_STATUS_ROW_ENV = "BINLOG_TEST_CRASH_BEFORE_STATUS_ROW"
"""Test hook: exit the process (status 137) once the P-binlog is on a pump, before the status row."""
CRASH_AFTER_STATUS_ROW_ENV = "BINLOG_TEST_CRASH_AFTER_STATUS_ROW"
"""Test hook: exit (137) with the P-binlog sent, the status row pending and the data prewritten, uncommitted."""
CRASH_AFTER_COMMIT_ENV = "BINLOG_TEST_CRASH_AFTER_STORAGE_COMMIT"
"""Test hook: exit the process (status 137) after the storage commit, before the C-binlog."""
CRASH_HOOKS = (CRASH_BEFORE_STATUS_ROW_ENV, CRASH_AFTER_STATUS_ROW_ENV, CRASH_AFTER_COMMIT_ENV)
_CRASH_ARMED = frozenset(name for name in CRASH_HOOKS if os.environ.get(name))

MAX_LOCK_TTL: Final = 120.0
LOCK_TTL_FACTOR_MS: Final = 6000
"""TiDB's lock TTL grows with sqrt(transaction MB) by this factor."""
DEFAULT_MAX_BINLOG_SIZE: Final = 2 * 1024**3 - 4 * 1024**2 - MAX_HEADER_SIZE
"""The largest prewrite binlog when the client does not say (the pumps' default max-message-size less
the request header; pump_client.transport.DEFAULT_MAX_MESSAGE_SIZE)."""

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63


class TimestampOracle(Protocol):
    """Where commit timestamps come from (pd-server's TSO through :class:`common.pd_client.TSOClient`)."""

    def get_ts(self) -> int: ...


class BinlogClient(Protocol):
    """The pump client as the commit path uses it (:class:`pump_client.PumpsClient`).

    A client may also offer ``write_encoded_binlog(EncodedBinlog)`` (the prewrite binlog is then sent in
    the pieces it was encoded in), ``max_binlog_size`` (the largest prewrite binlog the pumps take) and
    ``prewrite_pump(start_ts)`` (the node id of the pump that took a prewrite, recorded with the committed
    status so that a copy another pump stored from a timed-out attempt is rolled back, not committed)."""

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None: ...

    def write_binlog_async(self, binlog: binlog_pb2.Binlog) -> None: ...


class StatusSessions(Protocol):
    """The part of the store the status rows need: its status sessions, and whether they are a second writer."""

    parallel_status: bool

    def status_session(self) -> Session: ...

    def status_write(self) -> contextlib.AbstractContextManager[object]: ...


def prewrite_key(table_id: int, handle: int) -> bytes:
    """The transaction's primary key in TiDB's record-key shape ``t{table_id}_r{handle}`` (comparable ints)."""
    return (
        b"t"
        + _U64.pack((table_id ^ _SIGN) & 0xFFFFFFFFFFFFFFFF)
        + b"_r"
        + _U64.pack((handle ^ _SIGN) & 0xFFFFFFFFFFFFFFFF)
    )


_PREWRITE_TAIL = b"\x38\x00\x40\x00"  # ddl_job_id = 0, ddl_schema_state = 0: always written (gogo)


def encode_prewrite(start_ts: int, key: bytes, pv_parts: list[bytes]) -> EncodedBinlog:
    """A DML prewrite binlog, the gogo bytes of ``binlog.Binlog`` in pieces (the value's are not copied):

    08 00 (tp Prewrite) ‖ 10 varint(start_ts) ‖ 18 00 (commit_ts) ‖ 22 uvarint(len(key)) key
    ‖ 2a uvarint(len(prewrite_value)) prewrite_value… ‖ 38 00 40 00
    """
    size = sum(len(p) for p in pv_parts)
    head = b"\x08\x00\x10" + varint(start_ts) + b"\x18\x00\x22" + uvarint(len(key)) + key + b"\x2a" + uvarint(size)
    return EncodedBinlog(binlog_pb2.Prewrite, start_ts, 0, [head, *pv_parts, _PREWRITE_TAIL])


def _crash_hook(name: str, start_ts: int, *wait_for: Future[None] | None) -> None:
    """Test hooks (CRASH_HOOKS): exit at once, status 137, once `wait_for` are done, if `name` is set."""
    if name not in _CRASH_ARMED:
        return
    for f in wait_for:
        if f is not None:
            f.exception()
    log.warning("start_ts=%s %s set: exiting", start_ts, name)
    os._exit(137)


class Committer:
    """Commits a database's transactions: the protocol of this module's docstring, with binlog or without.

    `store`: where status sessions come from; `status`: the txn-status table; `tso`: commit timestamps;
    `client`: the pump client (None: binlog is off, and so are the status rows and `pool`); `pool`: the
    prewrite threads (the P-binlog, and the status row where the store has a second writer);
    `schema_guard`: held shared through a commit (a DDL of this process holds it exclusive); `schema`: the
    database's schema now.  `lock_ttl_ms`: a pending row's lock TTL (a large transaction gets more, as in
    TiDB); `status_row_ttl`: seconds after its start_ts by which a transaction's status row exists.

    The committer also owns what the status rows need between commits: a pool of idle status sessions,
    and the transactions in their commit phase, whose lock TTL :meth:`keep_alive` extends."""

    def __init__(
        self,
        *,
        store: StatusSessions,
        status: TxnStatusStore,
        tso: TimestampOracle,
        client: BinlogClient | None,
        pool: Executor | None,
        schema_guard: Callable[[], AbstractContextManager[None]],
        schema: Callable[[], InfoSchema],
        lock_ttl_ms: int,
        status_row_ttl: float,
    ) -> None:
        self._store = store
        self._status = status
        self._tso = tso
        self._client: Any = client
        self._pool = pool
        self._schema_guard = schema_guard
        self._schema = schema
        self._lock_ttl_ms = lock_ttl_ms
        self.status_row_ttl = status_row_ttl
        self._lock = threading.Lock()
        self._idle_status: list[Session] = []
        self._pending: dict[int, int] = {}  # start_ts -> ttl_ms, while the lock TTL matters

    @property
    def binlog_enabled(self) -> bool:
        return self._client is not None

    # ------------------------------------------------------------------ the commit path
    def commit(self, txn: Transaction) -> int:
        """Commit `txn`'s written rows (with binlog when enabled); returns the commit_ts, 0 if nothing was written.

        Leaves the transaction's state to the caller: on an error nothing is committed and the error is raised."""
        entries = txn.written_entries()
        if not entries:
            return 0
        with self._schema_guard():
            self._check_schema(txn, entries)
            return self._commit_with_binlog(txn, entries) if self.binlog_enabled else self._commit_plain(txn, entries)

    def _check_schema(self, txn: Transaction, entries: Sequence[Entry]) -> None:
        schema = self._schema()
        for e in entries:
            ref = schema.table_by_id(e.ref.table.id)
            if ref is None or ref.table is not e.ref.table:
                raise SchemaChangedError.of(e.ref.db.name, e.ref.table.name, txn.start_ts)

    @staticmethod
    def _prewrite(txn: Transaction, entries: Sequence[Entry]) -> None:
        """Lock, verify and apply every written row on the transaction's session (transaction left open)."""
        s = txn.session
        for e in sorted(entries, key=lambda x: (x.ref.table.id, x.handle)):
            db, t = e.ref.db.name, e.ref.table
            if e.verify:
                now = s.get_row(db, t, e.handle, lock=True)
                if now != e.base:
                    raise WriteConflictError(
                        f"write conflict on {db}.{t.name} handle {e.handle}: changed since start_ts={txn.start_ts} "
                        "read it"
                    )
            if e.base is None and e.current is not None:
                s.insert_row(db, t, e.handle, e.current)
            elif e.base is not None and e.current is None:
                s.delete_row(db, t, e.handle)
            elif e.base is not None and e.current is not None and e.base != e.current:
                s.update_row(db, t, e.handle, e.current)

    def _commit_plain(self, txn: Transaction, entries: Sequence[Entry]) -> int:
        s = txn.session
        s.begin()
        try:
            self._prewrite(txn, entries)
            commit_ts = self._tso.get_ts()
        except BaseException:
            s.rollback()
            raise
        s.commit()
        return commit_ts

    def _p_binlog(self, txn: Transaction, entries: Sequence[Entry]) -> tuple[EncodedBinlog, bytes]:
        """The prewrite binlog and its key; the transaction's mutation log lets its rows go (the binlog has them).

        TxnTooLargeError, before anything is sent, when the pumps would refuse it."""
        first = entries[0]
        key = prewrite_key(first.ref.table.id, first.handle)
        p = encode_prewrite(txn.start_ts, key, txn.mutations.prewrite_value_parts(self._schema().version))
        txn.mutations.clear()
        limit = self.max_binlog_size
        if p.size > limit:
            raise TxnTooLargeError(
                f"transaction start_ts={txn.start_ts} is too large for a binlog: its prewrite binlog is {p.size} "
                f"bytes, the pumps take at most {limit} (max-message-size)"
            )
        return p, key

    def _submit(self, fn: Callable[[], None]) -> Future[None]:
        assert self._pool is not None
        return self._pool.submit(fn)

    def _commit_with_binlog(self, txn: Transaction, entries: Sequence[Entry]) -> int:
        s = txn.session
        start_ts = txn.start_ts
        ttl_ms = self.lock_ttl_ms(txn.mutations.size)
        p, key = self._p_binlog(txn, entries)
        row_first = self.status_row_first(start_ts)
        if row_first:  # an old transaction: its row goes first, so no status-row deadline applies
            try:
                self.status_begin(start_ts, ttl_ms)
            except BaseException:
                self.status_rollback(start_ts)
                raise
        sent = self._submit(lambda: self.write(p))  # the longest leg: it goes first
        status: Future[None] | None = None
        self._track_pending(start_ts, ttl_ms)
        try:
            try:
                if not row_first:
                    _crash_hook(CRASH_BEFORE_STATUS_ROW_ENV, start_ts, sent)
                    not_after = status_row_deadline_ms(start_ts, self.status_row_ttl)
                    if self._store.parallel_status:
                        status = self._submit(lambda: self.status_begin(start_ts, ttl_ms, not_after_ms=not_after))
                    else:
                        self.status_begin(start_ts, ttl_ms, not_after_ms=not_after)
                s.begin()
                self._prewrite(txn, entries)
            finally:
                binlog_error = sent.exception()
                status_error = None if status is None else status.exception()
            if status_error is not None:
                raise status_error
            if binlog_error is not None:
                raise BinlogWriteError(f"prewrite binlog of start_ts={start_ts}: {binlog_error}") from binlog_error
            _crash_hook(CRASH_AFTER_STATUS_ROW_ENV, start_ts)
            # Only now: the prewrite binlog is durable on a pump and every row is locked (see the module docstring).
            commit_ts = self._tso.get_ts()
            pump = self._prewrite_pump(start_ts)
            s.call(lambda: self._status.mark_committed(s.conn, start_ts, commit_ts, pump_node_id=pump))
        except BaseException as exc:
            self._abort(txn, key, exc)
            raise
        finally:
            self._untrack_pending(start_ts)
        try:
            s.commit()
        except StoreError as exc:
            raise CommitUnknownError(
                f"storage commit of start_ts={start_ts} commit_ts={commit_ts} failed: {exc}; "
                "the txn-status row decides whether it committed"
            ) from exc
        _crash_hook(CRASH_AFTER_COMMIT_ENV, start_ts)
        c = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=key)
        self._client.write_binlog_async(c)
        return commit_ts

    def _prewrite_pump(self, start_ts: int) -> str:
        """The pump that took the P-binlog, when the client says ('' otherwise, and for an id the status
        table cannot hold: pumps refuse such ids, so it comes from elsewhere)."""
        ask = getattr(self._client, "prewrite_pump", None)
        node_id = None if ask is None else ask(start_ts)
        if not isinstance(node_id, str) or len(node_id) > MAX_NODE_ID:
            return ""
        return node_id

    def _abort(self, txn: Transaction, key: bytes, cause: BaseException) -> None:
        log.info("start_ts=%s rolled back: %s", txn.start_ts, cause)
        try:
            if txn.session.in_txn:
                txn.session.rollback()
        except StoreError as exc:
            log.warning("start_ts=%s storage rollback failed: %s", txn.start_ts, exc)
        self.status_rollback(txn.start_ts)
        r = binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=txn.start_ts, prewrite_key=key)
        self._client.write_binlog_async(r)

    # ------------------------------------------------------------------ binlogs
    def write(self, binlog: binlog_pb2.Binlog | EncodedBinlog) -> None:
        """Send one binlog to a pump and wait for it (an encoded one in its pieces when the client takes them)."""
        if isinstance(binlog, EncodedBinlog):
            write_encoded = getattr(self._client, "write_encoded_binlog", None)
            if write_encoded is not None:
                write_encoded(binlog)
                return
            binlog = binlog_pb2.Binlog.FromString(binlog.join())  # a client of another kind: a message
        self._client.write_binlog(binlog)

    @property
    def max_binlog_size(self) -> int:
        """The largest prewrite binlog the pumps take (the client's max message size less its header)."""
        size = getattr(self._client, "max_binlog_size", None)
        return size if isinstance(size, int) else DEFAULT_MAX_BINLOG_SIZE

    # ------------------------------------------------------------------ status rows
    def lock_ttl_ms(self, txn_bytes: int) -> int:
        size_ms = LOCK_TTL_FACTOR_MS * math.sqrt(txn_bytes / (1 << 20))
        return int(min(max(self._lock_ttl_ms, size_ms), MAX_LOCK_TTL * 1000))

    def _with_status_session(self, fn: Callable[[Session], None]) -> None:
        with self._lock:
            s = self._idle_status.pop() if self._idle_status else None
        if s is None:
            s = self._store.status_session()
        try:
            with self._store.status_write():
                fn(s)
        except BaseException:
            with contextlib.suppress(Exception):
                s.close()
            raise
        with self._lock:
            self._idle_status.append(s)

    def status_begin(self, start_ts: int, ttl_ms: int, *, not_after_ms: int | None = None) -> None:
        """The transaction's status row, ``pending`` with a lock TTL, committed on a status session.

        StatusRowTooLateError (nothing written) when the clock is past `not_after_ms`."""
        self._with_status_session(
            lambda s: s.call(lambda: self._status.begin_pending(s.conn, start_ts, ttl_ms, not_after_ms=not_after_ms))
        )

    def status_row_first(self, start_ts: int) -> bool:
        """True when `start_ts` is already half its status-row TTL old: its row goes before its P-binlog."""
        age_ms = time.time() * 1000 - tso.physical(start_ts)
        return age_ms >= self.status_row_ttl * 500

    def status_rollback(self, start_ts: int) -> None:
        try:
            self._with_status_session(lambda s: s.call(lambda: self._status.mark_rolled_back(s.conn, start_ts)))
        except Exception as exc:  # the pump resolves it through the TTL
            log.warning("start_ts=%s: cannot record the rollback in the txn-status table: %s", start_ts, exc)

    def _track_pending(self, start_ts: int, ttl_ms: int) -> None:
        with self._lock:
            self._pending[start_ts] = ttl_ms

    def _untrack_pending(self, start_ts: int) -> None:
        with self._lock:
            self._pending.pop(start_ts, None)

    def keep_alive(self) -> None:
        """Extend the lock TTL of transactions still in their commit phase (stores with a second writer only)."""
        if not self._store.parallel_status:
            return
        with self._lock:
            pending = dict(self._pending)
        for start_ts, ttl_ms in pending.items():
            try:
                self._with_status_session(
                    lambda s, ts=start_ts, ttl=ttl_ms: s.call(  # type: ignore[misc]
                        lambda: self._status.extend_ttl(s.conn, ts, ttl)
                    )
                )
            except Exception as exc:
                log.debug("start_ts=%s: lock keepalive failed: %s", start_ts, exc)

    def close_sessions(self) -> None:
        """Close the idle status sessions."""
        with self._lock:
            sessions, self._idle_status = self._idle_status, []
        for s in sessions:
            with contextlib.suppress(Exception):
                s.close()
