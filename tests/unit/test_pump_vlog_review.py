"""Value log review fixes: a footer mimicked by user bytes at open, GC closing a descriptor once."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.pb import binlog_pb2, gogo
from common.vlog_record import ValuePointer, encode_footer
from pump.storage.vlog import ValueLog


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
