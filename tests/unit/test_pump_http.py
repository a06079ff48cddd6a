"""The HTTP API on a loopback port over a backend of fakes (MemoryStorage, dict registry, real PumpNode)."""

from __future__ import annotations

import http.client
import inspect
import json
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from common import tso
from common.errors import BinlogError, UnavailableError
from common.pb import binlog_pb2, gogo
from common.registry import NodeKind, NodeState, NodeStatus
from pump.app import default_storage_factory
from pump.background import write_fake_binlog
from pump.http_api import StatusServer, parse_ts
from pump.memory_storage import MemoryStorage
from pump.metrics import PumpMetrics, StorageMetrics
from pump.node import ApproxClock, PumpNode
from pump.storage.api import StorageObserver, StorageOptions, StorageStatus
from tests.unit.test_pump_node import FakeRegistry, FakeTSO


@dataclass
class Backend:
    """A PumpHTTPBackend over fakes; `fail_ts` makes fresh_ts raise."""

    storage: MemoryStorage = field(default_factory=MemoryStorage)
    registry: FakeRegistry = field(default_factory=FakeRegistry)
    tso: FakeTSO = field(default_factory=FakeTSO)
    metrics: PumpMetrics = field(init=False)
    node: PumpNode = field(init=False)
    gc_busy: bool = False
    gc_triggers: int = 0
    fail_ts: bool = False
    actions: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.metrics = PumpMetrics(self.storage.status)
        self.node = PumpNode(
            self.registry,
            self.tso,
            ApproxClock(),
            node_id="pump-1:8250",
            host="127.0.0.1:8250",
            max_commit_ts=self.storage.max_commit_ts,
            heartbeat_interval=1.0,
        )

    def pump_statuses(self) -> list[NodeStatus]:
        return self.registry.list(NodeKind.PUMP)

    def drainer_statuses(self) -> list[NodeStatus]:
        return self.registry.list(NodeKind.DRAINER)

    def fresh_ts(self) -> int:
        if self.fail_ts:
            raise UnavailableError("no pd-server")
        return self.tso.get_ts()

    def storage_status(self) -> StorageStatus:
        return self.storage.status()

    def apply_action(self, node_id: str, action: str) -> None:
        self.node.apply_action(node_id, action)
        self.actions.append((node_id, action))

    def trigger_gc(self) -> bool:
        if self.gc_busy:
            return False
        self.gc_triggers += 1
        return True

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None:
        return self.storage.get_binlog(ts)

    def metrics_text(self) -> bytes:
        return self.metrics.render()


@pytest.fixture
def api() -> Iterator[tuple[Backend, StatusServer]]:
    backend = Backend()
    backend.node.register()
    server = StatusServer(backend, "127.0.0.1:0")
    server.start()
    yield backend, server
    server.stop()


def request(server: StatusServer, method: str, path: str, body: bytes | None = None) -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type") or "", resp.read()
    finally:
        conn.close()


def get_json(server: StatusServer, method: str, path: str) -> tuple[int, Any]:
    status, ctype, body = request(server, method, path)
    assert ctype == "application/json"
    return status, json.loads(body)


