"""The vlog writer thread: group commit, then hand-off to the index writer.

Callers of `submit` queue a request (the queue is bounded by bytes: they block while
`write_queue_bytes` are waiting) and block on their own lock.  Callers of `submit_nowait` (the
gRPC event loop) never block: they give a callback, which the writer thread calls once the record
is durable (or failed), and get False when the queue has no room.  The writer thread takes
*everything already queued*, up to `max_batch_bytes` (at least one request), writes it with one
`pwrite` and one `fdatasync`, releases every waiter of the batch, and then hands the batch's
entries to the index writer.  Requests that arrive during a write+fsync form the next batch, so
the batch size follows the load.

Waiting for company (ours; the original never waits): when the previous batch held n > 1 binlogs,
the writer waits, once the next batch's first binlog is queued, up to `group_commit_delay` (2 ms)
for n of them (or `max_batch_bytes`) before it takes the batch.  A lone writer (batches of one)
never waits; concurrent writers that come back at once end the wait as soon as they are all in.
Without it, under load the batches stayed at 2-4 binlogs (as many as arrive during one ~0.3 ms
fdatasync) and the per-batch costs in this process (fdatasync, thread wake-ups, index hand-off,
callbacks; all fighting the gRPC event loop for the GIL) capped WriteBinlog throughput; with it,
bench/pump_write.py gets batches of 7-8 at 8 and 64 writers, and more pairs/s with lower latency
at 4, 8 and 64 writers alike.

Batch limit (our choice): plain `max_batch_bytes` (1 MiB), not LevelDB's "first + 128 KiB when the
first is small".  That rule bounds the latency a small write pays for riding with others, but
here a batch only holds requests already waiting; splitting them would make the later ones wait
for one more fsync, and in Python the per-batch cost (thread hand-offs, syscalls) dominates.

No space: a batch that fails with NoSpaceError is written again one record at a time, so that the
records that fit are stored and only the others are refused.

Hand-off: while the slow chaser is off, the batch's entries are put on the index queue as one item
(its cost in the `kv_chan_cap` budget is its entry count); if the put blocks longer than
`slow-chaser-threshold`, the chaser is turned on from the batch's first entry and the writer stops
handing entries over (the chaser re-reads them from the vlog).  Append and hand-off happen under
the chaser's write lock, so its recovery sees a log that does not grow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from common.errors import BinlogError, NoSpaceError, StorageClosedError, StorageError
from common.vlog_record import HEADER_SIZE
from pump.storage.api import NullObserver, StorageObserver
from pump.storage.chaser import SlowChaser
from pump.storage.entry import Entry
from pump.storage.entry import max_ts as record_max_ts
from pump.storage.queues import BoundedQueue
from pump.storage.vlog import ValueLog

__all__ = ["DoneCallback", "VlogWriter", "WriteRequest"]

log = logging.getLogger(__name__)

_NO_LIMIT: Final = 1 << 62
GROUP_COMMIT_DELAY: Final = 0.002
"""Longest wait for a batch to grow as large as the previous one (ours; the original never waits)."""


DoneCallback = Callable[[BaseException | None], None]
"""Called on the writer thread with None once the record is durable, or with the write's error."""


class WriteRequest:
    __slots__ = ("callback", "commit_ts", "done", "error", "payload", "prewrite_key", "start_ts", "tp")

    def __init__(
        self,
        tp: int,
        start_ts: int,
        commit_ts: int,
        payload: bytes,
        *,
        prewrite_key: bytes | None = None,
        callback: DoneCallback | None = None,
    ) -> None:
        self.tp = tp
        self.prewrite_key = prewrite_key
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.payload = payload
        self.error: BaseException | None = None
        self.callback = callback
        self.done: threading.Lock | None = None
        if callback is None:
            self.done = threading.Lock()
            self.done.acquire()  # released by the writer thread once the record is durable (or failed)

    def finish(self, error: BaseException | None) -> None:
        """Wake the submitter: release its lock or call its callback (whose errors are logged, not raised)."""
        if self.callback is None:
            self.error = error
            assert self.done is not None
            self.done.release()
            return
        try:
            self.callback(error)
        except Exception:
            log.exception("write callback failed start_ts=%d commit_ts=%d", self.start_ts, self.commit_ts)


