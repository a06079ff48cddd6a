"""Prometheus metrics of the pump server, on a private registry per `PumpMetrics` (docs/architecture.md#metrics).

Every series the original pump exports, under its exact name, type and labels (the fact list is
tests/data/original_metrics.txt).  `render()` writes counters as the Go client does: a counter
registered as `x` is scraped as `x` (`BARE_COUNTERS`, common/metrics_text.py), not prometheus_client's
`x_total`; `binlog_pump_storage_deleted_kv_total` is the original's own name.  The process collector's
`process_*` series are served as the original's; its `go_*` ones are not (no Go runtime here).
`binlog_pump_detected_drainer_binlog_purge_count{id}` is registered here (the original defined but
never registered it).

    binlog_pump_rpc_duration_seconds{method=WriteBinlog|PullBinlogs, label=succ|fail}
                                                                   histogram exp(0.00005, 2, 18): a WriteBinlog
                                                                   call (probes included), a whole PullBinlogs
                                                                   stream (observed when it ends)
    binlog_pump_loss_binlog_count                                  counter: failed WriteBinlog calls

Ours (what the original lacked):

    binlog_pump_background_error_count{loop}                       counter (bare, as the original's
                                                                   `_count` counters): unexpected errors in the
                                                                   background loops
    binlog_pump_rpc_inflight_write_bytes                           gauge: WriteBinlog payload bytes between
                                                                   arrival and the storage's return (what
                                                                   `max-inflight-write-bytes` bounds)
    binlog_pump_storage_write_queue_bytes                          gauge: bytes of binlogs queued for the
                                                                   value-log writer (what the storage's write
                                                                   queue budget bounds); both read at scrape

`StorageMetrics` is the storage's `StorageObserver` (pump/storage/api.py) on the same registry:

    binlog_pump_storage_error_count{type}                          counter
    binlog_pump_storage_write_binlog_size{type=single|batch}       histogram exp(16, 2, 25)
    binlog_pump_storage_write_binlog_duration_time{type=single|batch|to_disk|fsync|rotate}
                                                                   histogram exp(0.00005, 2, 20)
                                                                   (batch = to_disk + fsync; single = one
                                                                   binlog from its hand-over to the storage
                                                                   until it is durable, observed by the
                                                                   server per stored binlog, probes excluded)
    binlog_pump_storage_slow_chaser_count{type}                    counter
    binlog_drainer_slow_chaser_catchup_time_seconds                histogram exp(0.001, 2, 22): seconds of
                                                                   one catch-up step of the slow chaser
    binlog_pump_storage_query_tikv_count                           counter (txn-status store lookups)
    binlog_pump_storage_done_gc_ts                                 gauge (physical ms of the TSO)
    binlog_pump_storage_deleted_kv_total                           counter
    binlog_pump_storage_ignored_decision_count{type=commit|rollback}
                                                                   counter (ours, bare): commits and rollbacks
                                                                   ignored because their transaction was
                                                                   decided already (served at most once)

`StorageMetrics.write_latency` (a `pump.score.LatencyEWMA` of the batch time, write + fsync) feeds the
routing score the pump publishes (pump/score.py).

The catch-up histogram keeps the original's name, `binlog_drainer_slow_chaser_catchup_time_seconds`,
although only the pump records it (the original registered it under the drainer subsystem from the
pump's storage package); a drainer does not export it.

`query_tikv_count` keeps the original's name: there is no TiKV here, it counts the commit resolver's
questions to the upstream's txn-status store (docs/architecture.md#transaction-status), the same role.

The storage gauges `binlog_pump_storage_max_commit_ts`, `binlog_pump_storage_gc_ts` (physical ms of the
TSO, as the original), `binlog_pump_storage_storage_size_bytes{type=capacity|available}` and
`binlog_pump_storage_write_queue_bytes` are read from `PumpStorage.status()` at scrape time.

The write path stays cheap: every child it touches is bound once here (no label lookup per binlog), an
observation takes no lock of ours, and the gauges cost nothing until scraped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import metrics_text, process_metrics, tso
from pump.score import LatencyEWMA
from pump.storage.api import StorageStatus

log = logging.getLogger(__name__)

BARE_COUNTERS: Final = frozenset(
    {
        "binlog_pump_loss_binlog_count",
        "binlog_pump_detected_drainer_binlog_purge_count",
        "binlog_pump_storage_error_count",
        "binlog_pump_storage_slow_chaser_count",
        "binlog_pump_storage_query_tikv_count",
        "binlog_pump_background_error_count",
        "binlog_pump_storage_ignored_decision_count",
    }
)
"""Counters scraped under their registered name, as the original's Go client writes them (no `_total`)."""
RPC_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(18))
"""prometheus.ExponentialBuckets(0.00005, 2, 18), as the original."""
SIZE_BUCKETS: Final = tuple(16.0 * 2**i for i in range(25))
"""ExponentialBuckets(16, 2, 25): binlog_pump_storage_write_binlog_size."""
WRITE_DURATION_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(20))
"""ExponentialBuckets(0.00005, 2, 20): binlog_pump_storage_write_binlog_duration_time."""
CATCHUP_BUCKETS: Final = tuple(0.001 * 2**i for i in range(22))
"""ExponentialBuckets(0.001, 2, 22): the slow chaser's catch-up time."""

