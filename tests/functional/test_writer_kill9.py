"""kill -9 of the upstream writer during a bank workload on sqlite: no stall outlives the TTL.

A real cluster (etcd, pd-server, two pumps with the txn-status resolver, a drainer to sqlite)
and `binlog-workload --workload bank` on the sqlite store in a child process.  The writer is
killed with SIGKILL at random points (after a random number of its commits) and exits at each
crash hook of upstream/commit.py.  After each death the drainer's checkpoint must pass a fresh
TSO within the TTL (max of the status-row TTL and the lock TTL) plus a few seconds; at the end
the downstream equals the upstream (the audit) and the bank's total is intact.

A kill often leaves a P-binlog on a pump whose transaction has no status row yet; the pumps
used to wait `max-txn-timeout` (10 min) for it, holding every later transaction back.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

import pytest

from common.txnstatus import DEFAULT_STATUS_ROW_TTL, TABLE
from tests.functional.audit import audit_sqlite
from tests.functional.drainerutil import Cluster, unique_name
from tools.localcluster import DrainerProcess
from tools.procs import ManagedProcess, python_module_argv, wait_for
from upstream.commit import CRASH_BEFORE_STATUS_ROW_ENV, CRASH_HOOKS
from upstream.database import DEFAULT_LOCK_TTL, Database

pytestmark = pytest.mark.functional

SLACK = 5.0
"""Seconds a stall may outlast the TTL: resolve-interval, the drainer's pull and merge, a busy machine."""
ACCOUNTS = 20
INITIAL = 1000


class StallWatch:
    """Stalls that overlap: each one is a TSO taken right after a kill, which the drainer's checkpoint
    must pass within `bound` seconds; a thread polls the checkpoint and times each one."""

    def __init__(self, drainer: DrainerProcess, bound: float) -> None:
        self._drainer = drainer
        self._bound = bound
        self._lock = threading.Lock()
        self._pending: list[tuple[str, int, float]] = []  # (what, ts, began)
        self.cleared: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="stall-watch", daemon=True)
        self._thread.start()

    def add(self, what: str, ts: int) -> None:
        with self._lock:
            self._pending.append((what, ts, time.monotonic()))

    def _poll(self) -> None:
        while not self._stop.wait(0.1):
            try:
                checkpoint = int(self._drainer.http_json("GET", "/commit_ts")["data"]["ts"])
            except OSError:
                continue
            now = time.monotonic()
            with self._lock:
                done = [p for p in self._pending if checkpoint >= p[1]]
                self._pending = [p for p in self._pending if checkpoint < p[1]]
                self.cleared.extend((what, now - began) for what, _, began in done)

    def wait_all(self) -> list[tuple[str, float]]:
        """Every stall's seconds, once all cleared; fails naming those that outlived the bound."""
        try:
            wait_for(lambda: not self._pending, self._bound + 1, "every overlapping stall to clear", interval=0.2)
        finally:
            self._stop.set()
            self._thread.join(5)
        late = [(what, round(took, 1)) for what, took in self.cleared if took > self._bound]
        assert late == [], f"stalls longer than {self._bound}s: {late}"
        return self.cleared


