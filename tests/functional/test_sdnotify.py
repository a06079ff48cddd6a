"""systemd's side of the notify protocol against pd-server, a pump and a drainer run as real processes.

The test binds the datagram socket that NOTIFY_SOCKET names, as systemd does for a Type=notify unit,
and reads what the daemon sends with SO_PASSCRED, so every message carries the sender's pid (systemd's
NotifyAccess=main accepts only the main pid).  For each daemon:

- READY=1 arrives, and at that moment the daemon already serves: its gRPC port answers a real call
  and its log already says it listens (the message is sent after start-up, never before);
- WATCHDOG=1 pings arrive every WATCHDOG_USEC / 2 when WATCHDOG_USEC is set;
- SIGTERM brings STOPPING=1, then the process exits with status 0.

The image's `healthcheck` probe (deploy/docker/healthcheck.py) runs against each daemon too: healthy
while it serves, unhealthy once it has stopped.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import struct
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc, pump_pb2, pump_pb2_grpc
from common.pd_client import read_cluster_id
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess
from tools.procs import ManagedProcess, port_open

pytestmark = pytest.mark.functional

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
WATCHDOG_USEC = 200_000
"""Pings every 0.1 s: a few arrive within a second of start-up."""
MIN_PINGS = 3
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass
class Message:
    pid: int
    fields: dict[str, str]


@dataclass
class NotifyListener:
    """The service manager's end: a bound AF_UNIX datagram socket that records every message."""

    sock: socket.socket
    env_value: str
    messages: list[Message] = field(default_factory=list)

    @classmethod
    def bind(cls, address: str) -> NotifyListener:
        """`address` is a path, or `@name` for an abstract socket (both forms systemd uses)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        sock.bind(b"\0" + address[1:].encode() if address.startswith("@") else address)
        return cls(sock, address)

    def receive(self, timeout: float) -> Message | None:
        self.sock.settimeout(timeout)
        try:
            data, ancillary, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(_UCRED.size))
        except TimeoutError:
            return None
        pid = -1
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = _UCRED.unpack(payload[: _UCRED.size])[0]
        assignments = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
        message = Message(pid, assignments)
        self.messages.append(message)
        return message

    def wait_for(self, key: str, proc: ManagedProcess, timeout: float) -> Message:
        """The first message with `key`=1 (earlier ones are kept in `messages`); fails if `proc` dies first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.receive(0.1)
            if message is not None and message.fields.get(key) == "1":
                return message
            if message is None and not proc.alive:
                pytest.fail(f"{proc.name} exited before sending {key}=1; log tail:\n{proc.log_tail()}")
        pytest.fail(f"no {key}=1 from {proc.name} within {timeout}s; log tail:\n{proc.log_tail()}")

    def count(self, key: str) -> int:
        return sum(1 for m in self.messages if m.fields.get(key) == "1")

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[NotifyListener]:
    """A filesystem socket for pd-server and the pump, an abstract one for the drainer (both forms)."""
    abstract = "drainer" in request.node.name
    address = f"@tidb-binlog-test-{os.getpid()}-{time.monotonic_ns()}" if abstract else str(tmp_path / "notify")
    ear = NotifyListener.bind(address)
    yield ear
    ear.close()


