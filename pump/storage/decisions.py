"""Each transaction is decided once: the first commit or rollback of a start_ts wins.

A commit or rollback (not a fake binlog) for a start_ts that already has a decision is ignored:
a second commit with another commit_ts, the client's retry of the same commit after a timeout, a
rollback after a commit or a commit after a rollback.  It is indexed under `late:` (never served),
does not raise the watermark, is counted (`StorageObserver.decision_ignored`) and logged at
WARNING once per start_ts (the last `WARNED_CAP` start_ts remembered).  A prewrite stored after
its transaction's decision is indexed under `late:` too and never waits for a commit (logged, not
counted).

Decisions live in the index as `done:<start_ts>` keys written in the same LevelDB batch as the
deciding record's entry, so they survive a restart and are rebuilt with the index from the value
log (vlog order decides).  A record is the decision when its pointer is the one stored: replay
of already-indexed records takes the same choice again.  GC purges them with their start_ts.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from pump.storage.api import NullObserver, StorageObserver
from pump.storage.entry import COMMIT, PREWRITE, ROLLBACK, Entry, is_fake
from pump.storage.index import Decision, Index

__all__ = ["WARNED_CAP", "Decisions", "decides"]

log = logging.getLogger(__name__)

WARNED_CAP: Final = 4096


def decides(tp: int, start_ts: int, commit_ts: int) -> bool:
    """True for a record that decides its transaction: a commit, or a rollback that is not a fake binlog."""
    return tp == COMMIT or (tp == ROLLBACK and not is_fake(tp, start_ts, commit_ts))


def kind(tp: int) -> str:
    return "commit" if tp == COMMIT else "prewrite" if tp == PREWRITE else "rollback"


class Decisions:
    """Looks decisions up in the index and reports ignored records; used by the index writer thread
    (and at open), read by pullers."""

    def __init__(self, index: Index, observer: StorageObserver | None = None) -> None:
        self._index = index
        self._observer = observer or NullObserver()
        self._warned: OrderedDict[int, None] = OrderedDict()

    def classify(self, entries: Sequence[Entry]) -> tuple[list[bool], list[tuple[int, Decision]]]:
        """For a batch in vlog order: which entries are ignored (decided before), and the new
        decisions to write with the batch.  Reports each ignored entry."""
        fresh: dict[int, Decision] = {}
        ignored: list[bool] = []
        for e in entries:
            if e.tp == PREWRITE:  # a prewrite retried after its transaction was decided: nothing to wait for
                d = fresh.get(e.start_ts) or self._index.get_decision(e.start_ts)
                late = d is not None and d.ptr < e.ptr
                ignored.append(late)
                if late:
                    assert d is not None
                    self.report(e.tp, e.start_ts, e.commit_ts, d, count=False)
                continue
            if not decides(e.tp, e.start_ts, e.commit_ts):
                ignored.append(False)
                continue
            d = fresh.get(e.start_ts) or self._index.get_decision(e.start_ts)
            if d is None:
                fresh[e.start_ts] = Decision(e.commit_ts, e.ptr)
                ignored.append(False)
            elif d.ptr == e.ptr:  # indexed before (replay): the same decision
                ignored.append(False)
            else:
                ignored.append(True)
                self.report(e.tp, e.start_ts, e.commit_ts, d)
        return ignored, list(fresh.items())

    def replayed(self, entries: Sequence[Entry]) -> list[bool]:
        """Which already-indexed entries were ignored when they were indexed (not reported again)."""
        out: list[bool] = []
        for e in entries:
            if e.tp == PREWRITE:
                d = self._index.get_decision(e.start_ts)
                out.append(d is not None and d.ptr < e.ptr)
            elif decides(e.tp, e.start_ts, e.commit_ts):
                d = self._index.get_decision(e.start_ts)
                out.append(d is not None and d.ptr != e.ptr)
            else:
                out.append(False)
        return out

    def report(self, tp: int, start_ts: int, commit_ts: int, first: Decision, *, count: bool = True) -> None:
        """Count an ignored commit/rollback and warn once per start_ts."""
        if count:
            self._observer.decision_ignored(kind(tp))
        if start_ts in self._warned:
            return
        self._warned[start_ts] = None
        if len(self._warned) > WARNED_CAP:
            self._warned.popitem(last=False)
        log.warning(
            "%s for an already decided transaction ignored start_ts=%d commit_ts=%d decided_commit_ts=%d "
            "decided_fid=%d decided_offset=%d",
            kind(tp),
            start_ts,
            commit_ts,
            first.commit_ts,
            first.ptr.fid,
            first.ptr.offset,
        )

    def get(self, start_ts: int) -> Decision | None:
        return self._index.get_decision(start_ts)
