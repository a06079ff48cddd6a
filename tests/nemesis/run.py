"""A nemesis run: the cluster across namespaces, the writer recording its history, a seeded schedule of
faults, then heal everything, wait for the drainer to pass a fresh timestamp, and check.

    python -m tests.nemesis.run --seed 42 --rounds 40 --max-hold 10 [--kinds freeze,crash] [--keep]

Prints the schedule as it runs, then the checker's report and one JSON line of totals (faults by kind,
transactions acknowledged, lost, duplicated, recovery times).  Exit status 0 when the checker found no
violation, 1 when it did (the seed, the schedule and the first violated rule are printed, and the run's
directory with its logs and history is kept), 2 for bad options, 3 when the environment cannot run it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql

from common.etcd import EtcdClient
from common.pd_client import TSOClient
from tests.harness.mysql import MySQLDSN
from tests.nemesis import checker
from tests.nemesis.cluster import NemesisCluster, nemesis_cluster
from tests.nemesis.history import read_history
from tests.nemesis.hosts import require_netns
from tests.nemesis.nemesis import (
    Bandwidth,
    ClockSkew,
    Crash,
    Delay,
    DiskFull,
    Fault,
    Freeze,
    Isolate,
    Loss,
    Partition,
)
from tests.nemesis.schedule import KINDS, Step, make_schedule
from tests.nemesis.streams import cluster_id_from_etcd, pull_streams
from tests.nemesis.workload import INITIAL_BALANCE
from tools.procs import ManagedProcess, ProcessError, python_module_argv, wait_for

ROOT = Path(__file__).resolve().parents[2]
WRITER_THREADS = 4
CATCH_UP_TIMEOUT = 180.0
WRITER_EXIT_TIMEOUT = 60.0
ACCOUNTS = 10
RECOVERY_BOUND = 90.0


@dataclass
class Outcome:
    """What a run did and what the checker found."""

    seed: int
    schedule: list[Step]
    report: checker.Report | None = None
    faults: dict[str, int] = field(default_factory=dict)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.report is not None and not self.report.violations


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def build(c: NemesisCluster, step: Step, writer: WriterRun | None = None) -> Fault:
    """The nemesis object of one schedule step, on this cluster's hosts and processes."""
    hosts = c.hosts
    procs = c.processes()
    if writer is not None:
        procs["writer"] = writer.process
    if step.kind == "partition":
        node = hosts[step.target]
        if step.peer == "*":
            peers: list[Any] = [h for name, h in hosts.items() if name != step.target]
            if step.target == "drainer":
                peers.append("host")
            return Isolate(node, peers)
        peer: Any = "host" if step.peer == "mysql" else hosts[step.peer]
        return Partition(node, peer, one_way=step.one_way)
    if step.kind == "loss":
        return Loss(hosts[step.target], int(step.amount))
    if step.kind == "bandwidth":
        return Bandwidth(hosts[step.target], f"{int(step.amount)}kbit")
    if step.kind == "delay":
        assert c.mysql_proxy is not None
        return Delay(c.mysql_proxy, step.amount, step.params.get("high_ms", step.amount))
    if step.kind == "freeze":
        return Freeze(procs[step.target], step.hold)
    if step.kind == "crash":
        if step.target == "writer":
            assert writer is not None
            return Crash(writer.restart, writer.process)
        return Crash(restarter(c, step.target), procs[step.target])
    if step.kind == "disk":
        return DiskFull(c.base / step.target)
    if step.kind == "skew":
        return ClockSkew(prefix_restarter(c, step.target), step.amount, name=step.target)
    raise ValueError(f"unknown fault kind {step.kind!r}")


RESTART_DEADLINE = 300.0
"""A node that does not come back within this long of its restart fails the run (as an error, not a
violation): while another fault still holds (etcd frozen, a partition) a start can fail and is tried again."""


def persistently(name: str, start: Callable[[], None], stop: Callable[[], object]) -> None:
    """`start()` until it returns; after each failure `stop()` (whatever half-started is killed) and try
    again, for up to RESTART_DEADLINE."""
    deadline = time.monotonic() + RESTART_DEADLINE
    tries = 0
    while True:
        tries += 1
        try:
            start()
            if tries > 1:
                say(f"  {name} restarted on try {tries}")
            return
        except (ProcessError, TimeoutError, OSError) as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if time.monotonic() >= deadline:
                raise ProcessError(f"{name} did not come back within {RESTART_DEADLINE:.0f}s: {first_line}") from exc
            say(f"  {name} did not start (try {tries}): {first_line}; trying again")
            with contextlib.suppress(Exception):
                stop()


