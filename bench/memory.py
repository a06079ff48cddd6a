"""Benchmark of memory: peak RSS of every pump and of the drainer while the drainer catches up a backlog.

A private cluster of real processes (etcd, pd-server, ``--pumps`` pumps; ``tools.localcluster``)
in a temp dir.  With no drainer running, the upstream writer (``upstream.Database`` on an sqlite
store, in this process) writes the backlog through the pumps:

* ``--big-txns`` transactions of ``--txn-mb`` (64) MiB of 1 MiB BLOB rows (the ``bigtxn``
  workload), the large-binlog case: one binlog of 64 MiB;
* ``--small-row-txns`` transactions of ``--txn-mb`` MiB of ``--small-row-bytes`` (512) byte rows,
  alternately inserting a batch and deleting the previous one (``bigtxn`` with
  ``keep-batches = 1``): 131k row events per binlog, the "bulk DELETE" case where decoded
  rows cost far more memory than their bytes;
* ``--sysbench-seconds`` of the ``sysbench`` workload (small transactions, updates and deletes)
  from 4 threads;

until the pumps' data directories hold ``--backlog-mb`` (1024) MiB (more big transactions are
added if they fall short).  Then a drainer starts from commit_ts 0 (``--downstream mysql``, the
default, on ``--mysql`` = ``root@127.0.0.1:3306``, or ``sqlite``) with its default settings, and
this script samples ``VmRSS`` of each process every ``--interval`` seconds until the drainer's
checkpoint passes a timestamp taken after the last commit.  Peaks are ``VmHWM`` (the kernel's
high-water mark; a pump's is reset through ``/proc/<pid>/clear_refs`` when the catch-up starts,
so it covers the catch-up alone; its peak while writing is reported apart).  At the end every
table's row count downstream is compared with upstream.

One JSON object goes to stdout (progress to stderr): the backlog's bytes, the catch-up's seconds
and MB/s, and per process ``start_rss_mb`` (a pump's RSS left from the writes), ``peak_rss_mb``
(VmHWM), ``max_sampled_rss_mb`` and ``end_rss_mb``;
``target.met`` says whether the drainer's peak stayed within ``--target-mb`` (512).  Exit status 1
if the target is missed or a row count differs.

Usage: ``python bench/memory.py [--quick] [--downstream mysql|sqlite] [--backlog-mb N] [--pumps N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from _pumpbench import env_info, install_sigterm, log

from common.etcd import EtcdClient
from common.pd_client import TSOClient, read_cluster_id
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

MiB = 1 << 20
DEFAULT_TARGET_MB = 512
PUMP_ARGS = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1", "--storage.resolve-interval", "0.5"]
DRAINER_ARGS = ["--detect-interval", "1", "--initial-commit-ts", "0"]


# ---------------------------------------------------------------------------------------------- RSS


def proc_status_kb(pid: int, key: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (VmRSS, VmHWM), None once the process is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (``clear_refs`` 5, Linux 4.0+)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Track:
    name: str
    pid: int
    samples: list[int] = field(default_factory=list)  # VmRSS, kB
    hwm_kb: int = 0

    def sample(self) -> None:
        rss = proc_status_kb(self.pid, "VmRSS")
        if rss is not None:
            self.samples.append(rss)
        hwm = proc_status_kb(self.pid, "VmHWM")
        if hwm is not None:
            self.hwm_kb = max(self.hwm_kb, hwm)

    def summary(self) -> dict[str, Any]:
        s = self.samples
        return {
            "pid": self.pid,
            "start_rss_mb": round(s[0] / 1024, 1) if s else None,
            "peak_rss_mb": round(self.hwm_kb / 1024, 1),
            "max_sampled_rss_mb": round(max(s) / 1024, 1) if s else None,
            "median_sampled_rss_mb": round(sorted(s)[len(s) // 2] / 1024, 1) if s else None,
            "end_rss_mb": round(s[-1] / 1024, 1) if s else None,
            "samples": len(s),
        }


class Sampler:
    """A thread sampling every tracked process's VmRSS (and VmHWM) every `interval` seconds."""

    def __init__(self, tracks: list[Track], interval: float) -> None:
        self.tracks = tracks
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for t in self.tracks:
                t.sample()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for t in self.tracks:
            t.sample()


