"""The index writer thread: sorter feed, LevelDB batches, watermark publication.

Entries arrive in vlog order (from the vlog writer, the slow chaser or start-up replay).  For a
batch of up to 128 of them the thread (1) pushes each into the sorter, which says whether a
commit is late, (2) writes one LevelDB batch: `ts:` keys (or `late:` keys for late commits) and
headPointer, plus the `done:` decision of each transaction decided in the batch (a commit or
rollback for a transaction decided before is ignored: indexed under `late:`, see `decisions.py`),
plus maxCommitTS and handlePointer at most once per second, and only then (3)
publishes the sorter's new watermark, so a puller never sees a watermark above an entry that is
not indexed yet.  A failed LevelDB write is retried every second until the storage closes; from the
second failure on, the index is reopened before each retry when that may help (`Index.recover_after`:
LevelDB keeps an I/O error of a background flush, e.g. on a full disk, until it is reopened).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

from common.vlog_record import ValuePointer
from pump.storage.api import StorageObserver
from pump.storage.decisions import Decisions
from pump.storage.entry import Entry
from pump.storage.index import (
    HANDLE_POINTER_KEY,
    HEAD_POINTER_KEY,
    MAX_COMMIT_TS_KEY,
    Decision,
    Index,
    late_key,
    long_key,
    ts_key,
)
from pump.storage.primitives import Watermark
from pump.storage.queues import BoundedQueue
from pump.storage.sorter import Sorter

__all__ = ["IndexWriter"]

log = logging.getLogger(__name__)

BATCH_SIZE: Final = 128  # original: batchRequest(reqs, 128)
PERSIST_INTERVAL: Final = 1.0  # original: handlePtrSaveInterval
RETRY_INTERVAL: Final = 1.0


class IndexWriter:
    def __init__(
        self,
        index: Index,
        sorter: Sorter,
        sort_lock: threading.Lock,
        watermark: Watermark,
        queue: BoundedQueue[list[Entry]],
        *,
        decisions: Decisions,
        head: ValuePointer,
        clock: Callable[[], float] = time.monotonic,
        persist_interval: float = PERSIST_INTERVAL,
        observer: StorageObserver | None = None,
    ) -> None:
        self._observer = observer
        self._index = index
        self._decisions = decisions
        self._sorter = sorter
        self._sort_lock = sort_lock
        self._watermark = watermark
        self._queue = queue
        self._clock = clock
        self._persist_interval = persist_interval
        self.head = head  # first vlog position not indexed yet
        self._safe: tuple[int, ValuePointer | None] = (sorter.watermark, sorter.handle_pointer)
        self._persisted: tuple[int, ValuePointer | None] | None = None
        self._last_persist = -float("inf")
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pump-index-writer", daemon=True)
        self._idle = threading.Condition()
        self.indexed_count = 0  # entries indexed from the queue (not by replay)

    def start(self) -> None:
        self._thread.start()

    # -------------------------------------------------------------------------------- batches

    def apply(self, entries: list[Entry], *, sort_from: ValuePointer | None = None, replay: bool = False) -> bool:
        """Sort and index `entries` (vlog order); False if the write was given up (closing).

        Entries before `sort_from` are only indexed (replay of what the sorter state already holds)."""
        ignored, decided = self._decisions.classify(entries)
        now = self._clock()
        keys: list[tuple[bytes, ValuePointer]] = []
        with self._sort_lock:
            push = self._sorter.push
            for e, dup in zip(entries, ignored, strict=True):
                before = sort_from is not None and e.ptr < sort_from  # sorted already: index only
                visible = not dup if before else push(e, now, ignored=dup)
                keys.append(((ts_key if visible else late_key)(e.index_ts), e.ptr))
            state = (self._sorter.watermark, self._sorter.handle_pointer)
            longs = self._sorter.long_unwritten()
        head = entries[-1].next_ptr
        if not self._write(keys, head, state, [(long_key(c), s) for c, s in longs], decided):
            return False
        if longs:
            with self._sort_lock:
                self._sorter.long_written(len(longs))
        self.head = head
        self._safe = state
        self._watermark.advance(state[0])
        with self._idle:  # counted only once the watermark is out: wait_for then sees both
            if not replay:
                self.indexed_count += len(entries)
            self._idle.notify_all()
        return True

    def apply_sorted_only(self, entries: Iterable[Entry]) -> None:
        """Push already-indexed entries into the sorter (start-up replay before headPointer)."""
        batch = list(entries)
        ignored = self._decisions.replayed(batch)
        now = self._clock()
        with self._sort_lock:
            for e, dup in zip(batch, ignored, strict=True):
                self._sorter.push(e, now, ignored=dup)
            self._safe = (self._sorter.watermark, self._sorter.handle_pointer)
            longs = self._sorter.long_unwritten()
        if longs:  # indexed with their commit already; rewritten in case (idempotent)
            try:
                self._index.write((), ints=[(long_key(c), s) for c, s in longs])
            except Exception as e:
                log.error("index write of long transactions failed at replay: %s", e)
                if self._observer is not None:
                    self._observer.error("batch_write_kv")
            else:
                with self._sort_lock:
                    self._sorter.long_written(len(longs))
        self._watermark.advance(self._safe[0])

    def _write(
        self,
        keys: list[tuple[bytes, ValuePointer]],
        head: ValuePointer,
        state: tuple[int, ValuePointer | None],
        longs: list[tuple[bytes, int]],
        decided: list[tuple[int, Decision]],
    ) -> bool:
        now = self._clock()
        ints: list[tuple[bytes, int]] = []
        pointers = [(HEAD_POINTER_KEY, head)]
        if now - self._last_persist >= self._persist_interval and state != self._persisted:
            ints, pointers = self._meta(state, head)
        failures = 0
        while True:
            try:
                self._index.write(keys, ints=ints + longs, pointers=pointers, decisions=decided)
                break
            except Exception as e:
                failures += 1
                log.error("index write failed, retrying in %.0fs entries=%d: %s", RETRY_INTERVAL, len(keys), e)
                if self._observer is not None:
                    self._observer.error("batch_write_kv")
                if self._closing.wait(RETRY_INTERVAL):
                    log.error("index write given up at close entries=%d", len(keys))
                    return False
                if failures >= 2:
                    try:
                        self._index.recover_after(e)
                    except Exception:  # never let the retry loop (and the indexing thread) die of it
                        log.exception("index reopen attempt failed; retrying the write")
        if ints:
            self._persisted = state
            self._last_persist = now
        return True

    def _meta(
        self, state: tuple[int, ValuePointer | None], head: ValuePointer
    ) -> tuple[list[tuple[bytes, int]], list[tuple[bytes, ValuePointer]]]:
        watermark, handle = state
        pointers = [(HEAD_POINTER_KEY, head)]
        if handle is not None:
            pointers.append((HANDLE_POINTER_KEY, handle))
        return [(MAX_COMMIT_TS_KEY, watermark)], pointers

    def persist(self, *, force: bool = False) -> None:
        """Persist maxCommitTS and handlePointer if they changed (and a second has passed)."""
        now = self._clock()
        if self._safe == self._persisted or (not force and now - self._last_persist < self._persist_interval):
            return
        ints, pointers = self._meta(self._safe, self.head)
        try:
            self._index.write((), ints=ints, pointers=pointers)
        except Exception as e:
            log.error("persisting maxCommitTS/handlePointer failed: %s", e)
            if self._observer is not None:
                self._observer.error("batch_write_kv")
            return
        self._persisted = self._safe
        self._last_persist = now
        log.debug("persisted max_commit_ts=%d handle=%s head=%s", self._safe[0], self._safe[1], self.head)

    # --------------------------------------------------------------------------------- thread

    def _run(self) -> None:
        queue = self._queue
        pending: list[Entry] = []
        while True:
            if not pending:
                got = queue.get_batch(BATCH_SIZE, BATCH_SIZE, timeout=self._persist_interval)
                if got is None:
                    break
                pending = [e for entries in got for e in entries]
            batch, pending = pending[:BATCH_SIZE], pending[BATCH_SIZE:]
            if batch and not self.apply(batch):
                break
            self.persist()
        self.persist(force=True)
        with self._idle:
            self._idle.notify_all()

    def wait_for(self, count: int, timeout: float) -> bool:
        """Wait until `count` entries have come through the queue and are indexed."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self.indexed_count < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._thread.is_alive():
                    return self.indexed_count >= count
                self._idle.wait(remaining)
            return True

    def close(self) -> None:
        """Index what is queued, persist the pointers and maxCommitTS, stop the thread."""
        self._queue.close()
        self._closing.set()  # a LevelDB write failing now is given up: start-up replay redoes it
        if self._thread.is_alive():
            self._thread.join()
        else:
            self.persist(force=True)
        log.info(
            "index writer stopped indexed=%d head=%s max_commit_ts=%d", self.indexed_count, self.head, self._safe[0]
        )