@dataclass
class WriterRun:
    """The writer's process; a restart after a kill -9 runs the next generation for the time that is left."""

    process: ManagedProcess
    deadline: float
    """time.monotonic() after which the writer stops by itself (a bound: the run stops it after the schedule)."""
    generation: int = 0

    def restart(self) -> None:
        self.generation += 1
        left = max(1.0, self.deadline - time.monotonic())
        argv = self.process.argv
        argv[argv.index("--duration") + 1] = f"{left:.0f}"
        argv[argv.index("--generation") + 1] = str(self.generation)
        persistently("writer", self.process.start, self.process.stop)
        say(f"  writer restarted: generation {self.generation}, {left:.0f}s left")


def restarter(c: NemesisCluster, name: str) -> Callable[[], None]:
    """Start `name` again after a kill -9 (waits until it serves, retrying a start that fails)."""
    node: Any
    if name == "etcd":
        node = c.etcd
    elif name == "pd":
        node = c.pd
    elif name == "drainer":
        node = c.drainer
    else:
        node = next(p for p in c.pumps if p.name == name)
    assert node is not None
    return lambda: persistently(name, node.start, node.stop)


def prefix_restarter(c: NemesisCluster, name: str) -> Callable[[list[str]], None]:
    """Restart a pump or the drainer behind `extra` (e.g. a skewed clock) inside its namespace."""
    node = c.drainer if name == "drainer" else next(p for p in c.pumps if p.name == name)
    assert node is not None
    base_prefix = c.hosts[name].prefix_argv()

    def restart(extra: list[str]) -> None:
        node.stop()
        node.set_prefix([*base_prefix, *extra])
        persistently(name, node.start, node.stop)

    return restart


def fresh_ts(c: NemesisCluster) -> int:
    assert c.etcd is not None
    client = EtcdClient(c.etcd.url, timeout=5.0, retry_for=30.0)
    tso = TSOClient(client)
    try:
        return tso.get_ts()
    finally:
        tso.close()
        client.close()


def read_checkpoint(c: NemesisCluster, cluster_id: int) -> int:
    """The drainer's saved checkpoint (0 before its first save), read straight from MySQL."""
    with contextlib.closing(c.connect_mysql()) as conn, conn.cursor() as cur:
        try:
            found = checker.checkpoint_ts(cur, f"`{c.checkpoint_schema}`.`checkpoint`", cluster_id)
        except pymysql.MySQLError:
            return 0
    return found or 0


