"""binlog.Pump over MemoryStorage: a real grpc server and channel on a loopback port."""

from __future__ import annotations

import asyncio
import logging
import queue
import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from common.errors import BinlogError, StorageClosedError
from common.pb import binlog_pb2, gogo, pump_pb2, pump_pb2_grpc
from common.pull import GC_TS_METADATA
from common.registry import NodeState
from pump import server as server_mod
from pump.memory_storage import MemoryStorage
from pump.metrics import PumpMetrics
from pump.server import GrpcServer, PumpService
from pump.storage.api import StorageOptions
from pump.storage.storage import Storage

CLUSTER = 6_900_000_000_000_000_001
DEADLINE = 10.0


@dataclass
class Pump:
    storage: MemoryStorage
    service: PumpService
    metrics: PumpMetrics
    channel: grpc.Channel
    stub: pump_pb2_grpc.PumpStub
    state: list[NodeState]


def start_pump(
    max_message_size: int = 64 << 20,
    *,
    storage: MemoryStorage | None = None,
    workers: int = 8,
    max_inflight_write_bytes: int = server_mod.DEFAULT_MAX_INFLIGHT_WRITE_BYTES,
) -> tuple[Pump, GrpcServer]:
    storage = storage or MemoryStorage()
    state = [NodeState.ONLINE]
    metrics = PumpMetrics(storage.status)
    service = PumpService(
        storage,
        CLUSTER,
        lambda: state[0],
        metrics,
        max_pull_streams=workers // 2,
        max_inflight_write_bytes=max_inflight_write_bytes,
    )
    server = GrpcServer(service, "127.0.0.1:0", max_message_size=max_message_size, workers=workers)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    return Pump(storage, service, metrics, channel, pump_pb2_grpc.PumpStub(channel), state), server


@pytest.fixture
def pump() -> Iterator[Pump]:
    p, server = start_pump()
    yield p
    p.channel.close()
    p.service.close_streams()
    server.stop(1.0)


def prewrite(start_ts: int, value: bytes = b"pv") -> bytes:
    pv = binlog_pb2.PrewriteValue(schema_version=3, mutations=[binlog_pb2.TableMutation(table_id=45)])
    pv.mutations[0].inserted_rows.append(value)
    return gogo.encode_binlog(binlog_pb2.Prewrite, start_ts, prewrite_value=gogo.marshal_prewrite_value(pv))


def commit(start_ts: int, commit_ts: int) -> bytes:
    return gogo.encode_binlog(binlog_pb2.Commit, start_ts, commit_ts)


def write(p: Pump, payload: bytes, cluster: int = CLUSTER) -> pump_pb2.WriteBinlogResp:
    resp: pump_pb2.WriteBinlogResp = p.stub.WriteBinlog(
        pump_pb2.WriteBinlogReq(clusterID=cluster, payload=payload), timeout=DEADLINE
    )
    return resp


def write_error(p: Pump, payload: bytes, cluster: int = CLUSTER) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as excinfo:
        write(p, payload, cluster)
    return excinfo.value


