"""`binlog-spark audit-binlog`: are the binlog streams of the pumps complete and consistent?

Input: the raw records of every pump (``spark_jobs.readers.pump.binlog_records``: one row per
prewrite / commit / rollback record of the value logs) and, with ``--txn-status DSN``, the upstream's
transaction-status table (``common/txnstatus.py``: start_ts, state, commit_ts), read in parallel
by start_ts ranges.

Findings (:data:`KINDS`; any one makes the exit status 1):

    missing_commit          committed upstream, but no commit record in any pump (the drainer
                            would never apply it); `pumps` lists where its prewrite is
    commit_ts_mismatch      a commit record whose commit_ts is not the upstream's
    not_committed_upstream  a commit record of a transaction the store has rolled back or pending
    duplicate_commit        more than one commit record for one start_ts (across all pumps)
    orphan_commit           a commit record without a prewrite of the same start_ts in the same pump
    shared_commit_ts        one commit_ts used by commit records (or fake binlogs) of different
                            start_ts (the drainer's merger keeps only one binlog per commit_ts)

Without ``--txn-status`` only the last three (stream) checks run.  Records a pump skipped as
damaged are counted by the reader; corrupted spans are a finding too (``damaged``).  A pump's GC
deletes old value-log files: transactions older than the oldest kept file are then reported as
missing; give ``--since-ts`` (a TSO) to check only transactions with start_ts at or above it.
A DDL has no txn-status row: its commit is counted as unknown to the store, not as a finding.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pymysql

from common.errors import BinlogError, ConfigError
from common.txnstatus import TABLE as TXN_STATUS_TABLE
from common.txnstatus import TxnState
from spark_jobs.audit.plan import Chunk, int_chunks, range_predicate, single_chunk
from spark_jobs.audit.read import Endpoint, query_all
from spark_jobs.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "FINDING_DDL",
    "KINDS",
    "STATUS_DDL",
    "BinlogReport",
    "findings",
    "read_txn_status",
    "run_audit_binlog",
    "status_endpoint",
    "status_findings",
    "stream_findings",
]

PREWRITE: Final = 0
COMMIT: Final = 1
ROLLBACK: Final = 2
"""binlog.BinlogType values (tipb)."""

KINDS: Final = (
    "missing_commit",
    "commit_ts_mismatch",
    "not_committed_upstream",
    "duplicate_commit",
    "orphan_commit",
    "shared_commit_ts",
)
FINDING_DDL: Final = "kind STRING, start_ts LONG, commit_ts LONG, pumps ARRAY<STRING>, detail STRING"
STATUS_DDL: Final = "start_ts LONG, state STRING, commit_ts LONG"
STATUS_CHUNK_ROWS: Final = 200_000
"""txn-status rows per Spark task."""


# ------------------------------------------------------------------------------- pure transforms
def _commits(records: DataFrame) -> DataFrame:
    from pyspark.sql import functions as fn

    return records.filter(fn.col("tp") == COMMIT).select("pump", "file", "offset", "start_ts", "commit_ts")


def _finding(df: DataFrame, kind: str, commit_ts: Any, pumps: Any, detail: Any) -> DataFrame:
    from pyspark.sql import functions as fn

    return df.select(
        fn.lit(kind).alias("kind"),
        fn.col("start_ts").cast("long").alias("start_ts"),
        commit_ts.cast("long").alias("commit_ts"),
        pumps.alias("pumps"),
        detail.alias("detail"),
    )


def stream_findings(records: DataFrame) -> DataFrame:
    """duplicate_commit, orphan_commit and shared_commit_ts of raw records (``FINDING_DDL``)."""
    from pyspark.sql import functions as fn

    commits = _commits(records)
    dup = (
        commits.groupBy("start_ts")
        .agg(
            fn.count(fn.lit(1)).alias("n"),
            fn.min("commit_ts").alias("commit_ts"),
            fn.array_sort(fn.collect_list("pump")).alias("pumps"),
            fn.array_sort(fn.collect_set("commit_ts")).alias("ts"),
        )
        .filter(fn.col("n") > 1)
    )
    duplicate = _finding(
        dup,
        "duplicate_commit",
        fn.col("commit_ts"),
        fn.col("pumps"),
        fn.format_string("%d commit records (commit_ts %s)", fn.col("n"), fn.array_join(fn.col("ts"), ", ")),
    )
    prewrites = records.filter(fn.col("tp") == PREWRITE).select("pump", "start_ts").distinct()
    orphans = commits.join(prewrites, ["pump", "start_ts"], "left_anti")
    orphan = _finding(
        orphans,
        "orphan_commit",
        fn.col("commit_ts"),
        fn.array(fn.col("pump")),
        fn.format_string("no prewrite in this pump (%s offset %d)", fn.col("file"), fn.col("offset")),
    )
    fake = (fn.col("tp") == ROLLBACK) & (fn.col("start_ts") == fn.col("commit_ts"))
    stamped = records.filter((fn.col("tp") == COMMIT) | fake)
    shared = (
        stamped.groupBy("commit_ts")
        .agg(
            fn.countDistinct("start_ts").alias("n"),
            fn.min("start_ts").alias("start_ts"),
            fn.array_sort(fn.collect_set("start_ts")).alias("starts"),
            fn.array_sort(fn.collect_set("pump")).alias("pumps"),
        )
        .filter(fn.col("n") > 1)
    )
    shared_ts = _finding(
        shared,
        "shared_commit_ts",
        fn.col("commit_ts"),
        fn.col("pumps"),
        fn.format_string("commit_ts used by start_ts %s", fn.array_join(fn.col("starts"), ", ")),
    )
    return duplicate.unionByName(orphan).unionByName(shared_ts)


def status_findings(records: DataFrame, status: DataFrame) -> DataFrame:
    """missing_commit, commit_ts_mismatch and not_committed_upstream against the txn-status rows."""
    from pyspark.sql import functions as fn

    commits = _commits(records)
    committed = status.filter(fn.col("state") == TxnState.COMMITTED.value).select("start_ts", "commit_ts")
    prewrite_pumps = (
        records.filter(fn.col("tp") == PREWRITE)
        .groupBy("start_ts")
        .agg(fn.array_sort(fn.collect_set("pump")).alias("pumps"))
    )
    missing_rows = committed.join(commits.select("start_ts"), "start_ts", "left_anti").join(
        prewrite_pumps, "start_ts", "left"
    )
    pumps = fn.coalesce(fn.col("pumps"), fn.array().cast("array<string>"))
    missing = _finding(
        missing_rows,
        "missing_commit",
        fn.col("commit_ts"),
        pumps,
        fn.when(
            fn.size(pumps) > 0, fn.format_string("prewrite in %s, no commit record", fn.array_join(pumps, ", "))
        ).otherwise(fn.lit("no prewrite and no commit record in any pump")),
    )
    up = committed.withColumnRenamed("commit_ts", "upstream_ts")
    wrong = commits.join(up, "start_ts").filter(fn.col("commit_ts") != fn.col("upstream_ts"))
    mismatch = _finding(
        wrong,
        "commit_ts_mismatch",
        fn.col("commit_ts"),
        fn.array(fn.col("pump")),
        fn.format_string("upstream commit_ts %d", fn.col("upstream_ts")),
    )
    not_committed = commits.join(
        status.filter(fn.col("state") != TxnState.COMMITTED.value).select("start_ts", "state"), "start_ts"
    )
    rolled = _finding(
        not_committed,
        "not_committed_upstream",
        fn.col("commit_ts"),
        fn.array(fn.col("pump")),
        fn.format_string("upstream state %s", fn.col("state")),
    )
    return missing.unionByName(mismatch).unionByName(rolled)


def findings(records: DataFrame, status: DataFrame | None) -> DataFrame:
    """Every finding (``FINDING_DDL``)."""
    found = stream_findings(records)
    return found if status is None else found.unionByName(status_findings(records, status))


def record_totals(records: DataFrame) -> dict[str, int]:
    """Records per type (prewrite, commit, rollback, fake) over all pumps."""
    from pyspark.sql import functions as fn

    fake = (fn.col("tp") == ROLLBACK) & (fn.col("start_ts") == fn.col("commit_ts"))
    kind = (
        fn.when(fake, "fake")
        .when(fn.col("tp") == PREWRITE, "prewrite")
        .when(fn.col("tp") == COMMIT, "commit")
        .when(fn.col("tp") == ROLLBACK, "rollback")
        .otherwise("other")
    )
    out = dict.fromkeys(("prewrite", "commit", "rollback", "fake", "other"), 0)
    for r in records.groupBy(kind.alias("kind")).count().collect():
        out[str(r["kind"])] = int(r["count"])
    return out


# ----------------------------------------------------------------------------- txn-status reading
@dataclass(frozen=True, slots=True)
class _StatusTask:
    endpoint: Endpoint
    table: str
    since_ts: int
    chunk: Chunk


def status_endpoint(dsn: str) -> tuple[Endpoint, str]:
    ep = Endpoint.parse(dsn)
    if ep.kind == "mysql":
        if not ep.database:
            raise ConfigError(f"--txn-status {dsn!r}: a MySQL txn-status DSN names its database (mysql://.../db)")
        return ep, f"{ep.dialect().quote(ep.database)}.{TXN_STATUS_TABLE}"
    return ep, TXN_STATUS_TABLE


def _read_status(tasks: Iterable[_StatusTask]) -> Iterator[tuple[int, str, int]]:
    conn = None
    try:
        for task in tasks:
            if conn is None:
                conn = task.endpoint.connect()
            ph = task.endpoint.dialect().placeholder
            where, params = range_predicate(task.chunk, ["start_ts"], ph)
            sql = f"SELECT start_ts, state, commit_ts FROM {task.table} WHERE start_ts >= {ph}"
            sql += f" AND {where}" if where else ""
            for start_ts, state, commit_ts in query_all(conn, sql, [task.since_ts, *(v for _, v in params)]):
                yield int(start_ts), str(state), int(commit_ts)
    finally:
        if conn is not None:
            conn.close()


def read_txn_status(spark: SparkSession, dsn: str, *, since_ts: int = 0) -> DataFrame:
    """The txn-status rows with start_ts >= since_ts (``STATUS_DDL``), one Spark task per start_ts range.

    ConfigError for a bad DSN, InputError when the store cannot be reached or has no such table."""
    ep, table = status_endpoint(dsn)
    conn = ep.connect()
    try:
        rows, lo, hi = query_all(
            conn,
            f"SELECT COUNT(*), MIN(start_ts), MAX(start_ts) FROM {table} WHERE start_ts >= {ep.dialect().placeholder}",
            [since_ts],
        )[0]
    except (sqlite3.Error, pymysql.MySQLError, BinlogError) as exc:
        raise InputError(f"txn-status store {ep.describe()}: cannot read {TXN_STATUS_TABLE}: {exc}") from None
    finally:
        conn.close()
    chunks = single_chunk() if not rows else int_chunks(int(lo), int(hi), int(rows), STATUS_CHUNK_ROWS)
    tasks = [_StatusTask(ep, table, since_ts, c) for c in chunks]
    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).mapPartitions(_read_status)
    return spark.createDataFrame(rdd, STATUS_DDL)


# ------------------------------------------------------------------------------------- the report
@dataclass
class BinlogReport:
    pumps: list[str]
    txn_status: str = ""
    since_ts: int = 0
    records: dict[str, int] = field(default_factory=dict)
    committed_checked: int = 0
    """Committed transactions of the txn-status store that were looked for (0 without --txn-status)."""
    unknown_commits: int = 0
    """Commit records of transactions the txn-status store has no row for (DDL, or purged rows)."""
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    examples: list[dict[str, Any]] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)
    """What the reader skipped (lines of DamageReport.lines())."""
    corrupted: int = 0

    @property
    def ok(self) -> bool:
        return not any(self.counts.values()) and not self.corrupted

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "pumps": self.pumps,
            "txn_status": self.txn_status or None,
            "since_ts": self.since_ts,
            "records": self.records,
            "committed_checked": self.committed_checked,
            "unknown_commits": self.unknown_commits,
            "findings": self.counts,
            "examples": self.examples,
            "damage": self.damage,
        }

    def json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def render(self) -> str:
        r = self.records
        head = "audit-binlog OK" if self.ok else "audit-binlog FAILED"
        lines = [
            f"{head}: {len(self.pumps)} pumps, {r.get('commit', 0)} commits, {r.get('prewrite', 0)} prewrites, "
            f"{r.get('rollback', 0)} rollbacks, {r.get('fake', 0)} fake binlogs",
        ]
        if self.txn_status:
            since = f" with start_ts >= {self.since_ts}" if self.since_ts else ""
            lines.append(
                f"  txn-status {self.txn_status}: {self.committed_checked} committed transactions{since} checked; "
                f"{self.unknown_commits} commits without a status row (DDL or purged)"
            )
        else:
            lines.append("  no --txn-status: stream checks only")
        width = max(len(k) for k in KINDS)
        for kind in KINDS:
            lines.append(f"  {kind:<{width}}  {self.counts.get(kind, 0)}")
            for e in self.examples:
                if e["kind"] == kind:
                    pumps = ",".join(e["pumps"]) or "-"
                    lines.append(
                        f"      start_ts={e['start_ts']} commit_ts={e['commit_ts']} pumps={pumps}: {e['detail']}"
                    )
        lines += [f"  {d}" for d in self.damage]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------- the job
def _examples(found: DataFrame, per_kind: int) -> list[dict[str, Any]]:
    from pyspark.sql import Window
    from pyspark.sql import functions as fn

    w = Window.partitionBy("kind").orderBy("start_ts", "commit_ts", "detail")
    rows = found.withColumn("_rank", fn.row_number().over(w)).filter(fn.col("_rank") <= per_kind).collect()
    order = {k: i for i, k in enumerate(KINDS)}
    return [
        {
            "kind": str(r["kind"]),
            "start_ts": int(r["start_ts"]),
            "commit_ts": int(r["commit_ts"]),
            "pumps": list(r["pumps"] or []),
            "detail": str(r["detail"]),
        }
        for r in sorted(rows, key=lambda r: (order[r["kind"]], r["start_ts"], r["commit_ts"]))
    ]


def run_audit_binlog(
    spark: SparkSession,
    pump_dirs: list[str],
    *,
    txn_status: str | None = None,
    since_ts: int = 0,
    examples: int = 5,
) -> BinlogReport:
    """Check the pumps' streams (and against the txn-status store when given).

    InputError when a path is not a pump data directory or the store cannot be read; ConfigError for a
    bad DSN.  Both are raised before any Spark work."""
    from pyspark.sql import functions as fn

    from spark_jobs.readers.damage import damage_accumulator
    from spark_jobs.readers.pump import binlog_records, find_pump_dirs

    if since_ts < 0:
        raise ConfigError(f"--since-ts must not be negative, got {since_ts}")
    pumps = find_pump_dirs(pump_dirs)
    if txn_status:
        status_endpoint(txn_status)
    report = BinlogReport([p.name for p in pumps], txn_status or "", since_ts)
    acc = damage_accumulator(spark.sparkContext)
    records = binlog_records(spark, pump_dirs, damage=acc).cache()
    status: DataFrame | None = None
    try:
        report.records = record_totals(records)  # the first action: the accumulator is complete after it
        report.damage = acc.value.lines()
        report.corrupted = acc.value.corrupted
        if txn_status:
            status = read_txn_status(spark, txn_status, since_ts=since_ts).cache()
            report.committed_checked = status.filter(fn.col("state") == TxnState.COMMITTED.value).count()
            commits = _commits(records).select("start_ts")
            report.unknown_commits = commits.join(status, "start_ts", "left_anti").count()
        found = findings(records, status).cache()
        try:
            for r in found.groupBy("kind").count().collect():
                report.counts[str(r["kind"])] = int(r["count"])
            report.examples = _examples(found, examples)
        finally:
            found.unpersist()
    finally:
        records.unpersist()
        if status is not None:
            status.unpersist()
    return report
