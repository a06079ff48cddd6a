"""Benchmark of the drainer's catch-up end to end: a backlog in 3 pumps into MariaDB, vs its loader alone.

A private cluster of real processes (etcd, pd-server, ``--pumps`` (3) pumps; ``tools.localcluster``)
in a temp dir.  The backlog is written once per invocation, with no drainer running, by the upstream
writer (``upstream.Database`` on an sqlite store, in this process; not timed):

* the ``sysbench`` workload (``upstream/workloads/sysbench.py``) on ``--tables`` (4) tables of
  ``--table-size`` (10,000) rows (loaded at setup by one thread, in 10-row transactions here, not
  the workload's 500), then transactions of 10 row changes from ``--threads`` (8) writer threads
  until ``--rows`` (1,000,000) more row changes are written.  The mix is the workload's own: an
  operation on a random id of 1..2 x table-size is an index update, a non-index update, a delete
  or a replace (1:1:1:1), and any operation on a missing id inserts it; at the tables' steady
  state (80% of the ids present) that is about 20% inserts, 60% updates, 20% deletes (the
  measured mix, from the pulled history, is in the JSON);
* at the same time, ``--big-txns`` (3) transactions of ``--txn-mb`` (64) MiB of 1 MiB BLOB rows
  (the ``bigtxn`` workload, as bench/memory.py), from one more thread;
* last, one row into a ``marker`` table: its arrival downstream is the "last row applied" time.

The same history is then read back once (not timed) through the drainer's own code in this process:
a ``Puller`` per pump into a ``Merger``, a ``Syncer`` (schema from the DDL history in etcd, the
drainer's filters, translation, large transactions in parts) into a sink that keeps the ``Txn``
objects, until a timestamp taken after the marker is reported.  This gives the row count, the binlog
bytes (payloads pulled) and the exact input the drainer's MySQL sink gets.

Then ``--runs`` (3) timed pairs, alternating (drainer first in even pairs, loader first in odd ones),
each side after a reset of the downstream (``--mysql``, default ``root@127.0.0.1:3306``: the two
databases dropped, this cluster's checkpoint row deleted):

* ``drainer``: a real drainer process (``tools.localcluster.DrainerProcess``: db-type mysql, its
  default worker-count, txn-batch and byte budget, initial-commit-ts 0, safe-mode-duration 0), timed
  from process start until ``/commit_ts`` (the saved checkpoint, saved every 3 s while there is
  progress) passes the last commit_ts of the backlog.  Also reported: from the first row seen
  downstream to that point, and from process start to the marker row seen downstream (polled every
  ``POLL`` s);
* ``loader``: ``drainer.app.default_sink_factory`` for the same drainer flags (a ``MySQLSink`` with the
  same worker count, batch, byte budget), connections opened untimed, then timed from the first
  ``add`` of the read-back txns until ``flush`` returns; a DDL is added between two flushes, as the
  syncer's barrier does.

Reported per mode: rows/s (row changes), MB/s (binlog bytes pulled), CPU seconds (of the drainer
process from its start; of this process over the loader's timed span), medians; the per-pair ratio
drainer / loader and its median (target >= 0.8); the drainer's absolute rows/s (target >= 50k).
Checks (untimed) after every run: per sysbench table the row count, SUM(k) and a CRC32 checksum of
every row, per bigtxn table the row count (and SUM(crc) of the blobs), equal upstream; a mismatch
fails the bench (exit 1, the error in the JSON).  ``--profile`` adds a drainer catch-up under
py-spy (``record --format raw``, all threads, idle samples dropped), attached once the drainer's
HTTP API answers, and puts the top functions by own and by total samples into the JSON (the raw
stacks are in a side file whose path is in the JSON); then once more with ``--gil`` (only samples of
the thread holding the GIL: where the drainer's Python CPU goes, waits on sockets and locks left
out, which py-spy's idle filter does not always recognise).  One JSON object goes to stdout, progress to
stderr.  Targets are reported, not asserted.

Usage: ``python bench/drainer_catchup.py [--quick] [--rows N] [--runs N] [--profile]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, also when the venv's editable install is another one

import pymysql  # noqa: E402
from _pumpbench import cpu_seconds, env_info, install_sigterm, log, median  # noqa: E402
from memory import Server, cleanup_mysql, dir_bytes, mysql_conn, start_cluster  # noqa: E402

from common.etcd import EtcdClient  # noqa: E402
from common.events import Txn  # noqa: E402
from common.pd_client import TSOClient, read_cluster_id  # noqa: E402
from drainer.app import default_sink_factory  # noqa: E402
from drainer.checkpoint import FileCheckpoint  # noqa: E402
from drainer.config import parse_args as drainer_parse_args  # noqa: E402
from drainer.config_syncer import syncer_filter  # noqa: E402
from drainer.merger import MergeItem, Merger  # noqa: E402
from drainer.puller import Puller  # noqa: E402
from drainer.schema import DrainerSchema, EtcdJobSource  # noqa: E402
from drainer.sinks.base import OnSuccess, Sink  # noqa: E402
from drainer.syncer import Syncer  # noqa: E402
from drainer.translator import is_fake  # noqa: E402
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess  # noqa: E402
from tools.procs import wait_for  # noqa: E402
from upstream.database import Database  # noqa: E402
from upstream.ddl import Column  # noqa: E402
from upstream.workloads import WorkloadOptions, make_workload, sysbench  # noqa: E402
from upstream.workloads.base import ensure_database  # noqa: E402
from upstream.workloads.runner import Snapshot, run  # noqa: E402

MiB: Final = 1 << 20
TARGET_RATIO: Final = 0.8
TARGET_ROWS_PER_S: Final = 50_000
POLL: Final = 0.05
"""Seconds between polls of the drainer's checkpoint and of the downstream (first row, marker)."""
PROGRESS_EVERY: Final = 10.0
SYSBENCH_ROWS_PER_TXN: Final = 10
MARKER: Final = "marker"
PROFILE_TOP: Final = 25
FRAMEWORK: Final = frozenset(
    f"{name} (threading.py)" for name in ("Thread._bootstrap", "Thread._bootstrap_inner", "Thread.run")
) | {"_run_module_as_main (<frozen runpy>)", "_run_code (<frozen runpy>)"}
"""Frames on every stack of a thread or of the main thread: left out of the by-total ranking."""
DRAINER_FLAGS: Final = ["--initial-commit-ts", "0", "--syncer.safe-mode-duration", "0"]
"""Catch-up settings; everything else is the drainer's default."""
PROCESS_FLAGS: Final = ["--detect-interval", "1"]
"""Flags of the process only (how soon it sees the pumps), not of its sink."""


