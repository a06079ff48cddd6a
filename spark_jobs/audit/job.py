"""`binlog-spark audit`: the steps, from table discovery to the report.

1. :func:`prepare` (driver, no Spark): connect to both sides (an unreachable side is an
   InputError before any Spark work), find the tables (``--tables`` or every upstream table),
   describe each on both sides (``meta.audit_table``) and plan its chunks from the upstream
   (row count; min/max or a sorted key sample).  A table missing on one side, with other
   columns, or that cannot be read is a problem in the report.
2. :func:`execute` pass 1: one Spark task per chunk and side reads the chunk and returns its row
   count and checksum; ``compare.chunk_status`` joins the sides.
3. pass 2, only for chunks whose sums differ: the same tasks return the chunk's rows, which
   ``compare.row_differences`` joins by key into missing / extra / different, counted and
   sampled per table.

Tables are read as they are at the moment each chunk is read (no snapshot across chunks or
sides): audit a quiet pair, e.g. after the drainer caught up (``/commit_ts``) with the writer
stopped.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import pymysql

from common.errors import BinlogError, ConfigError
from spark_jobs.audit.compare import (
    CHUNK_DDL,
    DOWN,
    KINDS,
    ROW_DDL,
    UP,
    chunk_status,
    difference_counts,
    difference_examples,
    row_differences,
)
from spark_jobs.audit.meta import AuditTable, TableProblemError, audit_table
from spark_jobs.audit.plan import (
    DEFAULT_CHUNK_SIZE,
    Chunk,
    boundary_chunks,
    chunk_count,
    int_chunks,
    sample_fraction,
    single_chunk,
)
from spark_jobs.audit.read import (
    Connection,
    Endpoint,
    ReadTask,
    convert,
    describe_table,
    list_tables,
    order_exprs,
    query_all,
    read_partition,
)
from spark_jobs.audit.report import EXAMPLES, AuditReport, Example, TableReport, differing_positions
from spark_jobs.errors import InputError
from spark_jobs.session import fit_shuffle_partitions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Prepared", "execute", "parse_tables", "plan_table", "prepare", "run_audit"]

log = logging.getLogger(__name__)

_SQLITE_RANDOM_SCALE: Final = 1_000_000
"""sqlite samples rows with ``abs(random() % scale) < fraction * scale``."""
_DB_ERRORS: Final = (BinlogError, sqlite3.Error, pymysql.MySQLError)


def parse_tables(specs: Sequence[str]) -> list[tuple[str, str]]:
    """``db.t`` names from ``--tables`` values (each may hold several, comma-separated); ConfigError if bad."""
    out: list[tuple[str, str]] = []
    for spec in specs:
        for item in spec.split(","):
            name = item.strip()
            if not name:
                continue
            db, dot, table = name.partition(".")
            if not dot or not db or not table:
                raise ConfigError(f"--tables {name!r}: expected db.table")
            if (db, table) not in out:
                out.append((db, table))
    if not out and specs:
        raise ConfigError("--tables names no table")
    return out


def _count(ep: Endpoint, conn: Connection, db: str, table: str) -> int:
    return int(query_all(conn, f"SELECT COUNT(*) FROM {ep.dialect().table(db, table)}")[0][0])


def plan_table(ep: Endpoint, conn: Connection, t: AuditTable, chunk_size: int) -> tuple[int, list[Chunk]]:
    """The upstream's row count and the chunks of `t` (read from the upstream side `ep`)."""
    rows = _count(ep, conn, t.db, t.name)
    n = chunk_count(rows, chunk_size)
    if not t.chunk_key or n == 1:
        return rows, single_chunk()
    d = ep.dialect()
    table = d.table(t.db, t.name)
    exprs = order_exprs(ep, t, UP)
    if t.int_ranges:
        lo_raw, hi_raw = query_all(conn, f"SELECT MIN({exprs[0]}), MAX({exprs[0]}) FROM {table}")[0]
        (lo,) = convert(ep, t, (lo_raw,), t.chunk_key)
        (hi,) = convert(ep, t, (hi_raw,), t.chunk_key)
        return rows, int_chunks(int(lo), int(hi), rows, chunk_size)
    cols = ", ".join(d.select_expr(t.info.columns[p]) for p in t.chunk_key)
    fraction = sample_fraction(rows, n)
    where = ""
    params: list[object] = []
    if fraction < 1.0:
        if ep.kind == "sqlite":
            where = " WHERE abs(random() % ?) < ?"
            params = [_SQLITE_RANDOM_SCALE, int(fraction * _SQLITE_RANDOM_SCALE)]
        else:
            where, params = " WHERE RAND() < %s", [fraction]
    sample = query_all(conn, f"SELECT {cols} FROM {table}{where} ORDER BY {', '.join(exprs)}", params)
    keys = [convert(ep, t, r, t.chunk_key) for r in sample]
    return rows, boundary_chunks(keys, rows, chunk_size)


@dataclass
class Prepared:
    """What pass 1 reads: every comparable table with its chunks, and the report so far."""

    up: Endpoint
    down: Endpoint
    report: AuditReport
    plans: list[tuple[AuditTable, list[Chunk]]] = field(default_factory=list)

    def tasks(self, chunks: set[tuple[str, int]] | None = None, *, rows: bool = False) -> list[ReadTask]:
        """One task per side and chunk (only `chunks` when given)."""
        out = []
        for t, planned in self.plans:
            for c in planned:
                if chunks is None or (t.full_name, c.index) in chunks:
                    out.append(ReadTask(UP, self.up, t, c, rows))
                    out.append(ReadTask(DOWN, self.down, t, c, rows))
        return out


