"""No space on the data directory: a real ENOSPC/EDQUOT (injected into the vlog's write calls) and the
free-space guard both reach the client as RESOURCE_EXHAUSTED "no available space", a failed write
leaves no partial record behind, and the pump writes again once there is room."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from common.errors import NoSpaceError, StorageError
from common.pb import binlog_pb2, gogo
from common.vlog_record import HEADER_SIZE, ValuePointer
from pump.storage import diskguard
from pump.storage.api import StorageOptions
from pump.storage.diskguard import DiskGuard
from pump.storage.storage import Storage
from pump.storage.vlog import ValueLog
from tests.unit.storageutil import FAST_CHASER, Tso, options
from tests.unit.test_pump_server import DEADLINE, commit, prewrite
from tests.unit.test_pump_write_refusals import OK, DiskPump, start_disk_pump

NO_SPACE = grpc.StatusCode.RESOURCE_EXHAUSTED
QUICK = 2.0
"""A refusal for lack of space is answered at once, not after retries (the client's budget is 15 s)."""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[DiskPump]:
    d = start_disk_pump(tmp_path / "pump", StorageOptions(stop_write_at_available_space=0))
    yield d
    d.close()


@pytest.fixture
def sampled_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskPump]:
    """`disk` whose free space is sampled only when the test calls refresh()."""
    monkeypatch.setattr(diskguard, "REFRESH_INTERVAL", 3600.0)
    d = start_disk_pump(tmp_path / "pump", StorageOptions(stop_write_at_available_space=0))
    yield d
    d.close()


class Statvfs:
    """An `os.statvfs` stand-in reporting `available` bytes (1-byte blocks)."""

    def __init__(self, available: int, capacity: int = 1 << 40) -> None:
        self.available = available
        self.capacity = capacity

    def __call__(self, path: Path) -> os.statvfs_result:
        return os.statvfs_result((1, 1, self.capacity, self.available, self.available, 0, 0, 0, 0, 255))


def vlog_file_size(storage: Storage) -> int:
    end = storage._vlog.end_pointer()
    return os.path.getsize(storage._vlog._dir / f"{end.fid:06d}.vlog")


