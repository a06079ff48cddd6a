"""PumpApp in-process with MemoryStorage against a real etcd and pd-server: registration, heartbeat,
Notify, pause and close (offline) procedures, and a real gRPC round trip."""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.errors import NotOnlineError
from common.etcd import EtcdClient
from common.pb import binlog_pb2, cistern_pb2, cistern_pb2_grpc, gogo, pump_pb2, pump_pb2_grpc
from common.pd_client import TSOClient
from common.registry import NodeChange, NodeKind, NodeState, NodeStatus, Registry
from pump import app as pump_app
from pump import main as pump_main
from pump.app import PumpApp
from pump.config import load_config
from pump.memory_storage import MemoryStorage, WaitingResolver
from pump.node import NotifyError, NotifyPolicy
from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import free_port

pytestmark = pytest.mark.functional

NODE_ID = "pump-functional:1"
DEADLINE = 20.0


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


class RunningPump:
    """A PumpApp over MemoryStorage, started, with `run()` on a thread."""

    def __init__(self, etcd_url: str, data_dir: Path, storage: MemoryStorage | None = None) -> None:
        self.storage = storage or MemoryStorage()
        cfg = load_config(
            flags={
                "pd-urls": etcd_url,
                "addr": f"127.0.0.1:{free_port()}",
                "status-addr": f"127.0.0.1:{free_port()}",
                "data-dir": str(data_dir),
                "node-id": NODE_ID,
                "heartbeat-interval": "100ms",
                "gen-binlog-interval": "100ms",
            },
            env={},
        )
        self.app = PumpApp(
            cfg,
            storage_factory=lambda _dir, _opts, _resolver: self.storage,
            resolver_factory=lambda _cfg, _node: WaitingResolver(),
            notify_policy=NotifyPolicy(attempts=3, backoff=0.1, factor=2.0, timeout=5.0),
            offline_check_interval=0.05,
        )
        self.exit_code: list[int] = []
        self.thread = threading.Thread(target=lambda: self.exit_code.append(self.app.run()), name="pump-run")

    def start(self) -> RunningPump:
        self.app.start()
        self.thread.start()
        return self

    def http(self, method: str, path: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", int(self.app.cfg.status_addr.rpartition(":")[2]), timeout=15)
        try:
            conn.request(method, path)
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def wait_exit(self) -> int:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), "pump did not exit"
        return self.exit_code[0]

    def stop(self) -> None:
        self.app.request_pause()
        if self.thread.is_alive():
            self.thread.join(DEADLINE)
        self.app.close()


class Cistern(cistern_pb2_grpc.CisternServicer):  # type: ignore[misc]
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls = 0

    def Notify(self, request: cistern_pb2.NotifyReq, context: grpc.ServicerContext) -> cistern_pb2.NotifyResp:
        self.calls += 1
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "drainer collector is down")
        return cistern_pb2.NotifyResp()


@pytest.fixture
def pumps(etcd_server: EtcdProcess, pd_server: PDProcess, tmp_path: Path) -> Iterator[Callable[..., RunningPump]]:
    made: list[RunningPump] = []

    def make(storage: MemoryStorage | None = None) -> RunningPump:
        p = RunningPump(etcd_server.url, tmp_path / "pump", storage)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


@pytest.fixture
def registry(etcd: EtcdClient) -> Registry:
    return Registry(etcd)


def start_drainer(registry: Registry, *, fail: bool = False, max_commit_ts: int = 0) -> tuple[Cistern, grpc.Server]:
    servicer = Cistern(fail)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    cistern_pb2_grpc.add_CisternServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    registry.upsert(
        NodeKind.DRAINER, NodeStatus("drainer-1", f"127.0.0.1:{port}", NodeState.ONLINE, max_commit_ts=max_commit_ts)
    )
    return servicer, server


def pump_status(registry: Registry) -> NodeStatus:
    status = registry.get(NodeKind.PUMP, NODE_ID)
    assert status is not None
    return status


# ---------------------------------------------------------------------------------------------- tests


