"""The drainer's input side end to end: Collector + Puller + Merger against real etcd, pd-server and pump
processes (merged order, idle pump, pause, Notify, kill -9), plus the Puller and the Cistern service
against scripted gRPC peers on loopback."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.etcd import EtcdClient
from common.pb import binlog_pb2, cistern_pb2, cistern_pb2_grpc, gogo, pump_pb2
from common.pd_client import TSOClient, read_cluster_id
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from drainer.cistern import start_cistern_server
from drainer.collector import Collector
from drainer.merger import MergeItem, Merger
from drainer.puller import Puller
from tests.functional.pumputil import PumpClient, WriteLog, is_fake, join_all, prewrite_value, run_writers
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import free_port, wait_for

pytestmark = pytest.mark.functional

FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
DEADLINE = 60.0


# ------------------------------------------------------------------------------------------------ helpers


class Consumer:
    """Reads the merger on a thread, as the syncer will."""

    def __init__(self, merger: Merger) -> None:
        self.merger = merger
        self.items: list[MergeItem] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="test-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self.merger.closed:
            item = self.merger.get(timeout=0.1)
            if item is not None:
                with self._lock:
                    self.items.append(item)

    def snapshot(self) -> list[MergeItem]:
        with self._lock:
            return list(self.items)

    def seen(self) -> set[int]:
        return {i.commit_ts for i in self.snapshot()}

    def wait_seen(self, commit_ts: set[int] | dict[int, int], what: str, timeout: float = DEADLINE) -> None:
        want = set(commit_ts)
        wait_for(lambda: want <= self.seen(), timeout, what)

    def stop(self) -> None:
        self.merger.close()
        self._thread.join(10)


def check_merged(items: list[MergeItem], committed: dict[int, int]) -> None:
    """Strictly ascending (so nothing twice), exactly the acknowledged commits with their prewrite data,
    everything else fake binlogs."""
    ts = [i.commit_ts for i in items]
    assert ts == sorted(set(ts)), "merged stream is not strictly ascending"
    commits = {i.commit_ts: i for i in items if i.binlog.tp == binlog_pb2.Commit}
    assert set(commits) == set(committed), "lost or unexpected commits"
    for commit_ts, item in commits.items():
        b = item.binlog
        assert b.start_ts == committed[commit_ts]
        assert not b.HasField("prewrite_value")  # kept apart: a view of the received message, not a copy
        assert item.prewrite_value is not None
        assert bytes(item.prewrite_value) == prewrite_value(b.start_ts)
    assert all(is_fake(i.binlog) for i in items if i.binlog.tp != binlog_pb2.Commit)


def puller_of(collector: Collector, node_id: str) -> Puller:
    puller = collector.pullers()[node_id]
    assert isinstance(puller, Puller)
    return puller


def write_txns(client: PumpClient, tso: TSOClient, n: int, log: WriteLog) -> None:
    for _ in range(n):
        start_ts = tso.get_ts()
        client.prewrite(start_ts)
        commit_ts = tso.get_ts()
        client.commit(start_ts, commit_ts)
        log.committed[commit_ts] = start_ts


def http_put(url: str) -> tuple[int, Any]:
    req = urllib.request.Request(url, method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def cluster_id(etcd: EtcdClient, pd_server: PDProcess) -> int:
    cid = read_cluster_id(etcd)
    assert cid is not None
    return cid


@dataclass
class Rig:
    """Real pumps plus the drainer's input side, torn down in order."""

    tmp_path: Path
    etcd_server: EtcdProcess
    etcd: EtcdClient
    cluster_id: int
    request: pytest.FixtureRequest
    pumps: dict[str, PumpProcess] = field(default_factory=dict)
    clients: list[PumpClient] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    collector: Collector | None = None
    consumer: Consumer | None = None
    merger: Merger | None = None

    def pump(self, name: str) -> PumpProcess:
        pump = PumpProcess(self.tmp_path, self.etcd_server.url, name=name, extra_args=FAST)
        self.pumps[name] = pump
        pump.start()
        return pump

    def client(self, pump: PumpProcess) -> PumpClient:
        c = PumpClient(pump.addr, self.cluster_id)
        self.clients.append(c)
        return c

    def drainer(self, latest_ts: int = 0, *, detect_interval: float = 1.0) -> tuple[Collector, Consumer]:
        self.merger = Merger(latest_ts)
        self.collector = Collector(
            Registry(self.etcd),
            self.merger,
            self.cluster_id,
            detect_interval=detect_interval,
            on_error=self.errors.append,
        )
        self.collector.start()
        self.consumer = Consumer(self.merger)
        return self.collector, self.consumer

    def close(self) -> None:
        if self.collector is not None:
            self.collector.close()
        if self.consumer is not None:
            self.consumer.stop()
        for c in self.clients:
            c.close()
        rep = getattr(self.request.node, "rep_call", None)
        for pump in self.pumps.values():
            if rep is not None and rep.failed:
                print(f"\n===== {pump.name} log =====\n{pump.process.log_tail(60)}")
            pump.stop()


