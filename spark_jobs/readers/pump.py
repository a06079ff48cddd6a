"""Pump data directories -> DataFrames of raw binlog records, scanned in parallel by byte range.

A pump data directory holds `value/NNNNNN.vlog` files (framing in `common/vlog_record.py`),
`kv/` (its LevelDB index, not needed here: every fact is in the value log) and `.node` (its node id).
Every vlog file is cut into ranges of `split_size` bytes (`ranges.py`) that tasks scan on their own,
so a 500 MB file is read by several tasks and never held whole by one Python process.

A record is a marshaled tipb `binlog.Binlog` (docs/formats.md#tipb-binlog): a Prewrite carries the mutations, its
Commit (same pump, same start_ts) the commit_ts; a Rollback drops the transaction, and a Rollback with
start_ts == commit_ts is the pump's fake (heartbeat) binlog.  `binlog_records` gives one row per
record, with the binlog's small fields only:

    pump STRING, file STRING, offset LONG, tp INT, start_ts LONG, commit_ts LONG, ddl_job_id LONG

Damaged records are skipped, counted in a `DamageReport` accumulator and logged by the job.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from common.errors import CodecError
from common.framing import FrameDecoder, Record
from common.vlog_record import FOOTER_SIZE, RecordDecoder, decode_footer
from spark_jobs.errors import InputError
from spark_jobs.readers.damage import DamageReport, damage_accumulator
from spark_jobs.readers.ranges import DEFAULT_SPLIT_SIZE, Damage, FileRange, plan_ranges, scan_range

if TYPE_CHECKING:
    from pyspark import RDD, Accumulator
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "RAW_RECORD_DDL",
    "PumpDir",
    "binlog_records",
    "find_pump_dirs",
    "pump_ranges",
    "scan_raw",
]

log = logging.getLogger(__name__)

_VLOG_NAME: Final = re.compile(r"^(\d{6,})\.vlog$")
NODE_ID_FILE: Final = ".node"

RAW_RECORD_DDL: Final = "pump STRING, file STRING, offset LONG, tp INT, start_ts LONG, commit_ts LONG, ddl_job_id LONG"
"""Schema of `binlog_records` (Spark DDL text)."""


@dataclass(frozen=True, slots=True)
class PumpDir:
    """A pump data directory: its name (the node id in `.node`, else the path) and its vlog files."""

    name: str
    path: str
    files: tuple[tuple[str, int], ...]
    """(path, size) of every `value/*.vlog` file, in file-number order."""


def find_pump_dirs(paths: Sequence[str]) -> list[PumpDir]:
    """Check and list every pump data directory; InputError (one line) for the first that is not one."""
    if not paths:
        raise InputError("no pump data directory given")
    out: list[PumpDir] = []
    seen: set[str] = set()
    for raw in paths:
        p = Path(raw).resolve()
        if not p.is_dir():
            raise InputError(f"pump data directory {raw} does not exist or is not a directory")
        value = p / "value"
        files = (
            sorted(
                (int(m.group(1)), value / name)
                for name in os.listdir(value)
                if (m := _VLOG_NAME.match(name)) is not None
            )
            if value.is_dir()
            else []
        )
        if not files:
            raise InputError(f"{raw} is not a pump data directory: no value/NNNNNN.vlog files in it")
        node = p / NODE_ID_FILE
        name = node.read_text(encoding="utf-8").strip() if node.is_file() else ""
        name = name or str(p)
        if name in seen:
            name = str(p)  # two copies of one pump's directory: tell them apart by path
        seen.add(name)
        out.append(PumpDir(name, str(p), tuple((str(f), f.stat().st_size) for _, f in files)))
    return out


def pump_ranges(pumps: Iterable[PumpDir], split_size: int = DEFAULT_SPLIT_SIZE) -> list[FileRange]:
    """The byte ranges of every vlog file of every pump, one Spark task each."""
    out: list[FileRange] = []
    for pd in pumps:
        for path, size in pd.files:
            out.extend(plan_ranges(pd.name, path, size, split_size))
    return out


def _vlog_decoder(start: int, end: int) -> FrameDecoder:
    return RecordDecoder(start, end=end)


def _is_footer(offset: int, data: bytes) -> bool:
    return len(data) == FOOTER_SIZE and decode_footer(data) is not None


def scan_vlog_range(rng: FileRange, chunk_size: int = 4 << 20) -> Iterator[Record | Damage]:
    """Records and damage of one range of a vlog file (a finalized file's footer is not damage)."""
    return scan_range(rng, _vlog_decoder, chunk_size=chunk_size, ignore_tail=_is_footer)


def header_fields(payload: bytes) -> tuple[int, int, int, int] | None:
    """(tp, start_ts, commit_ts, ddl_job_id) of a stored binlog, None when it does not parse.

    Only the small fields are parsed: the prewrite value (the rows) is skipped, not copied.
    """
    from common.pb.wire import split_binlog

    try:
        b, _ = split_binlog(payload)
    except CodecError:
        return None
    return int(b.tp), int(b.start_ts), int(b.commit_ts), int(b.ddl_job_id)


def scan_raw(rng: FileRange, acc: Accumulator[DamageReport] | None = None) -> Iterator[tuple[Any, ...]]:
    """Rows of `RAW_RECORD_DDL` for one range; damage (and records that are not binlogs) go to `acc`."""
    report = DamageReport()
    try:
        for item in scan_vlog_range(rng):
            if isinstance(item, Damage):
                report.add(item)
                continue
            fields = header_fields(item.payload)
            if fields is None:
                report.add(Damage(rng.source, rng.path, item.offset, len(item.payload), "not a binlog"))
                continue
            tp, start_ts, commit_ts, ddl_job_id = fields
            yield (rng.source, rng.path, item.offset, tp, start_ts, commit_ts, ddl_job_id)
    finally:
        if acc is not None and not report.empty:
            acc.add(report)


def _ranges_rdd(spark: SparkSession, ranges: list[FileRange]) -> RDD[FileRange]:
    # One partition per range: each task scans exactly one range of one file.
    return spark.sparkContext.parallelize(ranges, max(1, len(ranges)))


def binlog_records(
    spark: SparkSession,
    pump_dirs: list[str],
    *,
    split_size: int = DEFAULT_SPLIT_SIZE,
    damage: Accumulator[DamageReport] | None = None,
) -> DataFrame:
    """Raw binlog records of every pump: one row per prewrite / commit / rollback record (incl. fake
    binlogs), mutations not decoded.  Columns: `RAW_RECORD_DDL`.

    Raises InputError when a path is not a pump data directory.  Pass `damage` (see
    `spark_jobs.readers.damage.damage_accumulator`) to learn what was skipped once an action ran.
    """
    pumps = find_pump_dirs(pump_dirs)
    ranges = pump_ranges(pumps, split_size)
    log.info("pump ranges: pumps=%d files=%d ranges=%d", len(pumps), sum(len(p.files) for p in pumps), len(ranges))
    acc = damage if damage is not None else damage_accumulator(spark.sparkContext)
    rdd = _ranges_rdd(spark, ranges).flatMap(lambda r: scan_raw(r, acc))
    return spark.createDataFrame(rdd, RAW_RECORD_DDL)
