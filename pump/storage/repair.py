"""Index repairs done once at open, before start-up replay.

1. `drop_past_end`: when the value log lost its tail (a torn append cut off at open, or records
   removed by hand) while the index had already indexed past it (headPointer beyond the log's
   end), the `ts:`, `late:` and `done:` entries pointing at or past the end are deleted, with one
   WARNING saying how many, and headPointer moves to the end in the same batch (so a second open
   finds nothing to do).  A persisted maxCommitTS that came from a dropped record is lowered to the
   newest commit or fake binlog still indexed.  Only an index that went past the end is scanned.
2. `adopt_decisions`: an index written before `done:` keys existed may hold two visible commits
   for one start_ts.  Its `ts:` commits and rollbacks are read once: the first in vlog order
   becomes the decision, any other visible one moves to `late:`.  Then `!binlog!decisions` is set
   (at once for a new, empty index).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from common.errors import CodecError, CorruptRecordError, StorageError
from common.pb import binlog_pb2
from common.vlog_record import ValuePointer
from pump.storage.decisions import Decisions, decides
from pump.storage.entry import PREWRITE, parse_binlog
from pump.storage.index import (
    DECISIONS_KEY,
    DONE_PREFIX,
    GC_BATCH,
    HANDLE_POINTER_KEY,
    HEAD_POINTER_KEY,
    LATE_PREFIX,
    MAX_COMMIT_TS_KEY,
    TS_PREFIX,
    Decision,
    Index,
    late_key,
    ts_key,
)
from pump.storage.vlog import ValueLog

__all__ = ["adopt_decisions", "drop_past_end"]

log = logging.getLogger(__name__)

_PREWRITE_HEAD = b"\x08\x00"  # a gogo-marshaled Prewrite starts with tp = 0


def _past(index: Index, end: ValuePointer) -> Iterator[bytes]:
    for prefix in (TS_PREFIX, LATE_PREFIX):
        for ts, ptr in index.iter_prefix(prefix):
            if ptr >= end:
                yield prefix + ts.to_bytes(8, "big")
    for start_ts, d in index.iter_decisions():
        if d.ptr >= end:
            yield DONE_PREFIX + start_ts.to_bytes(8, "big")


def drop_past_end(index: Index, vlog: ValueLog) -> int:
    """Delete the entries pointing at or past the value log's end; how many."""
    end = vlog.end_pointer()
    head = index.get_pointer(HEAD_POINTER_KEY)
    if head is None or head <= end:
        return 0
    keys = list(_past(index, end))  # 11 bytes a key; only what the lost tail held
    for i in range(0, len(keys), GC_BATCH):
        index.delete(keys[i : i + GC_BATCH])
    ints: list[tuple[bytes, int]] = []
    pointers = [(HEAD_POINTER_KEY, end)]
    handle = index.get_pointer(HANDLE_POINTER_KEY)
    if handle is not None and handle > end:
        pointers.append((HANDLE_POINTER_KEY, end))
        persisted = index.get_int(MAX_COMMIT_TS_KEY) or 0
        top = _newest_visible(index, vlog, persisted)
        if top != persisted:
            ints.append((MAX_COMMIT_TS_KEY, top))
            log.warning("persisted maxCommitTS lowered to the newest binlog kept old=%d new=%d", persisted, top)
    index.write((), ints=ints, pointers=pointers)
    log.warning(
        "index entries pointing past the end of the value log dropped=%d end_fid=%d end_offset=%d "
        "head_fid=%d head_offset=%d",
        len(keys),
        end.fid,
        end.offset,
        head.fid,
        head.offset,
    )
    return len(keys)


def _newest_visible(index: Index, vlog: ValueLog, upto: int) -> int:
    """The newest `ts:` commit or fake binlog at or below `upto` (0 when none)."""
    for ts, ptr in index.iter_ts_descending(upto):
        try:
            if vlog.peek(ptr, len(_PREWRITE_HEAD)) == _PREWRITE_HEAD:
                continue
            b = parse_binlog(vlog.read(ptr))
        except (CorruptRecordError, CodecError, StorageError):
            continue
        if b.tp == binlog_pb2.Commit or (b.tp == binlog_pb2.Rollback and b.commit_ts == ts and ts > 0):
            return ts
    return 0


def adopt_decisions(index: Index, vlog: ValueLog, decisions: Decisions) -> int:
    """Bring an index without `done:` keys up to date; how many visible commits/rollbacks were hidden."""
    if index.get_int(DECISIONS_KEY) is not None:
        return 0
    hidden = 0
    if index.has_prefix(TS_PREFIX):
        log.info("index has no transaction decisions yet: reading its commits and rollbacks once")
        hidden = _adopt(index, vlog, decisions)
        log.info("index decisions recorded hidden_duplicates=%d", hidden)
    index.put_int(DECISIONS_KEY, 1)
    return hidden


def _adopt(index: Index, vlog: ValueLog, decisions: Decisions) -> int:
    hidden = 0
    pending: dict[int, Decision] = {}
    moves: list[tuple[int, ValuePointer]] = []  # (ts, ptr) of visible entries to hide

    def flush() -> None:
        index.write(
            [(late_key(ts), ptr) for ts, ptr in moves],
            decisions=list(pending.items()),
            deletes=[ts_key(ts) for ts, _ in moves],
        )
        pending.clear()
        moves.clear()

    for _, ptr in index.iter_prefix(TS_PREFIX):
        try:
            if vlog.peek(ptr, len(_PREWRITE_HEAD)) == _PREWRITE_HEAD:
                continue
            b = parse_binlog(vlog.read(ptr))
        except (CorruptRecordError, CodecError, StorageError):
            continue  # pulls report it
        if b.tp == PREWRITE or not decides(b.tp, b.start_ts, b.commit_ts):
            continue
        first = pending.get(b.start_ts) or index.get_decision(b.start_ts)
        mine = Decision(b.commit_ts, ptr)
        if first is None:
            pending[b.start_ts] = mine
            continue
        if first.ptr == ptr:  # recorded already (an adoption cut short)
            continue
        later = mine if first.ptr < ptr else first
        if later is first:
            pending[b.start_ts] = mine
        moves.append((later.commit_ts, later.ptr))
        decisions.report(b.tp, b.start_ts, later.commit_ts, mine if later is first else first)
        hidden += 1
        if len(pending) + len(moves) >= GC_BATCH:
            flush()
    flush()
    return hidden