@pytest.fixture
def rig(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, cluster_id: int, request: pytest.FixtureRequest
) -> Iterator[Rig]:
    r = Rig(tmp_path, etcd_server, etcd, cluster_id, request)
    yield r
    r.close()


# ---------------------------------------------------------------------------------------- real pumps


def test_two_pumps_merge_in_order_and_an_idle_pump_does_not_stall(rig: Rig, tso_client: TSOClient) -> None:
    p1, p2 = rig.pump("pump1"), rig.pump("pump2")
    collector, consumer = rig.drainer()
    assert sorted(collector.pump_positions()) == ["pump1", "pump2"]
    c1, c2 = rig.client(p1), rig.client(p2)

    # phase 1: only pump1 gets writes; pump2's fake binlogs keep the merge moving
    log = WriteLog()
    write_txns(c1, tso_client, 20, log)
    consumer.wait_seen(log.committed, "pump1's commits while pump2 is idle")
    # pump1's last commit left the merge, so pump2 had a (fake) binlog above it
    assert collector.pump_positions()["pump2"] > max(log.committed)

    # phase 2: concurrent writers on both pumps
    log2 = WriteLog()
    threads = run_writers(c1, tso_client, writers=4, pairs_per_writer=60, log=log2, seed=1)
    threads += run_writers(c2, tso_client, writers=4, pairs_per_writer=60, log=log2, seed=2)
    join_all(threads, timeout=300)
    assert not log2.errors, log2.errors[:3]
    log2.committed.update(log.committed)
    consumer.wait_seen(log2.committed, "every acknowledged commit of both pumps")
    check_merged(consumer.snapshot(), log2.committed)
    assert {i.node_id for i in consumer.snapshot() if i.binlog.tp == binlog_pb2.Commit} == {"pump1", "pump2"}
    positions = collector.pump_positions()
    assert positions["pump1"] > 0
    assert positions["pump2"] > 0
    assert not rig.errors


def test_paused_pump_stalls_the_merge_and_its_restart_resumes_it(rig: Rig, tso_client: TSOClient) -> None:
    p1, p2 = rig.pump("pump1"), rig.pump("pump2")
    collector, consumer = rig.drainer()
    c1, c2 = rig.client(p1), rig.client(p2)
    log = WriteLog()
    write_txns(c1, tso_client, 5, log)
    write_txns(c2, tso_client, 5, log)
    consumer.wait_seen(log.committed, "commits before the pause")

    status, body = http_put(f"http://{p2.status_addr}/state/{p2.node_id}/pause")
    assert status == 200, body
    assert p2.process.proc is not None
    assert p2.process.proc.wait(DEADLINE) == 0
    paused = Registry(rig.etcd).get(NodeKind.PUMP, "pump2")
    assert paused is not None
    assert paused.state is NodeState.PAUSED
    wait_for(lambda: puller_of(collector, "pump2").paused, DEADLINE, "the collector to pause pump2's puller")
    assert "pump2" in consumer.merger.source_ids()  # paused, not removed: the merge waits for it

    # pump1 keeps working, but nothing above pump2's last binlog may leave the merge while it is paused
    write_txns(c1, tso_client, 3, log)
    blocked = max(log.committed)
    stalled_at = consumer.merger.latest_ts()
    deadline = time.monotonic() + 3.0  # three of pump1's fake-binlog intervals
    while time.monotonic() < deadline:
        assert blocked not in consumer.seen(), "the merge went on without the paused pump"
        time.sleep(0.1)
    assert consumer.merger.latest_ts() < blocked
    assert stalled_at <= consumer.merger.latest_ts()

    p2.start()  # registers online again (no Notify: it is not new); the collector resumes it
    consumer.wait_seen({blocked}, "the merge to resume after pump2 restarted")
    write_txns(c2, tso_client, 5, log)
    write_txns(c1, tso_client, 5, log)
    consumer.wait_seen(log.committed, "commits after the restart")
    check_merged(consumer.snapshot(), log.committed)
    assert not puller_of(collector, "pump2").paused
    assert not rig.errors


