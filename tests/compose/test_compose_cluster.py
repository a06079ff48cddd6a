"""docker-compose.yml, run for real with podman-compose: the whole cluster through faults.

etcd, pd-server, three pumps, a drainer into MariaDB (the image's `mariadb` target) and the writer
running the bank workload come up in the file's dependency order, each stage healthy by its own health
check.  While the writer keeps committing, the first test

1. kills a pump container with SIGKILL and starts it again;
2. stops the drainer with SIGTERM (it exits 0 after saving its checkpoint) and starts it again;
3. restarts MariaDB;

and the second (on a cluster of its own) disconnects a pump from the compose network for 20 s (the
drainer cannot reach it) and connects it again under its service name, with a new address.

After each fault the drainer's checkpoint passes a timestamp taken after it: every pump delivers again.
Then the writer is stopped with SIGTERM (its bank check passes: exit 0, "check: ok"), the drainer
catches up, the accounts read on the host from the writer's volume equal MariaDB's (read through the
published port) row by row, the bank total holds, and the project's audit compares every table from
inside the cluster.  `down -v` then leaves no container, volume or network (the fixture asserts it).
Phase timings are printed as they finish.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any
from urllib.parse import quote

import pytest

from tests.compose.cluster import UPSTREAM_DB, ComposeCluster
from tests.compose.engine import podman, wait_for

ACCOUNTS = 100  # the bank workload's defaults, as the writer service runs it
INITIAL_BALANCE = Decimal(1000)
PARTITION_SECONDS = 20.0


class Phases:
    """Times each phase and prints it when it ends (also the one that failed)."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.started = time.monotonic()
        self.times: list[tuple[str, float]] = []

    def say(self, text: str) -> None:
        with self.capsys.disabled():
            print(f"[compose {time.monotonic() - self.started:6.1f}s] {text}", flush=True)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            took = time.monotonic() - started
            self.times.append((name, took))
            self.say(f"{name}: {took:.1f}s{'' if ok else ' (FAILED)'}")


def replicated_after(cluster: ComposeCluster, phases: Phases, what: str) -> None:
    """The drainer's checkpoint passes a timestamp taken now: every pump delivers again after `what`."""
    ts = cluster.fresh_ts()
    cluster.wait_replicated_past(ts, timeout=180)
    assert cluster.healthy("writer"), f"the writer stopped committing after {what}"
    assert cluster.state("writer")["Running"], f"the writer died during {what}"
    phases.say(f"replicating again after {what}")


def reachable_from_drainer(cluster: ComposeCluster, pump: str) -> bool:
    """The pump's status answers 2xx to a GET from inside the drainer's container.

    The probe bounds itself (name lookup included) by its --timeout; an exec that still does not return
    within 30 s counts as not reachable.
    """
    try:
        probe = cluster.exec(
            "drainer", "healthcheck", "--timeout", "2", "http", f"http://{pump}:18250/status", timeout=30
        )
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def bring_up(cluster: ComposeCluster, phases: Phases) -> None:
    with phases("up (stage by stage, each healthy)"):
        cluster.up(on_stage=lambda stage, took: phases.say(f"  {' '.join(stage)} healthy after {took:.1f}s"))

    with phases("bank workload replicating"):
        rows = wait_for("bank accounts downstream", lambda: len(cluster.downstream_accounts()) == ACCOUNTS, 180)
        assert rows
        replicated_after(cluster, phases, "start-up")


def stop_writer_and_compare(cluster: ComposeCluster, phases: Phases) -> None:
    with phases("SIGTERM the writer (its bank check)"):
        podman("stop", "--time", "60", cluster.container("writer"), timeout=180)
        state = cluster.state("writer")
        logs = podman("logs", cluster.container("writer")).stdout
        assert state["ExitCode"] == 0, f"the writer exited {state['ExitCode']}:\n{logs[-3000:]}"
        assert logs.rstrip().endswith("check: ok"), logs[-3000:]
        summary = [line for line in logs.splitlines() if line.startswith("workload bank: ")][-1]
        committed = int(summary.split()[2])
        assert committed > 0, summary
        phases.say(f"  {summary}")

    with phases("catch-up and row-by-row comparison"):
        cluster.wait_replicated_past(cluster.fresh_ts())
        upstream = cluster.upstream_accounts()
        downstream = cluster.downstream_accounts()
        assert len(upstream) == ACCOUNTS
        assert downstream == upstream, [(u, d) for u, d in zip(upstream, downstream, strict=False) if u != d][:5]
        total = sum((balance for _, balance in downstream), Decimal(0))
        assert total == ACCOUNTS * INITIAL_BALANCE, f"bank total {total}"
        assert len({balance for _, balance in downstream}) > 1, "no transfer was replicated"

    with phases("audit of every table, inside the cluster"):
        url = f"mysql://root:{quote(cluster.password, safe='')}@mariadb:3306"
        audit = cluster.exec_tool(
            "pump1", ["etcd", "mariadb"], "python", "-m", "tools.audit", "--etcd", "http://etcd:2379",
            "--upstream", f"sqlite://{UPSTREAM_DB}", "--downstream", url,
        )  # fmt: skip
        assert audit.returncode == 0, audit.stdout + audit.stderr
        assert audit.stdout.startswith("audit OK: "), audit.stdout
        phases.say(f"  {audit.stdout.splitlines()[0]}")

    with phases("down -v"):
        cluster.down()
        left = {kind: names for kind, names in cluster.leftovers().items() if names}
        assert not left, f"down -v left {left}"

    total_time = sum(took for _, took in phases.times)
    phases.say("phases: " + ", ".join(f"{name} {took:.0f}s" for name, took in phases.times) + f"; {total_time:.0f}s")


