"""The pump's storage (`PumpStorage`): value log + LevelDB index + sorter, wired together.

    write_binlog / submit_binlog ─► write queue (bounded by bytes) ─► vlog writer: group
        commit, one write + fdatasync per batch, waiters released (or called back) ─► index
        queue (kv_chan_cap entries; the slow chaser takes over when a hand-off blocks >
        slow_chaser_threshold) ─► index writer: sorter push + LevelDB batch, then maxCommitTS
        published ─► pullers woken

Threads, all joined by close(): vlog writer, index writer, slow chaser, maintenance (resolver
rounds; the stop flag is checked between resolver calls), free space (every 3 s).  Start-up
replays the vlog from min(headPointer, handlePointer), so a deleted `kv/` directory is rebuilt from
the vlog.  Before that, index entries left pointing past the end of a value log that lost its tail
are dropped, and an index from before transaction decisions were kept gets them (`repair.py`).
A transaction is served at most once: its first commit or rollback decides it (`decisions.py`).
`<data-dir>/.lock` is flock'ed while open.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from common.errors import CodecError, CorruptRecordError, NoSpaceError, StorageClosedError, StorageError
from common.pb import binlog_pb2, gogo
from common.vlog_record import HEADER_SIZE, ValuePointer
from pump.storage import diskguard
from pump.storage.api import (
    CommitResolver,
    NullObserver,
    PulledBinlog,
    StorageObserver,
    StorageOptions,
    StorageStatus,
)
from pump.storage.chaser import ChaserTimings, SlowChaser
from pump.storage.check import check_storage
from pump.storage.decisions import Decisions
from pump.storage.diskguard import DiskGuard
from pump.storage.entry import PREWRITE, Entry, is_fake, is_probe, parse_binlog, prewrite_key_of
from pump.storage.index import (
    DONE_PREFIX,
    GC_TS_KEY,
    HANDLE_POINTER_KEY,
    HEAD_POINTER_KEY,
    MAX_COMMIT_TS_KEY,
    Index,
)
from pump.storage.indexer import IndexWriter
from pump.storage.lockfile import DirLock
from pump.storage.primitives import ReaderGate, Watermark
from pump.storage.pull import Puller
from pump.storage.queues import BoundedQueue
from pump.storage.repair import adopt_decisions, drop_past_end
from pump.storage.replay import replay
from pump.storage.resolve import resolve_pass
from pump.storage.sorter import LONG_TXN_TSO, Sorter
from pump.storage.vlog import OpenReport, ValueLog
from pump.storage.writer import GROUP_COMMIT_DELAY, DoneCallback, VlogWriter

__all__ = ["GC_KEEP_TSO", "Storage"]

log = logging.getLogger(__name__)

GC_KEEP_TSO: Final = LONG_TXN_TSO  # GC keeps 10 more minutes so a commit still finds its prewrite


class Storage:
    """`PumpStorage` on a data directory: `value/` (vlog), `kv/` (LevelDB), `.lock`.

    The resolver, when given, belongs to the caller (close() does not close it).
    `group_commit_delay`: see `writer.py` (0 turns the wait for company off).
    """

    def __init__(
        self,
        data_dir: Path,
        options: StorageOptions = StorageOptions(),  # noqa: B008 - frozen dataclass, never mutated
        resolver: CommitResolver | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        chaser_timings: ChaserTimings = ChaserTimings(),  # noqa: B008 - frozen dataclass
        observer: StorageObserver | None = None,
        wall_clock: Callable[[], float] = time.time,
        group_commit_delay: float = GROUP_COMMIT_DELAY,
    ) -> None:
        self._observer: StorageObserver = observer or NullObserver()
        self._wall = wall_clock
        self._dir = data_dir
        self._opts = options
        self._group_commit_delay = group_commit_delay
        self._resolver = resolver
        self._clock = clock
        self._closed = False
        self._close_lock = threading.Lock()
        self._gc_lock = threading.Lock()
        self._sort_lock = threading.Lock()
        self._gate = ReaderGate()
        data_dir.mkdir(parents=True, exist_ok=True)
        self._dir_lock = DirLock(data_dir / ".lock")
        try:
            self._open(chaser_timings)
        except BaseException:
            index: Index | None = getattr(self, "_index", None)
            vlog: ValueLog | None = getattr(self, "_vlog", None)
            if index is not None:
                index.close()
            if vlog is not None:
                vlog.close()
            self._dir_lock.release()
            raise

    def _open(self, timings: ChaserTimings) -> None:
        opts = self._opts
        self._disk = DiskGuard(self._dir, opts.stop_write_at_available_space)
        vlog = self._vlog = ValueLog(
            self._dir / "value",
            file_size=opts.value_log_file_size,
            sync=opts.sync_log,
            on_rotate=self._observer.rotate,
        )
        index = self._index = Index(self._dir / "kv", options=opts.kv)
        self.dropped_past_end = drop_past_end(index, vlog)
        self._decisions = Decisions(index, self._observer)
        adopt_decisions(index, vlog, self._decisions)
        self._gc_ts = index.get_int(GC_TS_KEY) or 0
        end = vlog.end_pointer()
        handle = index.get_pointer(HANDLE_POINTER_KEY)
        head = index.get_pointer(HEAD_POINTER_KEY)
        # A pointer past the end of the log (its tail was lost) resumes at the end.
        handle = None if handle is None else min(handle, end)
        head = None if head is None else min(head, end)
        persisted = index.get_int(MAX_COMMIT_TS_KEY) or 0
        self._sorter = Sorter(persisted if handle is not None else 0, handle, resolve_interval=opts.resolve_interval)
        self._watermark = Watermark(self._sorter.watermark)
        self._index_queue: BoundedQueue[list[Entry]] = BoundedQueue(opts.kv_chan_cap)
        self._indexer = IndexWriter(
            index,
            self._sorter,
            self._sort_lock,
            self._watermark,
            self._index_queue,
            decisions=self._decisions,
            head=head or ValuePointer(vlog.fids()[0], 0),
            clock=self._clock,
            observer=self._observer,
        )
        self.replay_stats = replay(vlog, self._indexer, handle=handle, head=head)
        self._chaser: SlowChaser[Entry] = SlowChaser(
            self._chaser_scan,
            lambda e, timeout: self._index_queue.put([e], 1, timeout),
            interval=timings.interval,
            quick_pass=timings.quick_pass,
            recovery_timeout=timings.recovery_timeout,
            recover_gap=timings.recover_gap,
            clock=self._clock,
            observer=self._observer,
        )
        self._writer = VlogWriter(
            vlog,
            self._chaser,
            self._index_queue,
            max_batch_bytes=opts.max_batch_bytes,
            queue_bytes=opts.write_queue_bytes,
            handoff_timeout=opts.slow_chaser_threshold,
            observer=self._observer,
            group_commit_delay=self._group_commit_delay,
        )
        self._puller = Puller(
            self._gate,
            index,
            vlog,
            self._watermark,
            lambda: self._gc_ts,
            decisions=self._decisions,
            observer=self._observer,
        )
        self._maint_stop = threading.Event()
        self._maint = threading.Thread(target=self._maintain, name="pump-storage-maintenance", daemon=True)
        self._disk_thread = threading.Thread(target=self._refresh_disk, name="pump-storage-disk", daemon=True)
        self._indexer.start()
        self._writer.start()
        self._chaser.start()
        self._maint.start()
        self._disk_thread.start()
        if self._resolver is None:
            log.warning("storage has no commit resolver: a prewrite whose commit never arrives blocks maxCommitTS")
        log.info(
            "storage opened dir=%s max_commit_ts=%d gc_ts=%d pending_prewrites=%d fid=%d offset=%d",
            self._dir,
            self._watermark.value,
            self._gc_ts,
            self._sorter.pending,
            end.fid,
            end.offset,
        )

    # ----------------------------------------------------------------------------------- write

    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        start_ts, commit_ts = binlog.start_ts, binlog.commit_ts
        if is_probe(start_ts, commit_ts):
            return
        tp = binlog.tp
        self._check_writable(tp, start_ts, commit_ts, len(payload))
        began = time.monotonic()
        key = binlog.prewrite_key if tp == PREWRITE and binlog.HasField("prewrite_key") else None
        try:
            self._writer.submit(tp, start_ts, commit_ts, payload, key)
        except StorageClosedError:
            raise
        except StorageError:
            self._observer.error("write_binlog")
            raise
        self._check_slow(began, start_ts, commit_ts)

    def submit_binlog(
        self,
        tp: int,
        start_ts: int,
        commit_ts: int,
        payload: bytes,
        *,
        prewrite_key: bytes | None,
        done: DoneCallback,
    ) -> bool:
        """`write_binlog` without blocking, for the gRPC event loop: the binlog's fields come from the
        caller (`prewrite_key` only for a prewrite that has one; `payload` is what gets stored).

        Raises at once what write_binlog raises before writing (StorageClosedError, NoSpaceError);
        returns False, queueing nothing, when the write queue is full (the caller falls back to
        `write_binlog`, which waits for room); else True, and `done` is called exactly once from the
        vlog writer thread: with None once the binlog is durable, else with write_binlog's error.
        A probe is not stored: `done(None)` at once."""
        if is_probe(start_ts, commit_ts):
            done(None)
            return True
        self._check_writable(tp, start_ts, commit_ts, len(payload))
        began = time.monotonic()

        def finished(error: BaseException | None) -> None:
            if error is None:
                self._check_slow(began, start_ts, commit_ts)
            elif isinstance(error, StorageError) and not isinstance(error, StorageClosedError):
                self._observer.error("write_binlog")
            done(error)

        return self._writer.submit_nowait(
            tp, start_ts, commit_ts, payload, prewrite_key=prewrite_key, callback=finished
        )

    def _check_writable(self, tp: int, start_ts: int, commit_ts: int, size: int) -> None:
        """Refuse a write when closed, or when the disk guard does not admit its record (a fake binlog
        passes below stop-write-at-available-space, but only while it fits)."""
        if self._closed:
            raise StorageClosedError("storage is closed")
        disk = self._disk
        fake = is_fake(tp, start_ts, commit_ts)
        record = HEADER_SIZE + size
        admitted = disk.admit(record, exempt=True) if fake else disk.writable() and disk.admit(record)
        if not admitted:
            self._observer.error("write_binlog")
            raise NoSpaceError(disk.message(record))

    def _check_slow(self, began: float, start_ts: int, commit_ts: int) -> None:
        took = time.monotonic() - began
        if took > self._opts.slow_write_threshold:
            log.warning("slow storage write took=%.3fs start_ts=%d commit_ts=%d", took, start_ts, commit_ts)

    def _write_internal(self, binlog: binlog_pb2.Binlog) -> None:
        """A binlog the storage writes itself (resolver verdicts): no disk guard, same path."""
        self._writer.submit(binlog.tp, binlog.start_ts, binlog.commit_ts, gogo.marshal_binlog(binlog))

    def _chaser_scan(self, start: ValuePointer) -> Iterator[Entry]:
        for ptr, payload in self._vlog.scan(start):
            try:
                b = parse_binlog(payload)
            except CodecError as e:
                log.error(
                    "slow chaser skipped a record that is not a binlog fid=%d offset=%d: %s", ptr.fid, ptr.offset, e
                )
                continue
            yield Entry(b.tp, b.start_ts, b.commit_ts, ptr, ptr.advance(len(payload)), prewrite_key_of(b))

    # ------------------------------------------------------------------------------------ read

    def pull_commit_binlogs(self, last_ts: int, stop: threading.Event) -> Iterator[PulledBinlog]:
        return self._puller.pull(last_ts, stop)

    def commit_binlogs_between(self, after: int, upto: int) -> Iterator[PulledBinlog]:
        """One pass of what PullBinlogs streams, after < commit_ts <= min(upto, maxCommitTS); no waiting."""
        return self._puller.between(after, min(upto, self._watermark.value))

    def max_commit_ts(self) -> int:
        return self._watermark.value

    def gc_ts(self) -> int:
        return self._gc_ts

    def all_matched(self) -> bool:
        with self._sort_lock:
            return self._sorter.all_matched()

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None:
        with self._gate.enter():
            ptr = self._index.get(ts)
            if ptr is None:
                return None
            try:
                return parse_binlog(self._vlog.read(ptr))
            except StorageClosedError:
                raise
            except (CorruptRecordError, CodecError, StorageError) as e:
                log.error("binlog unreadable ts=%d fid=%d offset=%d: %s", ts, ptr.fid, ptr.offset, e)
                self._observer.error("read_value")
                return None

    def status(self) -> StorageStatus:
        head = self._indexer.head
        with self._sort_lock:
            pending = self._sorter.pending
        return StorageStatus(
            max_commit_ts=self._watermark.value,
            gc_ts=self._gc_ts,
            head_fid=head.fid,
            head_offset=head.offset,
            capacity_bytes=self._disk.capacity,
            available_bytes=self._disk.available,
            pending_prewrites=pending,
            chaser_on=self._chaser.is_on(),
            write_count=self._writer.write_count,
            write_queue_bytes=self._writer.queue_bytes,
        )

    @property
    def open_report(self) -> OpenReport:
        """Damage the value log found when it was opened."""
        return self._vlog.open_report

    def wait_indexed(self, timeout: float) -> bool:
        """Wait until every binlog written so far is indexed and sorted (tests, offline procedure)."""
        return self._indexer.wait_for(self._writer.write_count, timeout)

    def decided_count(self) -> int:
        """How many transactions have a recorded decision (tests, inspection: GC purges them)."""
        with self._gate.enter():
            return self._index.count_prefix(DONE_PREFIX)

    def check(self) -> list[str]:
        """Cross-check index against vlog (see `check.py`); call it while no writes are in flight."""
        with self._gate.enter():
            return check_storage(
                self._index,
                self._vlog,
                head=self._indexer.head,
                max_commit_ts=self._watermark.value,
                gc_ts=self._gc_ts,
                gc_cutoff=self._gc_ts - GC_KEEP_TSO if self._gc_ts else 0,
            )

    # -------------------------------------------------------------------------------------- gc

    def gc(self, ts: int) -> None:
        """Forget what is at or below `ts` - GC_KEEP_TSO, but nothing from the oldest prewrite a
        commit above `ts` still needs (a long transaction) or a waiting prewrite on.

        Index keys go in batches, each inside the reader gate on its own, so close() never waits
        for a whole pass (the pass stops when the storage closes; the next one finishes it)."""
        with self._gc_lock:
            if ts <= self._gc_ts:
                log.info("gc ignored: not above the current gc ts gc_ts=%d current=%d", ts, self._gc_ts)
                return
            top = self._watermark.value
            if ts >= top:
                log.warning("gc ignored as unsafe: not below max_commit_ts gc_ts=%d max_commit_ts=%d", ts, top)
                return
            keys = 0
            fids: list[int] = []
            try:
                with self._gate.enter():
                    cutoff = self._gc_cutoff(ts)
                    self._index.put_int(GC_TS_KEY, ts)
                    self._gc_ts = ts
                while cutoff > 0:
                    with self._gate.enter():
                        n = self._index.delete_batch_upto(cutoff)
                    if not n:
                        break
                    keys += n
                if cutoff > 0:
                    with self._gate.enter():
                        fids = self._vlog.gc(cutoff)
            except StorageClosedError:
                log.info("gc interrupted by close gc_ts=%d deleted_keys=%d", ts, keys)
                return
            log.info("gc done gc_ts=%d cutoff=%d deleted_keys=%d deleted_files=%s", ts, cutoff, keys, fids)
            self._observer.gc_done(ts, keys)

    def _gc_cutoff(self, ts: int) -> int:
        cutoff = ts - GC_KEEP_TSO
        if cutoff <= 0:
            return cutoff
        needed = [s for _, s in self._index.long_txns_above(ts)]
        with self._sort_lock:
            needed += [s for c, s in self._sorter.long_unwritten() if c > ts]
            oldest = self._sorter.oldest_waiting_start_ts()
        if oldest is not None:
            needed.append(oldest)
        keep_from = min(needed, default=None)
        if keep_from is not None and keep_from <= cutoff:
            log.info(
                "gc keeps the prewrites of long transactions gc_ts=%d cutoff=%d kept_from_start_ts=%d",
                ts,
                cutoff,
                keep_from,
            )
            cutoff = keep_from - 1
        return cutoff

    # ----------------------------------------------------------------------------- maintenance

    def _refresh_disk(self) -> None:
        """Free space every 3 s, on its own thread: a slow resolver must not freeze it."""
        while not self._maint_stop.wait(diskguard.REFRESH_INTERVAL):
            try:
                self._disk.refresh()
            except Exception:
                log.exception("free space refresh failed")

    def _maintain(self) -> None:
        interval = self._opts.resolve_interval
        tick = max(0.01, min(0.5, interval / 2))
        while not self._maint_stop.wait(tick):
            if self._resolver is None:
                return
            try:
                resolve_pass(
                    self._resolver,
                    self._sorter,
                    self._sort_lock,
                    write=self._write_internal,
                    now=self._clock,
                    wall=self._wall,
                    stop=self._maint_stop,
                    observer=self._observer,
                )
            except StorageClosedError:
                return
            except Exception:
                log.exception("resolver round failed")

    # ----------------------------------------------------------------------------------- close

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            log.info("storage closing: intake stopped dir=%s", self._dir)
            self._maint_stop.set()
            self._maint.join()
            self._disk_thread.join()
            log.info("storage closing: maintenance and resolver stopped")
            self._writer.close()
            log.info("storage closing: vlog writer drained")
            self._chaser.stop()
            log.info("storage closing: slow chaser stopped (on=%s)", self._chaser.is_on())
            self._indexer.close()
            log.info("storage closing: index writer drained, pointers persisted")
            self._watermark.close()
            self._gate.close()
            log.info("storage closing: readers gone")
            self._vlog.close()
            self._index.close()
            self._dir_lock.release()
            log.info("storage closed dir=%s", self._dir)

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
