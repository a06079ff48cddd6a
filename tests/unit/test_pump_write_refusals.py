"""WriteBinlog refuses invalid binlogs with INVALID_ARGUMENT, over the real storage: nothing of them is
stored, and none of them holds the watermark or gets served.  An orphan commit (no prewrite here) is
accepted, as it must be (see pump/validate.py), and is neither served nor a stall."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from common.pb import binlog_pb2, gogo, pump_pb2, pump_pb2_grpc
from common.registry import NodeState
from pump.memory_storage import MemoryStorage
from pump.metrics import PumpMetrics
from pump.server import GrpcServer, PumpService
from pump.storage.api import StorageOptions, StorageStatus
from pump.storage.storage import Storage
from tests.unit.test_pump_server import CLUSTER, DEADLINE, Puller, Pump, commit, prewrite

OK = grpc.StatusCode.OK


@dataclass
class DiskPump:
    pump: Pump
    storage: Storage
    metrics: PumpMetrics
    server: GrpcServer

    def close(self) -> None:
        self.pump.channel.close()
        self.pump.service.close_streams()
        self.server.stop(1.0)
        self.storage.close()

    def send(self, payload: bytes) -> tuple[grpc.StatusCode, str]:
        """(OK, "") when the binlog was accepted, else the refusal's code and details."""
        try:
            self.pump.stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=payload), timeout=DEADLINE)
        except grpc.RpcError as err:
            return err.code(), err.details() or ""
        return OK, ""

    def pulled(self, upto: int) -> list[tuple[int, int, binlog_pb2.Binlog]]:
        """Everything PullBinlogs serves from the start up to commit_ts `upto` (which must be served)."""
        assert self.storage.wait_indexed(DEADLINE)
        puller = Puller(self.pump, offset=0)
        got: list[tuple[int, int, binlog_pb2.Binlog]] = []
        try:
            while not got or got[-1][1] < upto:
                got.append(puller.take(1)[0])
        finally:
            puller.cancel()
        return got


def start_disk_pump(data_dir: Path, options: StorageOptions) -> DiskPump:
    """The servicer on a real gRPC port over a real `Storage` in `data_dir` (its metrics observer wired)."""
    state = [NodeState.ONLINE]
    storage: Storage | None = None

    def status() -> StorageStatus:
        assert storage is not None
        return storage.status()

    metrics = PumpMetrics(status)  # built first: the storage takes its observer from it
    storage = Storage(data_dir, options, observer=metrics.storage)
    service = PumpService(storage, CLUSTER, lambda: state[0], metrics, max_pull_streams=4)
    server = GrpcServer(service, "127.0.0.1:0", max_message_size=64 << 20, workers=16)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    p = Pump(MemoryStorage(), service, metrics, channel, pump_pb2_grpc.PumpStub(channel), state)
    return DiskPump(p, storage, metrics, server)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[DiskPump]:
    d = start_disk_pump(tmp_path / "pump", StorageOptions(stop_write_at_available_space=0))
    yield d
    d.close()


def test_an_unknown_type_is_refused_and_never_holds_the_watermark(disk: DiskPump) -> None:
    assert disk.send(prewrite(10)) == (OK, "")
    assert disk.send(commit(10, 11)) == (OK, "")
    refused = disk.send(gogo.encode_binlog(99, 20, 0, prewrite_key=b"k", prewrite_value=b"v"))
    assert disk.send(prewrite(30)) == (OK, "")
    assert disk.send(commit(30, 31)) == (OK, "")
    assert disk.storage.wait_indexed(DEADLINE)
    status = disk.storage.status()
    assert (status.max_commit_ts, status.pending_prewrites) == (31, 0)
    assert refused == (grpc.StatusCode.INVALID_ARGUMENT, "invalid binlog: unknown binlog type 99")
    assert status.write_count == 4
    assert [(s, c) for s, c, _ in disk.pulled(31)] == [(10, 11), (30, 31)]