def code_and_details(err: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    return err.code(), err.details() or ""


def wait_until(cond: object, what: str, timeout: float = DEADLINE) -> None:
    assert callable(cond)
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def sample(p: Pump, name: str, labels: dict[str, str] | None = None) -> float:
    value = p.metrics.registry.get_sample_value(name, labels or {})
    return 0.0 if value is None else value


# ------------------------------------------------------------------------------------------- WriteBinlog


def test_write_pair_is_stored_and_counted(pump: Pump) -> None:
    assert write(pump, prewrite(10)).errmsg == ""
    assert write(pump, commit(10, 11)).errmsg == ""
    assert pump.storage.max_commit_ts() == 11
    assert pump.service.write_count == 2
    labels = {"method": "WriteBinlog", "label": "succ"}
    assert sample(pump, "binlog_pump_rpc_duration_seconds_count", labels) == 2


def test_bad_payload_is_invalid_argument(pump: Pump) -> None:
    code, details = code_and_details(write_error(pump, b"\xff\xff\xff"))
    assert code is grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("payload is not a binlog")
    assert sample(pump, "binlog_pump_loss_binlog_count_total") == 1
    assert sample(pump, "binlog_pump_rpc_duration_seconds_count", {"method": "WriteBinlog", "label": "fail"}) == 1


def test_wrong_cluster_is_failed_precondition(pump: Pump) -> None:
    code, details = code_and_details(write_error(pump, prewrite(10), cluster=CLUSTER + 1))
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert details == f"cluster id mismatch: request has {CLUSTER + 1}, this pump serves {CLUSTER}"
    assert pump.storage.writes == 0


@pytest.mark.parametrize("state", [NodeState.PAUSING, NodeState.CLOSING, NodeState.PAUSED])
def test_not_online_refuses_prewrite_but_accepts_commit_and_rollback(pump: Pump, state: NodeState) -> None:
    write(pump, prewrite(10))
    write(pump, prewrite(20))
    pump.state[0] = state
    code, details = code_and_details(write_error(pump, prewrite(30)))
    assert (code, details) == (grpc.StatusCode.UNAVAILABLE, f"no online: {state.value}")
    write(pump, commit(10, 11))
    write(pump, gogo.encode_binlog(binlog_pb2.Rollback, 20, 0))
    assert pump.storage.max_commit_ts() == 11
    assert pump.storage.all_matched()


def test_no_space_is_resource_exhausted_but_fake_binlogs_pass(pump: Pump) -> None:
    pump.storage.no_space = True
    code, details = code_and_details(write_error(pump, prewrite(10)))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details == "no available space"
    write(pump, gogo.fake_binlog(50))
    assert pump.storage.max_commit_ts() == 50


def test_probe_succeeds_without_storing(pump: Pump) -> None:
    assert write(pump, b"").errmsg == ""
    assert write(pump, gogo.encode_binlog(binlog_pb2.Prewrite, 0, 0)).errmsg == ""
    assert pump.storage.writes == 0
    assert pump.service.write_count == 0


def test_probe_of_a_paused_pump_fails_like_a_prewrite(pump: Pump) -> None:
    pump.state[0] = NodeState.PAUSED
    assert code_and_details(write_error(pump, b"")) == (grpc.StatusCode.UNAVAILABLE, "no online: paused")


def test_closed_storage_is_unavailable(pump: Pump) -> None:
    pump.storage.close()
    code, details = code_and_details(write_error(pump, prewrite(10)))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in details


def test_message_larger_than_max_message_size_is_refused() -> None:
    p, server = start_pump(max_message_size=4096)
    try:
        code, _ = code_and_details(write_error(p, prewrite(10, b"x" * 10_000)))
        assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert p.storage.writes == 0
    finally:
        p.channel.close()
        server.stop(1.0)


def test_slow_write_is_logged(pump: Pump, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(server_mod, "SLOW_RPC_SECONDS", 0.01)
    pump.storage.write_delay = 0.02
    with caplog.at_level(logging.WARNING, logger="pump.server"):
        write(pump, prewrite(10))
    assert any("slow write binlog RPC" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------------------------------- PullBinlogs


class Puller:
    """A PullBinlogs call read on a thread into a queue of (start_ts, commit_ts, Binlog)."""

    def __init__(self, p: Pump, offset: int) -> None:
        self.call = p.stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER, startFrom=pump_pb2.Pos(offset=offset)))
        self.items: queue.Queue[tuple[int, int, binlog_pb2.Binlog]] = queue.Queue()
        self.error: list[grpc.RpcError] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for resp in self.call:
                e = resp.entity
                self.items.put((e.meta.startTs, e.meta.commitTs, binlog_pb2.Binlog.FromString(e.payload)))
        except grpc.RpcError as exc:
            self.error.append(exc)

    def take(self, n: int) -> list[tuple[int, int, binlog_pb2.Binlog]]:
        return [self.items.get(timeout=DEADLINE) for _ in range(n)]

    def cancel(self) -> None:
        self.call.cancel()
        self.thread.join(DEADLINE)


def test_pull_streams_commits_above_offset_in_order_and_follows_new_writes(pump: Pump) -> None:
    for start in (10, 20, 30):
        write(pump, prewrite(start, bytes([start])))
        write(pump, commit(start, start + 1))
    puller = Puller(pump, offset=11)
    try:
        got = puller.take(2)
        assert [(s, c) for s, c, _ in got] == [(20, 21), (30, 31)]
        first = got[0][2]
        assert first.tp == binlog_pb2.Commit
        pv = binlog_pb2.PrewriteValue.FromString(first.prewrite_value)
        assert pv.mutations[0].inserted_rows == [bytes([20])]

        write(pump, prewrite(40))
        write(pump, gogo.fake_binlog(35))  # arrives after the prewrite: held back by it
        assert puller.items.empty()
        write(pump, commit(40, 41))
        assert [(s, c) for s, c, _ in puller.take(2)] == [(35, 35), (40, 41)]
    finally:
        puller.cancel()


def test_wire_bytes_are_gogo_identical(pump: Pump) -> None:
    write(pump, prewrite(10))
    write(pump, commit(10, 11))
    write(pump, gogo.fake_binlog(12))
    raw: grpc.UnaryStreamMultiCallable[pump_pb2.PullBinlogReq, bytes] = pump.channel.unary_stream(
        "/binlog.Pump/PullBinlogs",
        request_serializer=pump_pb2.PullBinlogReq.SerializeToString,
        response_deserializer=None,  # raw bytes off the wire
    )
    call = raw(pump_pb2.PullBinlogReq(clusterID=CLUSTER, startFrom=pump_pb2.Pos(offset=0)))
    try:
        it = iter(call)
        first, second = next(it), next(it)
    finally:
        call.cancel()  # type: ignore[no-untyped-call]  # untyped in grpc-stubs
    merged = gogo.encode_binlog(
        binlog_pb2.Commit, 10, 11, prewrite_value=binlog_pb2.Binlog.FromString(prewrite(10)).prewrite_value
    )
    assert first == gogo.marshal_pull_resp(merged, 10, 11)
    # PullBinlogResp{entity{pos{}, payload=Binlog{tp=Rollback, start=commit=12}, meta{12, 12}}}, as Go writes it
    assert second == bytes.fromhex("0a 14 0a 00 12 0a 08 02 10 0c 18 0c 38 00 40 00 22 04 08 0c 10 0c")


def test_cancel_ends_the_server_side_stream(pump: Pump) -> None:
    puller = Puller(pump, offset=0)
    wait_until(lambda: pump.service.live_streams == 1, "the stream to open")
    puller.cancel()
    wait_until(lambda: pump.service.live_streams == 0, "the server to end the stream")
    assert sample(pump, "binlog_pump_rpc_duration_seconds_count", {"method": "PullBinlogs", "label": "succ"}) == 1


def test_pulls_cancelled_at_once_give_their_slots_back_and_a_stream_announces_the_gc_ts() -> None:
    """A client that leaves while the pump sends the stream's initial metadata (its gc ts) must not keep
    the stream's slot: with slots leaking, a pump soon refuses every stream, its drainer's too."""
    p, server = start_pump(workers=8)  # 4 stream slots
    try:
        for _ in range(200):
            p.stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER)).cancel()
        wait_until(lambda: p.service.live_streams == 0, "every cancelled stream to give its slot back")
        call = p.stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER))
        assert dict(call.initial_metadata())[GC_TS_METADATA] == "0"
        assert write(p, gogo.fake_binlog(7)).errmsg == ""
        first = next(iter(call))
        assert first.entity.meta.commitTs == 7  # served after 200 cancelled pulls
        call.cancel()
    finally:
        p.channel.close()
        p.service.close_streams()
        server.stop(1.0)


