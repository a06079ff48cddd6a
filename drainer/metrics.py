"""Prometheus metrics of the drainer, on a private registry per `DrainerMetrics` (docs/architecture.md#metrics).

Every series the original drainer exports, under its exact name, type, labels and buckets (the fact list
is tests/data/original_metrics.txt).  `render()` writes counters as the Go client does: a counter
registered as `x` is scraped as `x` (`BARE_COUNTERS`, common/metrics_text.py), not prometheus_client's
`x_total`; `binlog_drainer_ddl_jobs_total` is the original's own name, and ours named `..._total`
keep it.  The process collector's `process_*` series are served as the original's; its `go_*` ones are
not (no Go runtime here).

    binlog_drainer_pump_position{nodeID}            gauge: physical ms of the last commit_ts the merger took
                                                    from the pump (read at scrape time)
    binlog_drainer_checkpoint_tso                   gauge: physical ms of the saved checkpoint
    binlog_drainer_checkpoint_delay_seconds         histogram exp(0.001, 2, 22): wall clock - checkpoint time,
                                                    at each save
    binlog_drainer_ddl_jobs_total                   counter: DDL binlogs handled (filtered ones included)
    binlog_drainer_event{type}                      counter: Insert | Update | Delete (rows handed to the sink),
                                                    DDL (executed DDLs), savepoint (checkpoint saves)
    binlog_drainer_error_count{type}                counter: the error that stopped the drainer; type is
                                                    unmarshal_binlog for a pump's binlog that does not parse
                                                    (the original's one type), else the exception's class name
    binlog_drainer_disorder_binlog_count            counter: binlogs dropped as out of commit_ts order (the
                                                    original defined but never registered it)
    binlog_drainer_execute_duration_time            histogram exp(0.00005, 2, 18): one downstream transaction
                                                    of the SQL sinks (a chunk of txn-batch DMLs, or a DDL)
    binlog_drainer_query_duration_time{type}        histogram exp(0.00005, 2, 18): exec = one query round trip
                                                    (MySQL sends a chunk as multi-statement queries, the last
                                                    carries the COMMIT; sqlite: the statements of a chunk),
                                                    commit = a separate COMMIT (sqlite chunks, MySQL DDLs)
    binlog_drainer_binlog_reach_duration_time{nodeID}  histogram exp(0.00005, 2, 18): pull latency, see below
    binlog_drainer_read_binlog_size{nodeID}         histogram exp(16, 2, 25): bytes of each binlog pulled
    binlog_drainer_queue_size{name=syncer_input}    gauge: bytes of binlogs the merger holds, all pumps (the
                                                    original counted binlogs in a channel; ours are bounded
                                                    by bytes)

Ours (what the original lacked):

    binlog_drainer_merger_buffered_bytes{nodeID}    gauge: bytes of one pump's binlogs in the merger, from
                                                    its puller's put until the syncer has translated them
                                                    (what `max_bytes_per_source` bounds)
    binlog_drainer_loader_inflight_bytes            gauge: bytes the sink's budget holds (SQL sinks: decoded
                                                    rows added and not yet applied; file sink: encoded
                                                    records not yet fsynced), what `max-inflight-bytes` bounds
    binlog_drainer_pump_stalled_seconds{nodeID}     gauge: seconds the pump the merge waits for has sent nothing,
                                                    once over `pump-stall-report-after`; 0 for a pump delivering
                                                    (drainer/stall.py)
    binlog_drainer_pump_stalled{nodeID}             gauge: 1 while that pump is stalled, else 0

    db-type kafka only (drainer/sinks/kafka.py; the original had sarama's go-metrics, not Prometheus):

    binlog_drainer_kafka_messages_total             counter: messages the broker acknowledged
    binlog_drainer_kafka_bytes_total                counter: value bytes of those messages
    binlog_drainer_kafka_pending_messages           gauge: messages produced, not yet acknowledged
    binlog_drainer_kafka_pending_bytes              gauge: their value bytes (what max-inflight-bytes bounds)
    binlog_drainer_kafka_acked_commit_ts            gauge: physical ms of the last commit_ts acknowledged
                                                    together with everything before it

Pull latency per pump (`binlog_reach_duration_time`, as the original `drainer/pump.go` measured it):
drainer wall clock when its puller has parsed a binlog received from the pump, minus the physical part
of that binlog's commit_ts (pd-server's clock when the transaction committed).  Observed for every
binlog received, fake binlogs included (an idle pump's fake binlogs show the pull path alone).  It
includes the pump's own wait (the sorter holds a commit until its prewrite is paired and the watermark
passes it), the stream, and the time the puller waited for room in the merger; it does not include the
merge or the apply.  Clock skew between the pd-server host and the drainer host adds to it.  The
buckets end at 6.55 s, as the original's: a catch-up after a stop lands in +Inf; its lag is
`time() - binlog_drainer_pump_position / 1000`.

Not here: `update_mark_table` of query_duration_time (no mark table: bidirectional replication is
not implemented); `queue_size{name=worker_N}` (the loader's per-worker queues are internal; their
bytes are in `loader_inflight_bytes`).  `binlog_drainer_slow_chaser_catchup_time_seconds` is
served by the pump, as in the original (pump/metrics.py).  The binlogfile series of the file sink
(`common.binlogfile.metrics`) are served here too, as the original's drainer did.

Hot paths stay cheap: children are bound once (per pump for the puller's, in `source()`), events are
counted per transaction with one `inc(n)` per type, and nothing here takes a lock of its own; gauges of
live state are computed at scrape time.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final

from google.protobuf.message import DecodeError
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common import metrics_text, process_metrics, tso
from common.binlogfile import metrics as binlogfile_metrics
from common.errors import CodecError
from common.events import DML, DMLType
from drainer.errors import PullerError

if TYPE_CHECKING:
    from drainer.merger import Merger
    from drainer.sinks.base import Sink
    from drainer.sinks.kafka_window import KafkaStats

log = logging.getLogger(__name__)

DELAY_BUCKETS: Final = tuple(0.001 * 2**i for i in range(22))
"""ExponentialBuckets(0.001, 2, 22): checkpoint delay."""
EXEC_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(18))
"""ExponentialBuckets(0.00005, 2, 18): execute, query and reach durations."""
SIZE_BUCKETS: Final = tuple(16.0 * 2**i for i in range(25))
"""ExponentialBuckets(16, 2, 25): read binlog size."""
UNMARSHAL_BINLOG: Final = "unmarshal_binlog"
BARE_COUNTERS: Final = frozenset(
    {
        "binlog_drainer_error_count",
        "binlog_drainer_disorder_binlog_count",
        "binlog_drainer_event",
        *binlogfile_metrics.BARE_COUNTERS,
    }
)
"""Counters scraped under their registered name, as the original's Go client writes them (no `_total`)."""