@pytest.mark.timeout(1200)
def test_cluster_replicates_everything_through_restarts(
    compose_cluster: ComposeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """kill -9 of a pump, SIGTERM of the drainer, a MariaDB restart; then everything is downstream."""
    cluster = compose_cluster
    phases = Phases(capsys)
    bring_up(cluster, phases)

    with phases("kill -9 pump1, start it"):
        before = cluster.state("pump1")
        podman("kill", "--signal", "KILL", cluster.container("pump1"))

        def killed() -> dict[str, Any] | None:
            state = cluster.state("pump1")
            return state if state["StartedAt"] != before["StartedAt"] or not state["Running"] else None

        # the restart policy may bring it back by itself; otherwise it is started here
        after = wait_for("pump1 killed", killed, 60)
        phases.say(f"  pump1 after SIGKILL: {after['Status']}, exit code {after['ExitCode']}")
        if not after["Running"]:
            assert after["ExitCode"] == 137, after
            # a restart by the policy may race this start: what counts is that pump1 runs again
            podman("start", cluster.container("pump1"), check=False)
            wait_for("pump1 running again", lambda: cluster.state("pump1")["Running"], 60)
        cluster.wait_healthy(["pump1"])
        replicated_after(cluster, phases, "pump1 was killed")

    with phases("SIGTERM the drainer, start it"):
        podman("stop", "--time", "90", cluster.container("drainer"), timeout=180)
        state = cluster.state("drainer")
        assert not state["Running"]
        assert state["ExitCode"] == 0, f"the drainer exited {state['ExitCode']} on SIGTERM"
        podman("start", cluster.container("drainer"))
        cluster.wait_healthy(["drainer"])
        replicated_after(cluster, phases, "the drainer restarted")

    with phases("restart MariaDB"):
        podman("restart", "--time", "60", cluster.container("mariadb"), timeout=180)
        cluster.wait_healthy(["mariadb"])
        replicated_after(cluster, phases, "MariaDB restarted")

    stop_writer_and_compare(cluster, phases)


@pytest.mark.timeout(1200)
def test_cluster_replicates_everything_after_a_pump_is_cut_off_the_network(
    compose_cluster: ComposeCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """pump2 disconnected from the compose network for 20 s, connected again; then everything is downstream."""
    cluster = compose_cluster
    phases = Phases(capsys)
    bring_up(cluster, phases)

    with phases(f"pump2 off the network for {PARTITION_SECONDS:.0f}s"):
        network, pump2 = cluster.network(), cluster.container("pump2")
        assert reachable_from_drainer(cluster, "pump2")
        podman("network", "disconnect", network, pump2)
        cut = time.monotonic()
        try:
            wait_for("drainer loses pump2", lambda: not reachable_from_drainer(cluster, "pump2"), 30)
            while time.monotonic() - cut < PARTITION_SECONDS:  # the partition lasts; pump2 stays out of reach
                assert not reachable_from_drainer(cluster, "pump2"), "pump2 is reachable while disconnected"
                time.sleep(2)
        finally:
            podman("network", "connect", "--alias", "pump2", network, pump2)
        # pump2 has a new address now: connections to and from its old one must be given up and made again
        cluster.wait_healthy(["pump2"], timeout=180)
        wait_for("drainer reaches pump2", lambda: reachable_from_drainer(cluster, "pump2"), 60)
        replicated_after(cluster, phases, "pump2 was reconnected")

    stop_writer_and_compare(cluster, phases)
