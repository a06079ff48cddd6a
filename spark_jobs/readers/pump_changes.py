"""Pump value logs -> row changes: pair every prewrite with its commit by start_ts, decode committed ones.

Two passes over the same byte ranges (`pump.py`):

1. index: every task reads its range's record headers only (`common.pb.wire.split_binlog`: the rows are
   skipped, not copied) and returns its commits packed as int64 pairs (start_ts, commit_ts), the DDL
   jobs it saw committed (job id -> commit_ts) and its counts.  The driver merges them into a
   `CommitIndex`: two sorted int64 arrays, 16 bytes per transaction, broadcast to the tasks.
   Pairing is by start_ts across the whole pump set (a transaction's prewrite and commit go to the
   same pump, but a client retry can store one prewrite twice: the copies decode to identical rows).
   Damage is counted in this pass only.
2. decode: every task reads its range again and decodes each prewrite whose transaction committed
   inside the window (start-ts, stop-ts], with the table as it was at the prewrite's schema version
   (`drainer.schema.DrainerSchema` built from the DDL history, `drainer.translator.translate_iter`).
   Rows of tables the replay does not want (filtered, or gone by stop-ts) are not decoded at all.
   A transaction that cannot be decoded (unknown table, schema version missing from the history,
   bad row bytes) is counted and reported, not fatal.
"""

from __future__ import annotations

import bisect
import logging
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from common.errors import BinlogError
from common.pb import binlog_pb2
from common.schema.model import Job
from spark_jobs.readers.changes import CHANGE_DDL, Change, counted, dml_changes
from spark_jobs.readers.damage import DamageReport
from spark_jobs.readers.pump import scan_vlog_range
from spark_jobs.readers.ranges import Damage, FileRange

if TYPE_CHECKING:
    from pyspark import Accumulator, Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["CommitIndex", "DecodePlan", "Window", "index_range", "merge_index", "pump_changes", "scan_changes"]

log = logging.getLogger(__name__)

_PREWRITE = binlog_pb2.Prewrite
_COMMIT = binlog_pb2.Commit


@dataclass(frozen=True, slots=True)
class Window:
    """Commit ts window (start_ts, stop_ts]; None: unbounded on that side."""

    start_ts: int | None = None
    stop_ts: int | None = None

    def contains(self, commit_ts: int) -> bool:
        return (self.start_ts is None or commit_ts > self.start_ts) and (
            self.stop_ts is None or commit_ts <= self.stop_ts
        )


@dataclass
class RangeIndex:
    """What pass 1 found in one range."""

    commits: bytes = b""
    """int64 pairs start_ts, commit_ts (native byte order) of DML commits."""
    ddl: list[tuple[int, int]] = field(default_factory=list)
    """(job id, commit_ts) of DDL commits."""
    records: int = 0
    prewrites: int = 0
    rollbacks: int = 0
    fake: int = 0


def index_range(rng: FileRange, acc: Accumulator[DamageReport] | None) -> RangeIndex:
    """Pass 1 over one range."""
    from common.pb.wire import split_binlog

    out = RangeIndex()
    pairs = array("q")
    report = DamageReport()
    for item in scan_vlog_range(rng):
        if isinstance(item, Damage):
            report.add(item)
            continue
        try:
            b, _ = split_binlog(item.payload)
        except BinlogError:
            report.add(Damage(rng.source, rng.path, item.offset, len(item.payload), "not a binlog"))
            continue
        out.records += 1
        tp = b.tp
        if tp == _PREWRITE:
            out.prewrites += 1
        elif tp == _COMMIT:
            if b.ddl_job_id:
                out.ddl.append((int(b.ddl_job_id), int(b.commit_ts)))
            else:
                pairs.append(b.start_ts)
                pairs.append(b.commit_ts)
        elif b.start_ts == b.commit_ts and b.commit_ts > 0:
            out.fake += 1
        else:
            out.rollbacks += 1
    out.commits = pairs.tobytes()
    if acc is not None and not report.empty:
        acc.add(report)
    return out