@dataclass
class CountingCollector:
    """The Notifiable the Cistern server sees: counts Notify calls, then asks the real collector."""

    collector: Collector
    calls: int = 0

    def notify(self) -> None:
        self.calls += 1
        self.collector.notify()


def test_a_pump_started_later_is_merged_after_notify(rig: Rig, tso_client: TSOClient) -> None:
    p1 = rig.pump("pump1")
    collector, consumer = rig.drainer(detect_interval=3600)  # only Notify (and the etcd watch) refresh
    counting = CountingCollector(collector)
    server, port = start_cistern_server(counting, "127.0.0.1:0")
    try:
        drainer = NodeStatus("drainer-test", f"127.0.0.1:{port}", NodeState.ONLINE, max_commit_ts=0)
        Registry(rig.etcd).create(NodeKind.DRAINER, drainer)
        log = WriteLog()
        write_txns(rig.client(p1), tso_client, 5, log)
        consumer.wait_seen(log.committed, "pump1's commits")

        p2 = rig.pump("pump2")  # a new pump calls Notify on every online drainer before it serves
        assert counting.calls >= 1
        assert "pump2" in consumer.merger.source_ids()  # Notify returned only after the source was added
        write_txns(rig.client(p2), tso_client, 5, log)
        write_txns(rig.clients[0], tso_client, 5, log)
        consumer.wait_seen(log.committed, "commits of both pumps")
        check_merged(consumer.snapshot(), log.committed)
        assert any(i.node_id == "pump2" and i.binlog.tp == binlog_pb2.Commit for i in consumer.snapshot())
    finally:
        server.stop(5).wait(10)
    assert not rig.errors


def test_puller_reconnects_after_pump_kill9_without_loss_or_duplicates(rig: Rig, tso_client: TSOClient) -> None:
    p1, p2 = rig.pump("pump1"), rig.pump("pump2")
    collector, consumer = rig.drainer()
    c1, c2 = rig.client(p1), rig.client(p2)
    c1.wait_for_ready = False  # the writers must see the crash
    log = WriteLog()
    stop = threading.Event()
    threads = run_writers(c1, tso_client, writers=4, pairs_per_writer=100_000, log=log, stop=stop)
    wait_for(lambda: len(consumer.seen() & set(log.committed)) >= 100 or bool(log.errors), DEADLINE, "100 commits")
    assert not log.errors, log.errors[:3]
    p1.kill9()
    stop.set()
    join_all(threads, timeout=60)
    before = collector.pump_positions()["pump1"]

    p1.start()
    c1 = rig.client(p1)  # a fresh channel, as a client after a crash
    log.finish_inflight(c1)
    write_txns(c1, tso_client, 10, log)
    write_txns(c2, tso_client, 10, log)
    consumer.wait_seen(log.committed, "every acknowledged commit after the restart")
    check_merged(consumer.snapshot(), log.committed)
    assert collector.pump_positions()["pump1"] > before
    assert consumer.merger.duplicates == 0
    assert not rig.errors


def test_offline_pump_is_removed_from_the_merge(rig: Rig, tso_client: TSOClient) -> None:
    p1, p2 = rig.pump("pump1"), rig.pump("pump2")
    collector, consumer = rig.drainer()
    log = WriteLog()
    write_txns(rig.client(p2), tso_client, 3, log)
    consumer.wait_seen(log.committed, "pump2's commits")
    # pump2 goes offline (binlogctl offline-pump); no drainer is registered, so it does not wait
    status, body = http_put(f"http://{p2.status_addr}/state/{p2.node_id}/close")
    assert status == 200, body
    assert p2.process.proc is not None
    assert p2.process.proc.wait(DEADLINE) == 0
    wait_for(lambda: "pump2" not in consumer.merger.source_ids(), DEADLINE, "pump2 to leave the merge")
    assert sorted(collector.pump_positions()) == ["pump1"]
    write_txns(rig.client(p1), tso_client, 3, log)
    consumer.wait_seen(log.committed, "pump1's commits after pump2 went offline")
    check_merged(consumer.snapshot(), log.committed)


