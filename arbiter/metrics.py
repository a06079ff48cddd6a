"""Prometheus metrics of the arbiter, on a private registry, served at GET /metrics on `addr`.

Names, types, labels and buckets are the original's (the fact list is tests/data/original_metrics.txt).
`render()` writes counters as the Go client does: `binlog_arbiter_event` is scraped under that name
(`BARE_COUNTERS`, common/metrics_text.py), without the `_total` prometheus_client would add.  The
process collector's `process_*` series are served as the original's; its `go_*` ones are not.

    binlog_arbiter_checkpoint_tso              gauge: physical ms of the saved checkpoint ts
    binlog_arbiter_query_duration_time{type}   histogram exp(0.00005, 2, 18): exec = one query round trip
                                               (a chunk's statements, the last carrying its COMMIT),
                                               commit = a separate COMMIT (DDLs)
    binlog_arbiter_event{type}                 counter: Insert | Update | Delete (rows handed to the loader),
                                               DDL, Txn (transactions handed to the loader)
    binlog_arbiter_queue_size{name}            gauge, read at scrape time: kafka_reader = bytes of messages
                                               read and not yet handed to the loader; loader_input = bytes the
                                               loader's budget holds (decoded rows added, not yet applied).
                                               The original counted messages in two channels; ours are bytes.
    binlog_arbiter_txn_latency_seconds         histogram exp(0.00005, 2, 20): wall clock when a transaction
                                               is applied downstream minus the physical part of its commit_ts

Ours:

    binlog_arbiter_duplicate_messages_total    counter: messages dropped because their commit_ts was not above
                                               the last one taken
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
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import metrics_text, process_metrics, tso
from common.events import DMLType, Txn

__all__ = ["ArbiterMetrics"]

QUERY_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(18))
"""ExponentialBuckets(0.00005, 2, 18)."""
LATENCY_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(20))
"""ExponentialBuckets(0.00005, 2, 20)."""
BARE_COUNTERS: Final = frozenset({"binlog_arbiter_event"})
"""Counters scraped under their registered name, as the original's Go client writes them (no `_total`)."""


class _Queues(Collector):
    def __init__(self, reader_bytes: Callable[[], int], loader_bytes: Callable[[], int]) -> None:
        self._reader_bytes = reader_bytes
        self._loader_bytes = loader_bytes

    def collect(self) -> Iterable[Metric]:  # a scrape never fails because a part is closing
        q = GaugeMetricFamily("binlog_arbiter_queue_size", "bytes in the queue", labels=["name"])
        with contextlib.suppress(Exception):
            q.add_metric(["kafka_reader"], self._reader_bytes())
        with contextlib.suppress(Exception):
            q.add_metric(["loader_input"], self._loader_bytes())
        yield q


class ArbiterMetrics:
    """The arbiter's series; also the loader's `SinkObserver` (query durations)."""

    def __init__(
        self, reader_bytes: Callable[[], int] = lambda: 0, loader_bytes: Callable[[], int] = lambda: 0
    ) -> None:
        r = self.registry = CollectorRegistry()
        process_metrics.register(r)
        self.checkpoint_tso = Gauge("binlog_arbiter_checkpoint_tso", "save checkpoint tso of arbiter.", registry=r)
        query = Histogram(
            "binlog_arbiter_query_duration_time",
            "Bucketed histogram of processing time (s) of a query to sync data to downstream.",
            ["type"],
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self._exec = query.labels(type="exec")
        self._commit = query.labels(type="commit")
        events = Counter("binlog_arbiter_event", "the count of sql event(dml, ddl).", ["type"], registry=r)
        self._inserts, self._updates, self._deletes, self._ddl, self._txn = (
            events.labels(type=name) for name in ("Insert", "Update", "Delete", "DDL", "Txn")
        )
        self._latency = Histogram(
            "binlog_arbiter_txn_latency_seconds",
            "Bucketed histogram of seconds of a txn between loaded to downstream and committed at upstream.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.duplicates = Counter(
            "binlog_arbiter_duplicate_messages_total",
            "messages dropped: commit_ts not above the last one taken (ours)",
            registry=r,
        )
        r.register(_Queues(reader_bytes, loader_bytes))

    # SinkObserver
    def executed(self, seconds: float) -> None:
        pass

    def query_exec(self, seconds: float) -> None:
        self._exec.observe(seconds)

    def query_commit(self, seconds: float) -> None:
        self._commit.observe(seconds)

    # the arbiter's own
    def handed(self, txn: Txn) -> None:
        """A transaction handed to the loader."""
        self._txn.inc()
        if txn.ddl is not None:
            self._ddl.inc()
            return
        inserts = updates = deletes = 0
        for d in txn.dmls:
            tp = d.tp
            if tp == DMLType.INSERT:
                inserts += 1
            elif tp == DMLType.UPDATE:
                updates += 1
            else:
                deletes += 1
        if inserts:
            self._inserts.inc(inserts)
        if updates:
            self._updates.inc(updates)
        if deletes:
            self._deletes.inc(deletes)

    def applied(self, commit_ts: int) -> None:
        self._latency.observe(max(0.0, time.time() - tso.physical(commit_ts) / 1000.0))

    def saved(self, ts: int) -> None:
        self.checkpoint_tso.set(tso.physical(ts))

    def render(self) -> bytes:
        return metrics_text.render(self.registry, BARE_COUNTERS)