def error_type(exc: BaseException) -> str:
    """The `binlog_drainer_error_count` type of the error that stopped the drainer."""
    if isinstance(exc, PullerError) and isinstance(exc.__cause__, (CodecError, DecodeError)):
        return UNMARSHAL_BINLOG
    return type(exc).__name__


class _LiveCollector(Collector):
    """Gauges (and the disorder counter) read from the drainer's parts when scraped."""

    def __init__(
        self,
        positions: Callable[[], dict[str, int]],
        queue_size: Callable[[], int],
        disorders: Callable[[], int],
        source_bytes: Callable[[], dict[str, int]],
        inflight_bytes: Callable[[], int],
        *,
        stalled: Callable[[], dict[str, float]],
    ) -> None:
        self._stalled = stalled
        self._positions = positions
        self._queue_size = queue_size
        self._disorders = disorders
        self._source_bytes = source_bytes
        self._inflight_bytes = inflight_bytes

    def collect(self) -> Iterable[Metric]:  # a scrape never fails because a part is closing
        pos = GaugeMetricFamily("binlog_drainer_pump_position", "pump position (physical ms)", labels=["nodeID"])
        with contextlib.suppress(Exception):
            for node_id, ts in sorted(self._positions().items()):
                pos.add_metric([node_id], tso.physical(ts))
        yield pos
        q = GaugeMetricFamily("binlog_drainer_queue_size", "bytes of binlogs in the merger", labels=["name"])
        with contextlib.suppress(Exception):
            q.add_metric(["syncer_input"], self._queue_size())
        yield q
        d = CounterMetricFamily("binlog_drainer_disorder_binlog_count", "binlogs out of commit_ts order (dropped)")
        with contextlib.suppress(Exception):
            d.add_metric([], self._disorders())
        yield d
        src = GaugeMetricFamily(
            "binlog_drainer_merger_buffered_bytes", "bytes of a pump's binlogs in the merger (ours)", labels=["nodeID"]
        )
        with contextlib.suppress(Exception):
            for node_id, n in sorted(self._source_bytes().items()):
                src.add_metric([node_id], n)
        yield src
        inflight = GaugeMetricFamily("binlog_drainer_loader_inflight_bytes", "bytes the sink's budget holds (ours)")
        with contextlib.suppress(Exception):
            inflight.add_metric([], self._inflight_bytes())
        yield inflight
        secs = GaugeMetricFamily(
            "binlog_drainer_pump_stalled_seconds",
            "seconds the pump the merge waits for has sent nothing, once it counts as stalled (ours)",
            labels=["nodeID"],
        )
        flag = GaugeMetricFamily(
            "binlog_drainer_pump_stalled", "1 while the pump holds the merge back (ours)", labels=["nodeID"]
        )
        with contextlib.suppress(Exception):
            for node_id, seconds in sorted(self._stalled().items()):
                secs.add_metric([node_id], seconds)
                flag.add_metric([node_id], 1.0 if seconds > 0 else 0.0)
        yield secs
        yield flag


