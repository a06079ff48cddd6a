"""The continuous load of a scenario, and how every scenario ends.

`Load` runs, from its own threads, until `stop()`:

* a **ledger**: one thread inserting one row per transaction into ``<db>.ledger`` and recording
  ``(id, commit_ts)`` of every commit it saw succeed, so a scenario can ask "is every row committed
  at or below this checkpoint downstream?" (a transaction whose outcome is unknown is not recorded:
  the audit covers it);
* **workloads** from `upstream.workloads` (sysbench by default), each through the runner.

Transactions that fail while a pump, etcd or pd-server is down are retried by a new transaction
(ledger) or by the workload's own retry loop; they never stop the load.  `finish()` is the end of
every scenario: the load stopped, a fresh TSO, the drainer's saved checkpoint past it, the audit
clean, every ledger row downstream and the workloads' own invariants held.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace

import pymysql

from common.errors import BinlogError
from pump_client import PumpsClient
from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster
from tools.localcluster import DrainerProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.errors import CommitUnknownError
from upstream.txn import Transaction
from upstream.workloads import Workload, WorkloadOptions, make_workload
from upstream.workloads.runner import RunResult, Snapshot, run

LEDGER = "ledger"
ER_BAD_DB_ERROR = 1049
ER_NO_SUCH_TABLE = 1146
STOP_TIMEOUT = 90.0
"""Seconds for the load's threads to finish the transaction each is in (a commit may wait out a
pump's write timeout, 15 s, more than once)."""
CATCH_UP_TIMEOUT = 120.0
RETRY_PAUSE = 0.05
"""Seconds between a failed ledger transaction and the next one (a pump may be down)."""


class Ledger:
    """One thread inserting ``<db>.ledger`` rows, one per transaction, recording each known commit."""

    def __init__(self, db: Database, database: str) -> None:
        self.db = db
        self.database = database
        self.table = f"{database}.{LEDGER}"
        if not db.schema.has_db(database):
            db.create_database(database)
        db.create_table(
            database,
            LEDGER,
            [Column("id", "BIGINT", nullable=False), Column("v", "VARCHAR(64)"), Column("start_ts", "BIGINT")],
            primary_key=["id"],
        )
        self.committed: list[tuple[int, int]] = []
        """(id, commit_ts) of every transaction whose commit succeeded, in commit order."""
        self.unknown: list[int] = []
        self.failed = 0
        self.errors: dict[str, int] = {}
        self.crashed = ""
        """The traceback of an unexpected exception that ended the ledger thread."""
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.committed)

    def snapshot(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self.committed)

    def loop(self, stop: threading.Event) -> None:
        try:
            self._loop(stop)
        except BaseException:
            self.crashed = traceback.format_exc()
            raise

    def _loop(self, stop: threading.Event) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            txn: Transaction | None = None
            try:
                txn = self.db.begin()
                txn.insert(self.table, {"id": i, "v": f"row {i}", "start_ts": txn.start_ts})
                ts = txn.commit()
            except CommitUnknownError as exc:
                self._error(exc)
                with self._lock:
                    self.unknown.append(i)
                continue
            except BinlogError as exc:
                if txn is not None:
                    txn.rollback()
                self._error(exc)
                stop.wait(RETRY_PAUSE)
                continue
            with self._lock:
                self.committed.append((i, ts))

    def _error(self, exc: BinlogError) -> None:
        key = f"{type(exc).__name__}: {str(exc)[:160]}"
        with self._lock:
            self.failed += 1
            self.errors[key] = self.errors.get(key, 0) + 1

    def downstream_ids(self, cluster: Cluster) -> set[int]:
        """Ids in the downstream ledger table (none while the drainer has not created it)."""
        conn = cluster.mysql_conn()
        try:
            with conn.cursor() as cur:
                try:
                    cur.execute(f"SELECT id FROM `{self.database}`.`{LEDGER}`")
                except pymysql.err.MySQLError as exc:
                    if exc.args and exc.args[0] in (ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE):
                        return set()
                    raise
                rows = cur.fetchall()
            conn.commit()
        finally:
            conn.close()
        return {int(r[0]) for r in rows}

    def missing_downstream(self, cluster: Cluster, up_to_ts: int | None = None) -> list[int]:
        """Ledger ids committed (at or below `up_to_ts`, if given) that are not downstream."""
        must = {i for i, ts in self.snapshot() if up_to_ts is None or ts <= up_to_ts}
        return sorted(must - self.downstream_ids(cluster)) if must else []


@dataclass
class Job:
    workload: Workload
    threads: int
    result: RunResult | None = None
    progress: Snapshot | None = None
    """The runner's last progress report (once a second)."""


