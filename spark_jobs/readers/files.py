"""Drainer file-sink directories (pb binlog files) -> row changes, scanned in parallel by byte range.

A file sink writes one `pb_binlog.Binlog` record per transaction (`drainer/sinks/file.py`, framing
in `common/binlogfile/record.py`): DML records carry row events with database and table *names*,
column names, MySQL types and values; DDL records the query text.  No table ids, no keys: those
come from the DDL history (`spark_jobs.readers.ddl`).

Two passes over the ranges (`ranges.py`):

1. DDL: every task returns the DDL records of its range `(commit_ts, query)` and its counts; damage is
   counted here.  The driver matches them to the history's jobs in order (`replay.ddl.match_ddl_queries`),
   which says when each job took effect.
2. rows: every event of a DML record in the window is read with the table its name had just before
   the record's commit_ts (`replay.ddl.NameTimeline`): that gives the table id and the table info whose
   primary key makes the key.  Values are turned back into the canonical values the writer stored
   (`common.pbfile.decode_value`, then ENUM index -> name, SET bits -> names, BIT int -> bytes,
   `check_type_value`), so a row read from a file sink has the same JSON as one read from a pump.
   An event of a table the history does not know at that time, or with a value that does not fit its
   column, is counted and reported, not fatal.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from google.protobuf.message import DecodeError

from common.codec.flatten import MySQLType
from common.errors import BinlogError, StorageError
from common.framing import FrameDecoder
from common.pb import pb_binlog_pb2
from common.schema.model import ColumnInfo, Job, TableInfo
from common.schema.types import check_type_value
from spark_jobs.errors import InputError
from spark_jobs.readers.changes import CHANGE_DDL, OP_DELETE, OP_INSERT, OP_UPDATE, Change, KeyPlan, counted
from spark_jobs.readers.damage import DamageReport
from spark_jobs.readers.ranges import DEFAULT_SPLIT_SIZE, Damage, FileRange, plan_ranges, scan_range
from spark_jobs.replay.ddl import NameTimeline, effective_times

if TYPE_CHECKING:
    from pyspark import Accumulator, Broadcast
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["FilesPlan", "file_ranges", "files_changes", "find_file_sink", "scan_ddl", "scan_file_changes"]

log = logging.getLogger(__name__)

_DML: Final = pb_binlog_pb2.DML
_DDL: Final = pb_binlog_pb2.DDL
_DDL_START: Final = b"\x08\x01"  # field 1 (tp) = DDL: written first by gogo and by python protobuf
_OPS: Final = {pb_binlog_pb2.Insert: OP_INSERT, pb_binlog_pb2.Update: OP_UPDATE, pb_binlog_pb2.Delete: OP_DELETE}


def find_file_sink(directory: str) -> list[tuple[str, int]]:
    """(path, size) of every binlog file of a file-sink directory; InputError when it is not one."""
    p = Path(directory)
    if not p.is_dir():
        raise InputError(f"file-sink directory {directory} does not exist or is not a directory")
    from common.binlogfile import list_binlog_files

    try:
        names = list_binlog_files(p)
    except StorageError as exc:
        raise InputError(str(exc)) from None
    if not names:
        raise InputError(f"{directory} is not a drainer file-sink directory: no binlog-* files in it")
    return [(str(p / n.name), (p / n.name).stat().st_size) for n in names]


def file_ranges(directory: str, split_size: int = DEFAULT_SPLIT_SIZE) -> list[FileRange]:
    out: list[FileRange] = []
    for path, size in find_file_sink(directory):
        out.extend(plan_ranges(directory, path, size, split_size))
    return out


def _decoder(start: int, end: int) -> FrameDecoder:
    from common.binlogfile.record import RecordDecoder

    return RecordDecoder(start, end=end)


def _parse(payload: bytes) -> pb_binlog_pb2.Binlog | None:
    b = pb_binlog_pb2.Binlog()
    try:
        b.ParseFromString(payload)
    except DecodeError:
        return None
    return b


@dataclass
class RangeDDL:
    """What pass 1 found in one range."""

    ddl: list[tuple[int, str]] = field(default_factory=list)
    records: int = 0
    max_commit_ts: int = 0


def scan_ddl(rng: FileRange, acc: Accumulator[DamageReport] | None) -> RangeDDL:
    """Pass 1 over one range: its DDL records; damage and records that are not pb binlogs go to `acc`.

    A DML record is not parsed: gogo writes field 1 (tp) first, so `08 00` starts every DML record.
    """
    out = RangeDDL()
    report = DamageReport()
    for item in scan_range(rng, _decoder):
        if isinstance(item, Damage):
            report.add(item)
            continue
        payload = item.payload
        out.records += 1
        if payload[:2] == b"\x08\x00":
            continue
        b = _parse(payload)
        if b is None:
            report.add(Damage(rng.source, rng.path, item.offset, len(payload), "not a pb binlog"))
            continue
        if b.tp == _DDL:
            out.ddl.append((int(b.commit_ts), b.ddl_query.decode("utf-8", "replace")))
    if acc is not None and not report.empty:
        acc.add(report)
    return out


@dataclass(frozen=True)
class FilesPlan:
    """What pass 2 needs, broadcast once."""

    jobs_json: tuple[str, ...]
    job_ts: dict[int, int]
    """job id -> commit_ts of its DDL record (jobs not in the files take effect at their start_ts)."""
    start_ts: int | None = None
    stop_ts: int | None = None
    wanted_ids: frozenset[int] | None = None
    tz: str | None = None
    """Time zone the drainer wrote TIMESTAMP text in (None: this host's)."""

    def in_window(self, ts: int) -> bool:
        return (self.start_ts is None or ts > self.start_ts) and (self.stop_ts is None or ts <= self.stop_ts)


class _Tables:
    """Per task: key plans and column lookups of the table versions seen."""

    def __init__(self, plan: FilesPlan) -> None:
        jobs = [Job.from_json(t) for t in plan.jobs_json]
        self.timeline = NameTimeline(effective_times(jobs, plan.job_ts))
        self._plans: dict[int, KeyPlan] = {}

    def plan(self, info: TableInfo) -> KeyPlan:
        p = self._plans.get(id(info))
        if p is None or p.columns is not info.columns:
            p = self._plans[id(info)] = KeyPlan(info.columns, info)
        return p


def _tzinfo(name: str | None) -> dt.tzinfo | None:
    if name is None:
        return None
    from zoneinfo import ZoneInfo

    return dt.UTC if name.upper() == "UTC" else ZoneInfo(name)


def canonical(col: ColumnInfo, value: Any) -> Any:
    """The value the writer stored for `col`, from what `common.pbfile.decode_value` gives."""
    if value is None:
        return None
    ct = col.ctype
    tp = ct.tp
    if isinstance(value, int) and not isinstance(value, bool):
        if tp == MySQLType.ENUM:
            if not 0 < value <= len(ct.elems):
                raise BinlogError(f"column {col.name}: enum index {value} out of range")
            return ct.elems[value - 1]
        if tp == MySQLType.SET:
            return ",".join(e for i, e in enumerate(ct.elems) if value >> i & 1)
        if tp == MySQLType.BIT:
            return value.to_bytes((max(ct.flen, 1) + 7) // 8, "big")
    return check_type_value(ct, value, col.name)


def scan_file_changes(rng: FileRange, plan: FilesPlan, errors: Accumulator[DamageReport] | None) -> Iterator[Change]:
    """Pass 2 over one range: the row changes of every DML record in the window."""
    from common.pbfile import decode_value, parse_columns

    tables = _Tables(plan)
    tz = _tzinfo(plan.tz)
    report = DamageReport()
    try:
        for item in scan_range(rng, _decoder):
            if isinstance(item, Damage) or item.payload[:2] == _DDL_START:
                continue
            b = _parse(item.payload)
            if b is None or b.tp != _DML or not plan.in_window(b.commit_ts):
                continue
            commit_ts = int(b.commit_ts)
            for seq, ev in enumerate(b.dml_data.events):
                try:
                    found = tables.timeline.lookup(ev.schema_name, ev.table_name, commit_ts)
                    if found is None:
                        raise BinlogError(f"table {ev.schema_name}.{ev.table_name} unknown at commit_ts {commit_ts}")
                    tid, info = found
                    if plan.wanted_ids is not None and tid not in plan.wanted_ids:
                        continue
                    cols = parse_columns(ev)
                    first = {c.name.lower(): decode_value(c.value, c, tz) for c in cols}
                    kp = tables.plan(info)
                    old = _row(info, first)
                    op = _OPS.get(ev.tp)
                    if op is None:
                        raise BinlogError(f"unknown event type {ev.tp}")
                    if op == OP_UPDATE:
                        new = _row(info, {c.name.lower(): decode_value(c.changed, c, tz) for c in cols if c.changed})
                        key, old_key = kp.key(new), kp.key(old)
                        yield (
                            ev.schema_name,
                            ev.table_name,
                            tid,
                            commit_ts,
                            seq,
                            op,
                            key,
                            kp.row(new),
                            old_key if old_key != key else None,
                        )
                    else:
                        yield (ev.schema_name, ev.table_name, tid, commit_ts, seq, op, kp.key(old), kp.row(old), None)
                except BinlogError as exc:
                    report.add(Damage(rng.source, rng.path, item.offset, len(item.payload), f"event {seq}: {exc}"))
    finally:
        if errors is not None and not report.empty:
            errors.add(report)


def _row(info: TableInfo, by_name: dict[str, Any]) -> tuple[object, ...]:
    from common.schema.defaults import default_value

    out: list[object] = []
    for c in info.columns:
        if c.lname in by_name:
            out.append(canonical(c, by_name[c.lname]))
        else:
            out.append(default_value(c) if c.default is not None else None)
    return tuple(out)


def files_changes(
    spark: SparkSession,
    ranges: Sequence[FileRange],
    plan: Broadcast[FilesPlan],
    errors: Accumulator[DamageReport] | None = None,
    counter: Accumulator[int] | None = None,
) -> DataFrame:
    """The row changes (`CHANGE_DDL`) of pass 2 over `ranges` (one task each); `counter` counts them."""

    def task(rng: FileRange) -> Iterator[Change]:
        return counted(scan_file_changes(rng, plan.value, errors), counter)

    rdd = spark.sparkContext.parallelize(list(ranges), max(1, len(ranges))).flatMap(task)
    return spark.createDataFrame(rdd, CHANGE_DDL)