# --------------------------------------------------------------------------------------- backlog


@dataclass
class Backlog:
    sb_db: str
    big_db: str
    tables: int
    write_seconds: float = 0.0
    parts: dict[str, Any] = field(default_factory=dict)
    expected: dict[str, list[int]] = field(default_factory=dict)
    """Per table the check values (see `table_checks`)."""

    @property
    def databases(self) -> set[str]:
        return {self.sb_db, self.big_db}

    def table_names(self) -> list[tuple[str, str]]:
        sb = [(self.sb_db, f"sbtest{i}") for i in range(1, self.tables + 1)]
        return [*sb, (self.big_db, "blobs"), (self.big_db, "batches"), (self.big_db, MARKER)]


def check_query(db: str, table: str) -> str:
    """COUNT, SUM and a checksum of a table downstream (what `upstream_checks` computes upstream)."""
    if table.startswith("sbtest"):
        return (
            f"SELECT COUNT(*), COALESCE(SUM(k), 0), COALESCE(SUM(CRC32(CONCAT_WS('|', id, k, c, pad))), 0) "
            f"FROM `{db}`.`{table}`"
        )
    if table == "blobs":
        return f"SELECT COUNT(*), COALESCE(SUM(crc), 0), 0 FROM `{db}`.`{table}`"
    return f"SELECT COUNT(*), 0, 0 FROM `{db}`.`{table}`"


