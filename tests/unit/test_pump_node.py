"""Node lifecycle pieces without etcd: node id file, approx clock, state machine, registration, heartbeat,
Notify against a real in-process Cistern server, and the offline wait (MemoryStorage + a dict registry)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from common import tso
from common.errors import ConfigError, NodeExistsError, NodeNotFoundError
from common.pb import binlog_pb2, cistern_pb2, cistern_pb2_grpc, gogo
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from pump.background import write_fake_binlog
from pump.memory_storage import MemoryStorage
from pump.node import (
    TRANSITIONS,
    ActionError,
    ApproxClock,
    NotifyError,
    NotifyPolicy,
    PumpNode,
    StateError,
    node_id_history,
    notify_drainer,
    resolve_node_id,
    wait_safe_to_offline,
)

T0 = tso.compose(1_700_000_000_000, 0)
FAST_NOTIFY = NotifyPolicy(attempts=3, backoff=0.05, factor=2.0, timeout=5.0)


class FakeRegistry(Registry):
    """Registry semantics (create / update / upsert / list) over a dict: a fake of our own class."""

    def __init__(self) -> None:
        self.nodes: dict[tuple[NodeKind, str], NodeStatus] = {}
        self.writes: list[NodeStatus] = []
        self.lock = threading.Lock()

    def create(self, kind: NodeKind, status: NodeStatus) -> None:
        with self.lock:
            if (kind, status.node_id) in self.nodes:
                raise NodeExistsError(status.node_id)
            self.nodes[(kind, status.node_id)] = status
            self.writes.append(status)

    def update(self, kind: NodeKind, status: NodeStatus) -> None:
        with self.lock:
            if (kind, status.node_id) not in self.nodes:
                raise NodeNotFoundError(status.node_id)
            self.nodes[(kind, status.node_id)] = status
            self.writes.append(status)

    def get(self, kind: NodeKind, node_id: str) -> NodeStatus | None:
        with self.lock:
            return self.nodes.get((kind, node_id))

    def list(self, kind: NodeKind) -> list[NodeStatus]:
        with self.lock:
            return sorted((s for (k, _), s in self.nodes.items() if k is kind), key=lambda s: s.node_id)


class FakeTSO:
    """Increasing timestamps starting at T0 + 1 s (a fake of our TimestampSource)."""

    def __init__(self) -> None:
        self.ts = T0 + (1000 << 18)
        self.lock = threading.Lock()

    def get_ts(self, timeout: float | None = None) -> int:
        with self.lock:
            self.ts += 1
            return self.ts


def make_node(
    registry: FakeRegistry, storage: MemoryStorage | None = None, clock: ApproxClock | None = None
) -> PumpNode:
    st = storage or MemoryStorage()
    return PumpNode(
        registry,
        FakeTSO(),
        clock or ApproxClock(),
        node_id="pump-1",
        host="127.0.0.1:8250",
        max_commit_ts=st.max_commit_ts,
        heartbeat_interval=0.05,
        notify_policy=FAST_NOTIFY,
    )


# --------------------------------------------------------------------------------------------- node id


def test_node_id_defaults_to_hostname_port_and_is_persisted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    node_id = resolve_node_id(data, "", 8250)
    assert node_id == f"{socket.gethostname()}:8250"
    assert (data / ".node").read_text().strip() == node_id
    assert resolve_node_id(data, "", 9999) == node_id


def test_configured_node_id_is_used_and_persisted_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert resolve_node_id(tmp_path, "pump-a", 8250) == "pump-a"
    assert (tmp_path / ".node").read_text().strip() == "pump-a"
    assert resolve_node_id(tmp_path, "pump-b", 8250) == "pump-a"
    assert "node-id 'pump-b' is ignored" in caplog.text


def test_every_node_id_a_data_dir_served_under_is_remembered(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Renaming a pump (deleting `.node`) must not make its resolver treat its own waiting prewrites, whose
    status rows name the old id, as copies belonging to another pump."""
    assert node_id_history(tmp_path) == []
    assert resolve_node_id(tmp_path, "pump-a", 8250) == "pump-a"
    assert resolve_node_id(tmp_path, "", 8250) == "pump-a"
    (tmp_path / ".node").unlink()
    assert resolve_node_id(tmp_path, "pump-b", 8250) == "pump-b"
    assert node_id_history(tmp_path) == ["pump-a", "pump-b"]
    assert "this data dir served as pump-a before" in caplog.text


def test_a_node_id_longer_than_the_status_table_takes_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="256 characters, more than 255"):
        resolve_node_id(tmp_path, "p" * 256, 8250)
    assert not (tmp_path / ".node").exists()


# ---------------------------------------------------------------------------------------- approx clock


def test_approx_clock_adds_elapsed_milliseconds() -> None:
    clock = ApproxClock()
    assert clock.now() == 0
    clock.observe(T0)
    first = clock.now()
    assert first >= T0
    deadline = time.monotonic() + 5
    while clock.now() - T0 < (5 << 18):
        assert time.monotonic() < deadline
        time.sleep(0.002)
    assert tso.logical(clock.now()) == 0
    clock.observe(T0 - 1)  # never goes back
    assert clock.now() >= first