# -------------------------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    user: str
    password: str

    @staticmethod
    def parse(text: str) -> Server:
        """``user[:password]@host:port``."""
        user_pw, _, hostport = text.rpartition("@")
        user, _, password = (user_pw or "root").partition(":")
        host, _, port = hostport.partition(":")
        return Server(host or "127.0.0.1", int(port or 3306), user or "root", password)


def start_cluster(tmp: Path, etcd_server: EtcdProcess, pumps: list[PumpProcess], n: int, upstream: Path) -> PDProcess:
    """etcd, pd-server and `n` pumps (appended to `pumps` as each starts, so a failure stops the ones
    already up) reading the writer's txn-status store at `upstream`; the pd-server."""
    log(f"cluster in {tmp}: etcd, pd-server, {n} pumps")
    etcd_server.start()
    pd = PDProcess(tmp, etcd_server.url)
    pd.start()
    for i in range(n):
        extra = [*PUMP_ARGS, "--upstream.txn-status-dsn", f"sqlite:///{upstream}"]
        pump = PumpProcess(tmp, etcd_server.url, name=f"pump{i}", extra_args=extra)
        pump.start()
        pumps.append(pump)
    return pd


def dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, name)).st_size
    return total


def mysql_conn(m: Server, database: str | None = None) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password, database=database)


def upstream_counts(path: Path, tables: list[tuple[str, str]]) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        return {f"{d}.{t}": int(conn.execute(f'SELECT COUNT(*) FROM "{d}.{t}"').fetchone()[0]) for d, t in tables}
    finally:
        conn.close()


def downstream_counts(
    downstream: str, m: Server | None, sqlite_path: Path, tables: list[tuple[str, str]]
) -> dict[str, int]:
    if downstream == "sqlite":
        return upstream_counts(sqlite_path, tables)
    assert m is not None
    conn = mysql_conn(m)
    try:
        out = {}
        with conn.cursor() as cur:
            for d, t in tables:
                cur.execute(f"SELECT COUNT(*) FROM `{d}`.`{t}`")
                row = cur.fetchone()
                out[f"{d}.{t}"] = int(row[0]) if row else -1
        return out
    finally:
        conn.close()


# -------------------------------------------------------------------------------------------- backlog


@dataclass
class Backlog:
    tables: list[tuple[str, str]]
    payload_bytes: int = 0
    txns: int = 0
    seconds: float = 0.0
    parts: dict[str, Any] = field(default_factory=dict)


def run_workload(db: Database, name: str, options: WorkloadOptions, *, txns: int | None = None,
                 duration: float | None = None, threads: int = 1, seed: int = 1) -> dict[str, Any]:  # fmt: skip
    wl = make_workload(name, options)
    wl.setup(db)
    began = time.monotonic()
    result = run(db, wl, threads=threads, seed=seed, txns=txns, duration=duration)
    summary = result.summary()
    if result.crashed:
        raise RuntimeError(f"workload {name} crashed: {result.crashed[0]}")
    out = {
        "committed": summary.get("committed"),
        "failed": summary.get("failed"),
        "seconds": round(time.monotonic() - began, 1),
        **wl.describe(),
    }
    log(f"  {name} {options.database}: {out}")
    return out