def upstream_checks(db: Database, backlog: Backlog) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for d, t in backlog.table_names():
        rows = [r for _, r in db.rows(d, t)]
        if t.startswith("sbtest"):
            crc = sum(zlib.crc32(f"{r['id']}|{r['k']}|{r['c']}|{r['pad']}".encode()) for r in rows)
            out[f"{d}.{t}"] = [len(rows), sum(int(r["k"]) for r in rows), crc]
        elif t == "blobs":
            out[f"{d}.{t}"] = [len(rows), sum(int(r["crc"]) for r in rows), 0]
        else:
            out[f"{d}.{t}"] = [len(rows), 0, 0]
    return out


def downstream_checks(m: Server, backlog: Backlog) -> dict[str, list[int]]:
    conn = mysql_conn(m)
    try:
        out = {}
        with conn.cursor() as cur:
            for d, t in backlog.table_names():
                try:
                    cur.execute(check_query(d, t))
                    row = cur.fetchone()
                    out[f"{d}.{t}"] = [int(x) for x in row] if row else [-1, 0, 0]
                except pymysql.err.Error as exc:
                    out[f"{d}.{t}"] = [-1, 0, 0]
                    log(f"  check of {d}.{t} failed: {exc}")
        return out
    finally:
        conn.close()


def build_backlog(db: Database, args: argparse.Namespace, suffix: str) -> Backlog:
    """The history (see the module docstring); progress on stderr every PROGRESS_EVERY s."""
    backlog = Backlog(f"cu_sb_{suffix}", f"cu_big_{suffix}", args.tables)
    began = time.monotonic()
    big = make_workload(
        "bigtxn",
        WorkloadOptions(database=backlog.big_db, txn_size=args.txn_mb * MiB, blob_size=MiB, keep_batches=0),
    )
    big.setup(db)
    ensure_database(db, backlog.big_db)
    db.create_table(backlog.big_db, MARKER, [Column("id", "BIGINT")], primary_key=["id"])
    sb = make_workload(
        "sysbench",
        WorkloadOptions(
            database=backlog.sb_db, tables=args.tables, table_size=args.table_size, rows_per_txn=SYSBENCH_ROWS_PER_TXN
        ),
    )
    sysbench.LOAD_BATCH = SYSBENCH_ROWS_PER_TXN  # the initial load in 10-row transactions too
    sb.setup(db)
    backlog.parts["setup_seconds"] = round(time.monotonic() - began, 1)
    log(f"  setup done in {backlog.parts['setup_seconds']}s ({args.tables} x {args.table_size} rows loaded)")

    big_out: dict[str, Any] = {}

    def big_txns() -> None:
        t0 = time.monotonic()
        res = run(db, big, threads=1, seed=7, txns=args.big_txns)
        big_out.update(res.summary(), seconds=round(time.monotonic() - t0, 1), crashed=res.crashed[:1])

    big_thread = threading.Thread(target=big_txns, name="bigtxn", daemon=True)
    big_thread.start()
    last = [time.monotonic()]

    def progress(s: Snapshot) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY:
            last[0] = now
            log(f"  sysbench {s.elapsed:.0f}s: {s.committed} txns ({s.txn_per_s:.0f}/s), {s.retried} retried")

    t0 = time.monotonic()
    res = run(db, sb, threads=args.threads, seed=1, txns=args.rows // SYSBENCH_ROWS_PER_TXN, on_progress=progress)
    sb_seconds = time.monotonic() - t0
    if res.crashed:
        raise RuntimeError(f"sysbench crashed: {res.crashed[0]}")
    summary = res.summary()
    backlog.parts["sysbench"] = {
        **summary,
        "seconds": round(sb_seconds, 1),
        "txn_per_s": round(int(summary.get("committed", 0)) / sb_seconds, 1),
        "threads": args.threads,
        **sb.describe(),
    }
    big_thread.join()
    if big_out.get("crashed"):
        raise RuntimeError(f"bigtxn crashed: {big_out['crashed'][0]}")
    backlog.parts["bigtxn"] = big_out
    problems = sb.check(db) + big.check(db)
    if problems:
        raise RuntimeError(f"upstream invariants broken: {problems[:3]}")
    db.run(lambda txn: txn.insert(f"{backlog.big_db}.{MARKER}", {"id": 1}))
    backlog.write_seconds = time.monotonic() - began
    return backlog


# ------------------------------------------------------------------------------------- read back


class KeepSink(Sink):
    """Keeps every txn with something to execute (parts included), reports every commit_ts at once."""

    def __init__(self) -> None:
        self.txns: list[Txn] = []
        self.last_ts = 0
        self._on_success: OnSuccess | None = None

    def start(self, on_success: OnSuccess) -> None:
        self._on_success = on_success

    def add(self, txn: Txn) -> None:
        if not txn.is_empty:
            self.txns.append(txn)
        if not txn.partial:
            self.last_ts = txn.commit_ts
            assert self._on_success is not None
            self._on_success(txn.commit_ts)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass

    def error(self) -> BaseException | None:
        return None

    @property
    def takes_parts(self) -> bool:
        return True  # as MySQLSink: the txn list is exactly what the drainer's MySQL sink is given


class CountingMerger(Merger):
    """A `Merger` that adds up the payload bytes of the binlogs it hands out (fake ones left out)."""

    payload_bytes = 0

    def get(self, timeout: float | None = None) -> MergeItem | None:
        item = super().get(timeout)
        if item is not None and not is_fake(item.binlog):
            self.payload_bytes += item.size
        return item


@dataclass
class History:
    txns: list[Txn]
    rows: int
    payload_bytes: int
    last_ts: int
    mix: dict[str, int]
    seconds: float


def read_back(
    etcd_url: str, cluster_id: int, pumps: list[PumpProcess], *, target_ts: int, tmp: Path, drainer_argv: list[str]
) -> History:
    """The backlog as the drainer's syncer hands it to its sink (see the module docstring)."""
    began = time.monotonic()
    cfg, _ = drainer_parse_args(drainer_argv, env={})
    etcd = EtcdClient(etcd_url)
    schema = DrainerSchema(EtcdJobSource(etcd))
    schema.load(0)
    merger = CountingMerger(0, hold_until_released=True)
    sink = KeepSink()
    checkpoint = FileCheckpoint(tmp / "readback")
    checkpoint.load()
    errors: list[BaseException] = []
    syncer = Syncer(merger, schema, sink, checkpoint, syncer_filter(cfg.syncer), start_ts=0, schema_version=0,
                    safe_mode_duration=0, on_fatal=errors.append)  # fmt: skip
    pullers = []
    try:
        syncer.start()
        for p in pumps:
            merger.add_source(p.node_id)
            puller = Puller(p.node_id, p.addr, cluster_id, 0, merger, on_error=errors.append)
            puller.start()
            pullers.append(puller)

        def done() -> bool:
            if errors:
                raise RuntimeError(f"read-back failed: {errors[0]}")
            return sink.last_ts >= target_ts

        wait_for(done, 1800.0, "the read-back to reach the end of the backlog", interval=0.2)
    finally:
        for puller in pullers:
            puller.close()
        syncer.stop()
        merger.close()
        checkpoint.close()
        etcd.close()
    txns = sink.txns
    mix: Counter[str] = Counter()
    for t in txns:
        for d in t.dmls:
            mix[d.tp.name.lower()] += 1
        if t.ddl is not None:
            mix["ddl"] += 1
    rows = sum(len(t.dmls) for t in txns)
    return History(txns, rows, merger.payload_bytes, txns[-1].commit_ts, dict(mix), time.monotonic() - began)


# ----------------------------------------------------------------------------------------- runs


def reset_downstream(m: Server, backlog: Backlog, cluster_id: int) -> None:
    cleanup_mysql(m, backlog.databases, cluster_id)


def run_loader(history: History, drainer_argv: list[str]) -> dict[str, float]:
    """The read-back txns through the drainer's MySQL sink in this process; a DDL between two flushes."""
    cfg, _ = drainer_parse_args(drainer_argv, env={})
    sink = default_sink_factory(cfg)
    reported: list[int] = []
    sink.start(reported.append)
    try:
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        for txn in history.txns:
            if txn.ddl is not None:
                sink.flush(600)
                sink.add(txn)
                sink.flush(600)
            else:
                sink.add(txn)
        sink.flush(3600)
        seconds = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        if sink.error() is not None:
            raise RuntimeError(f"loader failed: {sink.error()}")
    finally:
        sink.close()
    if not reported or reported[-1] != history.last_ts:
        raise RuntimeError(f"loader reported up to {reported[-1:]} not the last commit_ts {history.last_ts}")
    return {"seconds": seconds, "cpu_s": cpu}


def _first(cur: pymysql.cursors.Cursor, query: str) -> bool:
    try:
        cur.execute(query)
        return cur.fetchone() is not None
    except pymysql.err.Error:
        return False  # the table does not exist yet


def run_drainer(
    tmp: Path,
    etcd_url: str,
    m: Server,
    *,
    backlog: Backlog,
    history: History,
    flags: list[str],
    name: str,
    timeout: float,
    profile_to: Path | None = None,
    gil: bool = False,
) -> dict[str, Any]:
    """A drainer process from an empty downstream until its checkpoint passes the backlog."""
    drainer = DrainerProcess(tmp, etcd_url, name=name, extra_args=[*flags, *PROCESS_FLAGS])
    conn = mysql_conn(m)
    conn.autocommit(True)
    spy: subprocess.Popen[bytes] | None = None
    first_row = f"SELECT 1 FROM `{backlog.sb_db}`.`sbtest1` LIMIT 1"
    marker = f"SELECT 1 FROM `{backlog.big_db}`.`{MARKER}` LIMIT 1"
    out: dict[str, Any] = {}
    try:
        began = time.monotonic()
        drainer.process.start()
        pid = drainer.process.pid or 0
        first_at: float | None = None
        marker_at: float | None = None
        last_report = [began]
        with conn.cursor() as cur:

            def caught_up() -> bool:
                nonlocal first_at, marker_at, spy
                if not drainer.process.alive:
                    raise RuntimeError(f"drainer exited; log tail:\n{drainer.process.log_tail()}")
                now = time.monotonic()
                if first_at is None and _first(cur, first_row):
                    first_at = now
                if marker_at is None and first_at is not None and _first(cur, marker):
                    marker_at = now
                try:
                    ts = int(drainer.http_json("GET", "/commit_ts", timeout=2.0)["data"]["ts"])
                except (OSError, KeyError, ValueError):
                    return False
                if profile_to is not None and spy is None:
                    spy = start_py_spy(pid, profile_to, gil)
                if now - last_report[0] >= PROGRESS_EVERY:
                    last_report[0] = now
                    lag = ((history.last_ts >> 18) - (ts >> 18)) / 1000
                    log(f"    {now - began:.0f}s: checkpoint {max(lag, 0):.0f}s of upstream time behind")
                return ts >= history.last_ts

            wait_for(caught_up, timeout, "the drainer's checkpoint to pass the backlog", interval=POLL)
        end = time.monotonic()
        cpu = cpu_seconds(pid)
        if first_at is None or marker_at is None:
            raise RuntimeError("the drainer's checkpoint passed the backlog before its rows were seen downstream")
        out = {
            "seconds": end - began,
            "from_first_row_s": end - first_at,
            "to_first_row_s": first_at - began,
            "to_marker_s": marker_at - began,
            "cpu_s": cpu,
        }
    finally:
        conn.close()
        drainer.stop()
        if spy is not None:
            try:
                spy.wait(120)
            except subprocess.TimeoutExpired:
                spy.send_signal(signal.SIGINT)
                spy.wait(30)
    return out


# -------------------------------------------------------------------------------------- profile


def start_py_spy(pid: int, path: Path, gil: bool) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).with_name("py-spy")
    cmd = [str(exe), "record", "--pid", str(pid), "--format", "raw", "-o", str(path), "--rate", "100"]
    if gil:
        cmd.append("--gil")
    log(f"  py-spy attached to the drainer (pid {pid}){' (--gil)' if gil else ''}")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _function(frame: str) -> str:
    """``name (path:line)`` -> ``name (path)``; paths shortened to the repository or site-packages."""
    frame = frame.strip()
    if frame.endswith(")") and "(" in frame:
        name, _, where = frame[:-1].partition(" (")
        where = where.rsplit(":", 1)[0]
        for marker in (str(ROOT) + "/", "site-packages/", "/lib/python3"):
            if marker in where:
                where = where.split(marker, 1)[1]
                break
        return f"{name} ({where})"
    return frame