def test_a_commit_at_or_below_its_start_ts_is_refused_and_never_served(disk: DiskPump) -> None:
    assert disk.send(prewrite(100)) == (OK, "")
    equal = disk.send(commit(100, 100))
    below = disk.send(commit(100, 50))
    assert disk.send(prewrite(200)) == (OK, "")
    assert disk.send(commit(200, 201)) == (OK, "")
    assert disk.send(commit(100, 150)) == (OK, "")  # the client's real commit pairs the prewrite
    assert [(s, c) for s, c, _ in disk.pulled(201)] == [(100, 150), (200, 201)]
    assert equal == (grpc.StatusCode.INVALID_ARGUMENT, "invalid binlog: commit_ts 100 is not above start_ts 100")
    assert below == (grpc.StatusCode.INVALID_ARGUMENT, "invalid binlog: commit_ts 50 is not above start_ts 100")
    assert disk.storage.status().write_count == 4


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (gogo.encode_binlog(binlog_pb2.Commit, 0, 0), "commit has start_ts 0, must be > 0"),
        (gogo.encode_binlog(binlog_pb2.Commit, 0, 5), "commit has start_ts 0, must be > 0"),
        (gogo.encode_binlog(binlog_pb2.Commit, 5, 0), "commit_ts 0 is not above start_ts 5"),
        (gogo.encode_binlog(binlog_pb2.Rollback, 0, 0), "rollback has start_ts 0, must be > 0"),
        (gogo.encode_binlog(binlog_pb2.Rollback, 5, 9), "rollback has commit_ts 9, must be 0 (or start_ts 5)"),
        (gogo.encode_binlog(binlog_pb2.Prewrite, 0, 5, prewrite_value=b"v"), "prewrite has start_ts 0, must be > 0"),
        (gogo.encode_binlog(binlog_pb2.Prewrite, 5, 0), "prewrite has neither prewrite_value nor ddl_query"),
        (gogo.encode_binlog(binlog_pb2.PreDDL, 5, 6), "binlog type PreDDL is obsolete"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_invalid_binlogs_are_refused_and_store_nothing(disk: DiskPump, payload: bytes, reason: str) -> None:
    assert disk.send(payload) == (grpc.StatusCode.INVALID_ARGUMENT, f"invalid binlog: {reason}")
    assert disk.storage.status().write_count == 0
    assert disk.pump.service.write_count == 0
    assert disk.metrics.loss_binlog._value.get() == 1


def test_valid_binlogs_of_every_kind_are_still_accepted(disk: DiskPump) -> None:
    assert disk.send(b"") == (OK, "")  # the liveness probe: nothing stored
    ddl = b"create table t (a int)"
    assert disk.send(gogo.encode_binlog(binlog_pb2.Prewrite, 10, prewrite_key=b"k", ddl_query=ddl)) == (OK, "")
    assert disk.send(gogo.encode_binlog(binlog_pb2.Commit, 10, 11, ddl_query=ddl)) == (OK, "")
    assert disk.send(prewrite(20)) == (OK, "")
    assert disk.send(gogo.encode_binlog(binlog_pb2.Rollback, 20, 0)) == (OK, "")
    assert disk.send(gogo.fake_binlog(30)) == (OK, "")  # a fake binlog sent like the pump's own
    got = disk.pulled(30)
    assert [(s, c) for s, c, _ in got] == [(10, 11), (30, 30)]
    assert got[0][2].ddl_query == ddl
    assert disk.storage.status().write_count == 5


def test_an_orphan_commit_is_accepted_but_neither_served_nor_a_stall(disk: DiskPump) -> None:
    assert disk.send(commit(40, 41)) == (OK, "")  # no prewrite 40 on this pump
    assert disk.send(prewrite(50)) == (OK, "")
    assert disk.send(commit(50, 51)) == (OK, "")
    assert [(s, c) for s, c, _ in disk.pulled(51)] == [(50, 51)]
    status = disk.storage.status()
    assert (status.max_commit_ts, status.pending_prewrites) == (51, 0)
    errors = disk.metrics.registry.get_sample_value(
        "binlog_pump_storage_error_count_total", {"type": "feed_pre_write_value"}
    )
    assert errors == 1
