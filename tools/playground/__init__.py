"""`binlog-playground`: a whole local cluster in one command, a workload through it, and an audit.

    binlog-playground                                    # 30 s of sysbench through 3 pumps into sqlite
    binlog-playground --clean --workload bank --duration 10s --pumps 2
    binlog-playground --downstream mysql://root@127.0.0.1:3306 --keep
    binlog-playground --stop --dir playground-data       # stop a kept cluster

Under ``--dir`` (default ``./playground-data``) it starts a private etcd, pd-server, N pumps and
a drainer as real processes (logs: ``<dir>/*.log``), runs the upstream writer in this process
on ``<dir>/upstream.db`` with a workload, and shows live progress.  At the end it stops the
workload, takes a fresh TSO, waits until the drainer's checkpoint passes it, audits every
upstream table against downstream (common/audit.py), prints a summary and stops everything
(``--keep`` leaves the cluster running and prints how to reach and stop it).

Exit status: 0 when the audit is clean (and the workload's own check too), 1 when it is not or
the cluster failed (the tail of the failing process's log is printed), 2 for a bad option,
130 after Ctrl-C (which stops the workload, then every process).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any, TextIO

from common.audit import AuditResult
from common.cli import fail
from common.errors import BinlogError, ConfigError
from common.logsetup import setup_logging
from tools.audit import audit_mysql_server, audit_sqlite_file
from tools.playground.cluster import Cluster, PlaygroundError
from tools.playground.monitor import LagStats, Reading, Screen, plain_line, progress_lines, take_reading
from tools.playground.options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    Options,
    parse_args,
)
from tools.playground.report import downstream_where, kept_text, summary_text
from tools.playground.state import DirLock, State, load_state, save_state, stop_recorded
from tools.playground.workdir import prepare
from tools.procs import ManagedProcess, ProcessError
from upstream import Database, Snapshot, Workload, WorkloadOptions, make_workload, run_workload

log = logging.getLogger(__name__)

LOG_TAIL = 30
RATE_WINDOW = 5.0
"""Seconds over which the rows/s shown are averaged."""


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
        self._snap: Snapshot | None = None

    def say(self, text: str) -> None:
        self.screen.say(text)

    def error(self, text: str) -> None:
        """A failure: on stderr, below the live block."""
        self.screen.detach()
        self.out.flush()
        print(f"{PROG}: {text}", file=sys.stderr, flush=True)

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
        except (ProcessError, PlaygroundError) as exc:
            self.error(str(exc))
            return EXIT_FAILED
        except (BinlogError, OSError) as exc:
            self.error(str(exc))
            dead = self.cluster.dead() if self.cluster else None
            if dead is not None:
                self.error(died(dead))
            return EXIT_FAILED
        finally:
            self.finish(keep=completed and o.keep)

    def write_and_audit(self, cluster: Cluster) -> int:

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
        threads = f"{o.threads} thread{'s' if o.threads != 1 else ''}"
        self.say(f"workload {o.workload}: {threads}, {o.duration:g}s, seed {o.seed}  (Ctrl-C stops)")
        began = time.monotonic()
        before = self.reading()
        result = run_workload(
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
        where = downstream_where(o, cluster, self.state)
        self.say(
            summary_text(
                o, result=result, problems=problems, lags=self.lags, catch_up=catch_up, audit=audit, last=last,
                where=where,
            )
        )  # fmt: skip
        return EXIT_OK if audit.ok and not problems else EXIT_FAILED

    def reading(self) -> Reading:
        assert self.cluster is not None
        c = self.cluster
        now = take_reading([(p.name, p.status_addr) for p in c.pumps], c.drainer.status_addr)
        self.readings.append(now)
        del self.readings[:-32]  # enough for the rate window
        return now

    def tick(self, began: float, snap: Snapshot, *, force: bool = False) -> Reading:
        now_mono = time.monotonic()
        # rows/s over the last few seconds: the drainer hands rows to its sink in bursts
        before = next((r for r in self.readings if now_mono - r.mono <= RATE_WINDOW), None)
        now = self.reading()
        lines = progress_lines(time.monotonic() - began, snap, self._snap, now, before)
        self.screen.show(lines, plain_line(time.monotonic() - began, snap, now, before), force=force)
        self._snap = snap
        return now

    def on_progress(self, began: float, snap: Snapshot) -> None:
        now = self.tick(began, snap)
        self.lags.add(now.lag)
        dead = self.cluster.dead() if self.cluster else None
        if dead is not None and not self.failure:
            self.failure = died(dead)
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
                raise PlaygroundError(died(dead, "while the drainer caught up"))
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
            self.say(kept_text(self.opts, c, downstream_where(self.opts, c, self.state)))
        elif c is not None:
            c.stop(lambda text: log.info("%s", text))
            self.state.status = "stopped"
            save_state(self.opts.base, self.state)
            self.say(f"stopped the drainer, {len(c.pumps)} pumps, pd-server and etcd; logs in {self.opts.base}")
        self.lock.release()


def died(p: ManagedProcess, when: str = "") -> str:
    """What to say about a process that exited by itself: its status and the tail of its log."""
    status = p.proc.returncode if p.proc is not None else None
    how = f"was killed by signal {-status}" if status is not None and status < 0 else f"exited with status {status}"
    return f"{p.name} {how}{' ' + when if when else ''}; tail of {p.log_path}:\n{p.log_tail(LOG_TAIL)}"


def _workload_check(workload: Workload, db: Any) -> list[str]:
    try:
        return workload.check(db)
    except BinlogError as exc:
        return [f"the check could not run: {exc}"]


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
        pg.state = prepare(opts, pg.lock, pg.say)
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