def test_status(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    write_fake_binlog(backend.storage, backend.tso)
    status, doc = get_json(server, "GET", "/status")
    assert status == 200
    assert list(doc) == ["status", "CommitTS", "Checkpoint", "ErrMsg"]
    me = doc["status"]["pump-1:8250"]
    assert list(me) == ["nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"]
    assert (me["state"], me["host"]) == ("online", "127.0.0.1:8250")
    assert doc["CommitTS"] > backend.storage.max_commit_ts() > 0
    assert doc["Checkpoint"]["maxCommitTS"] == backend.storage.max_commit_ts()
    assert doc["ErrMsg"] == ""


def test_status_reports_errors_in_errmsg(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    backend.fail_ts = True
    status, doc = get_json(server, "GET", "/status")
    assert status == 200
    assert doc["CommitTS"] == 0
    assert doc["ErrMsg"] == "get ts: no pd-server"
    assert "pump-1:8250" in doc["status"]


def test_drainers(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    assert get_json(server, "GET", "/drainers") == (200, [])
    backend.registry.create(NodeKind.DRAINER, NodeStatus("d1", "127.0.0.1:8249", NodeState.ONLINE, max_commit_ts=9))
    status, doc = get_json(server, "GET", "/drainers")
    assert status == 200
    assert [(d["nodeId"], d["maxCommitTS"], d["state"]) for d in doc] == [("d1", 9, "online")]


def test_pause_action(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    status, doc = get_json(server, "PUT", "/state/pump-1:8250/pause")
    assert (status, doc) == (200, {"message": "apply action pause success!", "code": 200, "data": None})
    assert backend.node.state is NodeState.PAUSING
    status, doc = get_json(server, "PUT", "/state/pump-1%3A8250/close")
    assert status == 409
    assert doc == {"message": "this pump's state is pausing, apply close failed!", "code": 3, "data": None}


def test_close_action(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    status, doc = get_json(server, "PUT", "/state/pump-1:8250/close")
    assert (status, doc["message"], doc["code"]) == (200, "apply action close success!", 200)
    assert backend.node.state is NodeState.CLOSING


@pytest.mark.parametrize(
    ("path", "status", "message"),
    [
        ("/state/other:1/pause", 404, "invalid nodeID other:1, this pump's nodeID is pump-1:8250"),
        ("/state/pump-1:8250/jump", 400, "invalid action jump"),
        ("/state/pump-1:8250", 404, "no such endpoint: PUT /state/pump-1:8250"),
    ],
)
def test_action_errors(api: tuple[Backend, StatusServer], path: str, status: int, message: str) -> None:
    backend, server = api
    assert get_json(server, "PUT", path) == (status, {"message": message, "code": 3, "data": None})
    assert backend.node.state is NodeState.ONLINE
    assert backend.actions == []


def test_wrong_method_and_unknown_path(api: tuple[Backend, StatusServer]) -> None:
    _, server = api
    status, doc = get_json(server, "GET", "/state/pump-1:8250/pause")
    assert (status, doc["code"]) == (405, 3)
    assert "use PUT" in doc["message"]
    status, doc = get_json(server, "POST", "/status")
    assert status == 405
    status, doc = get_json(server, "GET", "/nothing/here")
    assert (status, doc["message"]) == (404, "no such endpoint: GET /nothing/here")


def test_gc_trigger(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    assert request(server, "POST", "/debug/gc/trigger")[::2] == (200, b"trigger gc success\n")
    backend.gc_busy = True
    assert request(server, "POST", "/debug/gc/trigger")[::2] == (200, b"gc is working\n")
    assert backend.gc_triggers == 1


def test_debug_binlog_dumps_commit_with_its_prewrite_value(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    pv = binlog_pb2.PrewriteValue(schema_version=7, mutations=[binlog_pb2.TableMutation(table_id=45)])
    pv.mutations[0].inserted_rows.append(b"\x01row")
    p = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=100, prewrite_value=gogo.marshal_prewrite_value(pv))
    c = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=100, commit_ts=101)
    backend.storage.write_binlog(p, gogo.marshal_binlog(p))
    backend.storage.write_binlog(c, gogo.marshal_binlog(c))
    status, ctype, body = request(server, "GET", "/debug/binlog/101")
    text = body.decode()
    assert (status, ctype) == (200, "text/plain; charset=utf-8")
    assert text.startswith("binlog at ts 101:\ntp: Commit\nstart_ts: 100\ncommit_ts: 101\n")
    assert "prewrite value (of start_ts 100):\nschema_version: 7\nmutations {\n  table_id: 45\n" in text
    status, _, body = request(server, "GET", "/debug/binlog/100")
    assert status == 200
    assert b"tp: Prewrite" in body
    assert b"schema_version: 7" in body


def test_debug_binlog_errors(api: tuple[Backend, StatusServer]) -> None:
    _, server = api
    assert request(server, "GET", "/debug/binlog/5")[::2] == (404, b"no binlog at ts 5\n")
    status, doc = get_json(server, "GET", "/debug/binlog/abc")
    assert (status, doc["message"]) == (400, "bad ts 'abc': expected a non-negative integer")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("1" * 26, f"bad ts '{'1' * 26}': above the largest ts, 18446744073709551615 (uint64)"),
        (str(2**64), f"bad ts '{2**64}': above the largest ts, 18446744073709551615 (uint64)"),
        ("-1", "bad ts '-1': expected a non-negative integer"),
        ("%C2%B2", "bad ts '\u00b2': expected a non-negative integer"),  # '²' is a digit to str.isdigit()
        ("1e3", "bad ts '1e3': expected a non-negative integer"),
    ],
)
def test_debug_binlog_bad_ts_is_400(api: tuple[Backend, StatusServer], raw: str, message: str) -> None:
    backend, server = api

    def uint64_only(ts: int) -> binlog_pb2.Binlog | None:  # as the real storage, which packs ts as uint64
        struct.pack(">Q", ts)
        return None

    backend.get_binlog = uint64_only  # type: ignore[method-assign]
    status, doc = get_json(server, "GET", f"/debug/binlog/{raw}")
    assert (status, doc["message"]) == (400, message)
    assert request(server, "GET", f"/debug/binlog/{2**64 - 1}")[::2] == (404, f"no binlog at ts {2**64 - 1}\n".encode())


def test_parse_ts() -> None:
    assert parse_ts("0") == 0
    assert parse_ts(str(2**64 - 1)) == 2**64 - 1
    for raw in ("", "+1", " 1", "1_000", "\u0661", str(2**64)):
        with pytest.raises(ValueError, match="bad ts"):
            parse_ts(raw)


def test_metrics(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    write_fake_binlog(backend.storage, backend.tso)
    backend.metrics.loss_binlog.inc()
    status, ctype, body = request(server, "GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert ctype.startswith("text/plain; version=0.0.4")
    assert "# TYPE binlog_pump_loss_binlog_count counter\nbinlog_pump_loss_binlog_count 1.0\n" in text
    assert "# TYPE binlog_pump_rpc_duration_seconds histogram" in text
    assert "binlog_pump_storage_max_commit_ts " in text
    assert 'binlog_pump_storage_storage_size_bytes{type="available"}' in text


def test_a_failing_backend_gives_500_without_traceback(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    backend.storage.close()

    def broken(ts: int) -> binlog_pb2.Binlog | None:
        raise RuntimeError("index is gone")

    backend.get_binlog = broken  # type: ignore[method-assign]
    status, doc = get_json(server, "GET", "/debug/binlog/1")
    assert (status, doc) == (500, {"message": "RuntimeError: index is gone", "code": 3, "data": None})


def test_garbage_requests_do_not_crash_the_server(api: tuple[Backend, StatusServer]) -> None:
    _, server = api
    for raw in (b"\x00\xff garbage\r\n\r\n", b"GET\r\n\r\n", b"BREW /pot HTTP/1.1\r\n\r\n", b""):
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(4096):
                pass
    threads = [threading.Thread(target=request, args=(server, "GET", "/status")) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert get_json(server, "GET", "/drainers")[0] == 200


def test_stop_is_idempotent_and_frees_the_port() -> None:
    server = StatusServer(Backend(), "127.0.0.1:0")
    server.start()
    port = server.port
    server.stop()
    server.stop()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))


def test_a_busy_port_is_a_clear_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(BinlogError, match=f"cannot listen on status-addr 127.0.0.1:{port}"):
            StatusServer(Backend(), f"127.0.0.1:{port}")


def scrape(server: StatusServer) -> dict[str, float]:
    """GET /metrics as {'name{labels}': value}."""
    status, _, body = request(server, "GET", "/metrics")
    assert status == 200
    samples: dict[str, float] = {}
    for line in body.decode().splitlines():
        m = re.fullmatch(r"([a-zA-Z_:][\w:]*(?:\{[^}]*\})?) (\S+)", line)
        if m:
            samples[m.group(1)] = float(m.group(2))
    return samples


class ObservedStorage(MemoryStorage):
    """MemoryStorage that reports each write as a one-binlog batch, as the real storage does."""

    def __init__(self, observer: StorageObserver) -> None:
        super().__init__()
        self.observer = observer

    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        started = time.monotonic()
        super().write_binlog(binlog, payload)
        self.observer.write_batch(1, len(payload), time.monotonic() - started, 0.0001)


def test_storage_metrics_series_move(api: tuple[Backend, StatusServer]) -> None:
    backend, server = api
    observer: StorageObserver = backend.metrics.storage  # StorageMetrics is a StorageObserver
    assert isinstance(observer, StorageMetrics)
    storage = ObservedStorage(observer)
    before = scrape(server)
    for _ in range(3):
        write_fake_binlog(storage, backend.tso)
    observer.rotate(0.002)
    observer.error("write_binlog")
    observer.chaser("turned_on")
    observer.chaser("catch_up", 0.5)
    observer.resolver_query()
    done = tso.compose(1_700_000_000_000, 5)
    observer.gc_done(done, 42)
    after = scrape(server)
    batch = '{type="batch"}'
    assert before.get(f"binlog_pump_storage_write_binlog_size_count{batch}", 0.0) == 0.0
    assert after[f"binlog_pump_storage_write_binlog_size_count{batch}"] == 3
    assert after[f"binlog_pump_storage_write_binlog_size_sum{batch}"] > 0
    for kind in ("batch", "to_disk", "fsync"):
        assert after[f'binlog_pump_storage_write_binlog_duration_time_count{{type="{kind}"}}'] == 3
    assert after['binlog_pump_storage_write_binlog_duration_time_count{type="rotate"}'] == 1
    assert after['binlog_pump_storage_error_count{type="write_binlog"}'] == 1
    assert after['binlog_pump_storage_slow_chaser_count{type="turned_on"}'] == 1
    assert after['binlog_pump_storage_slow_chaser_count{type="catch_up"}'] == 1
    assert after["binlog_drainer_slow_chaser_catchup_time_seconds_count"] == 1
    assert after["binlog_pump_storage_query_tikv_count"] == 1
    assert after["binlog_pump_storage_done_gc_ts"] == 1_700_000_000_000
    assert after["binlog_pump_storage_deleted_kv_total"] == 42
    assert 'binlog_pump_storage_write_binlog_size_bucket{le="16.0",type="batch"}' in after
    assert 'binlog_pump_storage_write_binlog_duration_time_bucket{le="5e-05",type="batch"}' in after
    drainer_named = {name.partition("{")[0] for name in after if name.startswith("binlog_drainer_")}
    assert drainer_named == {  # the original's catch-up histogram, registered by the pump under the drainer's name
        f"binlog_drainer_slow_chaser_catchup_time_seconds{suffix}" for suffix in ("_bucket", "_count", "_sum")
    }


def test_real_storage_reports_to_the_pump_metrics(tmp_path: Path) -> None:
    from pump.storage.storage import Storage

    if "observer" not in inspect.signature(Storage).parameters:
        pytest.skip("pump.storage.storage.Storage does not take observer= yet")
    backend = Backend()
    options = StorageOptions(stop_write_at_available_space=0, value_log_file_size=64 * 1024)
    storage = default_storage_factory(tmp_path, options, None, observer=backend.metrics.storage)
    backend.storage = storage  # type: ignore[assignment]  # the real one: only write and status used
    server = StatusServer(backend, "127.0.0.1:0")
    server.start()
    try:
        for _ in range(5):
            write_fake_binlog(storage, backend.tso)
        samples = scrape(server)
    finally:
        server.stop()
        storage.close()
    assert samples['binlog_pump_storage_write_binlog_size_count{type="batch"}'] >= 1
    assert samples['binlog_pump_storage_write_binlog_duration_time_count{type="to_disk"}'] >= 1