class FakePuller:
    """Records what the collector asks of a puller."""

    def __init__(self, node_id: str, addr: str, cluster_id: int, start_ts: int, merger: Merger, **kw: Any) -> None:
        self.node_id, self.addr, self.cluster_id, self.start_ts = node_id, addr, cluster_id, start_ts
        self.kw = kw
        self.last_ts = start_ts
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    def pause(self) -> None:
        self.calls.append("pause")

    def resume(self) -> None:
        self.calls.append("resume")

    def set_addr(self, addr: str) -> None:
        self.calls.append(f"addr {addr}")
        self.addr = addr

    def close(self) -> None:
        self.calls.append("close")


def test_collector_applies_every_pump_state(etcd: EtcdClient) -> None:
    registry = Registry(etcd)
    merger = Merger(42)
    made: dict[str, FakePuller] = {}

    def factory(*args: Any, **kw: Any) -> FakePuller:
        p = FakePuller(*args, **kw)
        made[p.node_id] = p
        return p

    def put(node_id: str, state: NodeState, host: str = "") -> None:
        registry.upsert(NodeKind.PUMP, NodeStatus(node_id, host or f"h-{node_id}:1", state))

    put("gone", NodeState.OFFLINE)
    put("on", NodeState.ONLINE)
    put("sleepy", NodeState.PAUSED)
    put("leaving", NodeState.CLOSING)
    collector = Collector(registry, merger, 9, detect_interval=3600, compressor="gzip", puller_factory=factory)
    collector.refresh()
    try:
        assert sorted(made) == ["leaving", "on", "sleepy"]  # an unknown offline pump is ignored
        assert merger.source_ids() == ["leaving", "on", "sleepy"]
        assert made["on"].calls == ["start"]
        assert made["sleepy"].calls == ["pause", "start"]  # created paused: the merge waits for it
        assert made["leaving"].calls == ["start"]
        assert (made["on"].cluster_id, made["on"].start_ts, made["on"].kw["compressor"]) == (9, 42, "gzip")
        assert collector.pump_positions() == {"leaving": 42, "on": 42, "sleepy": 42}

        for p in made.values():
            p.calls.clear()
        put("on", NodeState.PAUSING)  # nothing: a pausing pump still serves
        put("sleepy", NodeState.ONLINE, host="h-sleepy:2")  # restarted elsewhere
        put("leaving", NodeState.OFFLINE)
        collector.notify()
        assert made["on"].calls == []
        assert made["sleepy"].calls == ["addr h-sleepy:2", "resume"]
        assert made["leaving"].calls == ["close"]
        assert merger.source_ids() == ["on", "sleepy"]
        assert sorted(collector.pump_positions()) == ["on", "sleepy"]
    finally:
        collector.close()
    assert made["on"].calls[-1] == "close"
    assert made["sleepy"].calls[-1] == "close"
    assert merger.source_ids() == ["on", "sleepy"]  # closing the collector leaves the sources to the merger


# ----------------------------------------------------------------------------------------- cistern


def test_cistern_notify_errors_are_grpc_statuses(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, cluster_id: int
) -> None:
    class Broken:
        def notify(self) -> None:
            raise RuntimeError("boom")

    closed = Collector(Registry(etcd), Merger(0), cluster_id)
    closed.close()
    servers = [start_cistern_server(target, "127.0.0.1:0") for target in (Broken(), closed)]
    try:
        for (_, port), code, text in (
            (servers[0], grpc.StatusCode.INTERNAL, "boom"),
            (servers[1], grpc.StatusCode.UNAVAILABLE, "shutting down"),
        ):
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = cistern_pb2_grpc.CisternStub(channel)
                with pytest.raises(grpc.RpcError) as info:
                    stub.Notify(cistern_pb2.NotifyReq(), timeout=10)
                assert info.value.code() == code
                assert text in str(info.value.details())
                with pytest.raises(grpc.RpcError) as info:
                    stub.DumpDDLJobs(cistern_pb2.DumpDDLJobsReq(), timeout=10)
                assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
                with pytest.raises(grpc.RpcError) as info:
                    list(stub.DumpBinlog(cistern_pb2.DumpBinlogReq(), timeout=10))
                assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED

        # a new pump whose Notify fails registers offline and exits
        Registry(etcd).create(
            NodeKind.DRAINER, NodeStatus("drainer-closed", f"127.0.0.1:{servers[1][1]}", NodeState.ONLINE)
        )
        pump = PumpProcess(tmp_path, etcd_server.url, name="pump-refused", extra_args=FAST)
        pump.process.start()
        try:
            assert pump.process.proc is not None
            assert pump.process.proc.wait(DEADLINE) != 0
        finally:
            pump.stop()
        node = Registry(etcd).get(NodeKind.PUMP, "pump-refused")
        assert node is not None
        assert node.state is NodeState.OFFLINE
    finally:
        for server, _ in servers:
            server.stop(5).wait(10)


