"""Drive a workload from many threads for a duration or a number of transactions, and count.

Each thread has its own ``random.Random(seed, thread)`` and calls ``workload.run_once`` until
the deadline, the transaction budget or ``stop``.  A thread finishes the transaction it is in
before it looks at ``stop``, so stopping never abandons a commit half-way.  An exception other
than a BinlogError out of ``run_once`` is a bug: it is recorded and stops every thread.
"""

from __future__ import annotations

import itertools
import logging
import math
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from upstream.workloads.base import TxnOutcome, Workload

if TYPE_CHECKING:
    from upstream.database import Database

log = logging.getLogger(__name__)

MAX_LATENCY_SAMPLES = 1_000_000
MAX_ERROR_KINDS = 20
ERROR_TEXT = 300


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, nearest rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


@dataclass(frozen=True)
class Snapshot:
    elapsed: float
    committed: int
    failed: int
    retried: int
    ddl: int
    unknown: int
    nbytes: int

    @property
    def txn_per_s(self) -> float:
        return self.committed / self.elapsed if self.elapsed > 0 else 0.0

    def line(self, previous: Snapshot | None = None) -> str:
        """The one-line progress report."""
        rate = self.txn_per_s
        if previous is not None and self.elapsed > previous.elapsed:
            rate = (self.committed - previous.committed) / (self.elapsed - previous.elapsed)
        text = (
            f"{self.elapsed:7.1f}s  committed {self.committed}  failed {self.failed}  "
            f"retried {self.retried}  {rate:.1f} txn/s"
        )
        if self.ddl:
            text += f"  ddl {self.ddl}"
        if self.nbytes:
            text += f"  {self.nbytes / self.elapsed / 1e6 if self.elapsed else 0:.1f} MB/s"
        return text


@dataclass
class Stats:
    """Counters shared by the worker threads (``record`` is thread-safe)."""

    committed: int = 0
    failed: int = 0
    retried: int = 0
    ddl: int = 0
    unknown: int = 0
    nbytes: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def record(self, o: TxnOutcome) -> None:
        with self._lock:
            self.retried += o.retries
            if o.committed:
                self.committed += 1
                self.nbytes += o.nbytes
                if o.kind == "ddl":
                    self.ddl += 1
                elif len(self.latencies) < MAX_LATENCY_SAMPLES:
                    self.latencies.append(o.commit_latency)
            else:
                self.failed += 1
                self.unknown += o.unknown
                key = o.error[:ERROR_TEXT]
                if key in self.errors or len(self.errors) < MAX_ERROR_KINDS:
                    self.errors[key] += 1

    def snapshot(self, elapsed: float) -> Snapshot:
        with self._lock:
            return Snapshot(elapsed, self.committed, self.failed, self.retried, self.ddl, self.unknown, self.nbytes)


@dataclass
class RunResult:
    stats: Stats
    elapsed: float
    crashed: list[str]
    """Tracebacks of unexpected exceptions (each one stopped the run)."""
    interrupted: bool

    def summary(self) -> dict[str, Any]:
        s = self.stats
        lat = sorted(s.latencies)
        snap = s.snapshot(self.elapsed)
        return {
            "elapsed_s": round(self.elapsed, 3),
            "txns": s.committed + s.failed,
            "committed": s.committed,
            "failed": s.failed,
            "retried": s.retried,
            "ddl": s.ddl,
            "unknown_outcome": s.unknown,
            "txn_per_s": round(snap.txn_per_s, 2),
            "commit_latency_ms": {
                "p50": _ms(percentile(lat, 0.50)),
                "p99": _ms(percentile(lat, 0.99)),
                "max": _ms(lat[-1]) if lat else None,
            },
            "bytes_committed": s.nbytes,
            "mb_per_s": round(s.nbytes / self.elapsed / 1e6, 3) if self.elapsed > 0 else 0.0,
            "errors": dict(s.errors.most_common()),
            "interrupted": self.interrupted,
            "crashed": self.crashed,
        }


def _ms(seconds: float) -> float | None:
    return None if math.isnan(seconds) else round(seconds * 1000, 3)


def run(
    db: Database,
    workload: Workload,
    *,
    threads: int,
    seed: int,
    duration: float | None = None,
    txns: int | None = None,
    stop: threading.Event | None = None,
    on_progress: Callable[[Snapshot], None] | None = None,
    progress_interval: float = 1.0,
) -> RunResult:
    """Run ``workload.run_once`` from ``threads`` threads until ``duration`` s, ``txns`` units or ``stop``."""
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if (duration is None) == (txns is None):
        raise ValueError("give exactly one of duration and txns")
    stop = stop or threading.Event()
    halt = threading.Event()  # stop, the deadline, or a crash
    stats = Stats()
    crashed: list[str] = []
    budget = itertools.count()
    began = time.monotonic()
    deadline = began + duration if duration is not None else math.inf

    def worker(i: int) -> None:
        rng = random.Random(seed * 1_000_003 + i)
        try:
            while not halt.is_set() and not stop.is_set() and time.monotonic() < deadline:
                if txns is not None and next(budget) >= txns:
                    break
                stats.record(workload.run_once(db, rng))
        except BaseException:
            crashed.append(traceback.format_exc())
            log.exception("workload thread %d stopped by an unexpected error", i)
            halt.set()

    pool = [threading.Thread(target=worker, args=(i,), name=f"workload-{i}", daemon=True) for i in range(threads)]
    for t in pool:
        t.start()
    next_report = began + progress_interval
    try:
        for t in pool:
            while t.is_alive():
                t.join(max(0.0, next_report - time.monotonic()))
                if time.monotonic() >= next_report:
                    if on_progress is not None:
                        on_progress(stats.snapshot(time.monotonic() - began))
                    next_report += progress_interval
    finally:
        halt.set()
    elapsed = time.monotonic() - began
    return RunResult(stats, elapsed, crashed, stop.is_set())
