"""Pairs prewrites with their commit/rollback and keeps the `maxCommitTS` watermark (pure).

Items are kept in arrival (vlog) order.  A prewrite adds its start_ts to the waiting set, a commit
or rollback removes it.  After every push the sorter pops from the front: a prewrite whose
start_ts is still waiting stops it; a commit or fake binlog raises the watermark to its
commit_ts.  So the watermark never passes an unmatched prewrite, and a commit that arrives later
for a waiting prewrite always has commit_ts above it (TiDB fetches commit_ts after the prewrite
was acknowledged).  A commit whose commit_ts is at or below the watermark *when it arrives* is
"late" (a duplicate, or one whose prewrite went elsewhere): `push` returns False so the storage
keeps it out of the visible index; it still matches its prewrite so nothing waits forever.  A
commit or rollback the storage ignores (its transaction was decided before, see `decisions.py`)
is pushed with `ignored=True`: it releases a waiting prewrite but adds nothing to the watermark.

No threads, no I/O, no clock: the storage calls it under its own lock and passes `now`.
The sorter holds only small tuples, never payloads, and only what can still block: the prewrites
behind the head plus one `_Run` per stretch of non-blocking items between them (max commit_ts and
where the stretch starts and ends in the vlog).  Prewrites matched while stuck behind the head are
folded into runs by a compaction whenever the queue doubles, so memory follows the number of
unfinished prewrites, not the number of binlogs that arrived behind a stuck one.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass
from typing import Final

from common.vlog_record import ValuePointer
from pump.storage.entry import COMMIT, PREWRITE, Entry

__all__ = ["LONG_TXN_TSO", "Sorter", "Waiting"]

log = logging.getLogger(__name__)


_MIN_COMPACT = 1024
LONG_TXN_TSO: Final = 600_000 << 18
"""A commit with commit_ts - start_ts above this (10 minutes, the GC margin) is a long transaction:
its prewrite is older than what GC keeps below a gc ts, so it is recorded for GC to protect."""


class _Run:
    """Consecutive items that block nothing: their max commit_ts and the vlog span they cover."""

    __slots__ = ("max_commit_ts", "next_ptr", "ptr")

    def __init__(self, max_commit_ts: int, ptr: ValuePointer, next_ptr: ValuePointer) -> None:
        self.max_commit_ts = max_commit_ts
        self.ptr = ptr
        self.next_ptr = next_ptr


@dataclass(slots=True)
class Waiting:
    """A prewrite whose commit has not arrived."""

    start_ts: int
    ptr: ValuePointer
    arrived: float
    next_ask: float
    prewrite_key: bytes | None = None


class Sorter:
    def __init__(
        self,
        watermark: int = 0,
        handle: ValuePointer | None = None,
        *,
        resolve_interval: float = 1.0,
        compact_min: int = _MIN_COMPACT,
    ) -> None:
        self._watermark = watermark
        self._items: deque[Entry | _Run] = deque()  # Entry: a prewrite
        self._compact_min = compact_min
        self._compact_at = compact_min
        self._waiting: dict[int, Waiting] = {}
        self._resume = handle  # handle pointer when no item is held
        self._interval = resolve_interval
        self.late_count = 0
        self._long: list[tuple[int, int]] = []  # (commit_ts, start_ts) of long txns not yet indexed

    @property
    def watermark(self) -> int:
        """maxCommitTS: no commit with commit_ts <= this can become visible any more."""
        return self._watermark

    @property
    def handle_pointer(self) -> ValuePointer | None:
        """Where replay must resume to rebuild this state: the oldest item held, else past the last one."""
        return self._items[0].ptr if self._items else self._resume

    @property
    def pending(self) -> int:
        return len(self._waiting)

    @property
    def held(self) -> int:
        """Items held in the queue (prewrites and runs), for tests and status."""
        return len(self._items)

    def all_matched(self) -> bool:
        return not self._waiting

    def push(self, e: Entry, now: float, *, ignored: bool = False) -> bool:
        """Add an item in arrival order; False when it is a late commit (must stay invisible).

        `ignored`: a commit/rollback for a transaction decided before (see `decisions.py`): it
        still ends a wait for its prewrite (a prewrite retried after the decision) but never
        raises the watermark; False is returned (invisible)."""
        tp = e.tp
        visible = True
        if ignored:
            self._waiting.pop(e.start_ts, None)
            self._append_run(e, 0)
            return False
        if tp == PREWRITE:
            w = self._waiting.get(e.start_ts)
            if w is None:
                self._waiting[e.start_ts] = Waiting(e.start_ts, e.ptr, now, now + self._interval, e.prewrite_key)
            else:  # a retried prewrite: wait for the newest copy
                w.ptr = e.ptr
                w.prewrite_key = e.prewrite_key
        else:
            paired = self._waiting.pop(e.start_ts, None) is not None
            if (tp == COMMIT or e.commit_ts > 0) and e.commit_ts <= self._watermark:
                visible = False
                self.late_count += 1
                log.warning(
                    "commit at or below the watermark ignored start_ts=%d commit_ts=%d max_commit_ts=%d",
                    e.start_ts,
                    e.commit_ts,
                    self._watermark,
                )
            elif paired and tp == COMMIT and e.commit_ts - e.start_ts > LONG_TXN_TSO:
                self._long.append((e.commit_ts, e.start_ts))
        if tp == PREWRITE:
            self._items.append(e)
            self._settle()
        else:
            self._append_run(e, e.commit_ts)
        return visible

    def _append_run(self, e: Entry, commit_ts: int) -> None:
        items = self._items
        if items and isinstance(last := items[-1], _Run):
            last.max_commit_ts = max(last.max_commit_ts, commit_ts)
            last.next_ptr = e.next_ptr
        else:
            items.append(_Run(commit_ts, e.ptr, e.next_ptr))
        self._settle()

    def _settle(self) -> None:
        self._advance()
        if len(self._items) > self._compact_at:
            self._compact()

    def _advance(self) -> None:
        items = self._items
        waiting = self._waiting
        last: Entry | _Run | None = None
        while items:
            head = items[0]
            if isinstance(head, _Run):
                self._watermark = max(self._watermark, head.max_commit_ts)
            elif head.start_ts in waiting:
                break
            last = items.popleft()
        if last is not None:
            self._resume = last.next_ptr

    def _compact(self) -> None:
        """Fold prewrites matched behind the head into the runs around them."""
        waiting = self._waiting
        out: deque[Entry | _Run] = deque()
        for it in self._items:
            if not isinstance(it, _Run) and it.start_ts in waiting:
                out.append(it)
                continue
            top = it.max_commit_ts if isinstance(it, _Run) else 0
            if out and isinstance(prev := out[-1], _Run):
                prev.max_commit_ts = max(prev.max_commit_ts, top)
                prev.next_ptr = it.next_ptr
            else:
                out.append(_Run(top, it.ptr, it.next_ptr))
        self._items = out
        self._compact_at = max(self._compact_min, 2 * len(out))

    # ------------------------------------------------------------------------------ long txns

    def long_unwritten(self) -> list[tuple[int, int]]:
        """(commit_ts, start_ts) of the long transactions paired but not yet confirmed indexed."""
        return list(self._long)

    def long_written(self, count: int) -> None:
        """The first `count` of `long_unwritten()` are now in the index."""
        del self._long[:count]

    def oldest_waiting_start_ts(self) -> int | None:
        """The smallest start_ts of the prewrites still waiting for their commit."""
        return min(self._waiting, default=None)

    # --------------------------------------------------------------------------------- resolve

    def due_for_resolve(self, now: float, limit: int = 256) -> list[tuple[Waiting, float]]:
        """Waiting prewrites due to be asked about (after `resolve_interval`), oldest first, with
        the seconds they have waited.  They are not due again until `retry_later` is called."""
        out: list[tuple[Waiting, float]] = []
        for w in self._waiting.values():
            if w.arrived + self._interval > now:
                break  # later entries arrived later still
            if w.next_ask <= now:
                w.next_ask = math.inf
                out.append((w, now - w.arrived))
                if len(out) >= limit:
                    break
        return out

    def retry_later(self, start_ts: int, now: float) -> None:
        """Ask again about `start_ts` after another `resolve_interval` (verdict WAIT, or a failure)."""
        w = self._waiting.get(start_ts)
        if w is not None:
            w.next_ask = now + self._interval
