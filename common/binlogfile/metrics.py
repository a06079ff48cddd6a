"""Metrics of binlog files (`binlog_binlogfile_*`, docs/architecture.md#metrics): one set per process.

    binlog_binlogfile_write_binlog_size{label="local"}           histogram exp(16, 2, 20): bytes of one
                                                                 record's payload, per record written
    binlog_binlogfile_write_binlog_duration_time{label="local"}  histogram exp(0.00005, 2, 18): seconds of one
                                                                 `BinlogFileWriter.write_many` call (its
                                                                 records in one write, plus the fdatasync
                                                                 when the writer syncs each write)
    binlog_binlogfile_read_binlog_duration_time{label="local"}   histogram exp(0.00005, 2, 18): seconds to read
                                                                 and decode one chunk of a file (up to 2 MiB,
                                                                 or one larger record) in `iter_records`
    binlog_binlogfile_corruption_binlog_count                    counter: damaged spans skipped by the reader
                                                                 (bad magic, CRC mismatch, impossible length,
                                                                 a torn record before the last file's end),
                                                                 and damage found when a writer reopens its
                                                                 last file; a torn tail at the end is EOF, not
                                                                 counted (as the original)

Names, buckets and the label are the original's (`pkg/binlogfile/metrics.go`: the label is called
`label` and its one value is `local`; the original's metrics docs write it as `type`).  The original observed the
read time per record; ours reads a chunk at a time, so one observation covers the records of a chunk.
A component's `render()` writes the counter under that bare name, as the original's Go client
(`BARE_COUNTERS`; prometheus_client alone would add `_total` to it).

Why one set per process rather than one per component (as `PumpMetrics` / `DrainerMetrics`): binlog
files are written and read by objects built apart from any metrics object (the drainer's file sink is
made by the sink factory, `read_pb_binlogs` and reparo open directories on their own), so, as in the
original, they all report to `METRICS` on the module's `REGISTRY`; a component that serves /metrics
adds `collector()` to its own registry.  The children are bound once (no label lookup per record) and
an observation takes no lock of ours.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "BARE_COUNTERS",
    "DURATION_BUCKETS",
    "METRICS",
    "REGISTRY",
    "SIZE_BUCKETS",
    "BinlogFileMetrics",
    "collector",
]

LABEL: Final = "local"
SIZE_BUCKETS: Final = tuple(16.0 * 2**i for i in range(20))
"""ExponentialBuckets(16, 2, 20), as the original."""
DURATION_BUCKETS: Final = tuple(0.00005 * 2**i for i in range(18))
"""ExponentialBuckets(0.00005, 2, 18), as the original."""
BARE_COUNTERS: Final = frozenset({"binlog_binlogfile_corruption_binlog_count"})
"""Counters a component's /metrics writes without `_total`, as the original (common/metrics_text.py)."""


class BinlogFileMetrics:
    """The four binlogfile series on `registry`, with their one child each bound."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.write_size = Histogram(
            "binlog_binlogfile_write_binlog_size",
            "write binlog size",
            ["label"],
            buckets=SIZE_BUCKETS,
            registry=registry,
        ).labels(label=LABEL)
        self.write_duration = Histogram(
            "binlog_binlogfile_write_binlog_duration_time",
            "Bucketed histogram of write time (s) of binlogs (one write call)",
            ["label"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        ).labels(label=LABEL)
        self.read_duration = Histogram(
            "binlog_binlogfile_read_binlog_duration_time",
            "Bucketed histogram of read time (s) of binlogs (one chunk read and decoded)",
            ["label"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        ).labels(label=LABEL)
        self.corruption = Counter(
            "binlog_binlogfile_corruption_binlog_count", "corruption binlog count", registry=registry
        )


REGISTRY: Final = CollectorRegistry()
"""The process's binlogfile series (not prometheus_client's global REGISTRY: nothing else lands here)."""
METRICS: Final = BinlogFileMetrics(REGISTRY)


class _RegistryCollector(Collector):
    """Yields what `REGISTRY` holds; another registry may register it (no describe: no name clash check)."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def collector() -> Collector:
    """A collector of the binlogfile series, for a component's own registry."""
    return _RegistryCollector()