def _describe(
    prep: Prepared,
    conns: tuple[Connection, Connection],
    db: str,
    name: str,
    chunk_size: int,
) -> None:
    report = TableReport(db, name)
    prep.report.tables.append(report)
    up_conn, down_conn = conns
    try:
        up_t = describe_table(prep.up, up_conn, db, name)
        down_t = describe_table(prep.down, down_conn, db, name)
        if up_t is None or down_t is None:
            if up_t is None and down_t is None:
                report.problem = "missing upstream and downstream"
            elif up_t is None:
                rows = _count(prep.down, down_conn, db, name)
                report.problem = f"missing upstream (downstream has {rows} rows)"
            else:
                rows = _count(prep.up, up_conn, db, name)
                report.problem = f"missing downstream (upstream has {rows} rows)"
            return
        t = audit_table(up_t, down_t)
        report.key = t.key.description
        report.columns = t.column_names
        rows, chunks = plan_table(prep.up, up_conn, t, chunk_size)
    except TableProblemError as exc:
        report.problem = str(exc)
        return
    except _DB_ERRORS as exc:
        report.problem = f"cannot read: {exc}"
        return
    report.chunks = len(chunks)
    prep.plans.append((t, chunks))
    log.info("audit plan: table=%s rows=%d chunks=%d key=%s", t.full_name, rows, len(chunks), t.key.description)


def prepare(
    up: Endpoint, down: Endpoint, tables: Sequence[tuple[str, str]] = (), *, chunk_size: int = DEFAULT_CHUNK_SIZE
) -> Prepared:
    """Connect, discover and plan (no Spark).  InputError when a side cannot be reached."""
    if chunk_size <= 0:
        raise ConfigError(f"--chunk-size must be positive, got {chunk_size}")
    prep = Prepared(up, down, AuditReport(up.describe(), down.describe(), chunk_size))
    up_conn = up.connect()
    try:
        down_conn = down.connect()
        try:
            names = list(tables) or list_tables(up, up_conn)
            if not names:
                raise InputError(f"upstream {up.describe()} has no tables (give --tables or another DSN)")
            for db, name in names:
                _describe(prep, (up_conn, down_conn), db, name, chunk_size)
            if not tables:
                have = set(names)
                dbs = {db for db, _ in names}
                prep.report.extra_tables = [
                    f"{db}.{t}" for db, t in list_tables(down, down_conn) if db in dbs and (db, t) not in have
                ]
        finally:
            _close(down_conn)
    finally:
        _close(up_conn)
    return prep


def _close(conn: Connection) -> None:
    with contextlib.suppress(Exception):
        conn.close()


def _read(spark: SparkSession, tasks: list[ReadTask], ddl: str, *, collect: bool = False) -> DataFrame:
    """A DataFrame of what `tasks` read: one Spark partition per task, so every chunk and side is read in parallel.

    `collect`: bring the (small) results to the driver first, so that using the DataFrame twice (both
    sides of a join) does not read the chunks twice."""
    rdd = spark.sparkContext.parallelize(tasks, max(1, len(tasks))).mapPartitions(read_partition)
    return spark.createDataFrame(rdd.collect() if collect else rdd, ddl)


def execute(spark: SparkSession, prep: Prepared, *, examples: int = EXAMPLES) -> AuditReport:
    """Passes 1 and 2 on Spark; fills and returns the report."""
    report = prep.report
    by_name = {t.name: t for t in report.tables}
    tasks = prep.tasks()
    if not tasks:
        return report
    differing: set[tuple[str, int]] = set()
    sums = _read(spark, tasks, CHUNK_DDL, collect=True)  # the chunk sums, computed on the executors
    fit_shuffle_partitions(spark)
    for r in chunk_status(sums).collect():
        t = by_name[r["table"]]
        t.upstream_rows += int(r["up_rows"])
        t.downstream_rows += int(r["down_rows"])
        error = r["up_error"] or r["down_error"]
        if error and not t.problem:
            t.problem = f"cannot read {error}"
        if r["differs"]:
            t.chunks_differing += 1
            differing.add((r["table"], int(r["chunk"])))
    log.info("audit pass 1: chunks=%d differing=%d", len(tasks) // 2, len(differing))
    if not differing:
        return report
    rows_read = _read(spark, prep.tasks(differing, rows=True), ROW_DDL).cache()
    diffs = row_differences(rows_read).cache()
    try:
        for r in difference_counts(diffs).collect():
            by_name[r["table"]].add(str(r["kind"]), int(r["n"]))
        rows: list[Any] = difference_examples(diffs, examples).collect()
    finally:
        diffs.unpersist()
        rows_read.unpersist()
    order = {k: i for i, k in enumerate(KINDS)}
    for r in sorted(rows, key=lambda r: (order[r["kind"]], r["chunk"], r["key_text"])):
        by_name[r["table"]].examples.append(
            Example(
                str(r["kind"]),
                str(r["key_text"]),
                None if r["up_cells"] is None else list(r["up_cells"]),
                None if r["down_cells"] is None else list(r["down_cells"]),
                int(r["n"]),
                differing_positions(r["up_hashes"], r["down_hashes"]),
            )
        )
    return report


def run_audit(
    spark: SparkSession,
    up: Endpoint,
    down: Endpoint,
    tables: Sequence[tuple[str, str]] = (),
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    examples: int = EXAMPLES,
) -> AuditReport:
    """Prepare and execute in one call."""
    return execute(spark, prepare(up, down, tables, chunk_size=chunk_size), examples=examples)
