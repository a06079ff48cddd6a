"""PullBinlogs from storage: commit and fake binlogs above a ts, in commit_ts order, forever.

The puller iterates the index over (last, maxCommitTS] in chunks of (ts, pointer) pairs, loads
one binlog at a time (memory: one binlog, whatever its size), skips prewrites and rollbacks, joins
each commit with its prewrite (a commit that is not its transaction's recorded decision is skipped:
a transaction is served at most once), and then waits on the watermark condition (woken as soon as the
index writer publishes a higher maxCommitTS; the wait is sliced so that `stop` is seen within
`WAIT_SLICE`).  Original: `storage.go PullCommitBinlog` polled every 100 ms.

Memory, for a transaction of N bytes: a prewrite met in the index is skipped after reading its
first bytes (gogo writes ``tp`` first: ``08 00``), not its N bytes; a commit's prewrite is read
once (N) and its ``prewrite_value`` goes into the merged binlog by one copy (N), never through a
parsed message (each protobuf access to a bytes field is another copy).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from typing import Final

from common.errors import CodecError, CorruptRecordError, StorageClosedError, StorageError
from common.pb import binlog_pb2, gogo
from common.vlog_record import ValuePointer
from pump.storage.api import NullObserver, PulledBinlog, StorageObserver
from pump.storage.decisions import Decisions
from pump.storage.entry import index_ts, parse_binlog
from pump.storage.index import Index
from pump.storage.primitives import ReaderGate, Watermark
from pump.storage.vlog import ValueLog

__all__ = ["Puller", "merge_prewrite", "split_prewrite_value"]

log = logging.getLogger(__name__)

CHUNK: Final = 256  # index entries fetched per iterator round
WAIT_SLICE: Final = 0.25
_PREWRITE_VALUE: Final = 5
_PREWRITE_HEAD: Final = b"\x08\x00"
"""A gogo-marshaled Prewrite starts with ``tp = 0``."""


def _fields(buf: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, offset of its tag, start, end of its value)`` of each field of a message."""
    pos, end = 0, len(buf)
    while pos < end:
        at = pos
        tag, pos = _uvarint(buf, pos)
        wire = tag & 7
        if wire == 0:
            start = pos
            _, pos = _uvarint(buf, pos)
        elif wire == 2:
            n, start = _uvarint(buf, pos)
            pos = start + n
        elif wire in (1, 5):
            start = pos
            pos += 8 if wire == 1 else 4
        else:
            raise CodecError(f"unsupported wire type {wire} at offset {at}")
        if pos > end:
            raise CodecError(f"field {tag >> 3} at offset {at} runs past the end")
        yield tag >> 3, at, start, pos


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise CodecError(f"bad varint at offset {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def split_prewrite_value(payload: bytes) -> tuple[binlog_pb2.Binlog, memoryview | None]:
    """The binlog in `payload` parsed without its ``prewrite_value``, and that value as a view of
    `payload` (None when not set); CodecError when `payload` is not a binlog."""
    buf = memoryview(payload)
    rest: list[bytes] = []
    value: memoryview | None = None
    keep = 0
    for number, at, start, end in _fields(buf):
        if number == _PREWRITE_VALUE:
            rest.append(payload[keep:at])
            keep = end
            value = buf[start:end]
    if value is None:
        return parse_binlog(payload), None
    rest.append(payload[keep:])
    return parse_binlog(b"".join(rest)), value


def merge_prewrite(
    commit: binlog_pb2.Binlog, prewrite: binlog_pb2.Binlog, prewrite_value: bytes | memoryview | None = None
) -> bytes:
    """The commit binlog with its prewrite's data (original `feedPreWriteValue`), gogo-marshaled.
    `prewrite_value`: the prewrite's value when `prewrite` was parsed without it (copied once, into
    the result)."""
    commit.start_ts = prewrite.start_ts
    for field in ("prewrite_value", "ddl_query"):
        if prewrite.HasField(field):
            setattr(commit, field, getattr(prewrite, field))
        else:
            commit.ClearField(field)
    commit.ddl_job_id = prewrite.ddl_job_id
    commit.ddl_schema_state = prewrite.ddl_schema_state
    small = gogo.marshal_binlog(commit)
    if prewrite_value is None:
        return small
    # gogo's field order: the value goes before the first field numbered above it
    at = next((at for number, at, _, _ in _fields(memoryview(small)) if number > _PREWRITE_VALUE), len(small))
    return b"".join((small[:at], b"\x2a", gogo.uvarint(len(prewrite_value)), prewrite_value, small[at:]))


class Puller:
    def __init__(
        self,
        gate: ReaderGate,
        index: Index,
        vlog: ValueLog,
        watermark: Watermark,
        gc_ts: Callable[[], int],
        *,
        decisions: Decisions,
        observer: StorageObserver | None = None,
    ) -> None:
        self._observer = observer or NullObserver()
        self._decisions = decisions
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

    def _read(
        self, ts: int, ptr: ValuePointer, *, split: bool = False
    ) -> tuple[binlog_pb2.Binlog, bytes | memoryview | None] | None:
        """The binlog indexed as `ts` at `ptr` and its payload (with `split`: the binlog without its
        prewrite value, and that value, see `split_prewrite_value`); None (logged, counted) when
        unreadable or when the record there is not that binlog (a stale key, e.g. after a power loss
        with sync-log off)."""
        try:
            payload = self._vlog.read(ptr)
            b, rest = split_prewrite_value(payload) if split else (parse_binlog(payload), payload)
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
        return b, rest

    def _load(self, ts: int, ptr: ValuePointer) -> PulledBinlog | None:
        try:
            if self._vlog.peek(ptr, len(_PREWRITE_HEAD)) == _PREWRITE_HEAD:
                return None  # a prewrite: its commit reads it
        except StorageClosedError:
            raise
        except (CorruptRecordError, StorageError):
            pass  # `_read` meets it again, logs and counts it
        got = self._read(ts, ptr)
        if got is None:
            return None
        b, payload = got
        if b.tp == binlog_pb2.Prewrite:
            return None
        if b.tp == binlog_pb2.Commit:
            decided = self._decisions.get(b.start_ts)
            if decided is not None and decided.ptr != ptr:  # never a second commit of one transaction
                self._decisions.report(b.tp, b.start_ts, b.commit_ts, decided, count=False)
                return None
            pptr = self._index.get(b.start_ts)
            p = None if pptr is None else self._read(b.start_ts, pptr, split=True)
            if p is None or p[0].tp != binlog_pb2.Prewrite:
                log.error(
                    "prewrite of a commit not found, commit skipped start_ts=%d commit_ts=%d", b.start_ts, b.commit_ts
                )
                self._observer.error("feed_pre_write_value")
                return None
            return PulledBinlog(b.start_ts, b.commit_ts, merge_prewrite(b, *p))
        if b.tp == binlog_pb2.Rollback and b.commit_ts == 0:
            return None
        assert isinstance(payload, bytes)
        return PulledBinlog(b.start_ts, b.commit_ts, payload)  # fake binlogs: as stored
