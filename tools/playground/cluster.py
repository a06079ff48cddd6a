"""The playground's processes: etcd, pd-server, N pumps and a drainer, started and stopped in order.

Every process is a real child process (tools/localcluster.py) with its log in the playground
directory.  Ports are free loopback ports on a fresh directory (a process whose port another
program took before it could listen starts again on new ones) and the recorded ones when a
directory is reused (etcd keeps its peer URL in its data, pumps their address in etcd).  The
state file is rewritten after each start, so ``--stop`` finds a half-started cluster too.

Stop order: drainer (it saves its checkpoint), pumps, pd-server, etcd.  The writer, which runs
in the playground process, is closed by the caller before the pumps stop.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common.audit import MySQLServer
from common.errors import BinlogError
from tools.localcluster import DrainerProcess, EtcdProcess, NodeProcess, PDProcess, PumpProcess
from tools.playground.state import State, save_state
from tools.procs import ManagedProcess

PUMP_ARGS = ("--gen-binlog-interval", "1", "--heartbeat-interval", "1")
"""A fake binlog after 1 s without writes (original: 3 s), so an idle pump holds the drainer back less."""
DRAINER_ARGS = ("--detect-interval", "1", "--initial-commit-ts", "0")
"""A fresh drainer starts at the first binlog (it starts before the writer does)."""
UPSTREAM_DB = "upstream.db"


class PlaygroundError(BinlogError):
    """The playground cannot go on; the message is one line for the user."""


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class Cluster:
    """The processes of one playground directory."""

    def __init__(self, base: Path, state: State, *, downstream: MySQLServer | None, keep: bool) -> None:
        self.base = base
        self.state = state
        self.upstream_path = base / UPSTREAM_DB
        self.upstream_dsn = f"sqlite://{self.upstream_path}"  # an absolute path: sqlite:///abs/path
        ports = state.ports
        self.etcd = EtcdProcess(base, client_port=ports.get("etcd"), peer_port=ports.get("etcd-peer"))
        self.pd = PDProcess(base, self.etcd.url, port=ports.get("pd"))
        pump_args = [*PUMP_ARGS, "--upstream.txn-status-dsn", self.upstream_dsn]
        self.pumps = [
            PumpProcess(
                base, self.etcd.url, name=f"pump{i}", extra_args=pump_args,
                grpc_port=ports.get(f"pump{i}"), status_port=ports.get(f"pump{i}-status"),
            )
            for i in range(state.pumps)
        ]  # fmt: skip
        drainer_args = list(DRAINER_ARGS)
        env = None
        if downstream is None:
            drainer_args += ["--syncer.db-type", "sqlite"]
        else:
            drainer_args += [
                "--syncer.db-type", "mysql",
                "--syncer.to.host", downstream.host,
                "--syncer.to.port", str(downstream.port),
                "--syncer.to.user", downstream.user,
            ]  # fmt: skip
            env = {**os.environ, "DRAINER_SYNCER_TO_PASSWORD": downstream.password}  # not in argv nor the log
        self.drainer = DrainerProcess(
            base, self.etcd.url, extra_args=drainer_args, env=env,
            grpc_port=ports.get("drainer"), status_port=ports.get("drainer-status"),
        )  # fmt: skip
        self.downstream_path = self.drainer.data_dir / "downstream.db"
        for p in self.processes():
            p.die_with_parent = not keep  # a kept cluster outlives the playground process
        state.ports = self.ports()

    def ports(self) -> dict[str, int]:
        """The ports by process, as the state file records them (a start can move a picked port)."""
        return {
            "etcd": self.etcd.client_port,
            "etcd-peer": self.etcd.peer_port,
            "pd": self.pd.port,
            **{k: v for n in self.nodes() for k, v in ((n.name, n.grpc_port), (f"{n.name}-status", n.status_port))},
        }

    def nodes(self) -> list[NodeProcess]:
        return [*self.pumps, self.drainer]

    def processes(self) -> list[ManagedProcess]:
        """In start order."""
        return [self.etcd.process, self.pd.process, *(n.process for n in self.nodes())]

    def check_ports(self) -> None:
        """PlaygroundError naming the first recorded port that another program holds."""
        for name, port in self.state.ports.items():
            if not port_free(port):
                raise PlaygroundError(
                    f"port {port} ({name}) is in use: another program holds it "
                    f"(--clean starts a fresh cluster on free ports)"
                )

    def _record(self, p: ManagedProcess) -> None:
        self.state.ports = self.ports()
        self.state.record(p.name, p.pid, p.argv, p.log_path)
        save_state(self.base, self.state)

    def start(self, say: Callable[[str], None]) -> None:
        """Start everything in order, each waited for until it serves; ProcessError on a failure."""
        t0 = time.monotonic()
        self._started(self.etcd.process, self.etcd.start)
        dependents: list[PDProcess | NodeProcess] = [self.pd, *self.nodes()]
        for dependent in dependents:  # etcd may have moved off a port taken since it was picked
            dependent.use_etcd(self.etcd.url)
        say(f"etcd        {self.etcd.url}  ({time.monotonic() - t0:.1f}s)")
        t0 = time.monotonic()
        self._started(self.pd.process, self.pd.start)
        say(f"pd-server   {self.pd.addr}  ({time.monotonic() - t0:.1f}s)")
        t0 = time.monotonic()
        for pump in self.pumps:
            self._started(pump.process, pump.start)
        names = "  ".join(f"{p.name} {p.addr}" for p in self.pumps)
        say(f"{len(self.pumps)} pumps     {names}  ({time.monotonic() - t0:.1f}s)")
        t0 = time.monotonic()
        self._started(self.drainer.process, self.drainer.start)
        say(f"drainer     {self.drainer.addr}, status {self.drainer.status_addr}  ({time.monotonic() - t0:.1f}s)")

    def _started(self, p: ManagedProcess, start: Callable[[], None]) -> None:
        try:
            start()
        finally:
            self._record(p)

    def dead(self) -> ManagedProcess | None:
        """The first process that exited by itself, if any."""
        for p in self.processes():
            if p.proc is not None and not p.alive:
                return p
        return None

    def stop(self, say: Callable[[str], None]) -> None:
        """Drainer, then the pumps together, pd-server, etcd; each SIGTERM first, SIGKILL after 10 s."""
        for group in ([self.drainer.process], [p.process for p in self.pumps], [self.pd.process], [self.etcd.process]):
            alive = [p for p in group if p.alive]
            if not alive:
                continue
            with ThreadPoolExecutor(len(alive)) as pool:
                statuses = list(pool.map(lambda p: p.stop(), alive))
            for p, status in zip(alive, statuses, strict=True):
                say(f"stopped {p.name} (exit status {status})")