def run(base: Path, mysql: MySQLDSN, seed: int, schedule: list[Step]) -> Outcome:
    """One run on `base`; the cluster is torn down before this returns (also after a failure)."""
    outcome = Outcome(seed, schedule)
    budget = sum(s.hold + s.recover for s in schedule) + 10.0
    writing = 4 * budget + 600.0  # the writer writes until the schedule is over (restarts make it run long)
    history_path = base / "history.jsonl"
    with nemesis_cluster(base, mysql) as c:
        assert c.etcd is not None
        cluster_id = cluster_id_from_etcd(c.etcd.url)
        argv = python_module_argv(
            "tests.nemesis.workload",
            "--etcd", c.etcd.url,
            "--store", c.upstream_dsn,
            "--db", c.database,
            "--history", str(history_path),
            "--threads", str(WRITER_THREADS),
            "--duration", f"{writing:.0f}",
            "--seed", str(seed),
            "--accounts", str(ACCOUNTS),
            "--generation", "0",
        )  # fmt: skip
        writer = WriterRun(c.writer_process(argv), time.monotonic() + writing)
        writer.process.env["PYTHONPATH"] = str(ROOT)
        writer.process.start()
        sampler = checker.CheckpointSampler(
            mysql, cluster_id, f"{c.database}.inserts", checkpoint_table=f"{c.checkpoint_schema}.checkpoint"
        )
        sampler.start()
        heals: list[tuple[str, float]] = []
        try:
            for i, step in enumerate(schedule, 1):
                fault = build(c, step, writer)
                say(f"[{i}/{len(schedule)}] {step.describe()}")
                fault.start()
                try:
                    time.sleep(step.hold)  # the fault holds for its scheduled time (not a wait for a condition)
                finally:
                    fault.heal()
                heals.append((step.kind, time.time()))
                outcome.faults[step.kind] = outcome.faults.get(step.kind, 0) + 1
                time.sleep(step.recover)  # scheduled peace before the next fault
            say("schedule done; stopping the writer")
            writer.process.stop(WRITER_EXIT_TIMEOUT)  # SIGTERM: it finishes the attempts in progress
            upto = fresh_ts(c)
            say(f"healed; waiting for the drainer's checkpoint to pass {upto}")
            wait_for(lambda: read_checkpoint(c, cluster_id) >= upto, CATCH_UP_TIMEOUT, f"the checkpoint to pass {upto}")
            final_checkpoint = read_checkpoint(c, cluster_id)
            seen = len(sampler.samples.times)
            wait_for(lambda: len(sampler.samples.times) >= seen + 2, 30.0, "two more checkpoint samples")
        finally:
            samples = sampler.stop()
        pulled = pull_streams([p.addr for p in c.pumps], cluster_id, upto, idle_timeout=5, timeout=60)
        incomplete = {a: s.error or "incomplete" for a, s in pulled.items() if not s.complete}
        if incomplete:
            outcome.error = f"pump streams could not be pulled to {upto}: {incomplete}"
        history = list(read_history(history_path))
        up = checker.read_sqlite_tables(str(c.upstream_path), c.database)
        down = checker.read_mysql_tables(mysql, c.database)
        report = checker.check(
            history,
            up,
            down,
            {a: s.entries for a, s in pulled.items()},
            samples,
            final_checkpoint=final_checkpoint,
            heals=[t for _, t in heals],
            recovery_bound=RECOVERY_BOUND,
            expected_total=Decimal(INITIAL_BALANCE * ACCOUNTS),
            upto=upto,
        )
        outcome.report = report
        for (kind, _), took in zip(heals, report.recovery, strict=True):
            if took is not None:
                outcome.recovery.setdefault(kind, []).append(took)
        if not outcome.ok:
            c.keep = True
    return outcome


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def totals(outcome: Outcome) -> dict[str, Any]:
    r = outcome.report
    return {
        "seed": outcome.seed,
        "faults": outcome.faults,
        "faults_total": sum(outcome.faults.values()),
        "acknowledged": None if r is None else r.counts["acknowledged_ok"],
        "lost": None if r is None else r.counts["lost"],
        "duplicated": None if r is None else r.counts["duplicated"],
        "violations": None if r is None else len(r.violations),
        "recovery_s": {
            k: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "n": len(v)}
            for k, v in sorted(outcome.recovery.items())
        },
        "error": outcome.error or None,
    }


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.nemesis.run", description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--max-hold", type=float, default=10.0, help="longest fault, seconds (freezes: --max-freeze)")
    ap.add_argument("--max-freeze", type=float, default=30.0)
    ap.add_argument("--recover", type=float, default=3.0, help="seconds of peace after a heal")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    ap.add_argument("--mysql", default=os.environ.get("BINLOG_TEST_MYSQL_DSN", "mysql://root@127.0.0.1:3306"))
    ap.add_argument("--dir", type=Path, default=None, help="run directory (default: a new temp dir)")
    args = ap.parse_args(argv)
    try:
        schedule = make_schedule(
            args.seed, args.rounds, kinds=tuple(args.kinds.split(",")), max_hold=args.max_hold,
            max_freeze=args.max_freeze, recover=args.recover,
        )  # fmt: skip
        mysql = MySQLDSN.parse(args.mysql)
    except ValueError as exc:
        print(f"nemesis: {exc}", file=sys.stderr)
        return 2
    reason = require_netns()
    if reason:
        print(f"nemesis: cannot run here: {reason}", file=sys.stderr)
        return 3
    signal.signal(signal.SIGTERM, _exit_on_signal)  # a stopped campaign still tears its cluster down
    base = args.dir or Path(tempfile.mkdtemp(prefix="nemesis-"))
    say(f"nemesis run: seed {args.seed}, {len(schedule)} faults, directory {base}")
    outcome = run(base, mysql, args.seed, schedule)
    if outcome.ok and args.dir is None:
        shutil.rmtree(base, ignore_errors=True)
    if outcome.report is not None:
        print(outcome.report.render())
    print(json.dumps(totals(outcome)))
    if outcome.ok:
        return 0
    first = outcome.error or (outcome.report.violations[0] if outcome.report else "no report")
    say(f"FAILED: seed {args.seed}; first violated rule: {first}")
    say("schedule:\n" + "\n".join(f"  {s.describe()}" for s in schedule))
    say(f"logs and history kept in {base}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
