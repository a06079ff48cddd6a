"""Two-phase commit with binlog, as TiDB does it (wire-formats §1, DESIGN §4).

    1. status row ``pending`` with a lock TTL, committed (the pump can see the txn lives)
    2. in parallel:  P-binlog -> pump (through the client)
                     storage prewrite: lock every touched row, check it still holds what the
                     transaction read, apply the net changes (not committed)
       either failing -> storage rollback, status ``rolled_back``, Rollback binlog; raise
    3. commit_ts from pd-server; status ``committed`` + commit_ts in the same storage
       transaction; storage commit
    4. C-binlog sent asynchronously (the pump's resolver covers a writer that dies here)

With a store that allows a second writer connection (MySQL) the status row is written in
the binlog branch of step 2, before the P-binlog is sent; with sqlite (one writer) it is
written before step 2.  Rows are locked in (table id, handle) order, so two prewrites never
deadlock on each other.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING

from common.pb import binlog_pb2
from common.pb.gogo import marshal_prewrite_value
from upstream.errors import BinlogWriteError, CommitUnknownError, SchemaChangedError, WriteConflictError
from upstream.store.base import StoreError

if TYPE_CHECKING:
    from upstream.txn import Entry, Transaction

log = logging.getLogger(__name__)

CRASH_AFTER_COMMIT_ENV = "BINLOG_TEST_CRASH_AFTER_STORAGE_COMMIT"
"""Test hook: exit the process (status 137) after the storage commit, before the C-binlog."""

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


def _p_binlog(txn: Transaction, entries: Sequence[Entry]) -> binlog_pb2.Binlog:
    first = entries[0]
    pv = txn.mutations.prewrite_value(txn.db.schema.version)
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite,
        start_ts=txn.start_ts,
        prewrite_key=prewrite_key(first.ref.table.id, first.handle),
        prewrite_value=marshal_prewrite_value(pv),
    )


def _commit_with_binlog(txn: Transaction, entries: Sequence[Entry]) -> int:
    db = txn.db
    s = txn.session
    p = _p_binlog(txn, entries)
    ttl_ms = db.lock_ttl_ms(txn.mutations.size)
    sent: Future[None]
    if db.store.parallel_status:

        def status_then_binlog() -> None:
            db.status_begin(txn.start_ts, ttl_ms)
            db.client_write(p)

        sent = db.submit_prewrite(status_then_binlog)
    else:
        s.call(lambda: db.status.begin_pending(s.conn, txn.start_ts, ttl_ms))
        sent = db.submit_prewrite(lambda: db.client_write(p))
    db.track_pending(txn.start_ts, ttl_ms)
    try:
        try:
            s.begin()
            _prewrite(txn, entries)
        finally:
            binlog_error = sent.exception()
        if binlog_error is not None:
            raise BinlogWriteError(f"prewrite binlog of start_ts={txn.start_ts}: {binlog_error}") from binlog_error
        commit_ts = db.tso.get_ts()
        s.call(lambda: db.status.mark_committed(s.conn, txn.start_ts, commit_ts))
    except BaseException as exc:
        _abort(txn, p, exc)
        raise
    finally:
        db.untrack_pending(txn.start_ts)
    try:
        s.commit()
    except StoreError as exc:
        raise CommitUnknownError(
            f"storage commit of start_ts={txn.start_ts} commit_ts={commit_ts} failed: {exc}; "
            "the txn-status row decides whether it committed"
        ) from exc
    if os.environ.get(CRASH_AFTER_COMMIT_ENV):
        log.warning("start_ts=%s %s set: exiting before the commit binlog", txn.start_ts, CRASH_AFTER_COMMIT_ENV)
        os._exit(137)
    c = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=txn.start_ts, commit_ts=commit_ts, prewrite_key=p.prewrite_key)
    db.client_write_async(c)
    return commit_ts


def _abort(txn: Transaction, p: binlog_pb2.Binlog, cause: BaseException) -> None:
    db = txn.db
    log.info("start_ts=%s rolled back: %s", txn.start_ts, cause)
    try:
        if txn.session.in_txn:
            txn.session.rollback()
    except StoreError as exc:
        log.warning("start_ts=%s storage rollback failed: %s", txn.start_ts, exc)
    db.status_rollback(txn.start_ts)
    r = binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=txn.start_ts, prewrite_key=p.prewrite_key)
    db.client_write_async(r)