# --------------------------------------------------------------------------------------- state machine


def test_transitions_follow_the_table() -> None:
    node = make_node(FakeRegistry())
    assert node.state is NodeState.OFFLINE
    with pytest.raises(StateError, match="cannot go from offline to paused"):
        node.transition(NodeState.PAUSED)
    node.transition(NodeState.ONLINE)
    node.transition(NodeState.CLOSING)
    node.transition(NodeState.OFFLINE)
    assert TRANSITIONS[NodeState.PAUSED] == frozenset()
    assert TRANSITIONS[NodeState.PAUSING] == {NodeState.PAUSED}


def test_apply_action_only_when_online_for_this_node() -> None:
    node = make_node(FakeRegistry())
    with pytest.raises(ActionError, match="this pump's state is offline, apply pause failed!") as excinfo:
        node.apply_action("pump-1", "pause")
    assert excinfo.value.http_status == 409
    node.transition(NodeState.ONLINE)
    with pytest.raises(ActionError, match="invalid nodeID other, this pump's nodeID is pump-1") as excinfo:
        node.apply_action("other", "pause")
    assert excinfo.value.http_status == 404
    with pytest.raises(ActionError, match="invalid action jump") as excinfo:
        node.apply_action("pump-1", "jump")
    assert excinfo.value.http_status == 400
    assert node.apply_action("pump-1", "close") is NodeState.CLOSING
    assert node.state is NodeState.CLOSING


# ----------------------------------------------------------------------------- registration, heartbeat


def test_register_publishes_online_and_returns_the_previous_state() -> None:
    registry = FakeRegistry()
    node = make_node(registry)
    assert node.register() is None
    status = registry.get(NodeKind.PUMP, "pump-1")
    assert status is not None
    assert (status.state, status.host, status.is_alive) == (NodeState.ONLINE, "127.0.0.1:8250", True)
    assert status.update_ts > T0

    registry.update(NodeKind.PUMP, status.with_state(NodeState.PAUSED))
    assert make_node(registry).register() is NodeState.PAUSED


def test_heartbeat_publishes_max_commit_ts_and_an_advancing_update_ts() -> None:
    registry = FakeRegistry()
    storage = MemoryStorage()
    node = make_node(registry, storage)
    node.register()
    first = registry.get(NodeKind.PUMP, "pump-1")
    assert first is not None
    write_fake_binlog(storage, FakeTSO())
    node.start_heartbeat()
    try:
        deadline = time.monotonic() + 10
        while True:
            now = registry.get(NodeKind.PUMP, "pump-1")
            assert now is not None
            if now.max_commit_ts == storage.max_commit_ts() and now.update_ts > first.update_ts:
                break
            assert time.monotonic() < deadline, "heartbeat did not publish"
            time.sleep(0.01)
    finally:
        node.stop_heartbeat()
    assert now.state is NodeState.ONLINE
    assert tso.physical(now.update_ts) >= tso.physical(first.update_ts)


def test_heartbeat_keeps_publishing_online_while_closing_locally() -> None:
    registry = FakeRegistry()
    node = make_node(registry)
    node.register()
    node.apply_action("pump-1", "close")
    node.heartbeat_once()
    status = registry.get(NodeKind.PUMP, "pump-1")
    assert status is not None
    assert status.state is NodeState.ONLINE


def test_frozen_max_commit_ts_survives_a_closed_storage() -> None:
    registry = FakeRegistry()
    storage = MemoryStorage()
    node = make_node(registry, storage)
    write_fake_binlog(storage, FakeTSO())
    node.freeze_max_commit_ts()
    expected = storage.max_commit_ts()
    write_fake_binlog(storage, FakeTSO())
    assert node.status(NodeState.PAUSED).max_commit_ts == expected


# -------------------------------------------------------------------------------------------- Notify


class Cistern(cistern_pb2_grpc.CisternServicer):  # type: ignore[misc]
    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.calls = 0

    def Notify(self, request: cistern_pb2.NotifyReq, context: grpc.ServicerContext) -> cistern_pb2.NotifyResp:
        self.calls += 1
        if self.fail:
            context.abort(grpc.StatusCode.INTERNAL, "collector failed")
        return cistern_pb2.NotifyResp()


@pytest.fixture
def cistern_server(request: pytest.FixtureRequest) -> Iterator[tuple[Cistern, str]]:
    servicer = Cistern(fail=bool(getattr(request, "param", False)))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    cistern_pb2_grpc.add_CisternServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(0).wait()


def test_notify_drainer_succeeds(cistern_server: tuple[Cistern, str]) -> None:
    servicer, host = cistern_server
    notify_drainer(host, FAST_NOTIFY)
    assert servicer.calls == 1


@pytest.mark.parametrize("cistern_server", [True], indirect=True)
def test_notify_drainer_tries_three_times_then_fails(cistern_server: tuple[Cistern, str]) -> None:
    servicer, host = cistern_server
    with pytest.raises(NotifyError, match=f"notify drainer at {host} failed: INTERNAL: collector failed"):
        notify_drainer(host, FAST_NOTIFY)
    assert servicer.calls == 3