class _LeavingContext:
    """A servicer context whose client is gone by the time the stream sends its initial metadata."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def add_done_callback(self, cb: object) -> None:
        pass

    def done(self) -> bool:
        return True

    async def send_initial_metadata(self, metadata: object) -> None:
        raise asyncio.CancelledError

    async def abort(self, code: object, details: str) -> None:
        raise AssertionError(f"abort({code}, {details})")


def test_a_client_gone_before_the_initial_metadata_gives_its_slot_back(pump: Pump) -> None:
    async def pull() -> None:
        stream = pump.service.pull_binlogs(pump_pb2.PullBinlogReq(clusterID=CLUSTER), _LeavingContext())  # type: ignore[arg-type]
        with pytest.raises(asyncio.CancelledError):
            await anext(stream)

    for _ in range(10):  # more than the 4 slots
        asyncio.run(pull())
    assert pump.service.live_streams == 0


def test_close_streams_ends_streams_with_unavailable_and_refuses_new_ones(pump: Pump) -> None:
    puller = Puller(pump, offset=0)
    wait_until(lambda: pump.service.live_streams == 1, "the stream to open")
    pump.service.close_streams()
    puller.thread.join(DEADLINE)
    assert [e.code() for e in puller.error] == [grpc.StatusCode.UNAVAILABLE]
    late = Puller(pump, offset=0)
    late.thread.join(DEADLINE)
    assert [e.code() for e in late.error] == [grpc.StatusCode.UNAVAILABLE]


def test_pull_with_wrong_cluster_is_failed_precondition(pump: Pump) -> None:
    call = pump.stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=1))
    with pytest.raises(grpc.RpcError) as excinfo:
        next(iter(call))
    code, details = code_and_details(excinfo.value)
    assert code is grpc.StatusCode.FAILED_PRECONDITION
    assert details.startswith("cluster id mismatch: request has 1")
    assert pump.service.live_streams == 0


def test_storage_close_ends_stream_with_unavailable(pump: Pump) -> None:
    puller = Puller(pump, offset=0)
    wait_until(lambda: pump.service.live_streams == 1, "the stream to open")
    pump.storage.close()
    puller.thread.join(DEADLINE)
    assert [e.code() for e in puller.error] == [grpc.StatusCode.UNAVAILABLE]


def test_a_busy_grpc_port_is_a_clear_error(pump: Pump) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(BinlogError, match=f"cannot listen on 127.0.0.1:{port}"):
            GrpcServer(pump.service, f"127.0.0.1:{port}", max_message_size=1 << 20)


# ------------------------------------------------------------------------------------------- capacity


def test_pull_streams_are_capped_and_writes_still_get_threads() -> None:
    p, server = start_pump(workers=8)
    pullers = [Puller(p, offset=0) for _ in range(4)]
    try:
        wait_until(lambda: p.service.live_streams == 4, "the maximum number of streams to open")
        assert write(p, gogo.fake_binlog(5)).errmsg == ""
        extra = Puller(p, offset=0)
        extra.thread.join(DEADLINE)
        assert [code_and_details(e) for e in extra.error] == [
            (grpc.StatusCode.RESOURCE_EXHAUSTED, "too many pull streams")
        ]
        assert p.service.live_streams == 4
        assert all(puller.take(1)[0][1] == 5 for puller in pullers)  # the open streams still work
    finally:
        for puller in pullers:
            puller.cancel()
        p.channel.close()
        p.service.close_streams()
        server.stop(1.0)


def test_byte_budget_admits_in_order_and_an_oversized_request_alone() -> None:
    async def scenario() -> None:
        budget = server_mod.ByteBudget(100)
        assert await budget.acquire(60)
        assert not await budget.acquire(60, timeout=0.05)  # 120 > 100 while 60 are in use
        assert await budget.acquire(40, timeout=0.05)
        budget.release(60)
        budget.release(40)
        assert await budget.acquire(500)  # larger than the budget: admitted when nothing else is in flight
        assert not await budget.acquire(1, timeout=0.05)
        budget.release(500)
        assert budget.in_use == 0

    asyncio.run(scenario())


def test_byte_budget_waiters_are_admitted_in_arrival_order() -> None:
    async def scenario() -> None:
        budget = server_mod.ByteBudget(100)
        assert budget.try_acquire(90)
        admitted: list[str] = []

        async def take(name: str, n: int) -> None:
            assert await budget.acquire(n, timeout=DEADLINE)
            admitted.append(name)

        big = asyncio.create_task(take("big", 80))
        await asyncio.sleep(0)
        small = asyncio.create_task(take("small", 5))  # would fit now, but arrived after "big"
        await asyncio.sleep(0.05)
        assert admitted == []
        assert not budget.try_acquire(1)  # nobody jumps the queue
        budget.release(90)
        await asyncio.gather(big, small)
        assert admitted == ["big", "small"]
        assert budget.in_use == 85

    asyncio.run(scenario())


def test_byte_budget_gives_up_on_timeout_and_cancellation_without_leaking() -> None:
    async def scenario() -> None:
        budget = server_mod.ByteBudget(100)
        assert await budget.acquire(100)
        timed_out = asyncio.create_task(budget.acquire(50, timeout=0.05))
        cancelled = asyncio.create_task(budget.acquire(50))
        behind = asyncio.create_task(budget.acquire(50, timeout=DEADLINE))
        assert not await timed_out
        await asyncio.sleep(0)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        budget.release(100)
        assert await behind  # the ones that gave up left the queue
        assert budget.in_use == 50

    asyncio.run(scenario())


class GatedStorage(MemoryStorage):
    """MemoryStorage whose writes wait for `gate`; `entered` counts writes that reached the storage."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = 0

    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        with self._cond:
            self.entered += 1
        self.gate.wait(DEADLINE)
        super().write_binlog(binlog, payload)


