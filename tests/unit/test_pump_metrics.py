"""The pump's metrics (pump/metrics.py) on their real update paths: gRPC WriteBinlog into the real storage.

Covers the series the pump's write path updates (rpc, single and batch writes), the gauges read at
scrape time (write queue bytes, in-flight write bytes) and the client's bound children.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common.pb import pump_pb2, pump_pb2_grpc
from common.registry import NodeState
from pump.metrics import PumpMetrics
from pump.server import GrpcServer, PumpService
from pump.storage.api import StorageOptions, StorageStatus
from pump.storage.storage import Storage
from pump_client.metrics import ClientMetrics
from tests.unit.test_pump_server import CLUSTER, DEADLINE, commit, prewrite

Served = tuple[PumpMetrics, Storage, pump_pb2_grpc.PumpStub]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """A real Storage reporting to a PumpMetrics, behind the real gRPC server."""
    parts: dict[str, PumpService | Storage] = {}

    def status() -> StorageStatus:
        s = parts["storage"]
        assert isinstance(s, Storage)
        return s.status()

    def inflight() -> int:
        s = parts["service"]
        assert isinstance(s, PumpService)
        return s.inflight_write_bytes

    metrics = PumpMetrics(status, inflight)  # as PumpApp: built before the storage and the service
    storage = parts["storage"] = Storage(tmp_path / "data", StorageOptions(sync_log=False), observer=metrics.storage)
    service = parts["service"] = PumpService(storage, CLUSTER, lambda: NodeState.ONLINE, metrics)
    server = GrpcServer(service, "127.0.0.1:0", max_message_size=64 << 20, workers=4)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    yield metrics, storage, pump_pb2_grpc.PumpStub(channel)
    channel.close()
    service.close_streams()
    server.stop(1.0)
    storage.close()


def value(m: PumpMetrics, name: str, labels: dict[str, str] | None = None) -> float:
    got = m.registry.get_sample_value(name, labels or {})
    assert got is not None, f"{name} {labels} is not exported"
    return got


def test_write_binlog_moves_rpc_single_and_batch_series(served: Served) -> None:
    metrics, storage, stub = served
    payloads = [prewrite(10, b"v" * 500), commit(10, 11), prewrite(12), commit(12, 13)]
    for p in payloads:
        stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=p), timeout=DEADLINE)
    stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=b""), timeout=DEADLINE)  # a probe
    with pytest.raises(grpc.RpcError):
        stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER + 1, payload=commit(14, 15)), timeout=DEADLINE)
    assert value(metrics, "binlog_pump_rpc_duration_seconds_count", {"method": "WriteBinlog", "label": "succ"}) == 5
    assert value(metrics, "binlog_pump_rpc_duration_seconds_count", {"method": "WriteBinlog", "label": "fail"}) == 1
    assert value(metrics, "binlog_pump_loss_binlog_count_total") == 1
    single = {"type": "single"}
    assert value(metrics, "binlog_pump_storage_write_binlog_size_count", single) == 4  # not the probe
    assert value(metrics, "binlog_pump_storage_write_binlog_size_sum", single) == sum(map(len, payloads))
    assert value(metrics, "binlog_pump_storage_write_binlog_duration_time_count", single) == 4
    assert value(metrics, "binlog_pump_storage_write_binlog_duration_time_sum", single) > 0
    assert 1 <= value(metrics, "binlog_pump_storage_write_binlog_size_count", {"type": "batch"}) <= 4
    assert value(metrics, "binlog_pump_storage_write_queue_bytes") == 0  # all written
    assert value(metrics, "binlog_pump_rpc_inflight_write_bytes") == 0
    assert value(metrics, "binlog_pump_storage_max_commit_ts") >= 0
    assert storage.status().write_queue_bytes == 0


def test_commits_for_a_decided_transaction_are_counted(served: Served) -> None:
    metrics, storage, stub = served
    for p in (prewrite(20), commit(20, 21), commit(20, 25), commit(20, 21), prewrite(30), commit(30, 31)):
        stub.WriteBinlog(pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=p), timeout=DEADLINE)
    assert storage.wait_indexed(10)
    assert value(metrics, "binlog_pump_storage_ignored_decision_count_total", {"type": "commit"}) == 2


def test_scrape_time_gauges_read_the_status_and_the_server() -> None:
    status = StorageStatus(
        max_commit_ts=(1_700_000_000_000 << 18) | 3,
        gc_ts=0,
        head_fid=0,
        head_offset=0,
        capacity_bytes=100 << 30,
        available_bytes=30 << 30,
        pending_prewrites=0,
        chaser_on=False,
        write_count=0,
        write_queue_bytes=12345,
    )
    m = PumpMetrics(lambda: status, lambda: 777)
    assert value(m, "binlog_pump_storage_write_queue_bytes") == 12345
    assert value(m, "binlog_pump_rpc_inflight_write_bytes") == 777
    assert value(m, "binlog_pump_storage_max_commit_ts") == 1_700_000_000_000
    assert value(m, "binlog_pump_storage_storage_size_bytes", {"type": "available"}) == 30 << 30


def test_a_closing_server_does_not_fail_the_scrape() -> None:
    def gone() -> int:
        raise RuntimeError("service closed")

    m = PumpMetrics(None, gone)
    assert b"binlog_pump_rpc_duration_seconds" in m.render()
    assert m.registry.get_sample_value("binlog_pump_rpc_inflight_write_bytes") is None


def test_client_counters_bind_a_pumps_children_once() -> None:
    c = ClientMetrics()
    c.attempt("p1", retry=False, ok=True)
    children = c._children["p1"]
    c.attempt("p1", retry=True, ok=False)
    c.attempt("p2", retry=False, ok=True)
    assert c._children["p1"] is children
    assert (c.writes("p1"), c.failures("p1"), c.retries("p1"), c.writes("p2")) == (1, 1, 1, 1)
