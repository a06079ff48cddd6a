"""A whole cluster across network namespaces: one host each for etcd, pd-server, three pumps, the drainer and
the writer, on a bridge the run creates; MariaDB stays on the host side, reached through a forwarder on the
bridge address (so a partition or a delay can sit between the drainer and MySQL).

Every pump's data dir is a small tmpfs (a full disk is one of the faults), with the disk guard's floor set
below what the tmpfs holds.  Fixed ports serve: every node has its own address.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql

from tests.harness.mysql import MySQLDSN
from tests.harness.tcpproxy import TcpProxy
from tests.nemesis.hosts import Host, Network
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess
from tools.procs import ManagedProcess

PUMPS = 3
PUMP_TMPFS = "96m"
PUMP_ARGS = [
    "--gen-binlog-interval", "1",
    "--heartbeat-interval", "1",
    "--storage.resolve-interval", "0.5",
    "--storage.stop-write-at-available-space", "4MiB",
]  # fmt: skip
DRAINER_ARGS = [
    "--detect-interval", "1",
    "--initial-commit-ts", "0",
    "--pump-stall-report-after", "3s",
]  # fmt: skip
MYSQL_PROXY_PORT = 13306
ETCD_PORT, PD_PORT, GRPC_PORT, STATUS_PORT = 2379, 2390, 8250, 8251


@dataclass
class NemesisCluster:
    """The processes of one run and the hosts they live on."""

    base: Path
    net: Network
    mysql: MySQLDSN
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    hosts: dict[str, Host] = field(default_factory=dict)
    etcd: EtcdProcess | None = None
    pd: PDProcess | None = None
    pumps: list[PumpProcess] = field(default_factory=list)
    drainer: DrainerProcess | None = None
    mysql_proxy: TcpProxy | None = None
    tmpfs: list[Path] = field(default_factory=list)
    keep: bool = False
    """Keep the data of the tmpfs dirs (copied beside them) when closing: set by a failed check."""

    @property
    def database(self) -> str:
        """The writer's logical database, replicated under the same name."""
        return f"nemesis_{self.run_id}"

    @property
    def checkpoint_schema(self) -> str:
        return f"nemesis_cp_{self.run_id}"

    @property
    def upstream_path(self) -> Path:
        return self.base / "upstream.db"

    @property
    def upstream_dsn(self) -> str:
        return f"sqlite://{self.upstream_path}"

    @property
    def mysql_host(self) -> str:
        """Where the namespaced nodes reach MySQL (the forwarder on the bridge)."""
        return self.net.gateway

    def processes(self) -> dict[str, ManagedProcess]:
        """Every node process by host name."""
        found: dict[str, ManagedProcess] = {}
        if self.etcd is not None:
            found["etcd"] = self.etcd.process
        if self.pd is not None:
            found["pd"] = self.pd.process
        for p in self.pumps:
            found[p.name] = p.process
        if self.drainer is not None:
            found["drainer"] = self.drainer.process
        return found

    # ------------------------------------------------------------------------------------------ start
    def start(self) -> None:
        for name in ("etcd", "pd", *(f"pump{i}" for i in range(PUMPS)), "drainer", "writer"):
            self.hosts[name] = self.net.add_host(name)
        self.mysql_proxy = self.net.forward(self.mysql.port, self.mysql.host, MYSQL_PROXY_PORT)
        h = self.hosts["etcd"]
        self.etcd = EtcdProcess(
            self.base, client_port=ETCD_PORT, peer_port=ETCD_PORT + 1, host=h.ip, prefix=h.prefix_argv()
        )
        self.etcd.start()
        h = self.hosts["pd"]
        self.pd = PDProcess(self.base, self.etcd.url, port=PD_PORT, host=h.ip, prefix=h.prefix_argv())
        self.pd.start()
        for i in range(PUMPS):
            name = f"pump{i}"
            h = self.hosts[name]
            data = self.base / name
            self.net.mount_tmpfs(data, PUMP_TMPFS)  # before the pump starts: namespaces see mounts made earlier
            self.tmpfs.append(data)
            pump = PumpProcess(
                self.base,
                self.etcd.url,
                name=name,
                host=h.ip,
                prefix=h.prefix_argv(),
                grpc_port=GRPC_PORT,
                status_port=STATUS_PORT,
                extra_args=[*PUMP_ARGS, "--upstream.txn-status-dsn", self.upstream_dsn],
            )
            self.pumps.append(pump)
            pump.start()
        h = self.hosts["drainer"]
        m = self.mysql
        self.drainer = DrainerProcess(
            self.base,
            self.etcd.url,
            name="drainer",
            host=h.ip,
            prefix=h.prefix_argv(),
            grpc_port=GRPC_PORT,
            status_port=STATUS_PORT,
            extra_args=[
                *DRAINER_ARGS,
                "--syncer.db-type", "mysql",
                "--syncer.to.host", self.mysql_host,
                "--syncer.to.port", str(MYSQL_PROXY_PORT),
                "--syncer.to.user", m.user,
                "--syncer.to.password", m.password,
                "--syncer.to.checkpoint.schema", self.checkpoint_schema,
            ],
        )  # fmt: skip
        self.drainer.start()

    def writer_process(self, argv: list[str]) -> ManagedProcess:
        """The writer's process in its own namespace (not started)."""
        return self.hosts["writer"].process("writer", argv, self.base / "writer.log")

    def connect_mysql(self) -> pymysql.connections.Connection[Any]:
        """A connection from this (host) side, straight to MySQL."""
        m = self.mysql
        return pymysql.connect(
            host=m.host, port=m.port, user=m.user, password=m.password, autocommit=True, connect_timeout=5
        )

    # ------------------------------------------------------------------------------------------- stop
    def close(self, *, keep: bool = False) -> None:
        """Stop everything this run started (processes, proxy, tmpfs, namespaces); drop its databases.

        `keep`: leave `base` (logs, history, data copies) for a failed run to be read."""
        for proc in reversed(list(self.processes().values())):
            with contextlib.suppress(Exception):
                proc.stop(timeout=10.0)
        for path in self.tmpfs if keep else ():
            with contextlib.suppress(OSError):
                shutil.copytree(path, path.with_name(path.name + "-data"), dirs_exist_ok=True)
        self.tmpfs.clear()
        self.net.close()  # the MySQL forwarder, the writer, the tmpfs mounts, the namespaces and the bridge
        with contextlib.suppress(pymysql.MySQLError), self.connect_mysql() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{self.database}`")
            cur.execute(f"DROP DATABASE IF EXISTS `{self.checkpoint_schema}`")


@contextlib.contextmanager
def nemesis_cluster(base: Path, mysql: MySQLDSN) -> Iterator[NemesisCluster]:
    """A started cluster, torn down on exit (also after a failure)."""
    with Network() as net:
        cluster = NemesisCluster(base, net, mysql)
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.close(keep=cluster.keep)
