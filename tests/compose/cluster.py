"""docker-compose.yml run by podman-compose under its own project name, and what the compose test reads
of it: containers by service, health, the drainer's checkpoint, the pumps' TSO, both databases.

Podman 4.3 ignores `condition: service_healthy` and runs no health check on a schedule without systemd
on the host, so `up()` starts the services in the file's dependency order, one stage at a time, and
waits for each stage's own health checks (`podman healthcheck run`, the file's checks) with deadlines.

Its DNS server (aardvark-dns) answers slowly for a while after a container of the network starts or
restarts: a new process's first lookup of a service name then took 10-20 s (seen here, after a
MariaDB restart; the running daemons keep their connections).  A tool run with `exec_tool` therefore
waits until the names it uses resolve promptly inside its container, and when it still does not
return in time, what runs in that container is printed with the timeout.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql

from tests.compose.engine import ROOT, EngineError, compose_command, engine_env, podman, tail, wait_for

COMPOSE_FILE = ROOT / "docker-compose.yml"
PUMPS = ("pump1", "pump2", "pump3")
STAGES: tuple[tuple[str, ...], ...] = (("etcd", "mariadb"), ("pd-server",), PUMPS, ("drainer",), ("writer",))
"""The start order of docker-compose.yml's depends_on (checked by tests/unit/test_deploy_compose.py)."""
PUMP_STATUS = {"pump1": 18250, "pump2": 18251, "pump3": 18252}
DRAINER_STATUS = 18249
MARIADB_PORT = 13306
UPSTREAM_DB = "/var/lib/tidb-binlog/upstream/upstream.db"
NAME_LOOKUP_LIMIT = 2.0
"""Seconds a name lookup inside a container may take for the names to count as resolving promptly."""
NAME_WAIT = 180.0
Rows = list[tuple[int, Decimal]]


