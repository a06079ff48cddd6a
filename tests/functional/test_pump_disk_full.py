"""A pump on a really full file system (a small tmpfs mounted for the test; the tests run as root).

* The value log's file system fills up while the free-space guard sees room (it watches the data
  directory, here on another file system, as a guard whose 3-second sample is stale would): the write
  meets a real ENOSPC, the client gets RESOURCE_EXHAUSTED "no available space" at once and does not retry
  it, no partial record is left behind, and the pump writes again once space is freed.
* The index's file system fills up: acknowledged binlogs are not lost, and once space is freed the
  index catches up, also when LevelDB kept the I/O error of a failed flush (it fails every write with
  it until it is reopened: the pump reopens it).
* The guard counts the payload it is about to admit: with little room left above
  stop-write-at-available-space, a binlog larger than that room is refused before it is written.

Every acknowledged binlog is pulled afterwards, and the storage checks clean offline.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo
from common.pd_client import TSOClient, read_cluster_id
from pump.storage.api import StorageOptions
from pump.storage.storage import Storage
from pump_client import PumpFullError, PumpsClient
from tests.functional.pumputil import PumpClient, is_fake
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional
FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
CLIENT_WRITE_TIMEOUT = 15.0
"""The pump client's write-timeout (its default): the budget a retried error would use up."""
QUICK = 3.0
"""A refusal for lack of space reaches the client well within its write-timeout: it is not retried."""
DEADLINE = 30.0


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the block; unmounted after it, whatever happened."""
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # still busy: detach it now


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@contextlib.contextmanager
def filled(path: Path, leave: int) -> Iterator[None]:
    """Fill the file system of `path` until ENOSPC, then give back `leave` bytes; freed after the block."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        chunk = b"\0" * (1 << 20)
        size = 0
        while True:
            try:
                size += os.write(fd, chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)
    try:
        yield
    finally:
        filler.unlink()


def txn(client: PumpsClient, tso: TSOClient, value_size: int) -> tuple[int, int]:
    """One transaction through the pump client: prewrite (with `value_size` bytes of data), then commit."""
    start = tso.get_ts()
    client.write_binlog(
        binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start, prewrite_key=b"k", prewrite_value=b"v" * value_size)
    )
    commit = tso.get_ts()
    client.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start, commit_ts=commit, prewrite_key=b"k"))
    return start, commit


def refused_quickly(client: PumpsClient, tso: TSOClient, value_size: int) -> tuple[str, float]:
    """A prewrite the pump refuses for lack of space: the client's error and how long it took."""
    began = time.monotonic()
    with pytest.raises(PumpFullError) as info:
        client.write_binlog(
            binlog_pb2.Binlog(
                tp=binlog_pb2.Prewrite, start_ts=tso.get_ts(), prewrite_key=b"k", prewrite_value=b"v" * value_size
            )
        )
    return str(info.value), time.monotonic() - began


def raw_refusal(raw: PumpClient, tso: TSOClient, value_size: int) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as info:
        raw.write(gogo.encode_binlog(binlog_pb2.Prewrite, tso.get_ts(), prewrite_value=b"v" * value_size))
    return info.value.code(), info.value.details() or ""


def check_served(raw: PumpClient, acked: list[tuple[int, int]]) -> None:
    """PullBinlogs serves exactly the acknowledged commits (and fake binlogs), with their data."""
    pulled = raw.pull_until(0, acked[-1][1], timeout=DEADLINE)
    commits = [b for b in pulled if b.tp == binlog_pb2.Commit]
    assert [(b.start_ts, b.commit_ts) for b in commits] == acked
    assert all(b.prewrite_value.startswith(b"v") for b in commits)
    assert all(is_fake(b) for b in pulled if b.tp != binlog_pb2.Commit)


def check_offline(data_dir: Path) -> None:
    """The stopped pump's storage opens without cutting anything off and cross-checks clean."""
    storage = Storage(data_dir, StorageOptions(stop_write_at_available_space=0))
    try:
        report = storage.open_report
        assert (report.truncated_bytes, report.corrupted_spans) == (0, 0)
        assert storage.check() == []
    finally:
        storage.close()


def test_enospc_on_the_value_log_is_resource_exhausted_at_once_and_writes_resume_once_space_is_freed(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tso_client: TSOClient
) -> None:
    pump = PumpProcess(
        tmp_path, etcd_server.url, name="pump1", extra_args=[*FAST, "--storage.stop-write-at-available-space", "1MiB"]
    )
    with tmpfs(pump.data_dir / "value", "4m") as value_fs:
        pump.start()
        cluster_id = read_cluster_id(etcd)
        assert cluster_id is not None
        raw = PumpClient(pump.addr, cluster_id)
        raw.wait_for_ready = False
        client = PumpsClient(etcd_server.url)
        try:
            acked = [txn(client, tso_client, 1000)]
            with filled(value_fs, leave=64 << 10):
                assert free_bytes(value_fs) < 1 << 20  # far below the threshold: only the guard does not see it
                message, took = refused_quickly(client, tso_client, 1 << 20)
                code, details = raw_refusal(raw, tso_client, 1 << 20)
                acked.append(txn(client, tso_client, 1000))  # a small one still fits
            acked.append(txn(client, tso_client, 1 << 20))  # space is back
            check_served(raw, acked)
        finally:
            client.close()
            raw.close()
            pump.stop()
        log = pump.process.log_tail(400)
        check_offline(pump.data_dir)
    assert "no available space to write the value log" in message
    assert took < QUICK < CLIENT_WRITE_TIMEOUT
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("no available space to write the value log: [Errno 28]")
    assert "Traceback" not in log


