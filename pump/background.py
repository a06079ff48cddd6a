"""The pump's background work (docs/architecture.md#pump): fake binlogs, GC, and the drainer purge warning.

* Fake binlog: after `gen-binlog-interval` (3 s) without a stored WriteBinlog or fake binlog, take a
  TSO from pd-server and write `Binlog{tp: Rollback, start_ts: ts, commit_ts: ts}` through
  `storage.write_binlog`, so drainers merging this pump keep moving.  While a drainer is pulling (a
  PullBinlogs stream is open), the idle gap is `gen-binlog-pull-interval` (ours, default 0.25 s)
  instead: a drainer's merge emits a binlog only once every pump has sent a newer one, so an idle
  pump delays every other pump's binlogs until its next fake binlog.  The original's ticker wrote one
  if nothing arrived since the previous tick (gaps up to twice the interval); here the gap is
  measured from the last write, so `gen-binlog-interval` is the longest an idle pump stays silent.

  Safety does not depend on the interval.  The ts is taken from pd-server *before* the write, and
  the write goes through the storage like any binlog: (1) a prewrite stored before it and not yet
  matched holds the sorter's watermark below it (the fake becomes visible only after that commit,
  with whatever commit_ts it has, is indexed); (2) a prewrite stored after it is acknowledged after
  it, and the writer takes its commit_ts from pd-server after that, so the commit_ts is above the
  fake's ts.  Either way no commit at or below a visible fake binlog's ts can appear later.
* GC: every hour (`GC_INTERVAL`) and on `trigger_gc()` (POST /debug/gc/trigger), gc ts = the current
  TSO minus `gc` seconds, then `storage.gc(gc_ts)`.  GC does not wait for drainers (as the original).
* An unexpected error (OSError, a bug) in any loop is logged with its traceback and counted in
  `binlog_pump_background_error_count{loop=gc|fake_binlog|detect_drainer}` (ours); the loop goes on.
* Purge warning: every 10 minutes, each non-offline drainer whose maxCommitTS < gc ts + 20 h is logged
  at ERROR and counted in `binlog_pump_detected_drainer_binlog_purge_count{id}`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final

from common import tso as tsolib
from common.errors import BinlogError
from common.pb import binlog_pb2, gogo
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from pump.metrics import PumpMetrics
from pump.node import ApproxClock, TimestampSource
from pump.storage.api import PumpStorage

log = logging.getLogger(__name__)

GC_INTERVAL: Final = 3600.0
DETECT_DRAINER_INTERVAL: Final = 600.0
EARLY_ALERT_GC: Final = 20 * 3600.0
"""A drainer whose checkpoint is less than this far above the gc ts is warned about (original: 20 h)."""
MIN_FAKE_WAIT: Final = 0.005
"""The fake binlog loop never sleeps less than this (a clock that does not move cannot spin it)."""


def write_fake_binlog(storage: PumpStorage, tso: TimestampSource, clock: ApproxClock | None = None) -> int:
    """Write one fake binlog with a fresh TSO; returns its ts. Raises BinlogError on failure."""
    ts = tso.get_ts()
    if clock is not None:
        clock.observe(ts)
    storage.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=ts, commit_ts=ts), gogo.fake_binlog(ts))
    log.debug("wrote fake binlog ts=%d", ts)
    return ts


def gc_ts_for(now_ts: int, keep_seconds: float) -> int:
    """The TSO `keep_seconds` before `now_ts` (logical part 0)."""
    return tsolib.compose(max(0, tsolib.physical(now_ts) - int(keep_seconds * 1000)), 0)


def drainers_at_risk(
    drainers: Iterable[NodeStatus], gc_ts: int, margin_seconds: float = EARLY_ALERT_GC
) -> list[NodeStatus]:
    """Non-offline drainers whose checkpoint is below gc ts + margin: GC may soon purge what they need."""
    limit = gc_ts + (int(margin_seconds * 1000) << tsolib.LOGICAL_BITS)
    return [d for d in drainers if d.state is not NodeState.OFFLINE and d.max_commit_ts < limit]


class Background:
    """The three background loops, each on its own thread; `stop()` joins them."""

    def __init__(
        self,
        storage: PumpStorage,
        tso: TimestampSource,
        registry: Registry,
        metrics: PumpMetrics,
        *,
        last_write: Callable[[], float],
        fake_interval: float,
        gc_keep: float,
        pull_fake_interval: float = 0.0,
        pulling: Callable[[], bool] = lambda: False,
        clock: ApproxClock | None = None,
        gc_interval: float = GC_INTERVAL,
        detect_interval: float = DETECT_DRAINER_INTERVAL,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """`last_write()`: the `monotonic()` time of the last binlog stored through WriteBinlog;
        `pulling()`: whether a drainer is pulling now; `pull_fake_interval` 0 = off."""
        self._storage = storage
        self._tso = tso
        self._registry = registry
        self._metrics = metrics
        self._last_write = last_write
        self._fake_interval = fake_interval
        self._pull_fake_interval = min(pull_fake_interval, fake_interval) if pull_fake_interval > 0 else 0.0
        self._pulling = pulling
        self._monotonic = monotonic
        self._gc_keep = gc_keep
        self._clock = clock
        self._gc_interval = gc_interval
        self._detect_interval = detect_interval
        self._stop = threading.Event()
        self._gc_trigger = threading.Event()
        self._gc_lock = threading.Lock()
        self._gc_running = False
        self._threads: list[threading.Thread] = []
        self.last_gc_ts = 0
        self._last_fake = monotonic()  # as if one had just been written: the first comes one gap later
        self._retry_at = 0.0  # after a failed fake binlog: not before this (monotonic)

    def start(self) -> None:
        for target, name in (
            (self._fake_loop, "pump-fake-binlog"),
            (self._gc_loop, "pump-gc"),
            (self._detect_loop, "pump-detect-drainer"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._gc_trigger.set()
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    # ------------------------------------------------------------------------------------ fake
    def fake_gap(self) -> float:
        """The idle gap after which a fake binlog is written now: shorter while a drainer is pulling."""
        if self._pull_fake_interval and self._pulling():
            return self._pull_fake_interval
        return self._fake_interval

    def fake_due_in(self) -> float:
        """Seconds until a fake binlog is due (<= 0: due now), from the last write or fake binlog."""
        due = max(self._last_write(), self._last_fake) + self.fake_gap()
        return max(due, self._retry_at) - self._monotonic()

    def fake_tick(self) -> bool:
        """Write a fake binlog if one is due; True when one was written.  After a failure (pd-server
        down, storage closing) the next try waits the long gap, `gen-binlog-interval`, so a pump with a
        drainer does not retry (and log) several times a second."""
        if self.fake_due_in() > 0:
            return False
        ok = False
        try:
            write_fake_binlog(self._storage, self._tso, self._clock)
            ok = True
        except BinlogError as exc:
            log.warning("cannot write a fake binlog (next try in %.1fs): %s", self._fake_interval, exc)
        finally:
            # the gap runs from the end of this write, as from the end of a WriteBinlog: the next fake's
            # TSO is then at least one gap above this one's
            now = self._last_fake = self._monotonic()
            self._retry_at = 0.0 if ok else now + self._fake_interval
        return ok

    def _fake_loop(self) -> None:
        while not self._stop.wait(self._fake_wait()):
            self._guarded("fake_binlog", self.fake_tick)

    def _fake_wait(self) -> float:
        """Sleep until the fake binlog is due, but no longer than the short gap while it is on, so a
        drainer that starts pulling gets the short gap at once.  A write meanwhile moves the due time
        later: the loop wakes, finds nothing due, sleeps again."""
        cap = self._pull_fake_interval or self._fake_interval
        return min(max(self.fake_due_in(), MIN_FAKE_WAIT), cap)

    def _guarded(self, loop: str, fn: Callable[[], object]) -> None:
        """One round of a loop: an unexpected error is logged with its traceback and counted, never fatal."""
        try:
            fn()
        except Exception:
            log.exception("background %s: unexpected error; the loop goes on", loop)
            self._metrics.background_error.labels(loop=loop).inc()

    # -------------------------------------------------------------------------------------- gc
    def trigger_gc(self) -> bool:
        """Ask for a GC now; False when one is already running ("gc is working")."""
        with self._gc_lock:
            if self._gc_running:
                return False
            self._gc_trigger.set()
            return True

    def gc_once(self) -> int | None:
        """Run one GC: returns the gc ts handed to the storage, or None if no TSO could be had."""
        with self._gc_lock:
            self._gc_running = True
        try:
            now = self._tso.get_ts()
            gc_ts = gc_ts_for(now, self._gc_keep)
            log.info("gc: dropping binlogs with ts <= %d (%s)", gc_ts, tsolib.to_datetime(gc_ts).isoformat())
            self._storage.gc(gc_ts)
            self.last_gc_ts = gc_ts
            return gc_ts
        except BinlogError as exc:
            log.warning("gc failed: %s", exc)
            return None
        except Exception:
            log.exception("gc failed unexpectedly")
            self._metrics.background_error.labels(loop="gc").inc()
            return None
        finally:
            with self._gc_lock:
                self._gc_running = False

    def _gc_loop(self) -> None:
        while True:
            self._gc_trigger.wait(self._gc_interval)
            if self._stop.is_set():
                return
            self._gc_trigger.clear()
            self._guarded("gc", self.gc_once)

    # ---------------------------------------------------------------------------------- detect
    def detect_once(self) -> list[str]:
        """Warn about drainers that GC may leave behind; returns their node ids."""
        gc_ts = self._storage.gc_ts()
        if gc_ts <= 0:
            return []
        try:
            drainers = self._registry.list(NodeKind.DRAINER)
        except BinlogError as exc:
            log.warning("cannot list drainers: %s", exc)
            return []
        at_risk = drainers_at_risk(drainers, gc_ts)
        for d in at_risk:
            log.error(
                "drainer %s checkpoint commit_ts=%d is close to the gc ts %d: binlogs it needs may be purged",
                d.node_id,
                d.max_commit_ts,
                gc_ts,
            )
            self._metrics.drainer_purge.labels(id=d.node_id).inc()
        return [d.node_id for d in at_risk]

    def _detect_loop(self) -> None:
        while not self._stop.wait(self._detect_interval):
            self._guarded("detect_drainer", self._detect_round)

    def _detect_round(self) -> None:
        try:
            self.detect_once()
        except BinlogError as exc:
            log.warning("drainer checkpoint check failed: %s", exc)