class Load:
    """A ledger plus workloads, running from `start()` to `stop()`."""

    def __init__(self, cluster: Cluster, db: Database, client: PumpsClient, *, ledger_db: str | None = None) -> None:
        self.cluster = cluster
        self.db = db
        self.client = client
        self.ledger = Ledger(db, ledger_db or cluster.dbname("ledger"))
        self.jobs: list[Job] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._started = 0.0
        self.elapsed = 0.0

    def add(self, name: str, options: WorkloadOptions, *, threads: int = 2) -> Workload:
        """Set up workload `name` (its database made unique) to run from `threads` threads."""
        database = self.cluster.dbname(options.database or name)
        w = make_workload(name, replace(options, database=database))
        w.setup(self.db)
        self.jobs.append(Job(w, threads))
        return w

    def sysbench(self, *, threads: int = 2, tables: int = 2, table_size: int = 200) -> Workload:
        return self.add("sysbench", WorkloadOptions(tables=tables, table_size=table_size), threads=threads)

    def start(self) -> Load:
        self._started = time.monotonic()
        self._threads.append(threading.Thread(target=self.ledger.loop, args=(self._stop,), name="ledger"))
        for n, job in enumerate(self.jobs):
            self._threads.append(threading.Thread(target=self._run, args=(job, n), name=f"load-{job.workload.name}"))
        for t in self._threads:
            t.daemon = True  # a safety net: `halt()` in the fixture's teardown stops them
            t.start()
        return self

    def _run(self, job: Job, n: int) -> None:
        def progress(snap: Snapshot) -> None:
            job.progress = snap

        w, stop = job.workload, self._stop
        job.result = run(self.db, w, threads=job.threads, seed=100 + n, stop=stop, duration=3600, on_progress=progress)

    @property
    def running(self) -> bool:
        return not self._stop.is_set()

    def wait_commits(self, n: int, what: str, timeout: float = 60.0) -> None:
        """Wait until the ledger committed `n` more transactions than now: the writer goes on."""
        target = self.ledger.count + n
        self.wait_until(lambda: self.ledger.count >= target, timeout, f"{n} more ledger commits ({what})")

    def wait_until(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        """`wait_for`, failing at once (with the traceback) if a workload thread crashed."""

        def check() -> bool:
            self.assert_no_crash()
            return cond()

        wait_for(check, timeout, what, interval=0.1)

    def assert_no_crash(self) -> None:
        assert not self.ledger.crashed, f"the ledger thread crashed:\n{self.ledger.crashed}"
        for job in self.jobs:
            if job.result is not None and job.result.crashed:
                raise AssertionError(f"workload {job.workload.name} crashed:\n{job.result.crashed[0]}")
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead and not self._stop.is_set():
            raise AssertionError(f"load threads {dead} ended before stop()")

    def stop(self) -> None:
        """Stop every thread (each finishes its transaction) and check none crashed."""
        alive = self.halt()
        assert not alive, f"load threads {alive} still running {STOP_TIMEOUT:.0f}s after stop"
        assert not self.ledger.crashed, f"the ledger thread crashed:\n{self.ledger.crashed}"
        for job in self.jobs:
            assert job.result is not None
            assert job.result.crashed == [], f"{job.workload.name} crashed:\n{job.result.crashed[0]}"

    def halt(self) -> list[str]:
        """Stop every thread, waiting up to STOP_TIMEOUT; the names of those still running."""
        self._stop.set()
        deadline = time.monotonic() + STOP_TIMEOUT
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self._started:
            self.elapsed = time.monotonic() - self._started
        return [t.name for t in self._threads if t.is_alive()]

    def summary(self) -> str:
        lg = self.ledger
        parts = [f"ledger {lg.count} committed, {lg.failed} failed, {len(lg.unknown)} unknown"]
        for job in self.jobs:
            r = job.result
            if r is not None:
                parts.append(f"{job.workload.name} {r.stats.committed} committed, {r.stats.failed} failed")
        if self.ledger.errors:
            top = sorted(self.ledger.errors.items(), key=lambda kv: -kv[1])[:3]
            parts.append(f"ledger errors {top}")
        return "; ".join(parts)


def audit(cluster: Cluster, db: Database) -> list[str]:
    conn = cluster.mysql_conn()
    try:
        return audit_mysql(db, conn)
    finally:
        conn.close()


def finish(
    cluster: Cluster, drainer: DrainerProcess, load: Load, *, min_ledger: int = 20, timeout: float = CATCH_UP_TIMEOUT
) -> None:
    """The end of every scenario: stop the load, a fresh TSO, the checkpoint past it, nothing lost."""
    if load.running:
        load.stop()
    print(f"load: {load.summary()}")
    assert load.ledger.count >= min_ledger, f"the load barely ran: {load.summary()}"
    ts = cluster.now()
    cluster.wait_applied(drainer, ts, timeout)
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert int(cp["commitTS"]) >= ts, f"downstream checkpoint {cp} is before {ts}"
    problems = audit(cluster, load.db)
    assert problems == [], "\n".join(problems)
    missing = load.ledger.missing_downstream(cluster)
    assert missing == [], f"{len(missing)} committed ledger rows are not downstream: {missing[:10]}"
    for job in load.jobs:
        assert job.workload.check(load.db) == [], job.workload.name
