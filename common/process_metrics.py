"""The process series every component serves beside its own (docs/architecture.md#metrics).

The original registered client_golang's process collector (`process_*`) and Go collector (`go_*`) on
each component's registry.  Ours registers prometheus_client's process collector, which gives the
same `process_*` names and types on Linux (`process_cpu_seconds_total`, `process_open_fds`,
`process_max_fds`, `process_virtual_memory_bytes`, `process_resident_memory_bytes`,
`process_start_time_seconds`), plus the one it lacks, `process_virtual_memory_max_bytes` (the soft
address-space limit, as client_golang reads it from /proc/self/limits; "unlimited" is 2^64 - 1 there,
so it is here).  The `go_*` series are not served: they describe the Go runtime (goroutines, the Go
heap, its GC), which a Python process does not have, and a Python number under a Go name would be
read against Go-tuned thresholds.  prometheus_client's `python_info` and `python_gc_*` are served
instead (the Python runtime's version and garbage collections).
"""

from __future__ import annotations

import resource
from collections.abc import Iterable
from typing import Final

from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["register"]

UNLIMITED: Final = float(2**64 - 1)
"""What client_golang (procfs) reports for an "unlimited" address space."""


class _AddressSpaceLimit(Collector):
    """`process_virtual_memory_max_bytes`: the soft RLIMIT_AS, read at scrape time."""

    def collect(self) -> Iterable[Metric]:
        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
        yield GaugeMetricFamily(
            "process_virtual_memory_max_bytes",
            "Maximum amount of virtual memory available in bytes.",
            UNLIMITED if soft == resource.RLIM_INFINITY else float(soft),
        )


def register(registry: CollectorRegistry) -> None:
    """Add the process, platform and garbage-collector series, and the address-space limit, to `registry`."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    registry.register(_AddressSpaceLimit())