def build_backlog(db: Database, args: argparse.Namespace, suffix: str, stored: Callable[[], int]) -> Backlog:
    big_db, small_db, sb_db = f"mem_big_{suffix}", f"mem_small_{suffix}", f"mem_sb_{suffix}"
    tables = [(big_db, "blobs"), (big_db, "batches"), (small_db, "blobs"), (small_db, "batches")]
    backlog = Backlog(tables)
    began = time.monotonic()
    txn_size = args.txn_mb * MiB
    if args.sysbench_seconds > 0:
        sb = WorkloadOptions(database=sb_db, tables=2, table_size=1000, rows_per_txn=10)
        backlog.parts["sysbench"] = run_workload(db, "sysbench", sb, duration=args.sysbench_seconds, threads=4)
        tables += [(sb_db, "sbtest1"), (sb_db, "sbtest2")]
    if args.small_row_txns > 0:
        small = WorkloadOptions(database=small_db, txn_size=txn_size, blob_size=args.small_row_bytes, keep_batches=1)
        backlog.parts["small_rows"] = run_workload(db, "bigtxn", small, txns=args.small_row_txns)
    big = WorkloadOptions(database=big_db, txn_size=txn_size, blob_size=MiB, keep_batches=0)
    backlog.parts["big_rows"] = run_workload(db, "bigtxn", big, txns=args.big_txns)
    extra = 0
    while stored() < args.backlog_mb * MiB:
        run_workload(db, "bigtxn", big, txns=1, seed=1000 + extra)
        extra += 1
    backlog.parts["big_rows_added"] = extra
    backlog.seconds = time.monotonic() - began
    return backlog


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--downstream", choices=("mysql", "sqlite"), default="mysql")
    p.add_argument("--mysql", default="root@127.0.0.1:3306", help="downstream MySQL DSN (user[:pass]@host:port)")
    p.add_argument("--pumps", type=int, default=3, help="as the playground")
    p.add_argument("--backlog-mb", type=int, default=1024, help="at least this many MiB stored by the pumps")
    p.add_argument("--txn-mb", type=int, default=64, help="size of each big transaction (MiB)")
    p.add_argument("--big-txns", type=int, default=10, help="transactions of 1 MiB rows")
    p.add_argument("--small-row-txns", type=int, default=4, help="transactions of small rows (insert/delete)")
    p.add_argument("--small-row-bytes", type=int, default=512)
    p.add_argument("--sysbench-seconds", type=float, default=20.0)
    p.add_argument("--interval", type=float, default=0.1, help="RSS sampling interval (s)")
    p.add_argument("--timeout", type=float, default=3600.0, help="give up on the catch-up after this many s")
    p.add_argument("--target-mb", type=int, default=DEFAULT_TARGET_MB)
    p.add_argument("--drainer-arg", action="append", default=[], help="extra drainer flag (repeatable)")
    p.add_argument("--keep", action="store_true", help="keep the temp dir")
    p.add_argument("--quick", action="store_true", help="a small smoke run (about 100 MiB, 16 MiB txns)")
    args = p.parse_args(argv)
    if args.quick:
        args.backlog_mb, args.txn_mb, args.big_txns, args.small_row_txns, args.sysbench_seconds = 96, 16, 3, 2, 3.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    install_sigterm()
    m = Server.parse(args.mysql) if args.downstream == "mysql" else None
    tmp = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    suffix = uuid.uuid4().hex[:8]
    etcd_server = EtcdProcess(tmp)
    pd: PDProcess | None = None
    pumps: list[PumpProcess] = []
    drainer: DrainerProcess | None = None
    db: Database | None = None
    tso: TSOClient | None = None
    etcd: EtcdClient | None = None
    backlog: Backlog | None = None
    cluster_id = 0
    upstream_path = tmp / "upstream.db"
    result: dict[str, Any] = {"bench": "memory", "env": env_info(), "downstream": args.downstream}
    ok = False
    try:
        pd = start_cluster(tmp, etcd_server, pumps, args.pumps, upstream_path)
        etcd = EtcdClient(etcd_server.url)
        cluster_id = read_cluster_id(etcd) or 0
        tso = TSOClient(etcd)

        def stored() -> int:
            return sum(dir_bytes(p.data_dir) for p in pumps)

        log(f"writing the backlog (drainer stopped): at least {args.backlog_mb} MiB, {args.txn_mb} MiB txns")
        pump_tracks = [Track(p.name, p.process.pid or 0) for p in pumps]
        write_sampler = Sampler(pump_tracks, 0.5)
        write_sampler.start()
        db = Database(etcd_server.url, f"sqlite:///{upstream_path}")
        backlog = build_backlog(db, args, suffix, stored)
        db.close()
        db = None
        write_sampler.stop()
        target_ts = tso.get_ts()
        backlog_bytes = stored()
        result["backlog"] = {
            "pump_storage_bytes": backlog_bytes,
            "pump_storage_mb": round(backlog_bytes / MiB, 1),
            "txn_mb": args.txn_mb,
            "write_seconds": round(backlog.seconds, 1),
            "workloads": backlog.parts,
        }
        result["pumps_while_writing"] = {t.name: {"peak_rss_mb": round(t.hwm_kb / 1024, 1)} for t in pump_tracks}
        log(f"backlog: {backlog_bytes / MiB:.0f} MiB in the pumps, written in {backlog.seconds:.0f}s")

        # ------------------------------------------------------------------------- catch-up
        drainer_args = [*DRAINER_ARGS]
        if m is not None:
            drainer_args += ["--syncer.db-type", "mysql", "--syncer.to.host", m.host, "--syncer.to.port",
                             str(m.port), "--syncer.to.user", m.user, "--syncer.to.password", m.password]  # fmt: skip
        else:
            drainer_args += ["--syncer.db-type", "sqlite"]
        drainer_args += args.drainer_arg
        drainer = DrainerProcess(tmp, etcd_server.url, name="drainer", extra_args=drainer_args)
        catch_tracks = [Track(p.name, p.process.pid or 0) for p in pumps]
        for t in catch_tracks:
            reset_peak(t.pid)
        began = time.monotonic()
        drainer.process.start()
        drainer_track = Track("drainer", drainer.process.pid or 0)
        sampler = Sampler([drainer_track, *catch_tracks], args.interval)
        sampler.start()
        last_report = [began]

        def caught_up() -> bool:
            if not drainer.process.alive:
                raise RuntimeError(f"drainer exited; log tail:\n{drainer.process.log_tail()}")
            try:
                ts = int(drainer.http_json("GET", "/commit_ts", timeout=2.0)["data"]["ts"])
            except (OSError, KeyError, ValueError):
                return False
            now = time.monotonic()
            if now - last_report[0] >= 10:
                last_report[0] = now
                rss = drainer_track.samples[-1] / 1024 if drainer_track.samples else 0
                lag = ((target_ts >> 18) - (ts >> 18)) / 1000
                log(f"  {now - began:.0f}s: checkpoint {lag:.0f}s of upstream time behind, drainer RSS {rss:.0f} MiB")
            return ts >= target_ts

        try:
            wait_for(caught_up, args.timeout, "the drainer's checkpoint to pass the last commit", interval=0.25)
        finally:
            sampler.stop()
        seconds = time.monotonic() - began
        result["catch_up"] = {
            "seconds": round(seconds, 1),
            "mb_per_s": round(backlog_bytes / MiB / seconds, 2),
            "note": "from the drainer's start to its saved checkpoint passing the last commit (saved every 3 s)",
        }
        result["rss"] = {t.name: t.summary() for t in (drainer_track, *catch_tracks)}
        peak = drainer_track.hwm_kb / 1024
        result["target"] = {"drainer_peak_rss_mb": round(peak, 1), "limit_mb": args.target_mb,
                            "met": peak <= args.target_mb}  # fmt: skip
        up = upstream_counts(upstream_path, backlog.tables)
        down = downstream_counts(args.downstream, m, drainer.data_dir / "downstream.db", backlog.tables)
        result["rows"] = {"upstream": up, "downstream": down, "equal": up == down}
        log(f"caught up in {seconds:.0f}s; drainer peak RSS {peak:.0f} MiB; rows equal: {up == down}")
        ok = up == down and peak <= args.target_mb
    finally:
        if drainer is not None:
            drainer.stop()
        if db is not None:
            db.close()
        if tso is not None:
            tso.close()
        if etcd is not None:
            etcd.close()
        for p in pumps:
            p.stop()
        if pd is not None:
            pd.stop()
        etcd_server.stop()
        if m is not None and backlog is not None:
            cleanup_mysql(m, {d for d, _ in backlog.tables}, cluster_id)
        if args.keep:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0 if ok else 1


def cleanup_mysql(m: Server, dbs: set[str], cluster_id: int) -> None:
    try:
        conn = mysql_conn(m)
    except pymysql.err.Error as exc:
        log(f"cannot drop the downstream databases: {exc}")
        return
    try:
        with conn.cursor() as cur:
            for name in sorted(dbs):
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cur.execute("SHOW DATABASES LIKE 'tidb_binlog'")
            if cur.fetchone():
                cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (cluster_id,))
        conn.commit()
    finally:
        conn.close()


if __name__ == "__main__":
    random.seed(1)
    sys.exit(main())