def test_inflight_write_bytes_are_bounded() -> None:
    storage = GatedStorage()
    big = prewrite(10, b"x" * 600)
    p, server = start_pump(storage=storage, max_inflight_write_bytes=1000)
    pool = futures.ThreadPoolExecutor(3)
    try:
        first = pool.submit(write, p, big)
        wait_until(lambda: storage.entered == 1, "the first write to reach the storage")
        second = pool.submit(write, p, prewrite(20, b"y" * 600))
        time.sleep(0.2)
        assert storage.entered == 1  # 1200 bytes would exceed the budget: the second waits before parsing
        assert p.service.inflight_write_bytes == len(big)
        storage.gate.set()
        first.result(DEADLINE)
        second.result(DEADLINE)
        assert storage.writes == 2
        assert p.service.inflight_write_bytes == 0
        huge = prewrite(30, b"z" * 5000)  # larger than the whole budget: admitted alone
        assert write(p, huge).errmsg == ""
        assert storage.writes == 3
    finally:
        storage.gate.set()
        pool.shutdown()
        p.channel.close()
        p.service.close_streams()
        server.stop(1.0)


def test_a_cancelled_write_keeps_its_bytes_counted_until_the_storage_is_done() -> None:
    storage = GatedStorage()
    payload = prewrite(10, b"x" * 600)
    p, server = start_pump(storage=storage, max_inflight_write_bytes=1000)
    try:
        call = p.stub.WriteBinlog.future(pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=payload), timeout=DEADLINE)
        wait_until(lambda: storage.entered == 1, "the write to reach the storage")
        call.cancel()
        time.sleep(0.1)
        assert p.service.inflight_write_bytes == len(payload)  # the storage still holds the payload
        storage.gate.set()
        wait_until(lambda: p.service.inflight_write_bytes == 0, "the bytes to be released")
        assert storage.writes == 1
    finally:
        storage.gate.set()
        p.channel.close()
        server.stop(1.0)


