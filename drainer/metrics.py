"""Prometheus metrics of the drainer, on a private registry per `DrainerMetrics` (reference §6).

Names are the original ones; prometheus_client exposes a counter `x` as `x_total`.

    binlog_drainer_pump_position{nodeID}          gauge, physical ms of the pump's last received commit_ts
    binlog_drainer_checkpoint_tso                 gauge, physical ms of the saved checkpoint
    binlog_drainer_checkpoint_delay_seconds       histogram exp(0.001, 2, 22): now - checkpoint time at each save
    binlog_drainer_ddl_jobs_total                 counter
    binlog_drainer_event{type}                    counter, Insert | Update | Delete | DDL | savepoint
    binlog_drainer_error_count{type}              counter
    binlog_drainer_disorder_binlog_count          counter (the original defined but never registered it)
    binlog_drainer_queue_size{name}               gauge, syncer_input = bytes of binlogs buffered in the merge

Gauges that read live state (pump positions, queue size) are collected at scrape time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import tso

DELAY_BUCKETS: Final = tuple(0.001 * 2**i for i in range(22))


class _LiveCollector(Collector):
    def __init__(
        self, positions: Callable[[], dict[str, int]], queue_size: Callable[[], int], disorders: Callable[[], int]
    ) -> None:
        self._positions = positions
        self._queue_size = queue_size
        self._disorders = disorders

    def collect(self) -> Iterable[Metric]:
        pos = GaugeMetricFamily("binlog_drainer_pump_position", "pump position (physical ms)", labels=["nodeID"])
        try:
            for node_id, ts in sorted(self._positions().items()):
                pos.add_metric([node_id], tso.physical(ts))
        except Exception:
            pass
        yield pos
        q = GaugeMetricFamily("binlog_drainer_queue_size", "queue size", labels=["name"])
        with contextlib.suppress(Exception):
            q.add_metric(["syncer_input"], self._queue_size())
        yield q
        d = CounterMetricFamily("binlog_drainer_disorder_binlog_count", "binlogs out of commit_ts order (dropped)")
        with contextlib.suppress(Exception):
            d.add_metric([], self._disorders())
        yield d


class DrainerMetrics:
    def __init__(
        self,
        positions: Callable[[], dict[str, int]] = dict,
        queue_size: Callable[[], int] = lambda: 0,
        disorders: Callable[[], int] = lambda: 0,
    ) -> None:
        r = self.registry = CollectorRegistry()
        self.checkpoint_tso = Gauge("binlog_drainer_checkpoint_tso", "save checkpoint tso (physical ms)", registry=r)
        self.checkpoint_delay = Histogram(
            "binlog_drainer_checkpoint_delay_seconds", "checkpoint delay (s)", buckets=DELAY_BUCKETS, registry=r
        )
        self.ddl_jobs = Counter("binlog_drainer_ddl_jobs", "DDL jobs applied", registry=r)
        self.event = Counter("binlog_drainer_event", "events by type", ["type"], registry=r)
        self.error = Counter("binlog_drainer_error_count", "errors by type", ["type"], registry=r)
        r.register(_LiveCollector(positions, queue_size, disorders))
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)

    def saved(self, commit_ts: int) -> None:
        physical_ms = tso.physical(commit_ts)
        self.checkpoint_tso.set(physical_ms)
        self.checkpoint_delay.observe(max(0.0, time.time() - physical_ms / 1000.0))
        self.event.labels("savepoint").inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