def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class ComposeCluster:
    project: str
    password: str
    log_path: Path
    _names: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------------------------ commands
    def compose(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        command = compose_command()
        if command is None:
            raise EngineError("podman-compose is not installed")
        argv = [*command, "--in-pod=false", "-p", self.project, "-f", str(COMPOSE_FILE), *args]
        done = subprocess.run(
            argv,
            env=engine_env(MARIADB_ROOT_PASSWORD=self.password),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=ROOT,
        )
        with self.log_path.open("a") as log:
            log.write(f"$ podman-compose {' '.join(args)}  (exit {done.returncode})\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            raise EngineError(f"podman-compose {' '.join(args)}: exit {done.returncode}: {tail(done.stderr)}")
        return done

    def label(self) -> str:
        return f"label=io.podman.compose.project={self.project}"

    def container(self, service: str) -> str:
        """The container name of a service (podman-compose's naming differs between versions: ask)."""
        if service not in self._names:
            out = podman(
                "ps", "-a", "--filter", self.label(), "--filter", f"label=com.docker.compose.service={service}",
                "--format", "{{.Names}}",
            ).stdout.split()  # fmt: skip
            if len(out) != 1:
                raise EngineError(f"service {service}: containers {out}")
            self._names[service] = out[0]
        return self._names[service]

    def state(self, service: str) -> dict[str, Any]:
        out = podman("inspect", "--type", "container", "--format", "{{json .State}}", self.container(service))
        state: dict[str, Any] = json.loads(out.stdout)
        return state

    def exec(self, service: str, *argv: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return podman("exec", self.container(service), *argv, check=False, timeout=timeout)

    def resolves_promptly(self, service: str, names: Sequence[str]) -> bool:
        """Each of `names` resolves inside `service`'s container within NAME_LOOKUP_LIMIT seconds."""
        for name in names:
            started = time.monotonic()
            done = self.exec(service, "getent", "hosts", name, timeout=60)
            if done.returncode != 0 or time.monotonic() - started > NAME_LOOKUP_LIMIT:
                return False
        return True

    def exec_tool(
        self, service: str, names: Sequence[str], *argv: str, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run a short-lived command in `service`'s container once `names` resolve promptly there (see the
        module doc); on a timeout the container's processes are part of the error."""
        wait_for(
            f"{' '.join(names)} resolving within {NAME_LOOKUP_LIMIT}s in {service}",
            lambda: self.resolves_promptly(service, names),
            NAME_WAIT,
        )
        try:
            return self.exec(service, *argv, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            ps = podman("top", self.container(service), check=False, timeout=30)
            raise AssertionError(
                f"{' '.join(argv[:3])} in {service} did not return in {timeout}s; output so far: {exc.stdout!r}; "
                f"processes of the container:\n{ps.stdout}{ps.stderr}"
            ) from exc

    def network(self) -> str:
        names = podman("network", "ls", "--format", "{{.Name}}").stdout.split()
        ours = [n for n in names if n.startswith(f"{self.project}_")]
        if len(ours) != 1:
            raise EngineError(f"networks of {self.project}: {ours}")
        return ours[0]

    def volume_path(self, volume: str) -> Path:
        out = podman("volume", "inspect", "--format", "{{.Mountpoint}}", f"{self.project}_{volume}")
        return Path(out.stdout.strip())

    # ------------------------------------------------------------------------------------- health
    def healthy(self, service: str) -> bool:
        """The service's own health check, run now (podman 4.3 here runs none on a schedule)."""
        return podman("healthcheck", "run", self.container(service), check=False, timeout=60).returncode == 0

    def wait_healthy(self, services: Sequence[str], timeout: float = 180.0) -> None:
        for service in services:

            def probe(service: str = service) -> bool:
                return self.healthy(service)

            wait_for(f"{service} healthy", probe, timeout)

    def up(self, on_stage: Any = None) -> None:
        """Create and start every service, stage by stage in the dependency order, each stage healthy."""
        for stage in STAGES:
            started = time.monotonic()
            self.compose("up", "-d", "--no-deps", *stage)
            self.wait_healthy(stage)
            if on_stage is not None:
                on_stage(stage, time.monotonic() - started)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks of this project that still exist."""
        return {
            "containers": podman("ps", "-a", "--filter", self.label(), "--format", "{{.Names}}").stdout.split(),
            "volumes": [
                v
                for v in podman("volume", "ls", "--format", "{{.Name}}").stdout.split()
                if v.startswith(f"{self.project}_")
            ],
            "networks": [
                n
                for n in podman("network", "ls", "--format", "{{.Name}}").stdout.split()
                if n.startswith(f"{self.project}_")
            ],
        }

    def down(self) -> None:
        self.compose("down", "-v", timeout=600)
        self._names.clear()

    def force_remove(self) -> None:
        """Whatever `down -v` left (a failed run): removed by name, errors ignored."""
        left = self.leftovers()
        if left["containers"]:
            podman("rm", "-f", "-t", "10", *left["containers"], check=False, timeout=300)
        if left["volumes"]:
            podman("volume", "rm", "-f", *left["volumes"], check=False)
        if left["networks"]:
            podman("network", "rm", "-f", *left["networks"], check=False)
        self._names.clear()

    def logs(self, lines: int = 40) -> str:
        out = []
        for name in podman("ps", "-a", "--filter", self.label(), "--format", "{{.Names}}", check=False).stdout.split():
            got = podman("logs", "--tail", str(lines), name, check=False)
            out.append(f"===== {name} =====\n{got.stdout}{got.stderr}")
        return "\n".join(out)

    # ----------------------------------------------------------------------------------- progress
    def fresh_ts(self) -> int:
        """A timestamp pd-server hands out now, through the first pump that answers /status."""
        for port in PUMP_STATUS.values():
            try:
                return int(http_json(f"http://127.0.0.1:{port}/status")["CommitTS"])
            except (OSError, ValueError, KeyError):
                continue
        raise EngineError("no pump answers /status")

    def checkpoint(self) -> int:
        return int(http_json(f"http://127.0.0.1:{DRAINER_STATUS}/status")["LastTS"])

    def wait_replicated_past(self, ts: int, timeout: float = 180.0) -> int:
        """Wait until the drainer's checkpoint passes `ts` (every pump delivered up to there)."""
        return wait_for(f"drainer checkpoint past {ts}", lambda: (cp := self.checkpoint()) >= ts and cp, timeout)

    # ---------------------------------------------------------------------------------- databases
    @contextmanager
    def downstream(self) -> Iterator[pymysql.connections.Connection[Any]]:
        conn = pymysql.connect(
            host="127.0.0.1", port=MARIADB_PORT, user="root", password=self.password, connect_timeout=5, autocommit=True
        )
        try:
            yield conn
        finally:
            conn.close()

    def downstream_accounts(self) -> Rows:
        with self.downstream() as conn, conn.cursor() as cur:
            cur.execute("SELECT id, balance FROM bank.accounts ORDER BY id")
            return [(int(i), Decimal(b)) for i, b in cur.fetchall()]

    def upstream_accounts(self) -> Rows:
        """The writer's sqlite store, read on the host from its named volume."""
        path = self.volume_path("upstream-data") / Path(UPSTREAM_DB).name
        conn = sqlite3.connect(path, timeout=30.0)
        try:
            rows = conn.execute('SELECT id, balance FROM "bank.accounts" ORDER BY id').fetchall()
        finally:
            conn.close()
        return [(int(i), Decimal(str(b))) for i, b in rows]