def test_the_guard_refuses_a_binlog_larger_than_the_room_above_the_threshold(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tso_client: TSOClient
) -> None:
    threshold = 2 << 20
    pump = PumpProcess(
        tmp_path, etcd_server.url, name="pump1", extra_args=[*FAST, "--storage.stop-write-at-available-space", "2MiB"]
    )

    def available() -> int:
        return int(pump.http_json("GET", "/status")["Checkpoint"]["available"])

    with tmpfs(pump.data_dir, "16m") as data_fs:
        pump.start()
        cluster_id = read_cluster_id(etcd)
        assert cluster_id is not None
        raw = PumpClient(pump.addr, cluster_id)
        raw.wait_for_ready = False
        client = PumpsClient(etcd_server.url)
        try:
            acked = [txn(client, tso_client, 1000)]
            with filled(data_fs, leave=3 << 20):
                room = free_bytes(data_fs)
                wait_for(lambda: available() <= room + (256 << 10), DEADLINE, "the pump to sample the full disk")
                seen = available()
                message, took = refused_quickly(client, tso_client, seen - threshold)  # would leave < threshold
                code, details = raw_refusal(raw, tso_client, seen - threshold)
                acked.append(txn(client, tso_client, (seen - threshold) // 4))
            wait_for(lambda: available() > seen + (4 << 20), DEADLINE, "the pump to sample the freed disk")
            acked.append(txn(client, tso_client, seen - threshold))  # space is back
            check_served(raw, acked)
        finally:
            client.close()
            raw.close()
            pump.stop()
        check_offline(pump.data_dir)
    assert seen > threshold  # the guard alone (the original's) would have let it through
    assert "no available space" in message
    assert took < QUICK
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("no available space: ")


def test_enospc_on_the_index_loses_nothing_and_it_catches_up_once_space_is_freed(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tso_client: TSOClient
) -> None:
    """The index is written after the binlog is acknowledged (it is durable in the value log by then), so its
    ENOSPC never reaches a client: the index writer retries every second and catches up once there is room."""
    pump = PumpProcess(
        tmp_path, etcd_server.url, name="pump1", extra_args=[*FAST, "--storage.stop-write-at-available-space", "1MiB"]
    )
    with tmpfs(pump.data_dir / "kv", "2m") as kv_fs:
        pump.start()
        cluster_id = read_cluster_id(etcd)
        assert cluster_id is not None
        raw = PumpClient(pump.addr, cluster_id)
        client = PumpsClient(etcd_server.url)
        try:
            acked = [txn(client, tso_client, 1000)]
            with filled(kv_fs, leave=0):

                def index_fails() -> bool:  # each transaction is acknowledged: the value log has room
                    acked.append(txn(client, tso_client, 1000))
                    return "index write failed" in pump.process.log_tail(200)

                wait_for(index_fails, DEADLINE, "the index to meet ENOSPC")
                acked.extend(txn(client, tso_client, 1000) for _ in range(3))
                full_log = pump.process.log_tail(400)
            check_served(raw, acked)
        finally:
            client.close()
            raw.close()
            pump.stop()
        check_offline(pump.data_dir)
    assert "No space left on device" in full_log


def test_a_leveldb_flush_that_met_enospc_is_reopened_once_space_is_freed(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tso_client: TSOClient
) -> None:
    """The nemesis suite found a pump that served nothing after its full disk was freed, until it was
    restarted: a LevelDB memtable flush that fails keeps its error, and every later write fails with it.
    A 64 KiB write buffer makes flushes frequent; the room left lets the log grow but not a flush."""
    pump = PumpProcess(
        tmp_path,
        etcd_server.url,
        name="pump1",
        extra_args=[*FAST, "--storage.stop-write-at-available-space", "1MiB", "--storage.kv.write-buffer", "64KiB"],
    )
    with tmpfs(pump.data_dir / "kv", "4m") as kv_fs:
        pump.start()
        cluster_id = read_cluster_id(etcd)
        assert cluster_id is not None
        raw = PumpClient(pump.addr, cluster_id)
        client = PumpsClient(etcd_server.url)
        try:
            acked = [txn(client, tso_client, 100)]
            with filled(kv_fs, leave=200 << 10):

                def index_fails() -> bool:
                    acked.extend(txn(client, tso_client, 100) for _ in range(20))
                    return "index write failed" in pump.process.log_tail(400)

                wait_for(index_fails, 2 * DEADLINE, "the index to meet ENOSPC")
                full_log = pump.process.log_tail(400)
            acked.extend(txn(client, tso_client, 100) for _ in range(3))  # space is back
            check_served(raw, acked)
            log_after = pump.process.log_tail(2000)
        finally:
            client.close()
            raw.close()
            pump.stop()
        check_offline(pump.data_dir)
    assert ".ldb: No space left on device" in full_log  # a flush failed, not only a log append
    assert "index reopened" in log_after
