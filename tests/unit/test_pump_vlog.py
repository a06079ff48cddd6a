"""Value log: append/read, rotation and footers (also footer-like user bytes), reopen recovery, damage, GC,
concurrent readers."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from common.errors import CorruptRecordError, StorageClosedError, StorageError
from common.pb import binlog_pb2, gogo
from common.vlog_record import FOOTER_SIZE, HEADER_SIZE, ValuePointer, decode_footer, encode_footer, encode_record
from pump.storage.vlog import FINALIZE_SIZE_AT_CLOSE, ValueLog, file_name


def payload(ts: int, size: int = 100) -> bytes:
    return gogo.encode_binlog(binlog_pb2.Prewrite, ts, 0, prewrite_value=b"v" * size)


def open_vlog(path: Path, file_size: int = 4096, **kw: object) -> ValueLog:
    return ValueLog(path, file_size=file_size, **kw)  # type: ignore[arg-type]


def scan_all(vlog: ValueLog, start: ValuePointer | None = None) -> list[tuple[ValuePointer, bytes]]:
    return list(vlog.scan(start or ValuePointer(vlog.fids()[0], 0)))


def test_append_read_one_batch(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path)
    batch = [payload(i) for i in range(1, 6)]
    ptrs = vlog.append(batch, 5)
    assert ptrs[0] == ValuePointer(0, 0)
    assert ptrs[1] == ptrs[0].advance(len(batch[0]))
    assert [vlog.read(p) for p in ptrs] == batch
    assert vlog.end_pointer() == ptrs[-1].advance(len(batch[-1]))
    assert (tmp_path / "000000.vlog").read_bytes() == b"".join(encode_record(p) for p in batch)
    with pytest.raises(CorruptRecordError):
        vlog.read(ValuePointer(0, 3))  # not a record start
    with pytest.raises(CorruptRecordError):
        vlog.read(vlog.end_pointer())
    with pytest.raises(StorageError):
        vlog.read(ValuePointer(9, 0))
    vlog.close()
    vlog.close()  # idempotent
    with pytest.raises(StorageClosedError):
        vlog.read(ptrs[0])


def test_rotation_finalizes_with_footer(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1000)
    written: list[bytes] = []
    for i in range(1, 31):
        p = payload(i * 10)
        written.append(p)
        vlog.append([p], i * 10)
    fids = vlog.fids()
    assert len(fids) > 3
    assert fids == list(range(len(fids)))
    for fid in fids[:-1]:
        assert vlog.is_ended(fid)
        raw = (tmp_path / file_name(fid)).read_bytes()
        assert decode_footer(raw[-FOOTER_SIZE:]) == vlog.file_max_ts(fid)
        assert len(raw) - FOOTER_SIZE > 1000  # rotated once the offset passed the size
    assert not vlog.is_ended(fids[-1])
    assert [p for _, p in scan_all(vlog)] == written
    vlog.close()


def test_reopen_with_footer_trusts_it_and_starts_a_new_file(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    big = [payload(i, 1000) for i in range(1, 60)]  # > 50 KiB -> finalized at close
    vlog.append(big, 59)
    vlog.close()
    raw = (tmp_path / file_name(0)).read_bytes()
    assert len(raw) >= FINALIZE_SIZE_AT_CLOSE
    assert decode_footer(raw[-FOOTER_SIZE:]) == 59
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    assert vlog.open_report.scanned_files == 0
    assert vlog.fids() == [0, 1]
    assert vlog.end_pointer() == ValuePointer(1, 0)
    assert vlog.file_max_ts(0) == 59
    ptr = vlog.append([payload(70)], 70)[0]
    assert ptr == ValuePointer(1, 0)
    assert [p for _, p in scan_all(vlog)] == [*big, payload(70)]
    vlog.close()


def test_reopen_without_footer_rescans_and_appends_in_place(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    vlog.append([payload(5), payload(9)], 9)
    end = vlog.end_pointer()
    vlog.close()  # small: no footer
    assert decode_footer((tmp_path / file_name(0)).read_bytes()[-FOOTER_SIZE:]) is None
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    assert vlog.open_report.scanned_files == 1
    assert vlog.file_max_ts(0) == 9
    assert vlog.end_pointer() == end
    assert vlog.fids() == [0]
    assert vlog.append([payload(11)], 11)[0] == end
    vlog.close()


def test_torn_tail_truncated_on_reopen(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    vlog.append([payload(1), payload(2)], 2)
    good_end = vlog.end_pointer().offset
    vlog.close()
    with open(tmp_path / file_name(0), "ab") as f:
        f.write(encode_record(payload(3))[:50])  # a crash in the middle of an append
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    assert vlog.open_report.truncated_bytes == 50
    assert os.path.getsize(tmp_path / file_name(0)) == good_end
    vlog.append([payload(4)], 4)
    assert [p for _, p in scan_all(vlog)] == [payload(1), payload(2), payload(4)]
    vlog.close()


def test_corrupted_record_in_the_middle_reported_and_skipped(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    ptrs = vlog.append([payload(i) for i in range(1, 6)], 5)
    vlog.close()
    path = tmp_path / file_name(0)
    data = bytearray(path.read_bytes())
    data[ptrs[2].offset + HEADER_SIZE + 20] ^= 0x01
    path.write_bytes(bytes(data))
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    rep = vlog.open_report
    assert rep.corrupted_spans == 1
    assert rep.corrupted_bytes == ptrs[3].offset - ptrs[2].offset
    assert rep.truncated_bytes == 0
    assert [p for _, p in scan_all(vlog)] == [payload(i) for i in (1, 2, 4, 5)]
    assert vlog.read(ptrs[4]) == payload(5)
    with pytest.raises(CorruptRecordError, match="checksum"):
        vlog.read(ptrs[2])
    assert vlog.end_pointer().offset == len(data)  # damage in the middle is not truncated
    vlog.close()


def test_scan_from_middle_and_from_a_deleted_file(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=500)
    ptrs = [vlog.append([payload(i)], i)[0] for i in range(1, 21)]
    assert [p for _, p in scan_all(vlog, ptrs[7])] == [payload(i) for i in range(8, 21)]
    deleted = vlog.gc(vlog.file_max_ts(ptrs[5].fid))
    assert deleted
    assert ptrs[0].fid in deleted
    got = scan_all(vlog, ptrs[0])  # its file is gone: starts at the next one that exists
    assert got[0][0].fid > ptrs[0].fid
    assert got[-1][1] == payload(20)
    with pytest.raises(StorageError, match="does not exist"):
        vlog.read(ptrs[0])
    vlog.close()


def test_gc_deletes_only_whole_old_files(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=500)
    for i in range(1, 31):
        vlog.append([payload(i * 100)], i * 100)
    fids = vlog.fids()
    max_ts = {fid: vlog.file_max_ts(fid) for fid in fids}
    cut = max_ts[fids[2]]
    assert vlog.gc(cut) == [f for f in fids[:-1] if max_ts[f] <= cut]
    assert vlog.fids() == [f for f in fids if max_ts[f] > cut]
    assert all(not (tmp_path / file_name(f)).exists() for f in fids[:3])
    assert vlog.gc(1 << 62) == fids[3:-1]
    assert vlog.fids() == [fids[-1]]  # never the current file
    vlog.close()


def test_unparsable_file_tail_garbage_truncated(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    vlog.append([payload(1)], 1)
    end = vlog.end_pointer().offset
    vlog.close()
    with open(tmp_path / file_name(0), "ab") as f:
        f.write(b"\x00" * 4096)  # zero-filled blocks after a power loss
    vlog = open_vlog(tmp_path, file_size=1 << 20)
    assert vlog.end_pointer().offset == end
    assert vlog.open_report.truncated_bytes == 4096
    vlog.close()


def test_concurrent_readers_while_appending(tmp_path: Path) -> None:
    vlog = open_vlog(tmp_path, file_size=8192, sync=False)
    published: list[tuple[ValuePointer, bytes]] = []
    cond = threading.Condition()
    done = False
    errors: list[str] = []

    def next_batch(seen: int) -> list[tuple[ValuePointer, bytes]] | None:
        with cond:
            cond.wait_for(lambda: done or len(published) > seen)
            if done and len(published) == seen:
                return None
            return published[seen:]

    def reader() -> None:
        seen = 0
        while (batch := next_batch(seen)) is not None:
            for ptr, want in batch:
                if vlog.read(ptr) != want:
                    errors.append(f"mismatch at {ptr}")
            seen += len(batch)

    def scanner() -> None:
        seen = 0
        while (batch := next_batch(seen)) is not None:
            seen += len(batch)
            with cond:
                known = dict(published)
            got = scan_all(vlog)
            if len(got) < seen:
                errors.append(f"scan saw {len(got)} records, {seen} were published before it started")
            errors.extend(f"scan mismatch at {ptr}" for ptr, p in got if ptr in known and known[ptr] != p)

    threads = [threading.Thread(target=reader), threading.Thread(target=reader), threading.Thread(target=scanner)]
    for t in threads:
        t.start()
    for i in range(1, 300):
        batch = [payload(i * 10 + j, 50 + j) for j in range(3)]
        ptrs = vlog.append(batch, i * 10 + 2)
        with cond:
            published.extend(zip(ptrs, batch, strict=True))
            cond.notify_all()
    with cond:
        done = True
        cond.notify_all()
    for t in threads:
        t.join()
    assert errors == []
    assert len(vlog.fids()) > 5  # the readers crossed rotations
    vlog.close()


# ------------------------------------------------------------------ footers mimicked by data, GC vs readers


def _commit_ending_like_a_footer(start_ts: int, commit_ts: int, forged_max_ts: int) -> bytes:
    key = b"user-key-" + encode_footer(forged_max_ts)
    b = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=key)
    payload = b.SerializeToString()
    assert payload.endswith(encode_footer(forged_max_ts))  # prewrite_key is the last field written
    return payload


def test_active_file_ending_with_footer_like_bytes_is_scanned(tmp_path: Path) -> None:
    first = gogo.encode_binlog(binlog_pb2.Prewrite, 100, 0, prewrite_key=b"k", prewrite_value=b"v")
    last = _commit_ending_like_a_footer(100, 200, forged_max_ts=1)
    v = ValueLog(tmp_path, file_size=1 << 20)
    ptrs = v.append([first], 100) + v.append([last], 200)
    v.close()  # < 50 KiB: not finalized, the file ends with the commit's bytes
    v = ValueLog(tmp_path, file_size=1 << 20)
    try:
        assert v.fids() == [0]
        assert v.read(ptrs[1]) == last  # the last acknowledged record is not cut off
        assert v.file_max_ts(0) == 200  # not the forged 1 (GC would delete live data)
        assert not v.is_ended(0)
        nxt = gogo.encode_binlog(binlog_pb2.Prewrite, 300, 0, prewrite_key=b"k3")
        p3 = v.append([nxt], 300)
        assert [p for p, _ in v.scan(ValuePointer(0, 0))] == [*ptrs, *p3]
    finally:
        v.close()


def test_real_footer_of_the_last_file_still_trusted(tmp_path: Path) -> None:
    big = gogo.encode_binlog(binlog_pb2.Prewrite, 5, 0, prewrite_value=b"x" * (60 * 1024))
    v = ValueLog(tmp_path, file_size=1 << 20)
    v.append([big], 5)
    v.close()  # >= 50 KiB: finalized with a footer
    v = ValueLog(tmp_path, file_size=1 << 20)
    try:
        assert v.is_ended(0)
        assert v.fids() == [0, 1]
        assert v.open_report.scanned_files == 0  # the footer was trusted, file 0 not scanned
    finally:
        v.close()


def test_gc_closes_a_descriptor_released_between_its_steps_exactly_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    v = ValueLog(tmp_path, file_size=100)
    pl = gogo.encode_binlog(binlog_pb2.Prewrite, 1, 0, prewrite_value=b"v" * 200)
    v.append([pl], 1)  # rotates: file 0 ended with max_ts 1
    assert v.fids() == [0, 1]
    held = v._acquire(0)  # a reader holding file 0 while GC runs
    fd = held.fd
    closes: list[int] = []
    real_close = os.close
    real_unlink = Path.unlink

    def counting_close(n: int) -> None:
        if n == fd:
            closes.append(n)
        real_close(n)

    def unlink_then_release(self: Path, missing_ok: bool = False) -> None:
        v._release(held)  # the reader finishes between GC's locked sections
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(os, "close", counting_close)  # what vlog calls
    monkeypatch.setattr(Path, "unlink", unlink_then_release)
    assert v.gc(1) == [0]
    monkeypatch.undo()
    assert closes == [fd]
    v.close()