def test_a_write_waiting_for_room_past_its_deadline_is_deadline_exceeded() -> None:
    storage = GatedStorage()
    p, server = start_pump(storage=storage, max_inflight_write_bytes=1000)
    pool = futures.ThreadPoolExecutor(1)
    try:
        first = pool.submit(write, p, prewrite(10, b"x" * 600))
        wait_until(lambda: storage.entered == 1, "the first write to reach the storage")
        with pytest.raises(grpc.RpcError) as excinfo:
            p.stub.WriteBinlog(
                pump_pb2.WriteBinlogReq(clusterID=CLUSTER, payload=prewrite(20, b"y" * 600)), timeout=0.3
            )
        assert excinfo.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert storage.entered == 1
        storage.gate.set()
        first.result(DEADLINE)
        wait_until(lambda: p.service.inflight_write_bytes == 0, "the bytes to be released")
    finally:
        storage.gate.set()
        pool.shutdown()
        p.channel.close()
        server.stop(1.0)


# ------------------------------------------------------------------------------- over the real Storage


@pytest.fixture
def disk_pump(tmp_path: Path) -> Iterator[tuple[Pump, GrpcServer, Storage]]:
    storage = Storage(tmp_path / "pump", StorageOptions(stop_write_at_available_space=0))
    state = [NodeState.ONLINE]
    metrics = PumpMetrics(storage.status)
    service = PumpService(storage, CLUSTER, lambda: state[0], metrics, max_pull_streams=4)
    server = GrpcServer(service, "127.0.0.1:0", max_message_size=64 << 20, workers=32)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    p = Pump(MemoryStorage(), service, metrics, channel, pump_pb2_grpc.PumpStub(channel), state)
    yield p, server, storage
    channel.close()
    service.close_streams()
    server.stop(1.0)
    storage.close()