@dataclass
class CommitIndex:
    """start_ts -> commit_ts of every committed DML transaction, as two sorted arrays (compact to broadcast)."""

    starts: array[int]
    commit_ts: array[int]
    ddl_commits: dict[int, int]
    records: int = 0
    prewrites: int = 0
    rollbacks: int = 0
    fake: int = 0

    def lookup(self, start_ts: int) -> int:
        """The commit_ts of the transaction that started at `start_ts`, 0 when it did not commit."""
        i = bisect.bisect_left(self.starts, start_ts)
        if i < len(self.starts) and self.starts[i] == start_ts:
            return int(self.commit_ts[i])
        return 0

    def __len__(self) -> int:
        return len(self.starts)


def merge_index(parts: Sequence[RangeIndex]) -> CommitIndex:
    """One index from every range's (duplicates of a start_ts collapse: the same transaction)."""
    pairs: dict[int, int] = {}
    ddl: dict[int, int] = {}
    for p in parts:
        a = array("q")
        a.frombytes(p.commits)
        for i in range(0, len(a), 2):
            pairs[a[i]] = a[i + 1]
        for job_id, ts in p.ddl:
            ddl[job_id] = max(ts, ddl.get(job_id, 0))
    starts = sorted(pairs)
    return CommitIndex(
        starts=array("q", starts),
        commit_ts=array("q", (pairs[s] for s in starts)),
        ddl_commits=ddl,
        records=sum(p.records for p in parts),
        prewrites=sum(p.prewrites for p in parts),
        rollbacks=sum(p.rollbacks for p in parts),
        fake=sum(p.fake for p in parts),
    )


def build_schema(jobs_json: Sequence[str]) -> Any:
    """A drainer schema with every job applied: `shape(table_id, version)` answers for any version."""
    from drainer import DrainerSchema, MemoryJobSource

    jobs = [Job.from_json(text) for text in jobs_json]
    schema = DrainerSchema(MemoryJobSource(jobs))
    schema.load(max((j.schema_version for j in jobs), default=0))
    return schema


@dataclass(frozen=True)
class DecodePlan:
    """Everything pass 2 needs, broadcast once: the commit index, the DDL history, the window and
    the tables wanted (None: every table)."""

    index: CommitIndex
    jobs_json: tuple[str, ...]
    window: Window = Window()
    wanted_ids: frozenset[int] | None = None

    def wanted(self, table_id: int) -> bool:
        return self.wanted_ids is None or table_id in self.wanted_ids


def scan_changes(rng: FileRange, plan: DecodePlan, errors: Accumulator[DamageReport] | None) -> Iterator[Change]:
    """Pass 2 over one range: the row changes of every committed prewrite in the window."""
    from common.pb.wire import split_binlog
    from drainer import translate_iter

    schema = build_schema(plan.jobs_json)
    report = DamageReport()
    index, window = plan.index, plan.window
    skip = _skipper(plan.wanted)
    try:
        for item in scan_vlog_range(rng):
            if isinstance(item, Damage):
                continue  # counted by pass 1
            try:
                b, pv = split_binlog(item.payload)
            except BinlogError:
                continue
            if b.tp != _PREWRITE or b.ddl_job_id or pv is None:
                continue
            commit_ts = index.lookup(b.start_ts)
            if not commit_ts or not window.contains(commit_ts):
                continue
            commit = binlog_pb2.Binlog(tp=_COMMIT, start_ts=b.start_ts, commit_ts=commit_ts)
            try:
                _, dmls = translate_iter(commit, schema, node_id=rng.source, skip_table=skip, prewrite_value=pv)
                yield from dml_changes(dmls, commit_ts)
            except BinlogError as exc:
                report.add(Damage(rng.source, rng.path, item.offset, len(item.payload), f"cannot decode: {exc}"))
    finally:
        if errors is not None and not report.empty:
            errors.add(report)


def _skipper(wanted: Callable[[int], bool]) -> Callable[[Any], bool]:
    def skip(shape: Any) -> bool:
        return not wanted(int(shape.info.id))

    return skip


def pump_changes(
    spark: SparkSession,
    ranges: list[FileRange],
    plan: Broadcast[DecodePlan],
    errors: Accumulator[DamageReport] | None = None,
    counter: Accumulator[int] | None = None,
) -> DataFrame:
    """The row changes (`CHANGE_DDL`) of pass 2 over `ranges` (one task each); `counter` counts them."""

    def task(rng: FileRange) -> Iterator[Change]:
        return counted(scan_changes(rng, plan.value, errors), counter)

    rdd = spark.sparkContext.parallelize(ranges, max(1, len(ranges))).flatMap(task)
    return spark.createDataFrame(rdd, CHANGE_DDL)
