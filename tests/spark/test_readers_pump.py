"""Raw records of pump data directories: byte-range splitting, damage, bad directories."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from common.pb import binlog_pb2
from common.vlog_record import HEADER_SIZE
from spark_jobs.errors import InputError
from spark_jobs.readers.damage import DamageReport, damage_accumulator
from spark_jobs.readers.pump import binlog_records, find_pump_dirs, pump_ranges, scan_raw, scan_vlog_range
from spark_jobs.readers.ranges import Damage
from tests.spark.vlogutil import txn_binlogs, write_pump_dir

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _history(n: int, payload: int = 300) -> list[binlog_pb2.Binlog]:
    out: list[binlog_pb2.Binlog] = []
    for i in range(n):
        out += txn_binlogs(1000 + 10 * i, 1005 + 10 * i, bytes([i % 251]) * payload)
        if i % 7 == 0:
            out.append(binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=1009 + 10 * i, commit_ts=1009 + 10 * i))
    return out


def test_ranges_of_any_size_give_the_same_records(tmp_path: Path) -> None:
    binlogs = _history(200)
    ptrs = write_pump_dir(tmp_path / "p1", binlogs, file_size=20_000, node_id="pump-1")
    (pd,) = find_pump_dirs([str(tmp_path / "p1")])
    assert pd.name == "pump-1"
    assert len(pd.files) > 2  # rotated: finalized files end with a footer
    whole = [row for r in pump_ranges([pd], 1 << 30) for row in scan_raw(r)]
    for split in (97, 1000, 4096):
        ranges = pump_ranges([pd], split)
        assert len(ranges) > len(pd.files)
        assert [row for r in ranges for row in scan_raw(r)] == whole
    assert len(whole) == len(binlogs)
    assert [(os.path.basename(r[1]), r[2]) for r in whole] == [(f"{fid:06d}.vlog", off) for fid, off in ptrs]
    assert [(r[3], r[4], r[5]) for r in whole] == [(b.tp, b.start_ts, b.commit_ts) for b in binlogs]


def test_binlog_records_dataframe(spark: SparkSession, tmp_path: Path) -> None:
    write_pump_dir(tmp_path / "a", _history(50), file_size=10_000, node_id="a")
    write_pump_dir(tmp_path / "b", txn_binlogs(5, 6, b"x", ddl_job_id=42), node_id="b")
    df = binlog_records(spark, [str(tmp_path / "a"), str(tmp_path / "b")], split_size=3000)
    assert df.columns == ["pump", "file", "offset", "tp", "start_ts", "commit_ts", "ddl_job_id"]
    rows = df.collect()
    assert len(rows) == 50 * 2 + 8 + 2
    by_pump = {r["pump"] for r in rows}
    assert by_pump == {"a", "b"}
    ddl = [r for r in rows if r["pump"] == "b"]
    assert [(r["tp"], r["start_ts"], r["commit_ts"], r["ddl_job_id"]) for r in ddl] == [(0, 5, 0, 42), (1, 5, 6, 42)]


def test_corrupted_record_is_counted_not_fatal(spark: SparkSession, tmp_path: Path) -> None:
    binlogs = _history(30)
    ptrs = write_pump_dir(tmp_path / "p", binlogs, file_size=1 << 20)
    fid, offset = ptrs[11]
    path = tmp_path / "p" / "value" / f"{fid:06d}.vlog"
    with open(path, "r+b") as f:  # flip a payload byte: the CRC no longer matches
        f.seek(offset + HEADER_SIZE + 3)
        b = f.read(1)
        f.seek(offset + HEADER_SIZE + 3)
        f.write(bytes([b[0] ^ 0xFF]))
    acc = damage_accumulator(spark.sparkContext)
    rows = binlog_records(spark, [str(tmp_path / "p")], split_size=2048, damage=acc).collect()
    assert len(rows) == len(binlogs) - 1
    assert sorted(r["offset"] for r in rows) == sorted(off for i, (_, off) in enumerate(ptrs) if i != 11)
    report = acc.value
    assert report.corrupted == 1
    assert report.examples[0].offset == offset
    assert "crc mismatch" in report.lines()[1]


def test_torn_tail_is_reported_as_torn(tmp_path: Path) -> None:
    write_pump_dir(tmp_path / "p", _history(5), file_size=1 << 20)
    path = tmp_path / "p" / "value" / "000000.vlog"
    size = path.stat().st_size
    os.truncate(path, size - 10)
    (pd,) = find_pump_dirs([str(tmp_path / "p")])
    report = DamageReport()
    n = 0
    for r in pump_ranges([pd], 500):
        for item in scan_vlog_range(r):
            if isinstance(item, Damage):
                report.add(item)
            else:
                n += 1
    assert n == 5 * 2 + 1 - 1
    assert (report.corrupted, report.torn) == (0, 1)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("empty", "is not a pump data directory"),
        ("file", "does not exist or is not a directory"),
    ],
)
def test_not_a_pump_dir(tmp_path: Path, setup: str, message: str) -> None:
    target = tmp_path / "x"
    if setup == "empty":
        (target / "value").mkdir(parents=True)
    elif setup == "file":
        target.write_text("hello")
    with pytest.raises(InputError, match=message):
        find_pump_dirs([str(target)])