def test_notify_drainers_only_calls_online_drainers(cistern_server: tuple[Cistern, str]) -> None:
    servicer, host = cistern_server
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d-online", host, NodeState.ONLINE))
    registry.create(NodeKind.DRAINER, NodeStatus("d-paused", "127.0.0.1:1", NodeState.PAUSED))
    make_node(registry).notify_drainers()
    assert servicer.calls == 1


def test_notify_drainers_names_the_failing_drainer() -> None:
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d-gone", "127.0.0.1:1", NodeState.ONLINE))
    node = make_node(registry)
    node._notify_policy = NotifyPolicy(attempts=2, backoff=0.01, timeout=0.5)
    with pytest.raises(NotifyError, match=r"drainer d-gone: notify drainer at 127\.0\.0\.1:1 failed"):
        node.notify_drainers()


# -------------------------------------------------------------------------------------- offline wait


def run_offline_wait(
    storage: MemoryStorage, registry: FakeRegistry, abort: threading.Event
) -> tuple[threading.Thread, list[bool]]:
    result: list[bool] = []
    fake_tso = FakeTSO()

    def target() -> None:
        result.append(
            wait_safe_to_offline(
                write_fake=lambda: write_fake_binlog(storage, fake_tso),
                all_matched=storage.all_matched,
                max_commit_ts=storage.max_commit_ts,
                registry=registry,
                abort=abort,
                interval=0.01,
            )
        )

    thread = threading.Thread(target=target)
    thread.start()
    return thread, result


def test_offline_wait_until_drainers_catch_up() -> None:
    storage = MemoryStorage()
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=0))
    registry.create(NodeKind.DRAINER, NodeStatus("d-off", "h:2", NodeState.OFFLINE, max_commit_ts=0))
    thread, result = run_offline_wait(storage, registry, threading.Event())
    deadline = time.monotonic() + 10
    while storage.writes < 3:  # one fake to start with, then one per check while d1 lags
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert thread.is_alive()
    registry.update(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=1 << 62))
    thread.join(10)
    assert result == [True]


def test_offline_wait_for_an_unmatched_prewrite_then_abort() -> None:
    storage = MemoryStorage()
    storage.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=5), gogo.encode_binlog(0, 5))
    abort = threading.Event()
    thread, result = run_offline_wait(storage, FakeRegistry(), abort)
    deadline = time.monotonic() + 10
    while storage.writes < 2:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert thread.is_alive()  # the fake binlog is held back by the prewrite
    abort.set()
    thread.join(10)
    assert result == [False]


def test_offline_wait_without_drainers_is_immediate() -> None:
    storage = MemoryStorage()
    thread, result = run_offline_wait(storage, FakeRegistry(), threading.Event())
    thread.join(10)
    assert result == [True]
    assert storage.writes == 1


def test_offline_wait_ends_when_the_drainer_lags_one_fake_binlog_behind() -> None:
    """The drainer publishes the ts of the fake binlog before the last one: the target must not move."""
    storage = MemoryStorage()
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=0))
    fake_tso = FakeTSO()
    written: list[int] = []

    def write_fake() -> int:
        previous = written[-1] if written else 0
        registry.update(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=previous))
        ts = write_fake_binlog(storage, fake_tso)
        written.append(ts)
        return ts

    abort = threading.Event()
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(
            wait_safe_to_offline(
                write_fake=write_fake,
                all_matched=storage.all_matched,
                max_commit_ts=storage.max_commit_ts,
                registry=registry,
                abort=abort,
                interval=0.01,
            )
        )
    )
    thread.start()
    thread.join(5)
    abort.set()
    thread.join(5)
    assert result == [True]
    assert len(written) == 2  # the first fake is the target; the second carried the drainer to it


def test_notify_policy_shares_the_budget_between_tries() -> None:
    assert NotifyPolicy().per_attempt() == pytest.approx((10.0 - 1.0 - 2.0) / 3)
    assert NotifyPolicy(attempt_timeout=0.7).per_attempt() == 0.7
    assert NotifyPolicy(timeout=1.0).per_attempt() == pytest.approx(1.0 / 3)  # back-offs alone exceed it


def test_notify_an_unreachable_drainer_gets_every_try_within_the_budget(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        host = f"127.0.0.1:{s.getsockname()[1]}"
    policy = NotifyPolicy(attempts=3, backoff=0.1, factor=2.0, timeout=2.0)
    started = time.monotonic()
    with caplog.at_level("WARNING", logger="pump.node"), pytest.raises(NotifyError):
        notify_drainer(host, policy)
    elapsed = time.monotonic() - started
    tries = [r for r in caplog.records if "notify drainer at" in r.getMessage()]
    assert [f"try {i}/3" in r.getMessage() for i, r in enumerate(tries, 1)] == [True, True, True]
    assert elapsed < policy.timeout + 1.0