def summarize_profile(path: Path) -> dict[str, Any]:
    """Top functions by own samples (the leaf), by total samples (anywhere on the stack), and samples per
    thread entry point (the first frame below the thread machinery: which thread's work)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    entry: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    samples = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        n = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if frames and frames[0].startswith(("process ", "thread ")):
            threads[frames[0]] += n
            frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += n
        funcs = [_function(f) for f in frames]
        own[funcs[-1]] += n
        entry[next((f for f in funcs if f not in FRAMEWORK), funcs[0])] += n
        for f in set(funcs) - FRAMEWORK:
            total[f] += n

    def top(c: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": f, "samples": n, "pct": round(100 * n / samples, 1)} for f, n in c.most_common(PROFILE_TOP)
        ]

    return {
        "samples": samples,
        "raw_stacks": str(path),
        "by_thread_entry": top(entry),
        "top_own": top(own),
        "top_total": top(total),
    }


# ------------------------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--mysql", default="root@127.0.0.1:3306", help="downstream (user[:password]@host:port)")
    p.add_argument("--pumps", type=int, default=3)
    p.add_argument("--rows", type=int, default=1_000_000, help="row changes of the sysbench part (10 per txn)")
    p.add_argument("--tables", type=int, default=4, help="sysbench tables")
    p.add_argument("--table-size", type=int, default=10_000, help="sysbench rows per table at setup")
    p.add_argument("--threads", type=int, default=8, help="sysbench writer threads")
    p.add_argument("--big-txns", type=int, default=3, help="large transactions")
    p.add_argument("--txn-mb", type=int, default=64, help="size of a large transaction (MiB)")
    p.add_argument("--runs", type=int, default=3, help="drainer/loader pairs; medians are reported")
    p.add_argument("--timeout", type=float, default=3600.0, help="give up on a catch-up after this many s")
    p.add_argument("--drainer-arg", action="append", default=[], help="extra drainer flag (repeatable)")
    p.add_argument("--profile", action="store_true", help="two more drainer runs under py-spy (all threads; --gil)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--quick", action="store_true", help="smoke run: 20k rows, one 16 MiB txn, 2 pairs")
    args = p.parse_args(argv)
    if args.quick:
        args.rows, args.table_size, args.big_txns, args.txn_mb, args.runs = 20_000, 1000, 1, 16, 2
    for name in ("rows", "tables", "table_size", "threads", "txn_mb", "runs", "pumps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def rate(n: float, seconds: float) -> float:
    return n / seconds if seconds > 0 else 0.0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_sigterm()
    m = Server.parse(args.mysql)
    tmp = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    suffix = uuid.uuid4().hex[:8]
    etcd_server = EtcdProcess(tmp)
    pd: PDProcess | None = None
    pumps: list[PumpProcess] = []
    db: Database | None = None
    tso: TSOClient | None = None
    etcd: EtcdClient | None = None
    backlog: Backlog | None = None
    cluster_id = 0
    upstream_path = tmp / "upstream.db"
    to = ["--syncer.to.host", m.host, "--syncer.to.port", str(m.port), "--syncer.to.user", m.user]
    flags = [*DRAINER_FLAGS, "--syncer.db-type", "mysql", *to, "--syncer.to.password", m.password, *args.drainer_arg]
    result: dict[str, Any] = {"bench": "drainer_catchup", "env": env_info(), "load_before": os.getloadavg()}
    errors: list[str] = []
    try:
        pd = start_cluster(tmp, etcd_server, pumps, args.pumps, upstream_path)
        etcd = EtcdClient(etcd_server.url)
        cluster_id = read_cluster_id(etcd) or 0
        tso = TSOClient(etcd)

        log(f"writing the backlog (no drainer): {args.rows} sysbench row changes from {args.threads} threads, "
            f"{args.big_txns} x {args.txn_mb} MiB")  # fmt: skip
        db = Database(etcd_server.url, f"sqlite:///{upstream_path}")
        backlog = build_backlog(db, args, suffix)
        backlog.expected = upstream_checks(db, backlog)
        db.close()
        db = None
        target_ts = tso.get_ts()
        stored = sum(dir_bytes(p.data_dir) for p in pumps)
        log(f"backlog written in {backlog.write_seconds:.0f}s: {stored / MiB:.0f} MiB in the pumps")

        log("reading the backlog back through the drainer's puller, merger, syncer and translator (in process)")
        history = read_back(etcd_server.url, cluster_id, pumps, target_ts=target_ts, tmp=tmp, drainer_argv=flags)
        gc.collect()
        gc.freeze()  # the kept history is not scanned by every collection of the loader runs
        mb = history.payload_bytes / MiB
        log(f"  {len(history.txns)} txns, {history.rows} row changes, {mb:.0f} MiB of binlogs "
            f"in {history.seconds:.0f}s; mix {history.mix}")  # fmt: skip
        result["backlog"] = {
            "rows": history.rows,
            "txns": len(history.txns),
            "mix": history.mix,
            "binlog_payload_mb": round(mb, 1),
            "pump_storage_mb": round(stored / MiB, 1),
            "write_seconds": round(backlog.write_seconds, 1),
            "write_rows_per_s": round(rate(history.rows, backlog.write_seconds)),
            "read_back_seconds": round(history.seconds, 1),
            "workloads": backlog.parts,
        }

        def checked(label: str) -> None:
            assert backlog is not None
            down = downstream_checks(m, backlog)
            bad = {
                k: {"upstream": v, "downstream": down.get(k)} for k, v in backlog.expected.items() if down.get(k) != v
            }
            if bad:
                errors.append(f"{label}: downstream differs from upstream: {bad}")
                log(f"  {label}: MISMATCH {bad}")

        runs: dict[str, list[dict[str, float]]] = {"drainer": [], "loader": []}
        ratios: list[float] = []
        for i in range(args.runs):
            order = ("drainer", "loader") if i % 2 == 0 else ("loader", "drainer")
            pair: dict[str, float] = {}
            for mode in order:
                reset_downstream(m, backlog, cluster_id)
                if mode == "drainer":
                    r = run_drainer(tmp, etcd_server.url, m, backlog=backlog, history=history, flags=flags,
                                    name=f"drainer{i}", timeout=args.timeout)  # fmt: skip
                else:
                    r = run_loader(history, flags)
                r["rows_per_s"] = rate(history.rows, r["seconds"])
                r["mb_per_s"] = rate(mb, r["seconds"])
                if mode == "drainer":
                    r["rows_per_s_from_first_row"] = rate(history.rows, r["from_first_row_s"])
                runs[mode].append(r)
                pair[mode] = r["rows_per_s"]
                log(f"  pair {i} {mode:7}: {r['seconds']:.1f}s, {r['rows_per_s']:.0f} rows/s, {r['mb_per_s']:.1f} MB/s")
                checked(f"pair {i} {mode}")
            ratios.append(pair["drainer"] / pair["loader"])
            log(f"  pair {i} ratio drainer/loader {ratios[-1]:.3f}")

        def med(mode: str, key: str, digits: int = 1) -> float:
            return round(median([r[key] for r in runs[mode]]), digits)

        drainer_rate = med("drainer", "rows_per_s", 0)
        ratio = round(median(ratios), 3)
        result["drainer"] = {
            "rows_per_s": drainer_rate,
            "mb_per_s": med("drainer", "mb_per_s", 2),
            "seconds": med("drainer", "seconds"),
            "rows_per_s_from_first_row": med("drainer", "rows_per_s_from_first_row", 0),
            "to_first_row_s": med("drainer", "to_first_row_s", 2),
            "to_marker_s": med("drainer", "to_marker_s"),
            "cpu_s": med("drainer", "cpu_s"),
            "note": "from process start to the saved checkpoint (saved every 3 s) passing the backlog's last commit_ts",
        }
        result["loader"] = {
            "rows_per_s": med("loader", "rows_per_s", 0),
            "mb_per_s": med("loader", "mb_per_s", 2),
            "seconds": med("loader", "seconds"),
            "cpu_s": med("loader", "cpu_s"),
            "note": "MySQLSink as the drainer builds it, fed the read-back txns in this process",
        }
        result["ratio"] = {"median": ratio, "pairs": [round(x, 3) for x in ratios]}
        result["runs"] = {k: [{kk: round(vv, 2) for kk, vv in r.items()} for r in v] for k, v in runs.items()}
        result["targets"] = {
            "ratio": TARGET_RATIO,
            "ratio_met": ratio >= TARGET_RATIO,
            "rows_per_s": TARGET_ROWS_PER_S,
            "rows_per_s_met": drainer_rate >= TARGET_ROWS_PER_S,
        }

        if args.profile:
            result["profile"] = {}
            for kind, gil in (("all_threads", False), ("gil", True)):
                log(f"profile: one more drainer catch-up under py-spy ({kind})")
                reset_downstream(m, backlog, cluster_id)
                raw = Path(tempfile.gettempdir()) / f"drainer_catchup_{suffix}.{kind}.pyspy.txt"
                r = run_drainer(tmp, etcd_server.url, m, backlog=backlog, history=history, flags=flags,
                                name=f"drainer-prof-{kind}", timeout=args.timeout, profile_to=raw, gil=gil)  # fmt: skip
                checked(f"profile run ({kind})")
                if raw.exists():
                    result["profile"][kind] = {"seconds": round(r["seconds"], 1), **summarize_profile(raw)}
                else:
                    errors.append(f"py-spy wrote no profile ({kind})")
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        log(f"failed: {exc}")
    finally:
        if db is not None:
            db.close()
        if tso is not None:
            tso.close()
        if etcd is not None:
            etcd.close()
        for p in pumps:
            with contextlib.suppress(Exception):
                p.stop()
        if pd is not None:
            pd.stop()
        etcd_server.stop()
        if backlog is not None:
            reset_downstream(m, backlog, cluster_id)
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    result["load_after"] = os.getloadavg()
    result["errors"] = errors
    print(json.dumps(result, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
