"""Start-up replay: bring the sorter and the index up to the end of the value log.

The scan starts at min(headPointer, handlePointer) (the start of the log when either is unknown,
e.g. after `kv/` was deleted) and sorts each record from handlePointer on (rebuilding the waiting
prewrites and the watermark from the persisted maxCommitTS), indexing it only from headPointer on
(what lies before is indexed already, and its late/visible decision must not be taken again).
The state that comes out is the one the storage had before it stopped, because the sorter is
deterministic and every resolver decision is a record in the log.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from common.errors import CodecError
from common.vlog_record import ValuePointer
from pump.storage.entry import Entry, is_probe, parse_binlog, prewrite_key_of
from pump.storage.indexer import IndexWriter
from pump.storage.vlog import ValueLog

__all__ = ["ReplayStats", "replay"]

log = logging.getLogger(__name__)

BATCH: Final = 1024

_SKIP, _SORT, _INDEX = 0, 1, 2


@dataclass(slots=True)
class ReplayStats:
    records: int = 0
    sorted_only: int = 0
    indexed: int = 0
    unparsable: int = 0


def replay(
    vlog: ValueLog, indexer: IndexWriter, *, handle: ValuePointer | None, head: ValuePointer | None
) -> ReplayStats:
    origin = ValuePointer(vlog.fids()[0], 0)
    sort_from = handle or origin
    index_from = head or origin
    start = min(sort_from, index_from)
    stats = ReplayStats()
    pending: list[Entry] = []
    mode = _SKIP

    def flush() -> None:
        if not pending:
            return
        if mode == _SORT:
            indexer.apply_sorted_only(pending)
            stats.sorted_only += len(pending)
        elif mode == _INDEX:
            indexer.apply(pending, sort_from=sort_from, replay=True)
            stats.indexed += len(pending)
        pending.clear()

    log.info("replaying vlog from fid=%d offset=%d (handle=%s head=%s)", start.fid, start.offset, handle, head)
    for ptr, payload in vlog.scan(start):
        stats.records += 1
        try:
            b = parse_binlog(payload)
        except CodecError as e:
            stats.unparsable += 1
            log.error("replay skipped a record that is not a binlog fid=%d offset=%d: %s", ptr.fid, ptr.offset, e)
            continue
        if is_probe(b.start_ts, b.commit_ts):
            continue
        kind = _INDEX if ptr >= index_from else _SORT if ptr >= sort_from else _SKIP
        if kind != mode or len(pending) >= BATCH:
            flush()
            mode = kind
        if kind != _SKIP:
            pending.append(Entry(b.tp, b.start_ts, b.commit_ts, ptr, ptr.advance(len(payload)), prewrite_key_of(b)))
    flush()
    indexer.persist(force=True)
    log.info(
        "replay done records=%d sorted_only=%d indexed=%d unparsable=%d",
        stats.records,
        stats.sorted_only,
        stats.indexed,
        stats.unparsable,
    )
    return stats
