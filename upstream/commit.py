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
+130% p50 at 8 threads): sqlite's busy handler sleeps in steps of 1-100 ms, so a shorter
hold does not make a shorter wait.  (A mutex queueing this process's writers instead of the
busy handler cost throughput: with the GIL, a queue of 8 threads convoys.)

Rows are locked in (table id, handle) order, so two prewrites never deadlock on each other.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from common.pb import binlog_pb2
from common.pb.gogo import uvarint, varint
from common.sql.dialect import StoreError
from common.txnstatus import status_row_deadline_ms
from pump_client import EncodedBinlog
from upstream.errors import (
    BinlogWriteError,
    CommitUnknownError,
    SchemaChangedError,
    TxnTooLargeError,
    WriteConflictError,
)

if TYPE_CHECKING:
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

_U64 = struct.Struct(">Q")
_SIGN = 1 << 63


def prewrite_key(table_id: int, handle: int) -> bytes:
    """The transaction's primary key in TiDB's record-key shape ``t{table_id}_r{handle}`` (comparable ints)."""
    return (
        b"t"
        + _U64.pack((table_id ^ _SIGN) & 0xFFFFFFFFFFFFFFFF)
        + b"_r"
        + _U64.pack((handle ^ _SIGN) & 0xFFFFFFFFFFFFFFFF)
    )


def commit_transaction(txn: Transaction) -> int:
    from upstream.txn import TxnState

    db = txn.db
    entries = txn.written_entries()
    if not entries:
        txn._close(TxnState.COMMITTED)
        return 0
    try:
        with db.ddl_guard.shared():
            _check_schema(txn, entries)
            commit_ts = _commit_with_binlog(txn, entries) if db.binlog_enabled else _commit_plain(txn, entries)
    except BaseException:
        txn._close(TxnState.ROLLED_BACK)
        raise
    txn.commit_ts = commit_ts
    txn._close(TxnState.COMMITTED)
    return commit_ts


def _check_schema(txn: Transaction, entries: Sequence[Entry]) -> None:
    schema = txn.db.schema
    for e in entries:
        ref = schema.table_by_id(e.ref.table.id)
        if ref is None or ref.table is not e.ref.table:
            raise SchemaChangedError(
                f"table {e.ref.db.name}.{e.ref.table.name} changed by a DDL during transaction start_ts={txn.start_ts}"
            )


def _prewrite(txn: Transaction, entries: Sequence[Entry]) -> None:
    """Lock, verify and apply every written row on the transaction's session (transaction left open)."""
    s = txn.session
    for e in sorted(entries, key=lambda x: (x.ref.table.id, x.handle)):
        db, t = e.ref.db.name, e.ref.table
        if e.verify:
            now = s.get_row(db, t, e.handle, lock=True)
            if now != e.base:
                raise WriteConflictError(
                    f"write conflict on {db}.{t.name} handle {e.handle}: changed since start_ts={txn.start_ts} read it"
                )
        if e.base is None and e.current is not None:
            s.insert_row(db, t, e.handle, e.current)
        elif e.base is not None and e.current is None:
            s.delete_row(db, t, e.handle)
        elif e.base is not None and e.current is not None and e.base != e.current:
            s.update_row(db, t, e.handle, e.current)


def _commit_plain(txn: Transaction, entries: Sequence[Entry]) -> int:
    s = txn.session
    s.begin()
    try:
        _prewrite(txn, entries)
        commit_ts = txn.db.tso.get_ts()
    except BaseException:
        s.rollback()
        raise
    s.commit()
    return commit_ts


_PREWRITE_TAIL = b"\x38\x00\x40\x00"  # ddl_job_id = 0, ddl_schema_state = 0: always written (gogo)


def encode_prewrite(start_ts: int, key: bytes, pv_parts: list[bytes]) -> EncodedBinlog:
    """A DML prewrite binlog, the gogo bytes of ``binlog.Binlog`` in pieces (the value's are not copied):

    08 00 (tp Prewrite) ‖ 10 varint(start_ts) ‖ 18 00 (commit_ts) ‖ 22 uvarint(len(key)) key
    ‖ 2a uvarint(len(prewrite_value)) prewrite_value… ‖ 38 00 40 00
    """
    size = sum(len(p) for p in pv_parts)
    head = b"\x08\x00\x10" + varint(start_ts) + b"\x18\x00\x22" + uvarint(len(key)) + key + b"\x2a" + uvarint(size)
    return EncodedBinlog(binlog_pb2.Prewrite, start_ts, 0, [head, *pv_parts, _PREWRITE_TAIL])