WRITE_BINLOG: Final = "WriteBinlog"
PULL_BINLOGS: Final = "PullBinlogs"
SUCC: Final = "succ"
FAIL: Final = "fail"


class _StorageCollector(Collector):
    """Gauges read from the storage's status when scraped; nothing when the storage is not there."""

    def __init__(self, status: Callable[[], StorageStatus | None]) -> None:
        self._status = status

    def collect(self) -> Iterable[Metric]:
        try:
            st = self._status()
        except Exception as exc:  # a scrape must never fail because the storage is closing
            log.debug("storage status unavailable for metrics: %s", exc)
            return
        if st is None:
            return
        yield GaugeMetricFamily(
            "binlog_pump_storage_max_commit_ts",
            "max commit ts (physical ms) in storage",
            tso.physical(st.max_commit_ts),
        )
        yield GaugeMetricFamily("binlog_pump_storage_gc_ts", "gc ts (physical ms) of storage", tso.physical(st.gc_ts))
        size = GaugeMetricFamily("binlog_pump_storage_storage_size_bytes", "storage size info", labels=["type"])
        size.add_metric(["capacity"], st.capacity_bytes)
        size.add_metric(["available"], st.available_bytes)
        yield size
        yield GaugeMetricFamily(
            "binlog_pump_storage_write_queue_bytes",
            "bytes of binlogs queued for the value-log writer (ours)",
            st.write_queue_bytes,
        )


class _InflightCollector(Collector):
    """The server's WriteBinlog bytes in flight, read when scraped."""

    def __init__(self, inflight: Callable[[], int]) -> None:
        self._inflight = inflight

    def collect(self) -> Iterable[Metric]:
        g = GaugeMetricFamily("binlog_pump_rpc_inflight_write_bytes", "WriteBinlog payload bytes in flight (ours)")
        try:
            g.add_metric([], self._inflight())
        except Exception as exc:  # a scrape must never fail because the server is closing
            log.debug("in-flight write bytes unavailable for metrics: %s", exc)
        yield g


class PumpMetrics:
    """The pump server's metrics; `render()` gives the text for GET /metrics."""

    def __init__(
        self,
        storage_status: Callable[[], StorageStatus | None] | None = None,
        inflight_write_bytes: Callable[[], int] | None = None,
    ) -> None:
        self.registry = CollectorRegistry()
        self.rpc_duration = Histogram(
            "binlog_pump_rpc_duration_seconds",
            "Bucketed histogram of processing time (s) of rpc",
            ["method", "label"],
            buckets=RPC_BUCKETS,
            registry=self.registry,
        )
        self.loss_binlog = Counter("binlog_pump_loss_binlog_count", "Total loss binlog count", registry=self.registry)
        self.drainer_purge = Counter(
            "binlog_pump_detected_drainer_binlog_purge_count",
            "binlog purged while a drainer still needs it (checkpoint older than gc ts + 20h)",
            ["id"],
            registry=self.registry,
        )
        self.background_error = Counter(
            "binlog_pump_background_error_count",
            "unexpected errors in the pump's background loops (ours)",
            ["loop"],
            registry=self.registry,
        )
        self.storage = StorageMetrics(self.registry)
        self._rpc = {
            (method, ok): self.rpc_duration.labels(method=method, label=SUCC if ok else FAIL)
            for method in (WRITE_BINLOG, PULL_BINLOGS)
            for ok in (True, False)
        }
        process_metrics.register(self.registry)
        if storage_status is not None:
            self.registry.register(_StorageCollector(storage_status))
        if inflight_write_bytes is not None:
            self.registry.register(_InflightCollector(inflight_write_bytes))

    def observe_rpc(self, method: str, ok: bool, seconds: float) -> None:
        """One RPC of `method` (WRITE_BINLOG or PULL_BINLOGS) took `seconds`."""
        self._rpc[method, ok].observe(seconds)

    def render(self) -> bytes:
        return metrics_text.render(self.registry, BARE_COUNTERS)