class VlogWriter:
    def __init__(
        self,
        vlog: ValueLog,
        chaser: SlowChaser[Entry],
        index_queue: BoundedQueue[list[Entry]],
        *,
        max_batch_bytes: int,
        queue_bytes: int,
        handoff_timeout: float,
        observer: StorageObserver | None = None,
        group_commit_delay: float = GROUP_COMMIT_DELAY,
    ) -> None:
        self._observer = observer or NullObserver()
        self._vlog = vlog
        self._chaser = chaser
        self._index_queue = index_queue
        self._max_batch = max_batch_bytes
        self._handoff_timeout = handoff_timeout
        self._delay = group_commit_delay
        self._queue: BoundedQueue[WriteRequest] = BoundedQueue(queue_bytes)
        self._thread = threading.Thread(target=self._run, name="pump-vlog-writer", daemon=True)
        self.write_count = 0
        self.batch_count = 0

    def start(self) -> None:
        self._thread.start()

    @property
    def queue_bytes(self) -> int:
        """Bytes of the requests queued and not yet taken by the writer thread (read without the lock)."""
        return self._queue.cost

    def submit(self, tp: int, start_ts: int, commit_ts: int, payload: bytes, prewrite_key: bytes | None = None) -> None:
        """Write one binlog; return once it is durable (raise what the write raised).

        `prewrite_key`: a prewrite's key, kept in the sorter for the resolver (no vlog read-back)."""
        req = WriteRequest(tp, start_ts, commit_ts, payload, prewrite_key=prewrite_key)
        self._queue.put(req, HEADER_SIZE + len(payload))  # StorageClosedError once closing
        assert req.done is not None
        req.done.acquire()
        if req.error is not None:
            raise req.error

    def submit_nowait(
        self,
        tp: int,
        start_ts: int,
        commit_ts: int,
        payload: bytes,
        *,
        prewrite_key: bytes | None,
        callback: DoneCallback,
    ) -> bool:
        """Queue one binlog without blocking; False (nothing queued) when the queue has no room.

        Once queued, `callback` is called exactly once on the writer thread: with None when the
        record is durable, else with the error `submit` would raise.  StorageClosedError once closing."""
        return self._queue.put_nowait(
            WriteRequest(tp, start_ts, commit_ts, payload, prewrite_key=prewrite_key, callback=callback),
            HEADER_SIZE + len(payload),
        )

    def close(self) -> None:
        """Refuse new requests, write the queued ones, stop the thread."""
        self._queue.close()
        if self._thread.is_alive():
            self._thread.join()
        log.info("vlog writer stopped writes=%d batches=%d", self.write_count, self.batch_count)

    def _run(self) -> None:
        queue = self._queue
        company = 1  # binlogs in the previous batch
        while True:
            if company > 1 and self._delay > 0:
                queue.wait_for(1, 1)  # the first of the next batch
                queue.wait_for(company, self._max_batch, self._delay)
            batch = queue.get_batch(_NO_LIMIT, self._max_batch)
            if batch is None:
                return
            if batch:
                company = len(batch)
                self._write(batch)

    def _write(self, batch: list[WriteRequest]) -> None:
        chaser = self._chaser
        released = False
        try:
            with chaser.write_lock:
                top = 0
                for r in batch:
                    t = record_max_ts(r.start_ts, r.commit_ts)
                    top = max(top, t)
                payloads = [r.payload for r in batch]
                ptrs = self._vlog.append(payloads, top)
                self._observer.write_batch(
                    len(batch),
                    sum(HEADER_SIZE + len(p) for p in payloads),
                    self._vlog.last_write_seconds,
                    self._vlog.last_sync_seconds,
                )
                self.write_count += len(batch)
                self.batch_count += 1
                entries = [
                    Entry(r.tp, r.start_ts, r.commit_ts, p, p.advance(len(r.payload)), r.prewrite_key)
                    for r, p in zip(batch, ptrs, strict=True)
                ]
                released = True
                for r in batch:
                    r.finish(None)
                if not chaser.is_on():
                    self._hand_off(entries)
        except NoSpaceError as e:
            if len(batch) > 1 and not released:
                # Nothing of the batch was kept (vlog.append cut it off): write each record alone, so
                # that the ones that fit are stored and only the others are refused.
                log.warning("vlog batch does not fit, writing its records one by one records=%d: %s", len(batch), e)
                for r in batch:
                    self._write([r])
                return
            self._fail(batch, e, released)
        except BaseException as e:  # every waiter must be released, whatever happened
            self._fail(batch, e, released)

    def _fail(self, batch: list[WriteRequest], e: BaseException, released: bool) -> None:
        """Release the waiters of a failed batch (unless they were already) with a BinlogError: NoSpaceError
        (the client is told RESOURCE_EXHAUSTED) stays what it is, anything else is a StorageError."""
        if not released:
            err = e if isinstance(e, BinlogError) else StorageError(f"value log write failed: {e}")
            for r in batch:
                r.finish(err)
        log.error("vlog batch failed records=%d: %s", len(batch), e)
        self._observer.error("write_binlog_batch")

    def _hand_off(self, entries: list[Entry]) -> None:
        """The whole batch goes to the index writer as one queue item (one wake-up per batch)."""
        try:
            ok = self._index_queue.put(entries, len(entries), self._handoff_timeout)
        except StorageClosedError:
            return
        if not ok:
            first = entries[0]
            log.warning(
                "index writer blocked for %.1fs, handing over to the slow chaser start_ts=%d commit_ts=%d",
                self._handoff_timeout,
                first.start_ts,
                first.commit_ts,
            )
            self._chaser.turn_on(first.ptr)