@dataclass
class KillRun:
    cluster: Cluster
    drainer: DrainerProcess
    database: str
    ttl: float
    writer_args: list[str]
    runs: int = 0
    stalls: list[tuple[str, float]] = field(default_factory=list)
    watch: StallWatch | None = None

    def committed_since(self, ts: int) -> int:
        if not self.cluster.upstream_path.exists():
            return 0
        conn = sqlite3.connect(f"file:{self.cluster.upstream_path}?mode=ro", uri=True, timeout=10)
        try:
            row = conn.execute(f"SELECT count(*) FROM {TABLE} WHERE state = 'committed' AND start_ts > ?", (ts,))
            return int(row.fetchone()[0])
        except sqlite3.OperationalError:  # the table does not exist yet
            return 0
        finally:
            conn.close()

    def writer(self, env: dict[str, str] | None = None, duration: str = "10m") -> ManagedProcess:
        self.runs += 1
        argv = python_module_argv(
            "upstream.workload_cli", "--workload", "bank", "--etcd", self.cluster.etcd_server.url,
            "--store", self.cluster.upstream_dsn, "--database", self.database, "--threads", "4",
            "--duration", duration, "--accounts", str(ACCOUNTS), "--initial-balance", str(INITIAL),
            "--quiet", "--log-level", "info", *self.writer_args,
        )  # fmt: skip
        proc = ManagedProcess(
            f"writer{self.runs}", argv, self.cluster.tmp / f"writer{self.runs}.log", env={**os.environ, **(env or {})}
        )
        proc.start()
        return proc

    def stall_clears(self, what: str) -> float:
        """Seconds until the drainer's checkpoint passes a TSO taken now; fails after ttl + SLACK."""
        if self.watch is not None:  # overlapping kills: the watcher checks this stall's bound
            self.watch.add(what, self.cluster.now())
            return 0.0
        fresh = self.cluster.now()
        t0 = time.monotonic()
        self.cluster.wait_applied(self.drainer, fresh, timeout=self.ttl + SLACK)
        took = time.monotonic() - t0
        self.stalls.append((what, took))
        return took

    def kill_at_random(self, rng: random.Random) -> None:
        before = self.cluster.now()
        target = rng.randint(1, 120)
        proc = self.writer()
        try:
            proc.wait_ready(lambda: self.committed_since(before) >= target, 60)
        except BaseException:
            proc.kill9()
            raise
        proc.kill9()
        self.stall_clears(f"kill -9 after {target} commits")

    def exit_at_hook(self, hook: str) -> None:
        proc = self.writer({hook: "1"})
        assert proc.proc is not None
        code = proc.proc.wait(60)
        assert code == 137, proc.log_tail()
        assert f"{hook} set: exiting" in proc.log_path.read_text(), proc.log_tail()
        self.stall_clears(hook)
        if hook == CRASH_BEFORE_STATUS_ROW_ENV and self.watch is None:
            self.assert_settled_by_the_status_row_ttl()

    def assert_settled_by_the_status_row_ttl(self) -> None:
        """A prewrite that had no status row was settled by the status-row TTL (the pumps say so)."""
        logs = "".join(p.process.log_path.read_text() for p in self.cluster.pumps)
        assert "(limit " in logs
        assert "rolled back, dropping the prewrite" in logs

    def finish(self) -> None:
        """A last writer run to its end, then the audit and the bank's total downstream."""
        proc = self.writer(duration="2")
        assert proc.proc is not None
        assert proc.proc.wait(120) == 0, proc.log_tail()
        self.cluster.wait_applied(self.drainer, self.cluster.now())
        with Database(self.cluster.etcd_server.url, self.cluster.upstream_dsn, binlog=False) as up:
            conn = sqlite3.connect(self.drainer.data_dir / "downstream.db")
            try:
                problems = audit_sqlite(up, conn)
                balances = [r[0] for r in conn.execute(f'SELECT balance FROM "{self.database}.accounts"')]
            finally:
                conn.close()
        assert problems == [], "\n".join(problems)
        assert len(balances) == ACCOUNTS
        cents = Decimal("0.01")
        assert sum(Decimal(str(b)).quantize(cents) for b in balances) == ACCOUNTS * INITIAL


@pytest.fixture
def make_run(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[KillRun]]:
    runs: list[KillRun] = []
    yield runs
    for r in runs:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(r.cluster.logs(120))
            print("stalls so far:", r.stalls)
        r.cluster.close()


def start(tmp_path: Path, runs: list[KillRun], *, ttl_args: list[str], ttl: float) -> KillRun:
    cluster = Cluster(tmp_path, None, pumps=0)
    for _ in range(2):
        cluster.add_pump(*ttl_args)
    drainer = cluster.drainer("--syncer.db-type", "sqlite", sink="sqlite")
    run = KillRun(cluster, drainer, unique_name("bank"), ttl, writer_args=[])
    runs.append(run)
    return run


def test_kill9_the_writer_with_default_settings_every_stall_clears_within_the_ttl(
    tmp_path: Path, make_run: list[KillRun]
) -> None:
    """Default TTLs; the kills follow each other without waiting, so their stalls overlap (as they
    would when a writer keeps being restarted into the same fault), and each is timed on its own."""
    ttl = max(DEFAULT_STATUS_ROW_TTL, DEFAULT_LOCK_TTL)
    run = start(tmp_path, make_run, ttl_args=[], ttl=ttl)
    run.watch = StallWatch(run.drainer, ttl + SLACK)
    rng = random.Random(8)
    for _ in range(10):
        run.kill_at_random(rng)
    for hook in CRASH_HOOKS:
        run.exit_at_hook(hook)
    stalls = run.watch.wait_all()
    assert len(stalls) == 10 + len(CRASH_HOOKS)
    run.assert_settled_by_the_status_row_ttl()
    print("stalls (s):", [(what, round(s, 1)) for what, s in stalls])
    run.watch = None
    run.finish()


def test_kill9_the_writer_with_a_short_ttl_every_stall_clears_within_it(
    tmp_path: Path, make_run: list[KillRun]
) -> None:
    """The same with a 2 s status-row TTL and lock TTL on the writer and the pumps: the bound follows the TTL."""
    run = start(tmp_path, make_run, ttl_args=["--upstream.status-row-ttl", "2s"], ttl=2.0)
    run.writer_args = ["--status-row-ttl", "2", "--lock-ttl", "2"]
    rng = random.Random(9)
    for _ in range(3):
        run.kill_at_random(rng)
    for hook in CRASH_HOOKS:
        run.exit_at_hook(hook)
    print("stalls (s):", [(what, round(s, 1)) for what, s in run.stalls])
    run.finish()