def test_registration_json_and_heartbeat(
    pumps: Callable[..., RunningPump], etcd: EtcdClient, registry: Registry
) -> None:
    p = pumps().start()
    kv = etcd.get(f"/tidb-binlog/v1/pumps/{NODE_ID}")
    assert kv is not None
    doc = json.loads(kv.value)
    assert list(doc) == ["nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"]
    assert (doc["nodeId"], doc["host"], doc["state"], doc["isAlive"], doc["score"], doc["label"]) == (
        NODE_ID,
        p.app.cfg.addr,
        "online",
        True,
        100,  # routing score (pump/score.py): MemoryStorage has 50 GiB free, no write batch measured yet
        {"labels": {"status-addr": p.app.http.addr if p.app.http else ""}},  # ours: where binlogctl finds its API
    )
    first = pump_status(registry)
    wait_until(
        lambda: pump_status(registry).update_ts > first.update_ts and pump_status(registry).max_commit_ts > 0,
        "heartbeat to advance updateTS and publish the fake binlogs' maxCommitTS",
    )
    assert (Path(p.app.cfg.data_dir) / ".node").read_text().strip() == NODE_ID


def test_write_pull_and_status_over_the_real_servers(pumps: Callable[..., RunningPump], tso_client: TSOClient) -> None:
    p = pumps().start()
    assert p.app.grpc is not None
    with grpc.insecure_channel(f"127.0.0.1:{p.app.grpc.port}") as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        cid = p.app.cluster_id
        start = tso_client.get_ts()
        stub.WriteBinlog(
            pump_pb2.WriteBinlogReq(clusterID=cid, payload=gogo.encode_binlog(0, start, prewrite_value=b"v")),
            timeout=10,
        )
        commit = tso_client.get_ts()
        stub.WriteBinlog(
            pump_pb2.WriteBinlogReq(clusterID=cid, payload=gogo.encode_binlog(binlog_pb2.Commit, start, commit)),
            timeout=10,
        )
        call = stub.PullBinlogs(pump_pb2.PullBinlogReq(clusterID=cid, startFrom=pump_pb2.Pos(offset=start - 1)))
        try:
            got = [(r.entity.meta.startTs, r.entity.meta.commitTs) for r, _ in zip(call, range(50), strict=False)]
            assert (start, commit) in got
        finally:
            call.cancel()
    status, doc = p.http("GET", "/status")
    assert status == 200
    assert doc["ErrMsg"] == ""
    assert doc["CommitTS"] > commit
    assert doc["status"][NODE_ID]["state"] == "online"


def test_new_pump_notifies_online_drainer_and_a_restarted_one_does_not(
    pumps: Callable[..., RunningPump], registry: Registry
) -> None:
    servicer, server = start_drainer(registry)
    try:
        p = pumps().start()
        assert servicer.calls == 1
        assert p.http("PUT", f"/state/{NODE_ID}/pause")[0] == 200
        assert p.wait_exit() == 0
        assert pump_status(registry).state is NodeState.PAUSED
        again = pumps().start()  # previous state paused: no Notify
        assert again.app.node is not None
        assert again.app.node.state is NodeState.ONLINE
        assert servicer.calls == 1
    finally:
        server.stop(0).wait()


def test_failing_drainer_makes_a_new_pump_go_offline(pumps: Callable[..., RunningPump], registry: Registry) -> None:
    servicer, server = start_drainer(registry, fail=True)
    try:
        p = pumps()
        with pytest.raises(NotifyError, match=r"drainer drainer-1: notify drainer at .* failed: UNAVAILABLE"):
            p.app.start()
        assert servicer.calls == 3
        assert pump_status(registry).state is NodeState.OFFLINE
        assert p.storage.closed
    finally:
        server.stop(0).wait()


def test_pause_via_http_publishes_pausing_then_paused(pumps: Callable[..., RunningPump], registry: Registry) -> None:
    states: list[NodeState] = []

    def seen(change: NodeChange) -> None:
        status = change.status
        if status is not None and change.node_id == NODE_ID and (not states or states[-1] is not status.state):
            states.append(status.state)

    watcher = registry.watch(NodeKind.PUMP, seen)
    try:
        p = pumps().start()
        wait_until(lambda: NodeState.ONLINE in states, "the online registration to be watched")
        status, doc = p.http("PUT", f"/state/{NODE_ID}/pause")
        assert (status, doc) == (200, {"message": "apply action pause success!", "code": 200, "data": None})
        assert p.wait_exit() == 0
        wait_until(lambda: NodeState.PAUSED in states, "paused to be watched")
        assert states == [NodeState.ONLINE, NodeState.PAUSING, NodeState.PAUSED]
        assert p.storage.closed
    finally:
        watcher.stop()