def test_storage_writes_without_blocking_the_server(disk_pump: tuple[Pump, GrpcServer, Storage]) -> None:
    p, _, storage = disk_pump
    assert isinstance(storage, server_mod.SubmittingStorage)
    pool = futures.ThreadPoolExecutor(16)
    try:
        pairs = [(100 + 2 * i, 101 + 2 * i) for i in range(64)]
        list(pool.map(lambda sc: write(p, prewrite(sc[0], b"v%d" % sc[0])), pairs))
        list(pool.map(lambda sc: write(p, commit(*sc)), pairs))
    finally:
        pool.shutdown()
    assert p.service.write_count == 128
    assert storage.status().write_count == 128
    assert p.service.inflight_write_bytes == 0
    assert storage.wait_indexed(DEADLINE)
    puller = Puller(p, offset=0)
    try:
        got = puller.take(64)
    finally:
        puller.cancel()
    assert [(s, c) for s, c, _ in got] == pairs
    assert all(
        binlog_pb2.PrewriteValue.FromString(b.prewrite_value).mutations[0].inserted_rows == [b"v%d" % s]
        for s, _, b in got
    )


def test_refusals_over_the_real_storage(disk_pump: tuple[Pump, GrpcServer, Storage]) -> None:
    p, _, storage = disk_pump
    assert code_and_details(write_error(p, b"\xff\xff\xff"))[0] is grpc.StatusCode.INVALID_ARGUMENT
    assert code_and_details(write_error(p, prewrite(10), cluster=CLUSTER + 1))[0] is grpc.StatusCode.FAILED_PRECONDITION
    p.state[0] = NodeState.PAUSED
    assert code_and_details(write_error(p, prewrite(10))) == (grpc.StatusCode.UNAVAILABLE, "no online: paused")
    p.state[0] = NodeState.ONLINE
    assert write(p, b"").errmsg == ""
    storage._disk.writable = lambda: False  # type: ignore[method-assign]
    code, details = code_and_details(write_error(p, prewrite(10)))
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert details.startswith("no available space")
    write(p, gogo.fake_binlog(50))  # fake binlogs still pass
    assert storage.status().write_count == 1
    storage.close()
    code, details = code_and_details(write_error(p, prewrite(20)))
    assert code is grpc.StatusCode.UNAVAILABLE
    assert "shutting down" in details