# ------------------------------------------------------------------------------ puller vs a scripted pump


Script = Callable[[pump_pb2.PullBinlogReq, grpc.ServicerContext], Iterator[bytes]]


class ScriptedPump:
    """A `binlog.Pump` whose PullBinlogs runs `script`; records each request."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[pump_pb2.PullBinlogReq] = []
        self.cancelled = threading.Event()
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.server = grpc.server(futures.ThreadPoolExecutor(4), options=[("grpc.so_reuseport", 0)])
        handler = grpc.unary_stream_rpc_method_handler(
            self._pull, request_deserializer=pump_pb2.PullBinlogReq.FromString, response_serializer=lambda b: b
        )
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("binlog.Pump", {"PullBinlogs": handler}),)
        )
        self.server.add_insecure_port(self.addr)
        self.server.start()

    def _pull(self, request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        self.requests.append(request)
        context.add_callback(self.cancelled.set)
        yield from self.script(request, context)

    def stop(self) -> None:
        self.server.stop(1).wait(10)


def resp(commit_ts: int) -> bytes:
    return gogo.marshal_pull_resp(gogo.fake_binlog(commit_ts), commit_ts, commit_ts)


def endless(request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
    ts = request.startFrom.offset
    while context.is_active():
        ts += 1
        yield resp(ts)
        time.sleep(0.01)  # a slow pump


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], ScriptedPump]]:
    made: list[ScriptedPump] = []

    def make(script: Script) -> ScriptedPump:
        made.append(ScriptedPump(script))
        return made[-1]

    yield make
    for p in made:
        p.stop()


def collect(merger: Merger, n: int) -> list[int]:
    out: list[int] = []
    deadline = time.monotonic() + DEADLINE
    while len(out) < n and time.monotonic() < deadline:
        item = merger.get(timeout=0.5)
        if item is not None:
            out.append(item.commit_ts)
    return out


def test_puller_resumes_from_last_ts_after_a_stream_error(scripted: Callable[[Script], ScriptedPump]) -> None:
    def script(request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        offset = request.startFrom.offset
        yield from (resp(ts) for ts in range(offset + 1, offset + 4))
        context.abort(grpc.StatusCode.UNAVAILABLE, "pump is shutting down")

    pump = scripted(script)
    merger = Merger(10)
    merger.add_source("p")
    puller = Puller("p", pump.addr, 77, 10, merger, reconnect_interval=0.05)
    puller.start()
    try:
        assert collect(merger, 9) == list(range(11, 20))
    finally:
        puller.close()
    offsets = [r.startFrom.offset for r in pump.requests]
    assert offsets[:3] == [10, 13, 16]
    assert all(r.clusterID == 77 for r in pump.requests)
    assert puller.error is None
    assert merger.duplicates == 0


def test_puller_unmarshal_error_is_fatal(scripted: Callable[[Script], ScriptedPump]) -> None:
    def script(request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield resp(11)
        yield gogo.marshal_pull_resp(b"\xff\xff\xff", 12, 12)
        yield resp(13)

    pump = scripted(script)
    merger = Merger(10)
    merger.add_source("p")
    errors: list[BaseException] = []
    puller = Puller("p", pump.addr, 1, 10, merger, on_error=errors.append, reconnect_interval=0.05)
    puller.start()
    try:
        wait_for(lambda: not puller.alive, DEADLINE, "the puller to stop")
    finally:
        puller.close()
    assert len(errors) == 1
    assert puller.error is errors[0]
    assert "pump p" in str(errors[0])
    assert "offset=11" in str(errors[0])
    assert puller.last_ts == 11
    assert len(pump.requests) == 1


def test_puller_pause_ends_the_stream_and_resume_continues(scripted: Callable[[Script], ScriptedPump]) -> None:
    pump = scripted(endless)
    merger = Merger(0)
    merger.add_source("p")
    puller = Puller("p", pump.addr, 1, 0, merger, compressor="gzip", reconnect_interval=0.05)
    puller.start()
    try:
        first = collect(merger, 5)
        puller.pause()
        assert pump.cancelled.wait(DEADLINE), "pause did not cancel the stream"
        paused_at = puller.last_ts
        assert len(pump.requests) == 1
        puller.resume()
        wait_for(lambda: len(pump.requests) == 2, DEADLINE, "a new stream after resume")
        assert pump.requests[1].startFrom.offset == paused_at
        rest = collect(merger, 5)
    finally:
        puller.close()
    seq = first + rest
    assert seq == list(range(1, len(seq) + 1))


def test_puller_close_is_bounded_while_blocked_on_the_merger(scripted: Callable[[Script], ScriptedPump]) -> None:
    pump = scripted(endless)
    merger = Merger(0, max_bytes_per_source=1)  # one binlog fills it; nobody reads
    merger.add_source("p")
    puller = Puller("p", pump.addr, 1, 0, merger)
    puller.start()
    wait_for(lambda: merger.buffered_bytes("p") > 0, DEADLINE, "the first binlog")
    started = time.monotonic()
    puller.close()
    puller.close()  # idempotent
    assert time.monotonic() - started < 5
    assert not puller.alive
    assert puller.last_ts == 1


def test_puller_rejects_an_unknown_compressor() -> None:
    with pytest.raises(ValueError, match="unknown compressor"):
        Puller("p", "127.0.0.1:1", 1, 0, Merger(0), compressor="snappy")


def test_a_stream_that_goes_silent_is_cancelled_and_dialled_again(scripted: Callable[[Script], ScriptedPump]) -> None:
    """The nemesis suite found a drainer waiting minutes on a stream its pump had ended while a partition
    dropped what it sent: the first stream here sends three binlogs and then nothing (its connection
    stays up); the puller gives it up after idle_timeout and resumes after the last binlog."""

    def script(request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        offset = request.startFrom.offset
        yield from (resp(ts) for ts in range(offset + 1, offset + 4))
        if offset == 10:  # the first stream falls silent without ending
            while context.is_active():
                time.sleep(0.05)

    pump = scripted(script)
    merger = Merger(10)
    merger.add_source("p")
    puller = Puller("p", pump.addr, 1, 10, merger, reconnect_interval=0.05, idle_timeout=0.5)
    puller.start()
    try:
        assert collect(merger, 6) == list(range(11, 17))
    finally:
        puller.close()
    assert puller.idle_cancels == 1
    assert [r.startFrom.offset for r in pump.requests][:2] == [10, 13]
    assert merger.duplicates == 0
    assert puller.idle_timeout == 0.5  # reset by the messages of the second stream


def test_the_idle_limit_doubles_while_streams_stay_quiet_and_resets_on_a_message(
    scripted: Callable[[Script], ScriptedPump], caplog: pytest.LogCaptureFixture
) -> None:
    """A quiet pump (its watermark waits for a slow transaction) or a large binlog on a slow link is not
    dead: each idle cancel doubles the limit, so the third stream, quiet for 1 s, gets its message."""

    def script(request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        started = time.monotonic()
        while context.is_active() and time.monotonic() - started < 1.0:  # quiet for 1 s, then one binlog
            time.sleep(0.02)
        if context.is_active():
            yield resp(request.startFrom.offset + 1)

    pump = scripted(script)
    merger = Merger(10)
    merger.add_source("p")
    puller = Puller("p", pump.addr, 1, 10, merger, reconnect_interval=0.05, idle_timeout=0.3)
    with caplog.at_level("WARNING", logger="drainer.puller"):
        puller.start()
        try:
            assert collect(merger, 1) == [11]
        finally:
            puller.close()
    assert puller.idle_cancels == 2  # after 0.3 s and 0.6 s; 1.2 s was enough
    assert puller.idle_timeout == 0.3
    assert "failed (CANCELLED" not in caplog.text  # the watchdog's own cancels are not failures
    assert caplog.text.count("delivered nothing") == 2


def test_a_puller_the_merger_holds_back_is_not_cancelled_for_silence(
    scripted: Callable[[Script], ScriptedPump],
) -> None:
    """Only time spent waiting for the stream counts: a puller waiting for room in the merger keeps it."""
    pump = scripted(endless)
    merger = Merger(0, max_bytes_per_source=1)  # one binlog fills it; nobody reads for a while
    merger.add_source("p")
    puller = Puller("p", pump.addr, 1, 0, merger, reconnect_interval=0.05, idle_timeout=0.3)
    puller.start()
    try:
        wait_for(lambda: merger.buffered_bytes("p") > 0, DEADLINE, "the first binlog")
        held = time.monotonic()
        wait_for(lambda: time.monotonic() - held > 1.5, DEADLINE, "five idle timeouts to pass")
        assert puller.idle_cancels == 0
        assert len(pump.requests) == 1
        assert collect(merger, 5) == [1, 2, 3, 4, 5]
    finally:
        puller.close()
