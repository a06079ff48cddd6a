"""binlogfile: framing golden vectors, decoder resynchronisation, writer and reader."""

from __future__ import annotations

import logging
import os
import stat
import struct
import tempfile
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.binlogfile import (
    BinlogFileWriter,
    Corruption,
    Position,
    ReadStats,
    Record,
    RecordDecoder,
    TornTail,
    encode_record,
    format_name,
    iter_records,
    list_binlog_files,
    parse_name,
)
from common.binlogfile import writer as writer_mod
from common.binlogfile.reader import DEFAULT_CHUNK_SIZE
from common.binlogfile.record import DecodeEvent
from common.errors import StorageError

HELLO = bytes.fromhex("04 05 1b 1c 05 00 00 00 00 00 00 00 68 65 6c 6c 6f 4c bb 71 9a")


def payloads(n: int, size: int = 20) -> list[bytes]:
    return [(b"%06d" % i) * (size // 6 + 1) for i in range(n)]


def read_all(
    directory: Path,
    start: tuple[int, int] | None = None,
    stats: ReadStats | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[bytes]:
    return [p for _, p in iter_records(directory, start, stats=stats, chunk_size=chunk_size)]


def files_of(directory: Path) -> list[Path]:
    return [directory / f.name for f in list_binlog_files(directory)]


def decode_all(data: bytes, step: int | None = None, **kwargs: int) -> list[DecodeEvent]:
    """Feed `data` to a decoder `step` bytes at a time (all at once when None)."""
    dec = RecordDecoder(**kwargs)
    events: list[DecodeEvent] = []
    pending = b""
    step = step or max(len(data), 1)
    for i in range(0, len(data), step):
        buf = pending + data[i : i + step]
        evs, used = dec.decode(buf, final=i + step >= len(data))
        events += evs
        pending = buf[used:]
    if not data:
        events += dec.decode(b"", final=True)[0]
    return events


# ------------------------------------------------------------------------------------------ framing


def test_golden_hello_record() -> None:
    assert encode_record(b"hello") == HELLO
    assert crc32c.crc32c(b"hello") == 0x9A71BB4C


def test_crc32c_check_value() -> None:
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_empty_payload_record() -> None:
    rec = encode_record(b"")
    assert rec == bytes.fromhex("04 05 1b 1c") + bytes(8) + struct.pack("<I", crc32c.crc32c(b""))
    assert decode_all(rec) == [Record(0, b"")]


@pytest.mark.parametrize("step", [1, 3, 7, 16, 1000])
def test_decoder_incremental(step: int) -> None:
    items = [b"hello", b"", b"x" * 300, b"world"]
    data = b"".join(map(encode_record, items))
    events = decode_all(data, step)
    assert [e.payload for e in events if isinstance(e, Record)] == items
    assert all(isinstance(e, Record) for e in events)
    assert [e.offset for e in events if isinstance(e, Record)] == [0, 21, 37, 353]


@pytest.mark.parametrize("step", [1, 5, 64, None])
def test_decoder_bad_crc_and_magic_resync(step: int | None) -> None:
    good = [encode_record(b"record-%d" % i) for i in range(4)]
    bad_crc = bytearray(good[1])
    bad_crc[14] ^= 0x01  # a payload byte
    bad_magic = bytearray(good[2])
    bad_magic[0] ^= 0xFF
    data = good[0] + bytes(bad_crc) + bytes(bad_magic) + good[3]
    events = decode_all(data, step)
    assert events == [
        Record(0, b"record-0"),
        Corruption(len(good[0]), len(good[1]) + len(good[2]), "crc mismatch"),
        Record(3 * len(good[0]), b"record-3"),
    ]


def test_decoder_impossible_length() -> None:
    bogus = struct.pack("<IQ", 0x1C1B0504, 1 << 60) + b"garbage"
    data = bogus + HELLO
    assert decode_all(data) == [Corruption(0, len(bogus), "impossible length"), Record(len(bogus), b"hello")]
    assert decode_all(data, 4) == decode_all(data)
    # With `end` known, a length past the end is judged at once (no buffering up to it).
    dec = RecordDecoder(end=len(data))
    head = struct.pack("<IQ", 0x1C1B0504, 1000) + b"abc"
    events, used = dec.decode(head + HELLO, final=False)
    assert events == [Corruption(0, len(head), "truncated record"), Record(len(head), b"hello")]
    assert used == len(head) + len(HELLO)


def test_decoder_torn_tail() -> None:
    data = HELLO + HELLO[:-3]
    assert decode_all(data) == [Record(0, b"hello"), TornTail(len(HELLO), len(HELLO) - 3)]
    assert decode_all(data, 2) == decode_all(data)
    assert decode_all(HELLO + HELLO[:5]) == [Record(0, b"hello"), TornTail(len(HELLO), 5)]
    # Garbage that is not the start of a record is corruption, not a torn tail.
    assert decode_all(HELLO + b"\x00\x00\x00") == [Record(0, b"hello"), Corruption(len(HELLO), 3, "bad magic")]
    assert decode_all(b"") == []


def test_decoder_torn_record_followed_by_data_is_corruption() -> None:
    for cut, reason in ((10, "impossible length"), (15, "crc mismatch"), (20, "crc mismatch")):
        assert decode_all(HELLO[:cut] + HELLO) == [Corruption(0, cut, reason), Record(cut, b"hello")], cut


def test_decoder_keeps_magic_split_across_calls() -> None:
    garbage = b"\xaa" * 50
    data = garbage + HELLO
    for step in (1, 2, 3, 5, 51, 52, 53):
        assert decode_all(data, step) == [Corruption(0, 50, "bad magic"), Record(50, b"hello")], step


def test_decoder_offsets_start_and_want() -> None:
    dec = RecordDecoder(1000)
    events, used = dec.decode(HELLO[:5])
    assert (events, used, dec.want) == ([], 0, 12)
    events, used = dec.decode(HELLO[:14])
    assert (events, used, dec.want) == ([], 0, len(HELLO))
    events, used = dec.decode(HELLO)
    assert (events, used, dec.offset) == ([Record(1000, b"hello")], len(HELLO), 1000 + len(HELLO))


# ------------------------------------------------------------------------------------------ names


def test_name_parsing() -> None:
    p = parse_name("binlog-0000000000000007-20190101010101")
    assert p is not None
    assert (p.index, p.created, p.archived) == (7, "20190101010101", False)
    p = parse_name("binlog-0000000000000003")
    assert p is not None
    assert (p.index, p.created) == (3, None)
    p = parse_name("binlog-0000000000000002-20190101010101-407623959013752832.tar.gz")
    assert p is not None
    assert (p.index, p.archived, p.first_ts) == (2, True, 407623959013752832)
    for name in (
        "binlog-0000000000000001-checkpoint",
        "binlog.lock",
        "binlog-0000000000000001.lock",
        ".lock",
        "savepoint",
        "binlog-1",
        "binlog-0000000000000001-2019",
        "binlog-0000000000000001-20190101010101-x.tar.gz",
        "xbinlog-0000000000000001",
    ):
        assert parse_name(name) is None, name


def test_format_name() -> None:
    name = format_name(12)
    assert name.startswith("binlog-0000000000000012-")
    parsed = parse_name(name)
    assert parsed is not None
    assert parsed.index == 12
    assert parsed.created is not None
    assert len(parsed.created) == 14


def test_listing_skips_archives_and_ignores_other_names(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for name in (
        "binlog-0000000000000000-20190101010101-5.tar.gz",
        "binlog-0000000000000001",
        "binlog-0000000000000002-20190101010101",
        "binlog-0000000000000003-checkpoint",
        "savepoint",
        ".lock",
    ):
        (tmp_path / name).write_bytes(HELLO)
    with caplog.at_level(logging.INFO):
        names = [f.name for f in list_binlog_files(tmp_path)]
        assert read_all(tmp_path) == [b"hello", b"hello"]
    assert names == ["binlog-0000000000000001", "binlog-0000000000000002-20190101010101"]
    assert "binlog-0000000000000000-20190101010101-5.tar.gz" in caplog.text
    assert len(list_binlog_files(tmp_path, include_archived=True)) == 3


def test_gap_in_indices(tmp_path: Path) -> None:
    for i in (4, 5, 7):
        (tmp_path / f"binlog-{i:016d}-20190101010101").write_bytes(HELLO)
    with pytest.raises(StorageError, match=r"file index 6 is missing"):
        read_all(tmp_path)
    with pytest.raises(StorageError, match=r"index 6 is missing"):
        BinlogFileWriter(tmp_path)
    (tmp_path / f"binlog-{10:016d}").write_bytes(HELLO)
    (tmp_path / f"binlog-{6:016d}").write_bytes(HELLO)
    with pytest.raises(StorageError, match=r"file index 8\.\.9 is missing"):
        list_binlog_files(tmp_path)


def test_duplicate_index(tmp_path: Path) -> None:
    (tmp_path / "binlog-0000000000000001").write_bytes(HELLO)
    (tmp_path / "binlog-0000000000000001-20190101010101").write_bytes(HELLO)
    with pytest.raises(StorageError, match="same index 1"):
        list_binlog_files(tmp_path)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot list"):
        read_all(tmp_path / "nope")


# ------------------------------------------------------------------------------------------ writer + reader


def test_roundtrip_across_rotations(tmp_path: Path) -> None:
    d = tmp_path / "data"
    items = payloads(50)
    positions = []
    with BinlogFileWriter(d, max_file_size=200, sync=False) as w:
        for p in items:
            positions.append(w.write(p))
        end = w.position
    files = files_of(d)
    assert len(files) > 5
    for f in files[:-1]:  # every finished file stopped right after crossing the limit
        size = f.stat().st_size
        assert size >= 200
        assert size - (len(items[0]) + 16) < 200
    stats = ReadStats()
    got = list(iter_records(d, stats=stats))
    assert got == list(zip(positions, items, strict=True))
    assert (stats.records, stats.skipped_records, stats.torn_tail_bytes) == (50, 0, 0)
    assert stats.files == len(files)
    assert end == Position(len(files) - 1, 0)
    # Resume from any yielded position, or from the end.
    assert read_all(d, start=positions[17]) == items[17:]
    assert read_all(d, start=end) == []
    with pytest.raises(StorageError, match="index 99 not found"):
        read_all(d, start=(99, 0))
    with pytest.raises(StorageError, match="beyond the end"):
        read_all(d, start=(0, 10**6))


def test_write_many_is_one_write_and_one_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"write": 0, "sync": 0}
    real_write, real_sync = os.write, writer_mod._datasync

    def counting_write(fd: int, data: bytes | memoryview) -> int:
        calls["write"] += 1
        return real_write(fd, data)

    def counting_sync(fd: int) -> None:
        calls["sync"] += 1
        real_sync(fd)

    with BinlogFileWriter(tmp_path, max_file_size=100, sync=True) as w:
        monkeypatch.setattr(os, "write", counting_write)
        monkeypatch.setattr(writer_mod, "_datasync", counting_sync)
        first = w.write_many(payloads(10))
        assert calls["write"] == 1
        assert calls["sync"] == 2  # the batch, then the finished file on rotation
        assert first == Position(0, 0)
        assert w.position == Position(1, 0)  # the whole batch stayed in file 0, then rotation
        assert w.write_many([]) == w.position
        monkeypatch.undo()
    assert read_all(tmp_path) == payloads(10)


def test_reopen_appends_to_last_file(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=1 << 20) as w:
        w.write(b"one")
        w.write(b"two")
        pos = w.position
    with BinlogFileWriter(tmp_path, max_file_size=1 << 20) as w:
        assert w.position == pos
        assert w.write(b"three") == pos
    assert len(files_of(tmp_path)) == 1
    assert read_all(tmp_path) == [b"one", b"two", b"three"]


def test_reopen_full_last_file_starts_next(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=1 << 20) as w:
        w.write(b"x" * 100)
    with BinlogFileWriter(tmp_path, max_file_size=50) as w:
        assert w.position == Position(1, 0)
        w.write(b"y")
    assert read_all(tmp_path) == [b"x" * 100, b"y"]


def test_torn_tail_is_eof_and_truncated_on_reopen(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=1 << 20) as w:
        w.write_many([b"a" * 10, b"b" * 10])
        good_size = w.position.offset
    last = files_of(tmp_path)[-1]
    with last.open("ab") as f:
        f.write(encode_record(b"c" * 40)[:30])
    stats = ReadStats()
    assert read_all(tmp_path, stats=stats) == [b"a" * 10, b"b" * 10]
    assert (stats.skipped_records, stats.torn_tail_bytes) == (0, 30)
    with caplog.at_level(logging.WARNING), BinlogFileWriter(tmp_path) as w:
        assert w.position == Position(0, good_size)
        assert last.stat().st_size == good_size
        w.write(b"d")
    assert "cut_bytes=30" in caplog.text
    assert read_all(tmp_path) == [b"a" * 10, b"b" * 10, b"d"]


def test_torn_record_in_non_last_file_is_skipped(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=60, sync=False) as w:
        w.write_many(payloads(3))
        w.write_many(payloads(3))
    first = files_of(tmp_path)[0]
    with first.open("ab") as f:
        f.write(encode_record(b"z" * 40)[:25])
    stats = ReadStats()
    assert read_all(tmp_path, stats=stats) == payloads(3) * 2
    assert (stats.skipped_records, stats.skipped_bytes, stats.torn_tail_bytes) == (1, 25, 0)


@pytest.mark.parametrize("damage", ["payload", "magic", "crc", "length"])
def test_corrupt_record_in_the_middle_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    items = payloads(30)
    with BinlogFileWriter(tmp_path, max_file_size=300, sync=False) as w:
        positions = [w.write(p) for p in items]
    victim = positions[5]  # a record in the middle of a non-last file
    path = files_of(tmp_path)[victim.file_index]
    raw = bytearray(path.read_bytes())
    at = victim.offset
    rec_len = len(items[5]) + 16
    if damage == "payload":
        raw[at + 12 + 3] ^= 0x40
    elif damage == "magic":
        raw[at] ^= 0x01
    elif damage == "crc":
        raw[at + rec_len - 1] ^= 0x80
    else:
        raw[at + 4 : at + 12] = struct.pack("<Q", 1 << 62)
    path.write_bytes(bytes(raw))
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        got = read_all(tmp_path, stats=stats)
    assert got == items[:5] + items[6:]
    assert (stats.skipped_records, stats.skipped_bytes) == (1, rec_len)
    assert f"fid={victim.file_index} offset={victim.offset}" in caplog.text
    assert path.name in caplog.text


def test_corrupt_record_in_last_file_and_bogus_length_past_eof(tmp_path: Path) -> None:
    items = payloads(6)
    with BinlogFileWriter(tmp_path, sync=False) as w:
        positions = [w.write(p) for p in items]
    path = files_of(tmp_path)[0]
    raw = bytearray(path.read_bytes())
    at = positions[2].offset
    raw[at + 4 : at + 12] = struct.pack("<Q", 5000)  # plausible, but runs past the end of the file
    path.write_bytes(bytes(raw))
    stats = ReadStats()
    assert read_all(tmp_path, stats=stats) == items[:2] + items[3:]
    assert (stats.skipped_records, stats.torn_tail_bytes) == (1, 0)


def test_huge_bogus_length_at_the_end(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, sync=False) as w:
        w.write(b"ok")
    path = files_of(tmp_path)[0]
    with path.open("ab") as f:
        f.write(struct.pack("<IQ", 0x1C1B0504, (1 << 64) - 1) + b"tail")
    stats = ReadStats()
    assert read_all(tmp_path, stats=stats) == [b"ok"]
    assert (stats.skipped_records, stats.skipped_bytes) == (1, 16)


def test_records_larger_than_read_chunk(tmp_path: Path) -> None:
    items = [os.urandom(n) for n in (10, 5000, 70, 40000, 3, 4096)]
    with BinlogFileWriter(tmp_path, max_file_size=30000, sync=False) as w:
        w.write_many(items)
        w.write_many(items)
    assert read_all(tmp_path, chunk_size=64) == items * 2
    assert read_all(tmp_path, chunk_size=4096) == items * 2
    # And a damaged big record is skipped with small chunks too.
    path = files_of(tmp_path)[0]
    raw = bytearray(path.read_bytes())
    raw[16 + 10 + 12 + 2500] ^= 1  # inside the 5000-byte payload
    path.write_bytes(bytes(raw))
    stats = ReadStats()
    assert read_all(tmp_path, chunk_size=64, stats=stats) == [items[0], *items[2:], *items]
    assert stats.skipped_bytes == 5016


def test_second_writer_is_refused(tmp_path: Path) -> None:
    w = BinlogFileWriter(tmp_path)
    with pytest.raises(StorageError, match="locked by another process"):
        BinlogFileWriter(tmp_path)
    w.close()
    with BinlogFileWriter(tmp_path) as w2:
        w2.write(b"x")


def test_modes(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        d = tmp_path / "newdir"
        with BinlogFileWriter(d, max_file_size=10, sync=False) as w:
            w.write(b"0123456789")
    finally:
        os.umask(old)
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    names = sorted(p.name for p in d.iterdir())
    assert names[0] == ".lock"
    assert len(names) == 3
    for p in d.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    w = BinlogFileWriter(tmp_path)
    w.write(b"a")
    w.flush()
    w.fsync()
    w.close()
    w.close()
    assert w.closed
    with pytest.raises(StorageError, match="closed"):
        w.write(b"b")
    with pytest.raises(StorageError, match="closed"):
        w.fsync()


def test_delete_before_never_deletes_current_file(tmp_path: Path) -> None:
    with BinlogFileWriter(tmp_path, max_file_size=20, sync=False) as w:
        for p in payloads(5):
            w.write(p)
        current = w.position.file_index
        assert current == 5
        removed = w.delete_before(3)
        assert len(removed) == 3
        assert [f.index for f in list_binlog_files(tmp_path)] == [3, 4, 5]
        removed = w.delete_before(100)
        assert len(removed) == 2
        assert [f.index for f in list_binlog_files(tmp_path)] == [current]
        w.write(b"after gc")
        end = w.position
    assert read_all(tmp_path) == [b"after gc"]
    with BinlogFileWriter(tmp_path) as w:  # reopen after GC: files no longer start at index 0
        assert w.position == end


def test_bad_max_file_size(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        BinlogFileWriter(tmp_path, max_file_size=0)


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.lists(st.binary(max_size=600), max_size=6), max_size=12),
    max_file_size=st.integers(min_value=1, max_value=3000),
    chunk_size=st.integers(min_value=1, max_value=2048),
    reopen_every=st.integers(min_value=1, max_value=5),
)
def test_random_payloads_roundtrip(
    batches: list[list[bytes]], max_file_size: int, chunk_size: int, reopen_every: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        expected: list[tuple[Position, bytes]] = []
        w = BinlogFileWriter(tmp, max_file_size=max_file_size, sync=False)
        try:
            for n, batch in enumerate(batches):
                if n % reopen_every == 0 and n:
                    w.close()
                    w = BinlogFileWriter(tmp, max_file_size=max_file_size, sync=False)
                if len(batch) == 1:
                    expected.append((w.write(batch[0]), batch[0]))
                    continue
                pos = w.write_many(batch)
                for p in batch:
                    expected.append((pos, p))
                    pos = Position(pos.file_index, pos.offset + len(p) + 16)
        finally:
            w.close()
        stats = ReadStats()
        assert list(iter_records(tmp, chunk_size=chunk_size, stats=stats)) == expected
        assert stats.skipped_records == 0
        assert stats.torn_tail_bytes == 0