def healthcheck_script() -> ModuleType:
    """deploy/docker/healthcheck.py, the image's probe (a script in the image, not a package)."""
    path = Path(__file__).resolve().parents[2] / "deploy" / "docker" / "healthcheck.py"
    spec = importlib.util.spec_from_file_location("deploy_docker_healthcheck", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def notify_env(ear: NotifyListener) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOTIFY_", "WATCHDOG_"))}
    return {**env, "NOTIFY_SOCKET": ear.env_value, "WATCHDOG_USEC": str(WATCHDOG_USEC)}


def check_lifecycle(
    ear: NotifyListener,
    proc: ManagedProcess,
    serving: Callable[[], bool],
    listening_line: str,
    probe: list[str],
) -> None:
    """READY once serving (and logged), watchdog pings, STOPPING on SIGTERM, exit 0; `probe` healthy meanwhile."""
    proc.start()
    ready = ear.wait_for("READY", proc, START_TIMEOUT)
    # right now, with no wait: the daemon answers, and it logged that it listens before it said READY
    try:
        answer = "serves" if serving() else "answered, but not as a serving daemon"
    except (grpc.RpcError, OSError) as exc:
        answer = f"failed: {exc}"
    assert answer == "serves", f"{proc.name} said READY=1, but a request right then {answer}"
    assert listening_line in Path(proc.log_path).read_text(), f"READY=1 came before {listening_line!r} was logged"
    assert ready.pid == proc.pid, f"READY=1 sent by pid {ready.pid}, not the main pid {proc.pid}"
    assert "STATUS" in ready.fields
    assert ear.count("STOPPING") == 0
    healthcheck = healthcheck_script()
    assert healthcheck.main(probe) == 0

    while ear.count("WATCHDOG") < MIN_PINGS:
        assert ear.receive(5.0) is not None, f"watchdog pings stopped after {ear.count('WATCHDOG')}"
    assert {m.pid for m in ear.messages} == {proc.pid}

    assert proc.proc is not None
    os.kill(proc.proc.pid, signal.SIGTERM)
    ear.wait_for("STOPPING", proc, STOP_TIMEOUT)
    try:
        status = proc.proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{proc.name} did not exit {STOP_TIMEOUT}s after SIGTERM; log tail:\n{proc.log_tail()}")
    assert status == 0, f"{proc.name} exited with {status}; log tail:\n{proc.log_tail()}"
    assert ear.count("READY") == 1
    assert healthcheck.main(["--timeout", "1", *probe]) == 1


def test_pd_server_ready_watchdog_stopping(etcd_server: EtcdProcess, listener: NotifyListener, tmp_path: Path) -> None:
    pd = PDProcess(tmp_path / "pd", etcd_server.url)
    pd.process.env = notify_env(listener)

    def serving() -> bool:
        with grpc.insecure_channel(pd.addr) as channel:
            resp = pd_pb2_grpc.PDStub(channel).Tso(pd_pb2.TsoRequest(count=1), timeout=2.0)
        return bool(resp.first.physical > 0)

    try:
        check_lifecycle(listener, pd.process, serving, "pd-server serving cluster", ["pd", pd.addr])
    finally:
        pd.stop()


def test_pump_ready_watchdog_stopping_json_log(
    etcd_server: EtcdProcess, pd_server: PDProcess, listener: NotifyListener, tmp_path: Path
) -> None:
    pump = PumpProcess(tmp_path, etcd_server.url, extra_args=["--log-format", "json"], env=notify_env(listener))
    client = EtcdClient(etcd_server.url)
    try:
        cluster_id = read_cluster_id(client)
    finally:
        client.close()
    assert cluster_id is not None

    def serving() -> bool:
        with grpc.insecure_channel(pump.addr) as channel:  # the liveness probe: an empty payload
            resp = pump_pb2_grpc.PumpStub(channel).WriteBinlog(
                pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=b""), timeout=2.0
            )
        return not resp.errmsg and port_open("127.0.0.1", pump.status_port)

    try:
        check_lifecycle(
            listener, pump.process, serving, "is online: gRPC", ["http", f"http://{pump.status_addr}/status"]
        )
    finally:
        pump.stop()
    # --log-format json: every line the pump logged is one JSON object (the first line is the harness's)
    lines = Path(pump.process.log_path).read_text().splitlines()[1:]
    records = [json.loads(line) for line in lines]
    assert all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert any("is online: gRPC" in r["message"] and r["logger"] == "pump.app" for r in records)
    assert any(r["message"] == "received SIGTERM: pausing" for r in records)


def test_drainer_ready_watchdog_stopping_abstract_socket(
    etcd_server: EtcdProcess, pd_server: PDProcess, listener: NotifyListener, tmp_path: Path
) -> None:
    assert listener.env_value.startswith("@")
    drainer = DrainerProcess(
        tmp_path, etcd_server.url, extra_args=["--syncer.db-type", "sqlite"], env=notify_env(listener)
    )

    def serving() -> bool:
        with urllib.request.urlopen(f"http://{drainer.status_addr}/status", timeout=2.0) as resp:
            ok = resp.status == 200
        return ok and port_open("127.0.0.1", drainer.grpc_port)

    try:
        check_lifecycle(
            listener, drainer.process, serving, "is online: gRPC", ["http", f"http://{drainer.status_addr}/status"]
        )
    finally:
        drainer.stop()
