"""`binlog_binlogfile_*` (common/binlogfile/metrics.py) move on the writer's and reader's real paths.

The series are process-wide, so each test compares values before and after what it does.
"""

from __future__ import annotations

from pathlib import Path

from common.binlogfile import BinlogFileWriter, ReadStats, encode_record, iter_records, list_binlog_files
from common.binlogfile.metrics import DURATION_BUCKETS, REGISTRY, SIZE_BUCKETS


def sample(name: str, labels: dict[str, str] | None = None) -> float:
    got = REGISTRY.get_sample_value(name, labels if labels is not None else {"label": "local"})
    assert got is not None, name
    return got


def test_buckets_are_the_originals() -> None:
    assert (SIZE_BUCKETS[0], SIZE_BUCKETS[-1], len(SIZE_BUCKETS)) == (16, 8_388_608, 20)
    assert (DURATION_BUCKETS[0], DURATION_BUCKETS[-1], len(DURATION_BUCKETS)) == (0.00005, 6.5536, 18)


def test_writes_observe_each_record_size_and_each_write_call(tmp_path: Path) -> None:
    sizes0 = sample("binlog_binlogfile_write_binlog_size_count")
    bytes0 = sample("binlog_binlogfile_write_binlog_size_sum")
    calls0 = sample("binlog_binlogfile_write_binlog_duration_time_count")
    with BinlogFileWriter(tmp_path, sync=True) as w:
        w.write_many([b"a" * 100, b"b" * 200, b"c" * 300])
        w.write(b"d" * 1000)
    assert sample("binlog_binlogfile_write_binlog_size_count") - sizes0 == 4
    assert sample("binlog_binlogfile_write_binlog_size_sum") - bytes0 == 1600
    assert sample("binlog_binlogfile_write_binlog_duration_time_count") - calls0 == 2


def test_reads_observe_chunks_and_count_skipped_corruption(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=300, sync=False) as w:
        positions = [w.write(bytes([i]) * 40) for i in range(12)]
    victim = positions[1]  # inside the first file, which is not the last
    path = tmp_path / list_binlog_files(tmp_path)[victim.file_index].name
    raw = bytearray(path.read_bytes())
    raw[victim.offset + 12 + 3] ^= 0x40  # a payload byte: CRC mismatch
    path.write_bytes(bytes(raw))
    reads0 = sample("binlog_binlogfile_read_binlog_duration_time_count")
    corrupt0 = sample("binlog_binlogfile_corruption_binlog_count_total", {})
    stats = ReadStats()
    got = [p for _, p in iter_records(tmp_path, stats=stats)]
    assert (len(got), stats.skipped_records) == (11, 1)
    assert sample("binlog_binlogfile_corruption_binlog_count_total", {}) - corrupt0 == 1
    nonempty = sum(1 for f in list_binlog_files(tmp_path) if (tmp_path / f.name).stat().st_size)
    assert sample("binlog_binlogfile_read_binlog_duration_time_count") - reads0 >= nonempty >= 2


def test_a_torn_tail_is_eof_and_not_corruption(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, sync=False) as w:
        w.write(b"x" * 50)
    path = tmp_path / list_binlog_files(tmp_path)[-1].name
    with path.open("ab") as f:
        f.write(encode_record(b"y" * 40)[:20])  # a crashed writer's partial record
    corrupt0 = sample("binlog_binlogfile_corruption_binlog_count_total", {})
    assert [p for _, p in iter_records(tmp_path)] == [b"x" * 50]
    assert sample("binlog_binlogfile_corruption_binlog_count_total", {}) == corrupt0
