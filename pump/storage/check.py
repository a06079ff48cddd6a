"""Cross-check of the index against the value log (`Storage.check()`, tests, offline inspection).

1. Every `ts:`/`late:` entry points at a readable record whose index ts equals the key's ts, and
   every `ts:` commit above the gc ts has its prewrite indexed (GC keeps long transactions').
2. Every vlog record before headPointer (above the GC cut-off) is indexed: its ts has a `ts:` or
   `late:` entry (a retried binlog with the same ts is indexed once, at its newest copy).
   No start_ts has two visible (`ts:`) commits, and each visible commit's start_ts has a `done:`
   decision pointing at it (when the index keeps decisions).
3. maxCommitTS is 0 or the commit_ts of an indexed commit/fake binlog, and the persisted
   maxCommitTS is not above the live one; the gc ts is below maxCommitTS.

Meant for a quiet storage (no writes in flight); returns a list of problems, empty when fine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from common.errors import CodecError, StorageError
from common.pb import binlog_pb2
from common.vlog_record import ValuePointer
from pump.storage.entry import index_ts, parse_binlog
from pump.storage.index import DECISIONS_KEY, LATE_PREFIX, MAX_COMMIT_TS_KEY, TS_PREFIX, Index, late_key, ts_key
from pump.storage.vlog import ValueLog

__all__ = ["MAX_PROBLEMS", "check_storage"]

log = logging.getLogger(__name__)

MAX_PROBLEMS: Final = 100


def check_storage(
    index: Index, vlog: ValueLog, *, head: ValuePointer, max_commit_ts: int, gc_ts: int, gc_cutoff: int
) -> list[str]:
    problems: list[str] = []

    def problem(text: str) -> None:
        if len(problems) < MAX_PROBLEMS:
            problems.append(text)

    # 1. index -> vlog
    kinds: dict[int, int] = {}
    visible: dict[int, int] = {}  # start_ts -> commit_ts of the visible commit met first
    keeps_decisions = index.get_int(DECISIONS_KEY) is not None
    for prefix in (TS_PREFIX, LATE_PREFIX):
        name = prefix.decode()
        for ts, ptr in index.iter_prefix(prefix):
            try:
                b = parse_binlog(vlog.read(ptr))
            except (StorageError, CodecError) as e:
                problem(f"{name}{ts} -> fid={ptr.fid} offset={ptr.offset}: unreadable ({e})")
                continue
            got = index_ts(b.tp, b.start_ts, b.commit_ts)
            if got != ts:
                problem(f"{name}{ts} -> fid={ptr.fid} offset={ptr.offset}: record has ts {got}")
            if prefix == TS_PREFIX:
                kinds[ts] = b.tp
                if b.tp == binlog_pb2.Commit and ts > gc_ts and kinds.get(b.start_ts) != binlog_pb2.Prewrite:
                    problem(f"{name}{ts} -> commit start_ts={b.start_ts}: prewrite missing from the index")
                if b.tp == binlog_pb2.Commit:
                    _check_decided(
                        index,
                        start_ts=b.start_ts,
                        ts=ts,
                        ptr=ptr,
                        visible=visible,
                        # GC purges decisions by start_ts: one at or below the cutoff may be gone
                        keeps_decisions=keeps_decisions and ts > gc_ts and b.start_ts > gc_cutoff,
                        problem=problem,
                    )
    # 2. vlog -> index
    first = vlog.fids()[0]
    for ptr, payload in vlog.scan(ValuePointer(first, 0)):
        if ptr >= head:
            break
        try:
            b = parse_binlog(payload)
        except CodecError as e:
            problem(f"record at fid={ptr.fid} offset={ptr.offset} is not a binlog: {e}")
            continue
        ts = index_ts(b.tp, b.start_ts, b.commit_ts)
        if ts <= gc_cutoff or (b.start_ts == 0 and b.commit_ts == 0):
            continue
        if ts not in kinds and not index.has(ts_key(ts)) and not index.has(late_key(ts)):
            problem(f"record at fid={ptr.fid} offset={ptr.offset} (ts {ts}) is not indexed")
    # 3. watermark
    if max_commit_ts > gc_cutoff and max_commit_ts > 0:
        tp = kinds.get(max_commit_ts)
        if tp is None or tp == binlog_pb2.Prewrite:
            problem(f"maxCommitTS {max_commit_ts} is not the commit_ts of an indexed commit or fake binlog")
    persisted = index.get_int(MAX_COMMIT_TS_KEY)
    if persisted is not None and persisted > max_commit_ts:
        problem(f"persisted maxCommitTS {persisted} is above the live one {max_commit_ts}")
    if gc_ts and gc_ts >= max_commit_ts:
        problem(f"gc ts {gc_ts} is not below maxCommitTS {max_commit_ts}")
    if problems:
        log.warning("storage check found problems count=%d first=%s", len(problems), problems[0])
    return problems


def _check_decided(
    index: Index,
    *,
    start_ts: int,
    ts: int,
    ptr: ValuePointer,
    visible: dict[int, int],
    keeps_decisions: bool,
    problem: Callable[[str], None],
) -> None:
    first = visible.setdefault(start_ts, ts)
    if first != ts:
        problem(f"start_ts {start_ts} is indexed twice: commits ts:{first} and ts:{ts} are both visible")
    if keeps_decisions:
        d = index.get_decision(start_ts)
        if d is None or d.ptr != ptr:
            problem(f"ts:{ts} -> commit start_ts={start_ts}: not the transaction's recorded decision ({d})")
