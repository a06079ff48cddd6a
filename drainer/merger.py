"""Merge the pumps' binlog streams into one stream in commit_ts order (docs/architecture.md#merger).

Each pump is a *source* whose binlogs arrive in ascending commit_ts.  The merge emits the smallest
head across all sources, and only when **every** source has a head: a source with nothing buffered
may still send a smaller commit_ts.  An idle pump writes a fake binlog `gen-binlog-pull-interval`
(0.25 s) after its last write while a drainer pulls from it (`gen-binlog-interval`, 3 s, otherwise),
so a live source always gets a head soon and an idle pump holds the others' binlogs back by about
that much; a paused or crashed pump keeps its source and so blocks the merge until it comes back or
goes offline (as the original).

A binlog whose commit_ts is not above the last emitted one is dropped: equal is a *duplicate*
(two pumps with the same fake ts, a reconnect overlap), smaller is a *disorder* (should never
happen).  Both are counted.

`MergeCore` is the pure algorithm (a min-heap of heads, no threads).  `Merger` wraps it for
threads: one puller per source calls `put`, one consumer calls `get`.  Each source's buffered
binlogs (its head included) are bounded by bytes, not counts (docs/architecture.md#byte-budgets): `put` blocks while the
source holds more than `max_bytes_per_source`, but always admits one binlog into an empty buffer
so a binlog larger than the budget still passes, alone.  `wait_room` lets a puller wait for room
*before* it receives the next binlog, so a source never holds more than its budget plus the one
binlog its puller has in hand; and only one source at a time receives ahead of need (a receive costs
grpcio about three times the binlog), while a source the merge waits for may always receive.  With
`hold_until_released`, a binlog taken by `get` stays on its
source's budget until the consumer calls `release` (the drainer's syncer does once it translated it),
so what a source costs is bounded through translation, not just while buffered.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from common.pb import binlog_pb2

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES_PER_SOURCE: Final = 16 << 20
"""Bytes one source may buffer in the merger, its head included (ours; the original's channels are
unbuffered, counted in binlogs)."""


@dataclass(slots=True)
class MergeItem:
    """One binlog from one pump: a Commit with its prewrite value merged in, or a fake binlog."""

    node_id: str
    binlog: binlog_pb2.Binlog
    size: int
    """Bytes of the serialized binlog, for byte budgets."""
    prewrite_value: bytes | memoryview | None = None
    """The binlog's prewrite value when ``binlog`` was parsed without it (:func:`common.pb.wire.split_binlog`:
    a view of the received message, not a copy)."""

    @property
    def commit_ts(self) -> int:
        return int(self.binlog.commit_ts)


class MergeCore:
    """Min-heap merge of per-source heads; pure and single-threaded.

    Drive it as: push a head for every source in `needs()`, then `pop()` until it returns None,
    then refill `needs()` again.  Ties between sources break by node id (the later one is then a
    duplicate and dropped).
    """

    def __init__(self, latest_ts: int = 0) -> None:
        self.latest_ts = latest_ts
        """The last emitted commit_ts (starts at the checkpoint)."""
        self.duplicates = 0
        self.disorders = 0
        self._sources: dict[str, None] = {}  # ordered set: needs() in the order sources were added
        self._heads: dict[str, tuple[int, MergeItem]] = {}  # node_id -> (token, item)
        self._heap: list[tuple[int, str, int]] = []  # (commit_ts, node_id, token); stale tokens skipped
        self._token = 0

    @property
    def sources(self) -> list[str]:
        return list(self._sources)

    def add_source(self, node_id: str) -> None:
        """Add a source; the merge waits for its first head from now on.  No-op if known."""
        self._sources.setdefault(node_id, None)

    def remove_source(self, node_id: str) -> MergeItem | None:
        """Forget a source and drop its head; returns that head, if any.  No-op if unknown."""
        self._sources.pop(node_id, None)
        head = self._heads.pop(node_id, None)
        return None if head is None else head[1]

    def head(self, node_id: str) -> MergeItem | None:
        head = self._heads.get(node_id)
        return None if head is None else head[1]

    def needs(self) -> list[str]:
        """The sources that have no head item right now."""
        return [s for s in self._sources if s not in self._heads]

    def push(self, item: MergeItem) -> None:
        """Give `item.node_id` its head; ValueError if the source is unknown or already has one."""
        node_id = item.node_id
        if node_id not in self._sources:
            raise ValueError(f"unknown merge source {node_id!r}")
        if node_id in self._heads:
            raise ValueError(
                f"merge source {node_id!r} already has a head (commit_ts={self._heads[node_id][1].commit_ts})"
            )
        self._token += 1
        self._heads[node_id] = (self._token, item)
        heapq.heappush(self._heap, (item.commit_ts, node_id, self._token))

    def take(self) -> tuple[MergeItem, bool] | None:
        """Remove the smallest head once every source has one: `(item, True)` when it is emitted,
        `(item, False)` when it was dropped (at or below `latest_ts`, counted).  None while some source
        has no head, or there are no sources."""
        if not self._sources or len(self._heads) < len(self._sources):
            return None
        heap = self._heap
        while heap:
            commit_ts, node_id, token = heapq.heappop(heap)
            head = self._heads.get(node_id)
            if head is None or head[0] != token:
                continue  # its source was removed (or re-added) since
            del self._heads[node_id]
            item = head[1]
            if commit_ts > self.latest_ts:
                self.latest_ts = commit_ts
                return item, True
            if commit_ts == self.latest_ts:
                self.duplicates += 1
                log.debug("dropped duplicate binlog node_id=%s commit_ts=%d", node_id, commit_ts)
            else:
                self.disorders += 1
                log.warning(
                    "dropped binlog out of order node_id=%s commit_ts=%d latest_ts=%d",
                    node_id,
                    commit_ts,
                    self.latest_ts,
                )
            return item, False
        raise AssertionError("every source has a head but the heap is empty")  # pragma: no cover

    def pop(self) -> MergeItem | None:
        """The smallest head, once every source has one; None while some source has no head (or there
        are no sources).  A head at or below `latest_ts` is dropped and counted, and None is returned
        (its source needs a new head)."""
        taken = self.take()
        return taken[0] if taken is not None and taken[1] else None


class Merger:
    """`MergeCore` for threads: pullers `put` per source, one consumer `get`s the merged stream."""

    def __init__(
        self,
        latest_ts: int,
        *,
        max_bytes_per_source: int = DEFAULT_MAX_BYTES_PER_SOURCE,
        hold_until_released: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes_per_source <= 0:
            raise ValueError(f"max_bytes_per_source must be positive, not {max_bytes_per_source}")
        self._core = MergeCore(latest_ts)
        self._max = max_bytes_per_source
        self._hold = hold_until_released
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # the consumer waits here
        self._room = threading.Condition(self._lock)  # producers wait here
        self._buffers: dict[str, deque[MergeItem]] = {}
        self._bytes: dict[str, int] = {}  # buffered bytes per source, its head in the core included
        self._receiving: set[str] = set()  # sources whose puller is receiving (see wait_room)
        self._closed = False
        self._clock = clock
        self._delivered: dict[str, tuple[float, int]] = {}  # node_id -> (clock when it last put, that commit_ts)

    # ------------------------------------------------------------------------------- sources
    def add_source(self, node_id: str) -> None:
        """Add a source: the merge waits for its first binlog from now on.  No-op if known."""
        with self._lock:
            if node_id in self._buffers:
                return
            self._buffers[node_id] = deque()
            self._bytes[node_id] = 0
            self._delivered[node_id] = (self._clock(), 0)
            self._core.add_source(node_id)
            self._room.notify_all()
        log.info("merge source added node_id=%s", node_id)

    def remove_source(self, node_id: str) -> None:
        """Forget a source and what it buffered; unblocks the merge if it was waiting for it."""
        with self._lock:
            if node_id not in self._buffers:
                return
            dropped = len(self._buffers.pop(node_id)) + (self._core.remove_source(node_id) is not None)
            del self._bytes[node_id]
            self._delivered.pop(node_id, None)
            self._receiving.discard(node_id)
            self._ready.notify_all()
            self._room.notify_all()
        log.info("merge source removed node_id=%s (dropped %d buffered binlogs)", node_id, dropped)

    def source_ids(self) -> list[str]:
        with self._lock:
            return list(self._buffers)

    def buffered_bytes(self, node_id: str) -> int:
        """Bytes `node_id` holds in the merger (its head included); 0 for an unknown source."""
        with self._lock:
            return self._bytes.get(node_id, 0)

    def waiting_for(self) -> list[tuple[str, float, int]]:
        """The sources the merge waits for now (no head and nothing buffered), each with the `clock` time it
        last delivered a binlog (or was added, if it never did) and the last commit_ts it delivered (0: none).

        While any of them has nothing, the merged watermark cannot advance: these are the pumps that hold
        the merge back (a stall report names them once they are quiet for long enough)."""
        with self._lock:
            heads = self._core
            return [
                (node_id, *self._delivered[node_id])
                for node_id, buf in self._buffers.items()
                if not buf and heads.head(node_id) is None
            ]

    @property
    def closed(self) -> bool:
        with self._lock:
            return self._closed

    # ------------------------------------------------------------------------------ counters
    def latest_ts(self) -> int:
        """The last emitted commit_ts (the checkpoint ts before anything was emitted)."""
        with self._lock:
            return self._core.latest_ts

    @property
    def duplicates(self) -> int:
        with self._lock:
            return self._core.duplicates

    @property
    def disorders(self) -> int:
        with self._lock:
            return self._core.disorders

    # ------------------------------------------------------------------------------ producer
    def put(self, item: MergeItem, timeout: float | None = None) -> bool:
        """Buffer `item` for its source, waiting while the source is over its byte budget (or is not
        added yet).  False when `timeout` passed first or the merger is closed."""
        node_id = item.node_id
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    return False
                held = self._bytes.get(node_id)
                if held is not None and (held == 0 or held + item.size <= self._max):
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._room.wait(remaining)
            self._buffers[node_id].append(item)
            self._bytes[node_id] = held + item.size
            self._delivered[node_id] = (self._clock(), item.commit_ts)
            self._ready.notify()
            return True

    def wait_room(self, node_id: str, timeout: float | None = None) -> bool:
        """Wait until ``node_id`` may receive its next binlog, and mark it receiving until `received`.

        A puller calls this before it receives, so a source with a large binlog buffered does not pull
        another one meanwhile.  Receiving a binlog costs grpcio about three times its size for a moment,
        so only one source at a time receives ahead of need: a source whose head the merge is waiting
        for (no head, nothing buffered) may always receive; any other only while no other source is
        receiving.  False when `timeout` passed first or the merger is closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while True:
                if self._closed:
                    return False
                held = self._bytes.get(node_id)
                if held is not None and held < self._max and self._may_receive(node_id):
                    self._receiving.add(node_id)
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._room.wait(remaining)

    def _may_receive(self, node_id: str) -> bool:
        needed = self._core.head(node_id) is None and not self._buffers[node_id]
        return needed or not (self._receiving - {node_id})

    def received(self, node_id: str) -> None:
        """The receive `wait_room` allowed is over (a binlog came, or the stream ended)."""
        with self._lock:
            self._receiving.discard(node_id)
            self._room.notify_all()

    # ------------------------------------------------------------------------------ consumer
    def get(self, timeout: float | None = None) -> MergeItem | None:
        """The next binlog in commit_ts order; None on timeout or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            while not self._closed:
                item = self._next_locked()
                if item is not None:
                    return item
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._ready.wait(remaining)
            return None

    def _next_locked(self) -> MergeItem | None:
        core = self._core
        while True:
            for node_id in core.needs():
                buf = self._buffers[node_id]
                if not buf:
                    self._room.notify_all()  # its puller may receive now, even while another does
                    return None  # the merge waits for this source
                core.push(buf.popleft())
            taken = core.take()
            if taken is None:  # no sources at all
                return None
            item, emitted = taken
            if emitted and self._hold:
                return item  # its bytes stay on the budget until release()
            self._bytes[item.node_id] -= item.size
            self._room.notify_all()
            if emitted:
                return item

    def release(self, node_id: str, size: int) -> None:
        """The consumer is done with a binlog of `size` bytes it took from `node_id` (with
        `hold_until_released`; a no-op otherwise, and for a source removed since)."""
        if not self._hold:
            return
        with self._lock:
            if node_id in self._bytes:
                self._bytes[node_id] = max(0, self._bytes[node_id] - size)
                self._room.notify_all()

    def close(self) -> None:
        """Wake everyone: `put` and `get` return False / None from now on.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._ready.notify_all()
            self._room.notify_all()
            latest = self._core.latest_ts
        log.info("merger closed at latest_ts=%d", latest)
