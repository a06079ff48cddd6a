"""Prometheus metrics of the pump server, on a private registry per `PumpMetrics` (reference §6).

Names are the original ones.  prometheus_client exposes a counter `x` as the sample `x_total` (the
OpenMetrics rule; Go's client does not add the suffix), so `binlog_pump_loss_binlog_count` is scraped as
`binlog_pump_loss_binlog_count_total`.  `binlog_pump_detected_drainer_binlog_purge_count{id}` is
registered here (the original defined but never registered it).

The storage gauges `binlog_pump_storage_max_commit_ts`, `binlog_pump_storage_gc_ts` (physical ms of the
TSO, as the original) and `binlog_pump_storage_storage_size_bytes{type=capacity|available}` are read
from `PumpStorage.status()` at scrape time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import tso
from pump.storage.api import StorageStatus

log = logging.getLogger(__name__)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
RPC_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(18))
"""prometheus.ExponentialBuckets(0.00005, 2, 18), as the original."""

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


class PumpMetrics:
    """The pump server's metrics; `render()` gives the text for GET /metrics."""

    def __init__(self, storage_status: Callable[[], StorageStatus | None] | None = None) -> None:
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
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        if storage_status is not None:
            self.registry.register(_StorageCollector(storage_status))

    def observe_rpc(self, method: str, ok: bool, seconds: float) -> None:
        self.rpc_duration.labels(method=method, label=SUCC if ok else FAIL).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