class _KafkaCollector(Collector):
    """The Kafka sink's numbers, read when scraped."""

    def __init__(self, stats: Callable[[], KafkaStats]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        try:
            st = self._stats()
        except Exception:  # a scrape never fails because the sink is closing
            return
        yield CounterMetricFamily(
            "binlog_drainer_kafka_messages_total", "messages Kafka acknowledged", value=st.messages
        )
        yield CounterMetricFamily("binlog_drainer_kafka_bytes_total", "value bytes Kafka acknowledged", value=st.bytes)
        yield GaugeMetricFamily(
            "binlog_drainer_kafka_pending_messages", "messages not yet acknowledged", value=st.pending_messages
        )
        yield GaugeMetricFamily(
            "binlog_drainer_kafka_pending_bytes", "value bytes not yet acknowledged", value=st.pending_bytes
        )
        yield GaugeMetricFamily(
            "binlog_drainer_kafka_acked_commit_ts",
            "physical ms of the last commit_ts acknowledged with everything before it",
            value=tso.physical(st.acked_commit_ts),
        )


class SourceMetrics:
    """One pump's pull series, bound once for its puller."""

    __slots__ = ("_reach", "_size")

    def __init__(self, reach: Histogram, size: Histogram) -> None:
        self._reach = reach
        self._size = size

    def received(self, commit_ts: int, size: int) -> None:
        """A binlog of `size` bytes with `commit_ts` arrived (see the module docstring)."""
        self._reach.observe(max(0.0, time.time() - tso.physical(commit_ts) / 1000.0))
        self._size.observe(size)


class SinkMetrics:
    """The `SinkObserver` of the drainer's sink: execute and query durations."""

    __slots__ = ("_commit", "_exec", "_execute")

    def __init__(self, execute: Histogram, query: Histogram) -> None:
        self._execute = execute
        self._exec = query.labels(type="exec")
        self._commit = query.labels(type="commit")

    def executed(self, seconds: float) -> None:
        self._execute.observe(seconds)

    def query_exec(self, seconds: float) -> None:
        self._exec.observe(seconds)

    def query_commit(self, seconds: float) -> None:
        self._commit.observe(seconds)


class DrainerMetrics:
    """The drainer's metrics; `render()` gives the text for GET /metrics.

    The callables read live state at scrape time: pump positions (commit_ts per node id), the merger's
    total bytes (`queue_size`), its disorder count, its bytes per pump, the sink's in-flight bytes and
    (db-type kafka) the Kafka sink's numbers.
    `for_drainer` wires them to a merger and a sink."""

    def __init__(
        self,
        positions: Callable[[], dict[str, int]] = dict,
        queue_size: Callable[[], int] = lambda: 0,
        disorders: Callable[[], int] = lambda: 0,
        *,
        source_bytes: Callable[[], dict[str, int]] = dict,
        inflight_bytes: Callable[[], int] = lambda: 0,
        stalled: Callable[[], dict[str, float]] = dict,
        kafka: Callable[[], KafkaStats] | None = None,
    ) -> None:
        r = self.registry = CollectorRegistry()
        self.checkpoint_tso = Gauge("binlog_drainer_checkpoint_tso", "save checkpoint tso (physical ms)", registry=r)
        self.checkpoint_delay = Histogram(
            "binlog_drainer_checkpoint_delay_seconds", "checkpoint delay (s)", buckets=DELAY_BUCKETS, registry=r
        )
        self.ddl_jobs = Counter("binlog_drainer_ddl_jobs_total", "DDL jobs handled", registry=r)
        self.event = Counter("binlog_drainer_event", "sql events (dml, ddl, savepoint)", ["type"], registry=r)
        self.error = Counter("binlog_drainer_error_count", "errors by type", ["type"], registry=r)
        self.execute_duration = Histogram(
            "binlog_drainer_execute_duration_time",
            "Bucketed histogram of processing time (s) of one downstream transaction",
            buckets=EXEC_BUCKETS,
            registry=r,
        )
        self.query_duration = Histogram(
            "binlog_drainer_query_duration_time",
            "Bucketed histogram of processing time (s) of a query to the downstream",
            ["type"],
            buckets=EXEC_BUCKETS,
            registry=r,
        )
        self.reach_duration = Histogram(
            "binlog_drainer_binlog_reach_duration_time",
            "Bucketed histogram of how long a binlog takes to reach the drainer since its commit",
            ["nodeID"],
            buckets=EXEC_BUCKETS,
            registry=r,
        )
        self.read_binlog_size = Histogram(
            "binlog_drainer_read_binlog_size",
            "Bucketed histogram of the size of a binlog pulled",
            ["nodeID"],
            buckets=SIZE_BUCKETS,
            registry=r,
        )
        self.sink = SinkMetrics(self.execute_duration, self.query_duration)
        self._savepoint = self.event.labels(type="savepoint")
        self._events = (
            self.event.labels(type="Insert"),
            self.event.labels(type="Update"),
            self.event.labels(type="Delete"),
            self.event.labels(type="DDL"),
        )
        r.register(_LiveCollector(positions, queue_size, disorders, source_bytes, inflight_bytes, stalled=stalled))
        r.register(binlogfile_metrics.collector())
        if kafka is not None:
            r.register(_KafkaCollector(kafka))
        process_metrics.register(r)

    @classmethod
    def for_drainer(
        cls,
        positions: Callable[[], dict[str, int]],
        merger: Merger,
        sink: Sink,
        *,
        stalled: Callable[[], dict[str, float]] = dict,
    ) -> DrainerMetrics:
        """The metrics of a drainer: live gauges read `merger`, `sink` and `stalled` (seconds per pump,
        `StallMonitor.stalled_seconds`), and `sink` reports its downstream timings here from now on
        (call before the sink starts)."""

        from drainer.sinks.kafka import KafkaSink

        def source_bytes() -> dict[str, int]:
            return {n: merger.buffered_bytes(n) for n in merger.source_ids()}

        metrics = cls(
            positions,
            lambda: sum(source_bytes().values()),
            lambda: merger.disorders,
            source_bytes=source_bytes,
            inflight_bytes=lambda: sink.inflight_bytes,
            stalled=stalled,
            kafka=sink.stats if isinstance(sink, KafkaSink) else None,
        )
        sink.set_observer(metrics.sink)
        return metrics

    # ----------------------------------------------------------------------------------- recording
    def source(self, node_id: str) -> SourceMetrics:
        """The pull series of pump `node_id`, bound for its puller."""
        return SourceMetrics(self.reach_duration.labels(nodeID=node_id), self.read_binlog_size.labels(nodeID=node_id))

    def count_events(self, dmls: Sequence[DML], ddl: bool) -> None:
        """A transaction (or a part of one) handed to the sink: its rows by type, and 1 DDL if `ddl`."""
        inserts = updates = deletes = 0
        for d in dmls:
            tp = d.tp
            if tp is DMLType.INSERT:
                inserts += 1
            elif tp is DMLType.UPDATE:
                updates += 1
            else:
                deletes += 1
        for child, n in zip(self._events, (inserts, updates, deletes, int(ddl)), strict=True):
            if n:
                child.inc(n)

    def saved(self, commit_ts: int) -> None:
        """A checkpoint was saved at `commit_ts`."""
        physical_ms = tso.physical(commit_ts)
        self.checkpoint_tso.set(physical_ms)
        self.checkpoint_delay.observe(max(0.0, time.time() - physical_ms / 1000.0))
        self._savepoint.inc()

    def fatal(self, exc: BaseException) -> None:
        """The error that stops the drainer."""
        self.error.labels(type=error_type(exc)).inc()

    def render(self) -> bytes:
        return metrics_text.render(self.registry, BARE_COUNTERS)
