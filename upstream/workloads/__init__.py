"""Workloads that drive the upstream writer (``binlog-workload``).

    from upstream.workloads import WorkloadOptions, make_workload, runner

    wl = make_workload("bank", WorkloadOptions(accounts=50))
    wl.setup(db)
    result = runner.run(db, wl, threads=8, seed=1, duration=10)
    assert not wl.check(db)

``bank``, ``sysbench``, ``ddl``, ``bigtxn``: see each module's docstring.
"""

from __future__ import annotations

from upstream.workloads.bank import BankWorkload
from upstream.workloads.base import TxnOutcome, Workload, WorkloadOptions, run_txn
from upstream.workloads.bigtxn import BigTxnWorkload
from upstream.workloads.ddl import DDLWorkload
from upstream.workloads.sysbench import SysbenchWorkload

WORKLOADS: dict[str, type[Workload]] = {
    "bank": BankWorkload,
    "sysbench": SysbenchWorkload,
    "ddl": DDLWorkload,
    "bigtxn": BigTxnWorkload,
}


def make_workload(name: str, options: WorkloadOptions) -> Workload:
    """The workload called ``name``; ValueError for an unknown name or a bad option."""
    try:
        cls = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r} (choose from {', '.join(WORKLOADS)})") from None
    return cls(options)


__all__ = [
    "WORKLOADS",
    "BankWorkload",
    "BigTxnWorkload",
    "DDLWorkload",
    "SysbenchWorkload",
    "TxnOutcome",
    "Workload",
    "WorkloadOptions",
    "make_workload",
    "run_txn",
]