def torn_pwrite(code: int) -> Callable[[int, bytes | memoryview, int], int]:
    """os.pwrite that writes half its buffer for real, then fails with `code` (a torn record on disk, as
    a file system filling up in the middle of a write leaves it)."""
    real = os.pwrite

    def pwrite(fd: int, buf: bytes | memoryview, offset: int) -> int:
        real(fd, buf[: len(buf) // 2], offset)
        raise OSError(code, os.strerror(code))

    return pwrite


def failing_fdatasync(code: int) -> Callable[[int], None]:
    def fdatasync(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    return fdatasync


@pytest.mark.parametrize(
    ("target", "code"),
    [("pwrite", errno.ENOSPC), ("pwrite", errno.EDQUOT), ("fdatasync", errno.ENOSPC)],
)
def test_enospc_is_resource_exhausted_leaves_no_torn_record_and_writes_resume(
    disk: DiskPump, monkeypatch: pytest.MonkeyPatch, target: str, code: int
) -> None:
    assert disk.send(prewrite(10)) == (OK, "")
    assert disk.send(commit(10, 11)) == (OK, "")
    good_end = disk.storage._vlog.end_pointer()
    real = getattr(os, target)
    monkeypatch.setattr(os, target, torn_pwrite(code) if target == "pwrite" else failing_fdatasync(code))
    began = time.monotonic()
    refused = disk.send(prewrite(20, b"x" * 100_000))
    took = time.monotonic() - began
    monkeypatch.setattr(os, target, real)  # space is back

    assert refused[0] is NO_SPACE, refused
    assert refused[1].startswith("no available space"), refused
    assert took < QUICK
    assert disk.storage._vlog.end_pointer() == good_end
    assert vlog_file_size(disk.storage) == good_end.offset  # the failed batch was cut off
    assert disk.send(prewrite(20)) == (OK, "")
    assert disk.send(commit(20, 21)) == (OK, "")
    assert [(s, c) for s, c, _ in disk.pulled(21)] == [(10, 11), (20, 21)]
    assert disk.storage.check() == []


def test_a_record_that_does_not_fit_fails_alone_not_its_whole_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER)
    real = os.pwrite

    def small_only(fd: int, buf: bytes | memoryview, offset: int) -> int:
        if len(buf) > 50_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, buf, offset)

    monkeypatch.setattr(os, "pwrite", small_only)
    clock = Tso()
    results: dict[str, BaseException | None] = {}
    events = {name: threading.Event() for name in ("small1", "big", "small2")}

    def done(name: str) -> Callable[[BaseException | None], None]:
        def call(error: BaseException | None) -> None:
            results[name] = error
            events[name].set()

        return call

    try:
        sizes = {"small1": 100, "big": 80_000, "small2": 100}
        with s._chaser.write_lock:  # the three are queued while the writer waits: one batch
            for name, size in sizes.items():
                start = clock.next()
                payload = gogo.encode_binlog(binlog_pb2.Prewrite, start, prewrite_value=b"v" * size)
                assert s.submit_binlog(binlog_pb2.Prewrite, start, 0, payload, prewrite_key=None, done=done(name))
        for event in events.values():
            assert event.wait(DEADLINE)
        assert results["small1"] is None
        assert results["small2"] is None
        assert isinstance(results["big"], NoSpaceError)
        assert s.status().write_count == 2
        assert s.wait_indexed(DEADLINE)
        assert s.status().pending_prewrites == 2
        assert s.check() == []
    finally:
        s.close()


def test_the_guard_counts_the_payload_it_admits(sampled_disk: DiskPump) -> None:
    disk = sampled_disk
    threshold = 512 << 10
    space = Statvfs(1 << 20)
    disk.storage._disk = DiskGuard(disk.storage._dir, threshold, statvfs=space)
    too_big = disk.send(prewrite(10, b"x" * (600 << 10)))  # leaves less than the threshold
    assert too_big[0] is NO_SPACE, too_big
    assert too_big[1].startswith("no available space"), too_big
    assert disk.send(prewrite(10, b"x" * (200 << 10))) == (OK, "")
    again = disk.send(prewrite(12, b"x" * (400 << 10)))  # fits alone, not with the first: counted until
    assert again[0] is NO_SPACE, again  # the next sample
    disk.storage._disk.refresh()  # the sample shows what was written (this stand-in: still 1 MiB free)
    assert disk.send(prewrite(12, b"x" * (400 << 10))) == (OK, "")
    assert disk.storage.status().write_count == 2


def test_a_fake_binlog_is_exempt_only_while_it_fits(sampled_disk: DiskPump) -> None:
    disk = sampled_disk
    fake = gogo.fake_binlog(50)
    space = Statvfs(1000)
    disk.storage._disk = DiskGuard(disk.storage._dir, 1 << 20, statvfs=space)
    assert disk.send(prewrite(10))[0] is NO_SPACE
    assert disk.send(fake) == (OK, "")  # below the threshold, but it fits
    space.available = HEADER_SIZE + len(fake) - 1
    disk.storage._disk.refresh()
    refused = disk.send(gogo.fake_binlog(60))
    assert refused[0] is NO_SPACE, refused
    assert disk.storage.status().write_count == 1


# ------------------------------------------------------------------------------------------- DiskGuard


def test_guard_admits_while_what_is_left_stays_above_the_threshold() -> None:
    space = Statvfs(10_000)
    g = DiskGuard(Path("/"), 4_000, statvfs=space)
    assert g.admit(5_998)  # leaves 4_002
    assert not g.admit(2)  # would leave 4_000: at the threshold
    assert g.writable()
    assert g.admit(1)  # leaves 4_001
    assert not g.admit(1)
    assert g.writable()
    space.available = 4_000
    g.refresh()  # a new sample replaces what was counted since the last one
    assert not g.writable()
    space.available = 9_000
    g.refresh()
    assert g.writable()
    assert g.admit(4_999)
    assert not g.admit(1)


def test_guard_lets_an_exempt_write_through_below_the_threshold_only_while_it_fits() -> None:
    space = Statvfs(3_000)
    g = DiskGuard(Path("/"), 4_000, statvfs=space)
    assert not g.writable()
    assert not g.admit(100)
    assert g.admit(100, exempt=True)
    assert not g.admit(2_901, exempt=True)  # 2_900 left
    assert g.admit(2_900, exempt=True)
    assert not g.admit(1, exempt=True)


def test_guard_message_says_no_available_space() -> None:
    g = DiskGuard(Path("/data"), 4_000, statvfs=Statvfs(3_000))
    assert g.message(100) == (
        "no available space: 3000 bytes free in /data (0 more being written), a write of 100 bytes "
        "would leave 2900, at or below stop-write-at-available-space 4000"
    )


# ------------------------------------------------------------------------------------------- value log


def vlog_payload(ts: int, size: int = 100) -> bytes:
    return gogo.encode_binlog(binlog_pb2.Prewrite, ts, 0, prewrite_value=b"v" * size)


def test_a_failed_write_that_cannot_be_cut_off_stops_appends_until_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vlog = ValueLog(tmp_path, file_size=1 << 20)
    a, b, c = vlog_payload(1, 5000), vlog_payload(2, 9000), vlog_payload(3, 10)
    vlog.append([a], 1)
    real_pwrite, real_ftruncate = os.pwrite, os.ftruncate

    def no_truncate(fd: int, length: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pwrite", torn_pwrite(errno.ENOSPC))
    monkeypatch.setattr(os, "ftruncate", no_truncate)
    with pytest.raises(NoSpaceError, match="no available space"):
        vlog.append([b], 2)
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert os.path.getsize(tmp_path / "000000.vlog") > vlog.end_pointer().offset  # half of b is there
    with pytest.raises(StorageError, match="cannot cut a failed write"):
        vlog.append([c], 3)  # c is shorter than half of b: written over it, it would leave b's rest behind
    monkeypatch.setattr(os, "ftruncate", real_ftruncate)
    vlog.append([c], 3)
    assert os.path.getsize(tmp_path / "000000.vlog") == vlog.end_pointer().offset
    assert [p for _, p in vlog.scan(ValuePointer(0, 0))] == [a, c]
    vlog.close()
    reopened = ValueLog(tmp_path, file_size=1 << 20)
    try:
        assert reopened.open_report.truncated_bytes == 0
        assert reopened.open_report.corrupted_spans == 0
        assert [p for _, p in reopened.scan(ValuePointer(0, 0))] == [a, c]
    finally:
        reopened.close()


def test_a_rotation_failing_after_the_footer_cuts_the_footer_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vlog = ValueLog(tmp_path, file_size=100)
    a, b = vlog_payload(1, 200), vlog_payload(2, 10)
    real_create = vlog._create

    def no_room(fid: int) -> object:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(vlog, "_create", no_room)
    vlog.append([a], 1)  # durable; the rotation after it fails
    assert vlog.fids() == [0]
    assert not vlog.is_ended(0)
    assert os.path.getsize(tmp_path / "000000.vlog") == vlog.end_pointer().offset  # no footer left
    monkeypatch.setattr(vlog, "_create", real_create)
    vlog.append([b], 2)  # into file 0 still, then it rotates
    assert vlog.fids() == [0, 1]
    assert vlog.is_ended(0)
    vlog.close()
    reopened = ValueLog(tmp_path, file_size=100)
    try:
        assert reopened.open_report.corrupted_spans == 0
        assert [p for _, p in reopened.scan(ValuePointer(0, 0))] == [a, b]
    finally:
        reopened.close()