def test_close_waits_for_the_drainer_before_going_offline(
    pumps: Callable[..., RunningPump], registry: Registry, tso_client: TSOClient
) -> None:
    _, server = start_drainer(registry, max_commit_ts=0)
    try:
        p = pumps().start()
        assert p.http("PUT", f"/state/{NODE_ID}/close")[0] == 200
        writes = p.storage.writes
        wait_until(lambda: p.storage.writes >= writes + 3, "fake binlogs written during the offline wait")
        assert p.thread.is_alive()
        assert pump_status(registry).state is NodeState.CLOSING  # published: clients stop routing here
        with pytest.raises(NotOnlineError, match="no online: closing"):
            _write_prewrite(p)
        assert p.http("PUT", f"/state/{NODE_ID}/pause")[0] == 409

        registry.update(
            NodeKind.DRAINER,
            NodeStatus("drainer-1", "127.0.0.1:1", NodeState.ONLINE, max_commit_ts=tso_client.get_ts() + (10 << 18)),
        )
        assert p.wait_exit() == 0
        final = pump_status(registry)
        assert final.state is NodeState.OFFLINE
        assert final.max_commit_ts == p.storage.max_commit_ts()
    finally:
        server.stop(0).wait()


def test_a_signal_cuts_the_offline_wait_short_and_leaves_the_pump_paused(
    pumps: Callable[..., RunningPump], registry: Registry
) -> None:
    _, server = start_drainer(registry, max_commit_ts=0)
    try:
        p = pumps().start()
        assert p.http("PUT", f"/state/{NODE_ID}/close")[0] == 200
        writes = p.storage.writes
        wait_until(lambda: p.storage.writes >= writes + 2, "the offline wait to be under way")
        p.app.request_pause()  # SIGTERM
        assert p.wait_exit() == 0
        assert pump_status(registry).state is NodeState.PAUSED
    finally:
        server.stop(0).wait()


def _write_prewrite(p: RunningPump) -> None:
    assert p.app.grpc is not None
    with grpc.insecure_channel(f"127.0.0.1:{p.app.grpc.port}") as channel:
        stub = pump_pb2_grpc.PumpStub(channel)
        req = pump_pb2.WriteBinlogReq(
            clusterID=p.app.cluster_id, payload=gogo.encode_binlog(0, 12345, prewrite_value=b"v")
        )
        try:
            stub.WriteBinlog(req, timeout=10)
        except grpc.RpcError as exc:
            if exc.code() is grpc.StatusCode.UNAVAILABLE:
                raise NotOnlineError(exc.details() or "") from None
            raise


def test_main_runs_a_pump_until_sigterm_pauses_it(
    etcd_server: EtcdProcess,
    pd_server: PDProcess,
    registry: Registry,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storage = MemoryStorage()
    monkeypatch.setattr(pump_app, "default_storage_factory", lambda _d, _o, _r, **_kw: storage)
    monkeypatch.setattr(pump_app, "default_resolver_factory", lambda _cfg, _node: WaitingResolver())
    log_file = tmp_path / "pump.log"
    argv = [
        "--pd-urls", etcd_server.url,
        "--addr", f"127.0.0.1:{free_port()}",
        "--status-addr", f"127.0.0.1:{free_port()}",
        "--data-dir", str(tmp_path / "data"),
        "--node-id", NODE_ID,
        "--log-file", str(log_file),
        "--binlog-file-size", "1024",
    ]  # fmt: skip
    errors: list[BaseException] = []

    def terminate_when_online() -> None:
        try:
            wait_until(
                lambda: (s := registry.get(NodeKind.PUMP, NODE_ID)) is not None and s.state is NodeState.ONLINE,
                "the pump to register online",
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    killer = threading.Thread(target=terminate_when_online)
    killer.start()
    try:
        code = pump_main.main(argv)
    finally:
        killer.join(DEADLINE)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        for h in list(root.handlers):
            root.removeHandler(h)
            h.close()
        for h in root_handlers:
            root.addHandler(h)
        root.setLevel(root_level)
    assert not errors
    assert code == 0
    assert pump_status(registry).state is NodeState.PAUSED
    assert storage.closed
    text = log_file.read_text()
    assert "config key 'binlog-file-size' is ignored (deprecated)" in text
    assert "received SIGTERM: pausing" in text
    assert "pump closed (paused)" in text