class StorageMetrics:
    """The storage's `StorageObserver`: the original's `binlog_pump_storage_*` metrics.  Never raises."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.error_count = Counter(
            "binlog_pump_storage_error_count", "Total count of storage errors", ["type"], registry=registry
        )
        self.write_binlog_size = Histogram(
            "binlog_pump_storage_write_binlog_size",
            "write binlog size",
            ["type"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        )
        self.write_binlog_duration = Histogram(
            "binlog_pump_storage_write_binlog_duration_time",
            "Bucketed histogram of write time (s) of a binlog",
            ["type"],
            buckets=WRITE_DURATION_BUCKETS,
            registry=registry,
        )
        self.slow_chaser_count = Counter(
            "binlog_pump_storage_slow_chaser_count",
            "How many times the slow chaser changed",
            ["type"],
            registry=registry,
        )
        self.slow_chaser_catchup = Histogram(
            "binlog_drainer_slow_chaser_catchup_time_seconds",
            "How long the catch up step takes to run (s); the pump's, under the original's name",
            buckets=CATCHUP_BUCKETS,
            registry=registry,
        )
        self.query_tikv_count = Counter(
            "binlog_pump_storage_query_tikv_count", "Total count of txn status queries", registry=registry
        )
        self.done_gc_ts = Gauge(
            "binlog_pump_storage_done_gc_ts", "the ts (physical ms) up to which gc is done", registry=registry
        )
        self.deleted_kv = Counter(
            "binlog_pump_storage_deleted_kv_total", "Total number of index entries deleted by gc", registry=registry
        )
        self.ignored_decision_count = Counter(
            "binlog_pump_storage_ignored_decision_count",
            "Total count of commits and rollbacks ignored because their transaction was already decided",
            ["type"],
            registry=registry,
        )
        self.write_latency = LatencyEWMA()
        size, duration = self.write_binlog_size, self.write_binlog_duration
        self._single_size = size.labels(type="single")
        self._batch_size = size.labels(type="batch")
        self._single_time = duration.labels(type="single")
        self._batch_time = duration.labels(type="batch")
        self._to_disk_time = duration.labels(type="to_disk")
        self._fsync_time = duration.labels(type="fsync")
        self._rotate_time = duration.labels(type="rotate")

    def write_single(self, size_bytes: int, seconds: float) -> None:
        """One binlog stored: its payload bytes, and the time from its hand-over until it was durable."""
        try:
            self._single_size.observe(size_bytes)
            self._single_time.observe(seconds)
        except Exception:  # pragma: no cover - an observer must never fail a write
            log.debug("write_single metrics failed", exc_info=True)

    def write_batch(self, binlogs: int, size_bytes: int, write_seconds: float, fsync_seconds: float) -> None:
        try:
            self.write_latency.observe(write_seconds + fsync_seconds)
            self._batch_size.observe(size_bytes)
            self._batch_time.observe(write_seconds + fsync_seconds)
            self._to_disk_time.observe(write_seconds)
            self._fsync_time.observe(fsync_seconds)
        except Exception:  # pragma: no cover - an observer must never fail the storage
            log.debug("write_batch metrics failed", exc_info=True)

    def rotate(self, seconds: float) -> None:
        try:
            self._rotate_time.observe(seconds)
        except Exception:  # pragma: no cover
            log.debug("rotate metrics failed", exc_info=True)

    def error(self, kind: str) -> None:
        try:
            self.error_count.labels(type=kind).inc()
        except Exception:  # pragma: no cover
            log.debug("error metrics failed", exc_info=True)

    def chaser(self, event: str, catch_up_seconds: float | None = None) -> None:
        try:
            self.slow_chaser_count.labels(type=event).inc()
            if catch_up_seconds is not None:
                self.slow_chaser_catchup.observe(catch_up_seconds)
        except Exception:  # pragma: no cover
            log.debug("chaser metrics failed", exc_info=True)

    def resolver_query(self) -> None:
        try:
            self.query_tikv_count.inc()
        except Exception:  # pragma: no cover
            log.debug("resolver metrics failed", exc_info=True)

    def gc_done(self, done_gc_ts: int, deleted_kv: int) -> None:
        try:
            self.done_gc_ts.set(tso.physical(done_gc_ts))
            if deleted_kv > 0:
                self.deleted_kv.inc(deleted_kv)
        except Exception:  # pragma: no cover
            log.debug("gc metrics failed", exc_info=True)

    def decision_ignored(self, kind: str) -> None:
        try:
            self.ignored_decision_count.labels(type=kind).inc()
        except Exception:  # pragma: no cover
            log.debug("decision metrics failed", exc_info=True)
