"""`binlog-spark replay`: orchestration, progress and the final summary (the I/O edge of replay).

    1 index    pass 1 over every byte range: commits (pumps) or DDL records (file sink); damage counted
    2 schema   DDL history ordered, each job's effective time, final schema at stop-ts, tables wanted
    3 decode   pass 2: committed row changes in the window, decoded with the schema of their time,
               compacted to the final image per (table, key); materialized once (cached)
    4 ddl      the target's databases and tables created at their final schema
    5 write    final rows written in parallel per partition, tombstones deleted

Every stage prints one line when it ends (what it did, how long it took); Spark's own progress bar
shows the tasks of the running stage.  The summary table at the end gives rows written and deleted
per table; damage (skipped records, transactions that did not decode) is listed under it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from common.pull import PumpWindow
from common.schema.infoschema import InfoSchema
from common.schema.model import Job
from spark_jobs.errors import InputError
from spark_jobs.readers.damage import DamageReport, damage_accumulator
from spark_jobs.readers.ranges import DEFAULT_SPLIT_SIZE, FileRange
from spark_jobs.replay.compact import compact
from spark_jobs.replay.ddl import ScheduledJob, effective_times, final_schema, match_ddl_queries
from spark_jobs.replay.target import MySQLTarget, ParquetTarget, SqliteTarget, Target
from spark_jobs.replay.write import DEFAULT_BATCH_ROWS, FinalTable, WritePlan, prepare_target, write_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Decoded", "ReplayOptions", "ReplaySummary", "read_decode_compact", "run_replay", "select_tables"]

log = logging.getLogger(__name__)

Out = Callable[[str], None]


@dataclass(frozen=True)
class ReplayOptions:
    target: Target | None
    pump_dirs: tuple[str, ...] = ()
    files_dir: str | None = None
    pump_windows: tuple[PumpWindow, ...] = ()
    """Live pumps read over gRPC: the windows `readers.pump_net.plan_windows` cut (stop_ts is set then)."""
    pd_urls: str | None = None
    ddl_file: str | None = None
    start_ts: int | None = None
    stop_ts: int | None = None
    tables: tuple[str, ...] = ()
    """`db.table` names (final names, at stop-ts) to replay; empty: every table."""
    split_size: int = DEFAULT_SPLIT_SIZE
    batch_rows: int = DEFAULT_BATCH_ROWS
    files_tz: str | None = None

    def check(self) -> None:
        if sum(map(bool, (self.pump_dirs, self.files_dir, self.pump_windows))) != 1:
            raise InputError(
                "give exactly one of --from-pumps DIR..., --from-files DIR and --from-pump-addrs / --from-cluster"
            )
        if self.start_ts is not None and self.stop_ts is not None and self.start_ts >= self.stop_ts:
            raise InputError(f"--start-ts {self.start_ts} is not below --stop-ts {self.stop_ts}")
        for name in self.tables:
            db, sep, table = name.partition(".")
            if not sep or not db or not table:
                raise InputError(f"--tables {name!r}: expected db.table")


@dataclass
class Stage:
    name: str
    seconds: float
    detail: str


@dataclass
class ReplaySummary:
    target: str
    stages: list[Stage] = field(default_factory=list)
    tables: list[tuple[str, int, int]] = field(default_factory=list)
    damage: DamageReport = field(default_factory=DamageReport)
    decode_errors: DamageReport = field(default_factory=DamageReport)
    changes: int = 0
    final_rows: int = 0

    @property
    def written(self) -> int:
        return sum(w for _, w, _ in self.tables)

    @property
    def deleted(self) -> int:
        return sum(d for _, _, d in self.tables)

    def render(self) -> str:
        width = max([len("table"), *(len(n) for n, _, _ in self.tables)])
        lines = [f"replay summary ({self.target})", f"  {'table':<{width}}  {'rows written':>12}  {'rows deleted':>12}"]
        for name, w, d in self.tables:
            lines.append(f"  {name:<{width}}  {w:>12,}  {d:>12,}")
        lines.append(f"  {'total':<{width}}  {self.written:>12,}  {self.deleted:>12,}")
        if not self.damage.empty:
            lines += ["damaged input:", *("  " + x for x in self.damage.lines())]
        if not self.decode_errors.empty:
            lines += ["transactions / events that did not decode:", *("  " + x for x in self.decode_errors.lines())]
        return "\n".join(lines)


@dataclass
class Decoded:
    """What stages 1-3 produce."""

    final: DataFrame
    """Compacted rows (`replay.compact.FINAL_COLUMNS`), cached and counted."""
    tables: list[FinalTable]
    schema: InfoSchema
    changes: int
    final_rows: int
    damage: DamageReport
    decode_errors: DamageReport


class _Clock:
    def __init__(self, summary: ReplaySummary, out: Out, total: int) -> None:
        self.summary = summary
        self.out = out
        self.total = total
        self.began = time.perf_counter()

    def done(self, name: str, detail: str) -> None:
        now = time.perf_counter()
        stage = Stage(name, now - self.began, detail)
        self.summary.stages.append(stage)
        self.out(f"[{len(self.summary.stages)}/{self.total}] {name}: {detail} ({stage.seconds:.1f} s)")
        self.began = now


def select_tables(schema: InfoSchema, names: Sequence[str]) -> list[FinalTable]:
    refs = schema.tables()
    if not names:
        return [FinalTable.of(r.db.name, r.table) for r in refs]
    out = []
    for name in names:
        db, _, table = name.partition(".")
        if not schema.has_table(db, table):
            known = ", ".join(f"{r.db.name}.{r.table.name}" for r in refs[:10]) or "none"
            raise InputError(f"--tables: table {name} is not in the schema at stop-ts (tables: {known})")
        ref = schema.table_ref(db, table)
        out.append(FinalTable.of(ref.db.name, ref.table))
    return out


def _schedule(
    jobs: list[Job], commit_ts_of: dict[int, int], opts: ReplayOptions
) -> tuple[list[ScheduledJob], InfoSchema]:
    schedule = effective_times(jobs, commit_ts_of)
    return schedule, final_schema(schedule, opts.stop_ts)


Progress = Callable[[str, str], None]
"""(stage name, what it did): called as each stage ends."""


def _no_progress(name: str, detail: str) -> None:
    log.info("stage %s: %s", name, detail)


@dataclass
class _Accumulators:
    damage: Any
    errors: Any
    counter: Any


Read = tuple["DataFrame", list[ScheduledJob], InfoSchema, list[FinalTable], Callable[[], None]]
"""What a source's reader gives: the changes, the DDL schedule, the schema at stop-ts, the tables to
replay, and what to call once the compacted rows are materialized (frees what the read cached)."""


def _nothing() -> None:
    pass


def _from_pumps(
    spark: SparkSession, opts: ReplayOptions, jobs: list[Job], acc: _Accumulators, progress: Progress
) -> Read:
    from spark_jobs.readers.pump import find_pump_dirs, pump_ranges
    from spark_jobs.readers.pump_changes import DecodePlan, Window, index_range, merge_index, pump_changes

    sc = spark.sparkContext
    damage = acc.damage
    pumps = find_pump_dirs(list(opts.pump_dirs))
    ranges = pump_ranges(pumps, opts.split_size)
    parts = sc.parallelize(ranges, max(1, len(ranges))).map(lambda r: index_range(r, damage)).collect()
    index = merge_index(parts)
    progress(
        "index",
        f"{index.records:,} records in {len(pumps)} pump(s), {len(ranges)} range(s): "
        f"{len(index):,} committed txns, {len(index.ddl_commits)} DDL, {index.rollbacks} rollbacks",
    )
    schedule, schema = _schedule(jobs, index.ddl_commits, opts)
    tables = select_tables(schema, opts.tables)
    plan = DecodePlan(
        index,
        tuple(s.job.to_json() for s in schedule),
        Window(opts.start_ts, opts.stop_ts),
        frozenset(t.table_id for t in tables),
    )
    changes = pump_changes(spark, ranges, sc.broadcast(plan), acc.errors, acc.counter)
    return changes, schedule, schema, tables, _nothing


def _from_files(
    spark: SparkSession, opts: ReplayOptions, jobs: list[Job], acc: _Accumulators, progress: Progress
) -> Read:
    from spark_jobs.readers.files import FilesPlan, file_ranges, files_changes, scan_ddl

    assert opts.files_dir is not None
    sc = spark.sparkContext
    damage = acc.damage
    ranges: list[FileRange] = file_ranges(opts.files_dir, opts.split_size)
    parts = sc.parallelize(ranges, max(1, len(ranges))).map(lambda r: scan_ddl(r, damage)).collect()
    ddl_records = [d for p in parts for d in p.ddl]
    matched = match_ddl_queries(jobs, ddl_records)
    progress(
        "index",
        f"{sum(p.records for p in parts):,} records in {len(ranges)} range(s): {len(ddl_records)} DDL "
        f"({len(matched)} matched to the history)",
    )
    schedule, schema = _schedule(jobs, matched, opts)
    tables = select_tables(schema, opts.tables)
    plan = FilesPlan(
        tuple(s.job.to_json() for s in schedule),
        matched,
        opts.start_ts,
        opts.stop_ts,
        frozenset(t.table_id for t in tables),
        opts.files_tz,
    )
    changes = files_changes(spark, ranges, sc.broadcast(plan), acc.errors, acc.counter)
    return changes, schedule, schema, tables, _nothing


def _from_pump_addrs(
    spark: SparkSession, opts: ReplayOptions, jobs: list[Job], acc: _Accumulators, progress: Progress
) -> Read:
    """One pass over the network: the tagged rows of every window, persisted; DDL commits and counts
    collected from them, the changes made a DataFrame of them."""
    from pyspark import StorageLevel

    from spark_jobs.readers.changes import CHANGE_DDL, Change, counted
    from spark_jobs.readers.pump_net import CHANGE, DDL, NetPlan, Tagged, ddl_commit_times, window_rows

    sc = spark.sparkContext
    windows = list(opts.pump_windows)
    plan = sc.broadcast(NetPlan(tuple(j.to_json() for j in jobs)))
    errors, counter = acc.errors, acc.counter
    rows = sc.parallelize(windows, len(windows)).flatMap(lambda w: window_rows(w, plan.value, errors))
    rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
    small = rows.filter(lambda r: r[0] != CHANGE).collect()
    ddl: dict[int, int] = {}
    commits = ddl_count = size = 0
    for tag, value in small:
        if tag == DDL:
            job_id, ts = value
            ddl[job_id] = max(ts, ddl.get(job_id, 0))
        else:
            commits += value[0]
            ddl_count += value[1]
            size += value[2]
    pumps = len({w.name for w in windows})
    progress(
        "index",
        f"{commits:,} committed txns and {ddl_count} DDL ({size / 1e6:,.1f} MB) pulled from {pumps} pump(s) over "
        f"gRPC in {len(windows)} window(s) up to stop-ts {opts.stop_ts}",
    )
    assert opts.stop_ts is not None  # set with the windows
    times = ddl_commit_times(ddl, jobs, after=opts.start_ts or 0, stop_ts=opts.stop_ts)
    schedule, schema = _schedule(jobs, times, opts)
    tables = select_tables(schema, opts.tables)
    keep = frozenset(t.table_id for t in tables)  # counted as the other readers count: tables replayed only

    def kept(part: Iterable[Tagged]) -> Iterator[Change]:
        return counted((r[1] for r in part if r[0] == CHANGE and r[1][2] in keep), counter)

    changes = spark.createDataFrame(rows.mapPartitions(kept), CHANGE_DDL)

    def release() -> None:
        rows.unpersist()

    return changes, schedule, schema, tables, release


def read_decode_compact(
    spark: SparkSession, opts: ReplayOptions, jobs: list[Job], progress: Progress = _no_progress
) -> Decoded:
    """Stages 1-3: index, schema, decode + compact (cached and counted; `final.unpersist()` when done)."""
    from pyspark import StorageLevel

    from spark_jobs.session import fit_shuffle_partitions

    sc = spark.sparkContext
    acc = _Accumulators(damage_accumulator(sc), damage_accumulator(sc), sc.accumulator(0))
    read = _from_pump_addrs if opts.pump_windows else _from_pumps if opts.pump_dirs else _from_files
    changes, schedule, schema, tables, release = read(spark, opts, jobs, acc, progress)
    fit_shuffle_partitions(spark)  # the index stage ran on the executors: their cores are known
    progress(
        "schema",
        f"{len(schedule)} DDL jobs, schema version {schema.version} at stop-ts, {len(tables)} table(s) to replay",
    )
    final = compact(changes, start_ts=opts.start_ts, stop_ts=opts.stop_ts, keep_tables=[t.table_id for t in tables])
    final = final.persist(StorageLevel.MEMORY_AND_DISK)
    final_rows = final.count()
    release()
    n = int(acc.counter.value)
    progress("decode+compact", f"{n:,} row changes -> {final_rows:,} final rows and tombstones")
    return Decoded(final, tables, schema, n, final_rows, acc.damage.value, acc.errors.value)


def _write_sql(spark: SparkSession, d: Decoded, target: Target, batch_rows: int) -> list[tuple[int, int, int]]:
    plan = spark.sparkContext.broadcast(WritePlan(target, {t.table_id: t for t in d.tables}, batch_rows))
    df = d.final.coalesce(1) if isinstance(target, SqliteTarget) else d.final
    rows: list[tuple[int, int, int]] = df.rdd.mapPartitions(lambda it: write_partition(it, plan.value)).collect()
    return rows


def _write_parquet(spark: SparkSession, d: Decoded, target: ParquetTarget) -> list[tuple[int, int, int]]:
    from pyspark.sql import functions as f

    names = spark.createDataFrame(
        [(t.table_id, t.db, t.name) for t in d.tables], "table_id LONG, schema STRING, table STRING"
    )
    live = d.final.filter(~f.col("deleted"))
    snapshot = live.join(f.broadcast(names), "table_id").select("schema", "table", "key", "values", "commit_ts")
    snapshot.write.mode("overwrite").partitionBy("schema", "table").parquet(str(target.path))
    counts = d.final.groupBy("table_id").agg(
        f.sum(f.when(~f.col("deleted"), 1).otherwise(0)).alias("w"),
        f.sum(f.when(f.col("deleted"), 1).otherwise(0)).alias("d"),
    )
    return [(int(r["table_id"]), int(r["w"]), int(r["d"])) for r in counts.collect()]


def run_replay(spark: SparkSession, opts: ReplayOptions, jobs: list[Job], out: Out = print) -> ReplaySummary:
    """Stages 1-5; the summary (also printed through `out`)."""
    target = opts.target
    assert target is not None
    summary = ReplaySummary(target.describe())
    clock = _Clock(summary, out, 5)
    d = read_decode_compact(spark, opts, jobs, clock.done)
    summary.damage, summary.decode_errors = d.damage, d.decode_errors
    summary.changes, summary.final_rows = d.changes, d.final_rows
    try:
        created, existing = prepare_target(target, d.tables)
        clock.done("ddl", f"{created} table(s) created, {existing} already there, at the final schema")
        if isinstance(target, MySQLTarget | SqliteTarget):
            per_task = _write_sql(spark, d, target, opts.batch_rows)
        else:
            per_task = _write_parquet(spark, d, target)
    finally:
        d.final.unpersist()
    totals: dict[int, list[int]] = {}
    for tid, w, dl in per_task:
        t = totals.setdefault(tid, [0, 0])
        t[0] += w
        t[1] += dl
    names = {t.table_id: t.full_name for t in d.tables}
    summary.tables = sorted((names[tid], w, dl) for tid, (w, dl) in totals.items())
    clock.done("write", f"{summary.written:,} rows written, {summary.deleted:,} deleted into {target.describe()}")
    out(summary.render())
    return summary
