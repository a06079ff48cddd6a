"""Counting damaged records across Spark tasks (a corrupted record is counted and reported, not fatal).

Tasks add what they skipped to an accumulator; the driver reads it after an action.  Spark adds a
task's updates once per successful task for accumulators used inside actions, but a stage that is
computed twice (a DataFrame used by two actions without caching) adds twice: the jobs cache the
scanned records before reading the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from spark_jobs.readers.ranges import Damage

if TYPE_CHECKING:
    from pyspark import Accumulator, SparkContext

__all__ = ["MAX_EXAMPLES", "DamageReport", "damage_accumulator"]

MAX_EXAMPLES: Final = 20
"""Damaged spans kept with their positions; the rest are only counted."""


@dataclass
class DamageReport:
    corrupted: int = 0
    corrupted_bytes: int = 0
    torn: int = 0
    torn_bytes: int = 0
    examples: list[Damage] = field(default_factory=list)

    def add(self, d: Damage) -> None:
        if d.torn:
            self.torn += 1
            self.torn_bytes += d.length
        else:
            self.corrupted += 1
            self.corrupted_bytes += d.length
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(d)

    def merge(self, other: DamageReport) -> DamageReport:
        return DamageReport(
            self.corrupted + other.corrupted,
            self.corrupted_bytes + other.corrupted_bytes,
            self.torn + other.torn,
            self.torn_bytes + other.torn_bytes,
            (self.examples + other.examples)[:MAX_EXAMPLES],
        )

    @property
    def empty(self) -> bool:
        return not (self.corrupted or self.torn)

    def lines(self) -> list[str]:
        """What an operator reads: the totals, then where (file and offset) each example was."""
        if self.empty:
            return []
        out = [
            f"skipped {self.corrupted} corrupted span(s) ({self.corrupted_bytes} bytes) and "
            f"{self.torn} torn record(s) ({self.torn_bytes} bytes)"
        ]
        for d in sorted(self.examples, key=lambda d: (d.path, d.offset)):
            kind = "torn" if d.torn else "corrupted"
            out.append(f"  {kind}: {d.path} offset {d.offset} length {d.length} ({d.reason})")
        return out


def _param() -> Any:
    from pyspark.accumulators import AccumulatorParam

    class _DamageParam(AccumulatorParam[DamageReport]):
        def zero(self, value: DamageReport) -> DamageReport:
            return DamageReport()

        def addInPlace(self, value1: DamageReport, value2: DamageReport) -> DamageReport:  # noqa: N802 - Spark's name
            return value1.merge(value2)

    return _DamageParam()


def damage_accumulator(sc: SparkContext) -> Accumulator[DamageReport]:
    """A fresh accumulator of damage reports on `sc`."""
    acc: Accumulator[DamageReport] = sc.accumulator(DamageReport(), _param())
    return acc
