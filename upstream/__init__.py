"""The upstream writer: a TiDB-like database that writes each transaction's binlog to the pump cluster.

This package's public entry point, for the tools and benchmarks that drive a writer:

    from upstream import Database, WorkloadOptions, make_workload, run_workload

    with Database("http://127.0.0.1:2379", "sqlite:///up.db") as db:
        wl = make_workload("bank", WorkloadOptions(accounts=50))
        wl.setup(db)
        result = run_workload(db, wl, threads=8, seed=1, duration=10)
"""

from __future__ import annotations

from upstream.database import Database
from upstream.workloads import WORKLOADS, Workload, WorkloadOptions, make_workload
from upstream.workloads.runner import RunResult, Snapshot, percentile
from upstream.workloads.runner import run as run_workload

__all__ = [
    "WORKLOADS",
    "Database",
    "RunResult",
    "Snapshot",
    "Workload",
    "WorkloadOptions",
    "make_workload",
    "percentile",
    "run_workload",
]
