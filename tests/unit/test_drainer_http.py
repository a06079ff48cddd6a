"""The drainer's HTTP API on a loopback port: a fake backend, and an unstarted DrainerApp for /state."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Final

import pytest

from common import tso
from common.httpserver import METRICS_CONTENT_TYPE, HTTPActionError
from common.registry import NodeKind, NodeState
from drainer.app import DrainerApp
from drainer.config import load_config
from drainer.http_api import StatusServer
from drainer.metrics import DrainerMetrics
from tests.unit.test_pump_node import FakeRegistry

NODE_ID: Final = "drainer-1:8249"
PUMP_TS: Final = tso.compose(1_700_000_000_123, 7)


@dataclass
class Backend:
    """A DrainerHTTPBackend of plain values; refuses actions as DrainerApp does."""

    positions: dict[str, int] = field(default_factory=lambda: {"pump-1:8250": PUMP_TS, "pump-2:8250": 42})
    is_synced: bool = True
    checkpoint_ts: int = 417_455_000_000_000_000
    actions: list[tuple[str, str]] = field(default_factory=list)
    broken: bool = False
    stalled: list[dict[str, object]] = field(default_factory=list)
    sink: dict[str, object] | None = None
    metrics: DrainerMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = DrainerMetrics(self.pump_positions, lambda: 3)

    def pump_positions(self) -> dict[str, int]:
        return dict(self.positions)

    def synced(self) -> bool:
        return self.is_synced

    def stalled_pumps(self) -> list[dict[str, object]]:
        return list(self.stalled)

    def last_ts(self) -> int:
        if self.broken:
            raise RuntimeError("checkpoint unreadable")
        return self.checkpoint_ts

    def sink_status(self) -> dict[str, object] | None:
        return self.sink

    def apply_action(self, node_id: str, action: str) -> None:
        if node_id != NODE_ID:
            raise HTTPActionError(HTTPStatus.NOT_FOUND, f"invalid nodeID {node_id}, this drainer's nodeID is {NODE_ID}")
        if action not in ("pause", "close"):
            raise HTTPActionError(HTTPStatus.BAD_REQUEST, f"invalid action {action}")
        self.actions.append((node_id, action))

    def metrics_text(self) -> bytes:
        return self.metrics.render()


@pytest.fixture
def api() -> Iterator[tuple[Backend, StatusServer]]:
    backend = Backend()
    server = StatusServer(backend, "127.0.0.1:0")
    server.start()
    yield backend, server
    server.stop()


def request(server: StatusServer, method: str, path: str) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def get_json(server: StatusServer, method: str, path: str) -> tuple[int, Any]:
    status, ctype, body = request(server, method, path)
    assert ctype == "application/json"
    return status, json.loads(body)


def error(message: str) -> dict[str, Any]:
    return {"message": message, "code": 3, "data": None}


def test_status_shape(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    status, doc = get_json(server, "GET", "/status")
    assert status == 200
    assert list(doc) == ["PumpPos", "Synced", "LastTS", "TsMap", "stalled_pumps"]
    assert doc == {
        "PumpPos": {"pump-1:8250": PUMP_TS, "pump-2:8250": 42},
        "Synced": True,
        "LastTS": backend.checkpoint_ts,
        "TsMap": "",
        "stalled_pumps": [],
    }
    backend.is_synced = False
    backend.positions = {}
    assert get_json(server, "GET", "/status/")[1] == {
        "PumpPos": {},
        "Synced": False,
        "LastTS": backend.checkpoint_ts,
        "TsMap": "",
        "stalled_pumps": [],
    }


def test_status_names_stalled_pumps(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    pump = {"node_id": "pump-2:8250", "addr": "127.0.0.1:8250", "since": 1700000000.5, "seconds": 42.0, "last_ts": 42}
    backend.stalled = [pump]
    assert get_json(server, "GET", "/status")[1]["stalled_pumps"] == [pump]


def test_status_carries_the_sinks_own_numbers(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    kafka = {
        "type": "kafka",
        "topic": "7_obinlog",
        "messages": 3,
        "bytes": 120,
        "pending_messages": 1,
        "pending_bytes": 40,
        "acked_commit_ts": 99,
    }
    backend.sink = kafka
    doc = get_json(server, "GET", "/status")[1]
    assert list(doc) == ["PumpPos", "Synced", "LastTS", "TsMap", "stalled_pumps", "sink"]
    assert doc["sink"] == kafka


def test_commit_ts_exact_json(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    status, ctype, body = request(server, "GET", "/commit_ts")
    assert (status, ctype) == (200, "application/json")
    doc = json.loads(body)
    assert doc == {"message": "get drainer's latest ts success!", "code": 200, "data": {"ts": backend.checkpoint_ts}}
    assert list(doc) == ["message", "code", "data"]
    assert body == (
        b'{"message": "get drainer\'s latest ts success!", "code": 200, "data": {"ts": 417455000000000000}}\n'
    )


def test_pause_and_close(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    assert get_json(server, "PUT", f"/state/{NODE_ID}/pause") == (
        200,
        {"message": "apply action pause success!", "code": 200, "data": None},
    )
    assert get_json(server, "PUT", "/state/drainer-1%3A8249/close") == (
        200,
        {"message": "apply action close success!", "code": 200, "data": None},
    )
    assert backend.actions == [(NODE_ID, "pause"), (NODE_ID, "close")]


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/state/other:1/pause", 404, f"invalid nodeID other:1, this drainer's nodeID is {NODE_ID}"),
        (f"/state/{NODE_ID}/jump", 400, "invalid action jump"),
        (f"/state/{NODE_ID}", 404, f"no such endpoint: PUT /state/{NODE_ID}"),
        (f"/state/{NODE_ID}/pause/now", 404, f"no such endpoint: PUT /state/{NODE_ID}/pause/now"),
    ],
)
def test_refused_actions(api: tuple[Backend, StatusServer], path: str, status: int, message: str) -> None:
    backend, server = api
    assert get_json(server, "PUT", path) == (status, error(message))
    assert backend.actions == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("POST", "/status", "GET"),
        ("PUT", "/commit_ts", "GET"),
        ("DELETE", "/metrics", "GET"),
        ("GET", f"/state/{NODE_ID}/pause", "PUT"),
        ("POST", f"/state/{NODE_ID}/close", "PUT"),
    ],
)
def test_wrong_method(api: tuple[Backend, StatusServer], method: str, path: str, allowed: str) -> None:
    backend, server = api
    assert get_json(server, method, path) == (405, error(f"{method} is not allowed on {path} (use {allowed})"))
    assert backend.actions == []


@pytest.mark.parametrize("path", ["/", "/nothing", "/status/extra", "/commit_ts/1", "/drainers", "/state"])
def test_unknown_path(api: tuple[Backend, StatusServer], path: str) -> None:
    _, server = api
    assert get_json(server, "GET", path) == (404, error(f"no such endpoint: GET {path}"))


def test_backend_failure_is_a_500_with_one_line(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    backend.broken = True
    assert get_json(server, "GET", "/commit_ts") == (500, error("RuntimeError: checkpoint unreadable"))


def test_metrics(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    m = backend.metrics
    m.saved(tso.compose(1_700_000_000_000, 1))
    m.ddl_jobs.inc()
    m.event.labels("Insert").inc(3)
    m.error.labels("unmarshal_binlog").inc()
    status, ctype, body = request(server, "GET", "/metrics")
    assert (status, ctype) == (200, METRICS_CONTENT_TYPE)
    text = body.decode()
    for line in [
        'binlog_drainer_pump_position{nodeID="pump-1:8250"} 1.700000000123e+12',
        'binlog_drainer_pump_position{nodeID="pump-2:8250"} 0.0',
        "binlog_drainer_checkpoint_tso 1.7e+12",
        "binlog_drainer_ddl_jobs_total 1.0",
        'binlog_drainer_event{type="Insert"} 3.0',
        'binlog_drainer_event{type="savepoint"} 1.0',
        'binlog_drainer_error_count{type="unmarshal_binlog"} 1.0',
        "binlog_drainer_disorder_binlog_count 0.0",
        'binlog_drainer_queue_size{name="syncer_input"} 3.0',
        "binlog_drainer_checkpoint_delay_seconds_count 1.0",
    ]:
        assert line in text.splitlines(), line
    types = dict(ln.split()[2:4] for ln in text.splitlines() if ln.startswith("# TYPE binlog_drainer_"))
    assert types == {
        "binlog_drainer_pump_position": "gauge",
        "binlog_drainer_checkpoint_tso": "gauge",
        "binlog_drainer_checkpoint_delay_seconds": "histogram",
        "binlog_drainer_ddl_jobs_total": "counter",
        "binlog_drainer_event": "counter",
        "binlog_drainer_error_count": "counter",
        "binlog_drainer_disorder_binlog_count": "counter",
        "binlog_drainer_queue_size": "gauge",
        "binlog_drainer_execute_duration_time": "histogram",
        "binlog_drainer_query_duration_time": "histogram",
        "binlog_drainer_binlog_reach_duration_time": "histogram",
        "binlog_drainer_read_binlog_size": "histogram",
        "binlog_drainer_merger_buffered_bytes": "gauge",
        "binlog_drainer_loader_inflight_bytes": "gauge",
        "binlog_drainer_pump_stalled_seconds": "gauge",
        "binlog_drainer_pump_stalled": "gauge",
    }


# ---------------------------------------------------------------------- DrainerApp as the backend


def unstarted_app() -> tuple[DrainerApp, FakeRegistry]:
    """A DrainerApp that was never started, with a node id and a registry of our own (no etcd)."""
    app = DrainerApp(load_config(env={}))
    registry = FakeRegistry()
    app.node_id = NODE_ID
    app.registry = registry
    return app, registry


@pytest.mark.parametrize(
    ("action", "publishing", "final"), [("pause", "pausing", "paused"), ("close", "closing", "offline")]
)
def test_drainer_app_apply_action_publishes_and_shuts_down(action: str, publishing: str, final: str) -> None:
    app, registry = unstarted_app()
    app.apply_action(NODE_ID, action)
    assert [(s.node_id, s.state.value) for s in registry.writes] == [(NODE_ID, publishing)]
    assert registry.writes[0].host == app.cfg.advertise
    assert app.run() == 0  # the action asked for shutdown: run() returns at once
    assert [s.state.value for s in registry.writes] == [publishing, final]
    status = registry.get(NodeKind.DRAINER, NODE_ID)
    assert status is not None
    assert status.state is NodeState(final)


@pytest.mark.parametrize(
    ("node_id", "action", "status", "message"),
    [
        ("other:1", "pause", HTTPStatus.NOT_FOUND, f"invalid nodeID other:1, this drainer's nodeID is {NODE_ID}"),
        (NODE_ID, "jump", HTTPStatus.BAD_REQUEST, "invalid action jump"),
        (NODE_ID, "", HTTPStatus.BAD_REQUEST, "invalid action "),
    ],
)
def test_drainer_app_apply_action_refusals(node_id: str, action: str, status: HTTPStatus, message: str) -> None:
    app, registry = unstarted_app()
    with pytest.raises(HTTPActionError) as info:
        app.apply_action(node_id, action)
    assert (info.value.http_status, str(info.value)) == (status, message)
    assert registry.writes == []
    app.apply_action(NODE_ID, "close")  # the refusal left nothing behind: a valid action then takes effect
    assert app.run() == 0
    assert [s.state for s in registry.writes] == [NodeState.CLOSING, NodeState.OFFLINE]


def test_drainer_app_behind_http() -> None:
    app, registry = unstarted_app()
    server = StatusServer(app, "127.0.0.1:0")
    server.start()
    try:
        assert get_json(server, "GET", "/status") == (
            200,
            {"PumpPos": {}, "Synced": False, "LastTS": 0, "TsMap": "", "stalled_pumps": []},
        )
        assert get_json(server, "GET", "/commit_ts")[1]["data"] == {"ts": 0}
        assert get_json(server, "PUT", "/state/other:1/pause") == (
            404,
            error(f"invalid nodeID other:1, this drainer's nodeID is {NODE_ID}"),
        )
        assert get_json(server, "PUT", f"/state/{NODE_ID}/stop") == (400, error("invalid action stop"))
        assert get_json(server, "GET", "/metrics") == (500, error("UnavailableError: the drainer is not started"))
        assert registry.writes == []
        assert get_json(server, "PUT", f"/state/{NODE_ID}/close")[0] == 200
        assert [s.state for s in registry.writes] == [NodeState.CLOSING]
    finally:
        server.stop()
    assert app.run() == 0
    assert [s.state for s in registry.writes] == [NodeState.CLOSING, NodeState.OFFLINE]