def _p_binlog(txn: Transaction, entries: Sequence[Entry]) -> tuple[EncodedBinlog, bytes]:
    """The prewrite binlog and its key; the transaction's mutation log lets its rows go (the binlog has them).

    TxnTooLargeError, before anything is sent, when the pumps would refuse it."""
    first = entries[0]
    key = prewrite_key(first.ref.table.id, first.handle)
    p = encode_prewrite(txn.start_ts, key, txn.mutations.prewrite_value_parts(txn.db.schema.version))
    txn.mutations.clear()
    limit = txn.db.max_binlog_size
    if p.size > limit:
        raise TxnTooLargeError(
            f"transaction start_ts={txn.start_ts} is too large for a binlog: its prewrite binlog is {p.size} bytes, "
            f"the pumps take at most {limit} (max-message-size)"
        )
    return p, key


def _crash_hook(name: str, start_ts: int, *wait_for: Future[None] | None) -> None:
    """Test hooks (CRASH_HOOKS): exit at once, status 137, once `wait_for` are done, if `name` is set."""
    if name not in _CRASH_ARMED:
        return
    for f in wait_for:
        if f is not None:
            f.exception()
    log.warning("start_ts=%s %s set: exiting", start_ts, name)
    os._exit(137)


def _commit_with_binlog(txn: Transaction, entries: Sequence[Entry]) -> int:
    db = txn.db
    s = txn.session
    start_ts = txn.start_ts
    ttl_ms = db.lock_ttl_ms(txn.mutations.size)
    p, key = _p_binlog(txn, entries)
    row_first = db.status_row_first(start_ts)
    if row_first:  # an old transaction: its row goes first, so no status-row deadline applies
        try:
            db.status_begin(start_ts, ttl_ms)
        except BaseException:
            db.status_rollback(start_ts)
            raise
    sent = db.submit_prewrite(lambda: db.client_write(p))  # the longest leg: it goes first
    status: Future[None] | None = None
    db.track_pending(start_ts, ttl_ms)
    try:
        try:
            if not row_first:
                _crash_hook(CRASH_BEFORE_STATUS_ROW_ENV, start_ts, sent)
                not_after = status_row_deadline_ms(start_ts, db.status_row_ttl)
                if db.store.parallel_status:
                    status = db.submit_prewrite(lambda: db.status_begin(start_ts, ttl_ms, not_after_ms=not_after))
                else:
                    db.status_begin(start_ts, ttl_ms, not_after_ms=not_after)
            s.begin()
            _prewrite(txn, entries)
        finally:
            binlog_error = sent.exception()
            status_error = None if status is None else status.exception()
        if status_error is not None:
            raise status_error
        if binlog_error is not None:
            raise BinlogWriteError(f"prewrite binlog of start_ts={start_ts}: {binlog_error}") from binlog_error
        _crash_hook(CRASH_AFTER_STATUS_ROW_ENV, start_ts)
        # Only now: the prewrite binlog is durable on a pump and every row is locked (see the module docstring).
        commit_ts = db.tso.get_ts()
        s.call(lambda: db.status.mark_committed(s.conn, start_ts, commit_ts))
    except BaseException as exc:
        _abort(txn, key, exc)
        raise
    finally:
        db.untrack_pending(start_ts)
    try:
        s.commit()
    except StoreError as exc:
        raise CommitUnknownError(
            f"storage commit of start_ts={start_ts} commit_ts={commit_ts} failed: {exc}; "
            "the txn-status row decides whether it committed"
        ) from exc
    _crash_hook(CRASH_AFTER_COMMIT_ENV, start_ts)
    c = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=key)
    db.client_write_async(c)
    return commit_ts


def _abort(txn: Transaction, key: bytes, cause: BaseException) -> None:
    db = txn.db
    log.info("start_ts=%s rolled back: %s", txn.start_ts, cause)
    try:
        if txn.session.in_txn:
            txn.session.rollback()
    except StoreError as exc:
        log.warning("start_ts=%s storage rollback failed: %s", txn.start_ts, exc)
    db.status_rollback(txn.start_ts)
    r = binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=txn.start_ts, prewrite_key=key)
    db.client_write_async(r)
