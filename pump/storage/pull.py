"""PullBinlogs from storage: commit and fake binlogs above a ts, in commit_ts order, forever.

The puller iterates the index over (last, maxCommitTS] in chunks of (ts, pointer) pairs, loads
one binlog at a time (memory: one binlog, whatever its size), skips prewrites and rollbacks, joins
each commit with its prewrite, and then waits on the watermark condition (woken as soon as the
index writer publishes a higher maxCommitTS; the wait is sliced so that `stop` is seen within
`WAIT_SLICE`).  Original: `storage.go PullCommitBinlog` polled every 100 ms.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Final

from common.errors import CodecError, CorruptRecordError, StorageClosedError, StorageError
from common.pb import binlog_pb2, gogo
from pump.storage.api import NullObserver, PulledBinlog, StorageObserver
from pump.storage.entry import index_ts, parse_binlog
from pump.storage.index import Index
from pump.storage.primitives import ReaderGate, Watermark
from pump.storage.vlog import ValueLog
from pump.storage.vlog_record import ValuePointer

__all__ = ["Puller", "merge_prewrite"]

log = logging.getLogger(__name__)

CHUNK: Final = 256  # index entries fetched per iterator round
WAIT_SLICE: Final = 0.25


def merge_prewrite(commit: binlog_pb2.Binlog, prewrite: binlog_pb2.Binlog) -> bytes:
    """The commit binlog with its prewrite's data (original `feedPreWriteValue`), gogo-marshaled."""
    commit.start_ts = prewrite.start_ts
    for field in ("prewrite_value", "ddl_query"):
        if prewrite.HasField(field):
            setattr(commit, field, getattr(prewrite, field))
        else:
            commit.ClearField(field)
    commit.ddl_job_id = prewrite.ddl_job_id
    commit.ddl_schema_state = prewrite.ddl_schema_state
    return gogo.marshal_binlog(commit)


class Puller:
    def __init__(
        self,
        gate: ReaderGate,
        index: Index,
        vlog: ValueLog,
        watermark: Watermark,
        gc_ts: Callable[[], int],
        *,
        observer: StorageObserver | None = None,
    ) -> None:
        self._observer = observer or NullObserver()
        self._gate = gate
        self._index = index
        self._vlog = vlog
        self._watermark = watermark
        self._gc_ts = gc_ts

    def pull(self, last_ts: int, stop: threading.Event) -> Iterator[PulledBinlog]:
        gc_ts = self._gc_ts()
        last = last_ts
        if last < gc_ts:
            log.warning("pull requested below the gc ts, binlogs may be lost last_ts=%d gc_ts=%d", last_ts, gc_ts)
            last = gc_ts
        while not stop.is_set():
            top = self._watermark.wait_above(last, WAIT_SLICE)
            if self._gate.closed or self._watermark.closed:
                return
            if top <= last:
                continue
            try:
                yield from self.between(last, top, stop)
            except StorageClosedError:
                return
            last = top  # nothing at or below the watermark can appear later

    def between(self, after: int, upto: int, stop: threading.Event | None = None) -> Iterator[PulledBinlog]:
        """One pass over after < commit_ts <= upto, no waiting (StorageClosedError once closed)."""
        gate = self._gate
        last = after
        while last < upto:
            with gate.enter():
                chunk = self._index.range(last, upto, CHUNK)
            for ts, ptr in chunk:
                with gate.enter():
                    item = self._load(ts, ptr)
                if item is not None:
                    yield item
                if stop is not None and stop.is_set():
                    return
                last = ts
            if len(chunk) < CHUNK:
                return

    def _read(self, ts: int, ptr: ValuePointer) -> tuple[binlog_pb2.Binlog, bytes] | None:
        """The binlog indexed as `ts` at `ptr`; None (logged, counted) when unreadable or when the
        record there is not that binlog (a stale key, e.g. after a power loss with sync-log off)."""
        try:
            payload = self._vlog.read(ptr)
            b = parse_binlog(payload)
        except StorageClosedError:
            raise
        except (CorruptRecordError, CodecError, StorageError) as e:
            log.error("unreadable binlog skipped ts=%d fid=%d offset=%d: %s", ts, ptr.fid, ptr.offset, e)
            self._observer.error("read_value")
            return None
        got = index_ts(b.tp, b.start_ts, b.commit_ts)
        if got != ts:
            log.error(
                "index entry points at another binlog, skipped ts=%d fid=%d offset=%d record_ts=%d",
                ts,
                ptr.fid,
                ptr.offset,
                got,
            )
            self._observer.error("read_value")
            return None
        return b, payload

    def _load(self, ts: int, ptr: ValuePointer) -> PulledBinlog | None:
        got = self._read(ts, ptr)
        if got is None:
            return None
        b, payload = got
        if b.tp == binlog_pb2.Prewrite:
            return None
        if b.tp == binlog_pb2.Commit:
            pptr = self._index.get(b.start_ts)
            p = None if pptr is None else self._read(b.start_ts, pptr)
            if p is None or p[0].tp != binlog_pb2.Prewrite:
                log.error(
                    "prewrite of a commit not found, commit skipped start_ts=%d commit_ts=%d", b.start_ts, b.commit_ts
                )
                self._observer.error("feed_pre_write_value")
                return None
            return PulledBinlog(b.start_ts, b.commit_ts, merge_prewrite(b, p[0]))
        if b.tp == binlog_pb2.Rollback and b.commit_ts == 0:
            return None
        return PulledBinlog(b.start_ts, b.commit_ts, payload)  # fake binlogs: as stored