def test_a_full_write_queue_falls_back_to_a_blocking_write(tmp_path: Path) -> None:
    storage = Storage(tmp_path / "pump", StorageOptions(stop_write_at_available_space=0, write_queue_bytes=2048))
    metrics = PumpMetrics(storage.status)
    service = PumpService(storage, CLUSTER, lambda: NodeState.ONLINE, metrics)
    server = GrpcServer(service, "127.0.0.1:0", max_message_size=64 << 20, workers=8)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    p = Pump(MemoryStorage(), service, metrics, channel, pump_pb2_grpc.PumpStub(channel), [NodeState.ONLINE])
    pool = futures.ThreadPoolExecutor(6)
    try:
        with storage._chaser.write_lock:  # the vlog writer stalls on its first batch; the queue fills up
            calls = [pool.submit(write, p, prewrite(10 + i, b"x" * 1000)) for i in range(6)]
            time.sleep(0.3)
            assert not any(c.done() for c in calls)
        for c in calls:
            assert c.result(DEADLINE).errmsg == ""
        assert storage.status().write_count == 6
    finally:
        pool.shutdown()
        channel.close()
        server.stop(1.0)
        storage.close()


# ------------------------------------------------------------------------------------------ pull feed


def test_pull_feed_is_bounded_by_bytes_and_lets_a_large_message_through_alone() -> None:
    async def scenario() -> None:
        feed = server_mod._Feed(asyncio.get_running_loop(), 100, threading.Event())
        put: list[bool] = []

        def reader() -> None:
            for msg in (b"a" * 60, b"b" * 30, b"c" * 60, b"d" * 500):
                put.append(feed.put(msg))
            feed.end()

        thread = threading.Thread(target=reader)
        thread.start()
        await asyncio.sleep(0.2)
        assert put == [True, True]  # a third would pass 100 bytes: the reader waits
        assert await feed.get() == [b"a" * 60, b"b" * 30]
        rest: list[bytes] = []
        while (batch := await feed.get()) is not None:
            rest += batch
        assert rest == [b"c" * 60, b"d" * 500]  # the oversized one came alone, after the feed emptied
        await asyncio.to_thread(thread.join, DEADLINE)
        assert put == [True, True, True, True]

    asyncio.run(scenario())


@pytest.mark.parametrize("how", ["stop", "close"])
def test_pull_feed_reader_gives_up_when_the_stream_stops_or_the_consumer_leaves(how: str) -> None:
    async def scenario() -> None:
        stop = threading.Event()
        feed = server_mod._Feed(asyncio.get_running_loop(), 10, stop)
        assert feed.put(b"x" * 10)
        result: list[bool] = []
        thread = threading.Thread(target=lambda: result.append(feed.put(b"y")))
        thread.start()
        await asyncio.sleep(0.1)
        assert result == []  # full: waiting
        if how == "stop":
            stop.set()
        else:
            feed.close()
        await asyncio.to_thread(thread.join, DEADLINE)
        assert result == [False]

    asyncio.run(scenario())


def test_pull_feed_passes_the_reader_error_on() -> None:
    async def scenario() -> None:
        feed = server_mod._Feed(asyncio.get_running_loop(), 100, threading.Event())
        await asyncio.to_thread(feed.end, StorageClosedError("closed"))
        with pytest.raises(StorageClosedError):
            await feed.get()

    asyncio.run(scenario())
