"""Benchmark of the upstream writer: committed txn/s and commit latency with binlog on versus off.

A private etcd, pd-server and ``--pumps`` pumps (``sync-log = true``: every binlog is
fdatasync'd) run as processes in a temp dir.  The store is the MariaDB/MySQL at ``--mysql``
(default ``root@127.0.0.1:3306``) in a fresh database, dropped at the end, or with
``--store sqlite`` an sqlite file in the temp dir.

The workload is ``sysbench`` (``upstream.workloads.sysbench``): ``--tables`` tables of
``--table-size`` rows, ``--rows-per-txn`` operations per transaction (index update, non-index
update, delete, insert), rows of about 200 bytes.  Two ``Database`` objects share the store
and the tables: one with binlog (prewrite binlog to a pump in parallel with the storage
prewrite, asynchronous commit binlog), one without.  For each thread count in ``--threads``
(default 1 and 8: latency without and with CPU contention), each run measures both modes for
``--duration`` seconds, in alternating order; a warm-up of each comes first.

Commit latency is the time of ``Transaction.commit()`` of committed transactions (the reads
before it are the same with and without binlog).  Reported: per mode the medians over runs of
txn/s and of p50 / p99; ``ratio_txn_per_s`` = on / off; ``added_latency_p50_pct`` =
(p50 on / p50 off - 1) * 100 (the first round's target, below 20, reported as ``old_target_met``), same
for p99; ``cpu_ms_per_txn``: CPU time of the
writer process, the pumps and pd-server per committed transaction (where binlog's price goes on a
machine whose cores they share; a local MySQL server is not counted); the top-level values are those
of the largest thread count, ``target_met`` needs every count to pass.  The workload's invariant check
runs at the end.

``--breakdown`` adds three modes that split the added latency by where it comes from: ``binlog_null``
(binlog on, but the pump client is a stand-in that sends nothing: the txn-status row, the prewrite
thread hand-off and the commit-binlog encoding) and ``binlog_echo`` (the stand-in sends each binlog
over gRPC to a bare grpcio server that answers at once, ``_pumpbench.BaselineServer``: everything but
the pump itself).  ``binlog_on - binlog_echo`` is then the pump's own part, and the target:
``p50_on_vs_echo``, the median over runs of p50 on / p50 echo (the modes alternate within a run), at
most 1.15 at every thread count (``target_met``; null without ``--breakdown``).  A third stand-in mode,
``binlog_floor``, sends to ``_pumpbench.serve_durable`` instead (one server that replies only after an
fdatasync of the request bytes, with group commit, on the pump's ``grpc.aio`` stack, and nothing
else); ``p50_floor_vs_echo`` is the least ``p50_on_vs_echo`` a durable pump on grpcio could reach in
the same run.

One JSON object goes to stdout, progress to stderr; exit status 1 if a process died, a check failed
or a run committed nothing.

Usage: ``python bench/writer.py [--store mysql|sqlite] [--threads 1,8] [--duration S] [--runs N]
[--breakdown] [--quick]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pymysql
from _pumpbench import BaselineServer, TempDir, env_info, install_sigterm, log, median, write_call

from common.pb import binlog_pb2, gogo
from pump_client.payload import EncodedBinlog, encode_write_req
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from upstream.database import Database
from upstream.workloads import WorkloadOptions, runner
from upstream.workloads.sysbench import SysbenchWorkload

TARGET_ADDED_P50_PCT = 20.0
"""The first round's bar (binlog on vs off), reported but no longer the target: one gRPC call to a server
that does nothing already adds more than that on one 2-core machine shared by writer, store and pumps."""
TARGET_ON_VS_ECHO_P50 = 1.15
"""The bar: p50 commit latency with binlog on over the same workload sending to a do-nothing gRPC server
(`binlog_echo`), the median of the per-run ratios: the pump's own share."""
PUMP_ARGS = ["--storage.sync-log", "true", "--heartbeat-interval", "1"]
CPU_PARTS = ("writer", "pumps", "pd")


def _mysql_parts(text: str) -> tuple[str, int, str, str]:
    user_pw, _, hostport = text.rpartition("@")
    user, _, password = (user_pw or "root").partition(":")
    host, _, port = hostport.partition(":")
    return host or "127.0.0.1", int(port or 3306), user or "root", password


class MySQLDatabase:
    """A fresh database on the server (the txn-status table lives there); its tables in ``<name>_*``."""

    def __init__(self, server: str) -> None:
        self.host, self.port, self.user, self.password = _mysql_parts(server)
        self.name = f"bench_writer_{uuid.uuid4().hex[:8]}"
        self.prefix = self.name + "_"

    def _connect(self) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, autocommit=True, connect_timeout=5
        )

    @property
    def dsn(self) -> str:
        auth = self.user + (f":{self.password}" if self.password else "")
        return f"mysql://{auth}@{self.host}:{self.port}/{self.name}"

    def create(self) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{self.name}`")
        finally:
            conn.close()

    def drop(self) -> None:
        conn = self._connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW DATABASES")
                names = [r[0] for r in cur.fetchall() if r[0] == self.name or str(r[0]).startswith(self.prefix)]
                for n in names:
                    cur.execute(f"DROP DATABASE `{n}`")
        finally:
            conn.close()


class StandInClient:
    """A pump client for the breakdown modes: the calls ``upstream.Database`` makes, no pump behind them.

    With ``addr`` every binlog is one raw ``WriteBinlog`` call to the server there (the echo or the floor; commit
    binlogs on 4 background threads, as the real client's dispatcher); without, nothing is sent."""

    max_binlog_size = 1 << 30

    def __init__(self, addr: str | None) -> None:
        self._channel = None if addr is None else grpc.insecure_channel(addr)
        self._call = None if self._channel is None else write_call(self._channel)
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="stand-in-commit")

    def _send(self, parts: list[bytes]) -> None:
        request = encode_write_req(1, parts)
        if self._call is not None:
            self._call(request)

    def write_encoded_binlog(self, binlog: EncodedBinlog) -> None:
        self._send(binlog.take())

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        self._send([gogo.marshal_binlog(binlog)])

    def write_binlog_async(self, binlog: binlog_pb2.Binlog) -> Future[None]:
        return self._pool.submit(self.write_binlog, binlog)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._channel is not None:
            self._channel.close()


def _process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) a process has used, 0 when it cannot be read."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of the writer (this process) and of the pumps and pd-server, per measured run."""

    def __init__(self, pumps: list[PumpProcess], pd: PDProcess) -> None:
        self._pumps = pumps
        self._pd = pd

    def sample(self) -> dict[str, float]:
        t = os.times()
        return {
            "writer": t.user + t.system,
            "pumps": sum(_process_cpu(p.process.pid) for p in self._pumps),
            "pd": _process_cpu(self._pd.process.pid),
        }


def measure(
    db: Database, wl: SysbenchWorkload, threads: int, duration: float, *, seed: int, cpu: CpuMeter
) -> dict[str, Any]:
    before = cpu.sample()
    r = runner.run(db, wl, threads=threads, seed=seed, duration=duration)
    after = cpu.sample()
    s = r.summary()
    if r.crashed:
        raise RuntimeError(f"workload thread crashed: {r.crashed[0]}")
    n = max(s["committed"], 1)
    return {
        "txn_per_s": s["txn_per_s"],
        "committed": s["committed"],
        "failed": s["failed"],
        "retried": s["retried"],
        "p50_ms": s["commit_latency_ms"]["p50"],
        "p99_ms": s["commit_latency_ms"]["p99"],
        "cpu_ms_per_txn": {k: round((after[k] - before[k]) * 1000 / n, 3) for k in after},
        "errors": s["errors"],
    }


def mode_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "txn_per_s": round(median([r["txn_per_s"] for r in runs]), 1),
        "p50_ms": round(median([r["p50_ms"] for r in runs if r["p50_ms"] is not None]), 3),
        "p99_ms": round(median([r["p99_ms"] for r in runs if r["p99_ms"] is not None]), 3),
        "cpu_ms_per_txn": {
            k: round(median([r["cpu_ms_per_txn"][k] for r in runs]), 3) for k in runs[0]["cpu_ms_per_txn"]
        },
        "runs": runs,
    }


def run_config(
    args: argparse.Namespace,
    modes: dict[str, Database],
    wl: SysbenchWorkload,
    threads: int,
    *,
    errors: list[str],
    cpu: CpuMeter,
) -> dict[str, Any]:
    """``args.runs`` runs of each mode at ``threads`` threads, in alternating order; medians and ratios."""
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in modes}
    for run in range(args.runs):
        order = list(modes) if run % 2 == 0 else list(reversed(modes))
        for name in order:
            r = measure(modes[name], wl, threads, args.duration, seed=run + 1, cpu=cpu)
            if not r["committed"]:
                errors.append(f"{threads} threads, run {run + 1} {name}: nothing committed: {r['errors']}")
            results[name].append(r)
            c = r["cpu_ms_per_txn"]
            log(
                f"{threads} threads, run {run + 1}/{args.runs} {name}: {r['txn_per_s']:.0f} txn/s, "
                f"commit p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms, {r['failed']} failed, {r['retried']} retries; "
                f"CPU ms/txn writer {c['writer']} pumps {c['pumps']} pd {c['pd']}"
            )
    summaries = {name: mode_summary(runs) for name, runs in results.items()}
    on, off = summaries["binlog_on"], summaries["binlog_off"]
    added_p50 = (on["p50_ms"] / off["p50_ms"] - 1) * 100
    breakdown = {
        name: round((summaries[name]["p50_ms"] / off["p50_ms"] - 1) * 100, 1)
        for name in ("binlog_null", "binlog_echo", "binlog_floor", "binlog_on")
        if name in summaries
    }

    def vs_echo_of(name: str) -> float | None:
        if "binlog_echo" not in results:
            return None
        # the runs alternate, so each run's pair saw the same minute of the machine
        pairs = zip(results[name], results["binlog_echo"], strict=True)
        return round(median([a["p50_ms"] / b["p50_ms"] for a, b in pairs if a["p50_ms"] and b["p50_ms"]]), 3)

    vs_echo = vs_echo_of("binlog_on")
    return {
        "threads": threads,
        **summaries,
        **({"added_latency_p50_pct_by_mode": breakdown} if len(breakdown) > 1 else {}),
        "ratio_txn_per_s": round(on["txn_per_s"] / off["txn_per_s"], 3),
        "added_latency_p50_pct": round(added_p50, 1),
        "added_latency_p99_pct": round((on["p99_ms"] / off["p99_ms"] - 1) * 100, 1),
        "old_target_met": added_p50 < TARGET_ADDED_P50_PCT,
        "p50_on_vs_echo": vs_echo,
        "p50_floor_vs_echo": vs_echo_of("binlog_floor") if "binlog_floor" in results else None,
        "target_met": None if vs_echo is None else vs_echo <= TARGET_ON_VS_ECHO_P50,
    }


def _thread_counts(text: str) -> list[int]:
    counts = sorted({int(x) for x in text.split(",") if x.strip()})
    if not counts or counts[0] < 1:
        raise argparse.ArgumentTypeError("thread counts must be >= 1")
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--store", choices=("mysql", "sqlite"), default="mysql", help="default mysql")
    ap.add_argument("--mysql", default="root@127.0.0.1:3306", help="user[:password]@host:port of the server")
    ap.add_argument(
        "--threads", type=_thread_counts, default=[1, 8], help="writer threads, comma-separated (default 1,8)"
    )
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per measurement (default 10)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each mode; medians are reported (default 3)")
    ap.add_argument("--pumps", type=int, default=2, help="pumps (default 2)")
    ap.add_argument("--tables", type=int, default=4, help="sysbench tables (default 4)")
    ap.add_argument("--table-size", type=int, default=10_000, help="rows per table (default 10000)")
    ap.add_argument("--rows-per-txn", type=int, default=4, help="operations per transaction (default 4)")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="also measure binlog on with a pump client that sends nothing, one that sends to a bare grpcio server, "
        "and one that sends to the durable floor",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run of 2 s, small tables")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.runs, args.table_size = 2.0, 1, 1000
    install_sigterm()
    began = time.monotonic()
    tmp = TempDir(args.keep, "bench-writer-")
    base = Path(tmp.path)
    etcd = EtcdProcess(base)
    pd = PDProcess(base, etcd.url)
    pumps = [PumpProcess(base, etcd.url, name=f"pump{i}", extra_args=PUMP_ARGS) for i in range(args.pumps)]
    mysql = MySQLDatabase(args.mysql) if args.store == "mysql" else None
    echo = BaselineServer(base, "echo") if args.breakdown else None
    floor = BaselineServer(base, "durable-floor", durable_dir=base / "floor") if args.breakdown else None
    out: dict[str, Any] = {"bench": "writer", **env_info()}
    errors: list[str] = []
    dbs: list[Database] = []
    stand_ins: list[StandInClient] = []
    try:
        if echo is not None and floor is not None:
            echo.start()  # before this process makes any gRPC call (BaselineServer's docstring)
            floor.start()
        log(f"starting etcd, pd-server and {args.pumps} pumps under {base}")
        etcd.start()
        pd.start()
        for p in pumps:
            p.start()
        if mysql is not None:
            mysql.create()
            store, prefix = mysql.dsn, mysql.prefix
        else:
            store, prefix = f"sqlite:///{base / 'upstream.db'}", ""
        on = Database(etcd.url, store, binlog=True, mysql_db_prefix=prefix)
        dbs.append(on)
        off = Database(etcd.url, store, binlog=False, mysql_db_prefix=prefix)
        dbs.append(off)
        options = WorkloadOptions(tables=args.tables, table_size=args.table_size, rows_per_txn=args.rows_per_txn)
        wl = SysbenchWorkload(options)
        log(f"loading {args.tables} tables of {args.table_size} rows into {store}")
        wl.setup(on)
        modes = {"binlog_on": on, "binlog_off": off}
        if echo is not None and floor is not None:
            for name, addr in (("binlog_null", None), ("binlog_echo", echo.addr), ("binlog_floor", floor.addr)):
                stand_ins.append(StandInClient(addr))
                modes[name] = Database(etcd.url, store, binlog=True, mysql_db_prefix=prefix, client=stand_ins[-1])
                dbs.append(modes[name])
        cpu = CpuMeter(pumps, pd)
        for name, db in modes.items():
            w = measure(db, wl, max(args.threads), min(2.0, args.duration), seed=0, cpu=cpu)
            log(f"warm-up {name}: {w['txn_per_s']:.0f} txn/s")
        configs = [run_config(args, modes, wl, threads, errors=errors, cpu=cpu) for threads in args.threads]
        problems = wl.check(on)
        errors += problems
        baseline_procs = [b.process for b in (echo, floor) if b is not None]
        dead = [p.name for p in (etcd.process, pd.process, *(p.process for p in pumps), *baseline_procs) if not p.alive]
        if dead:
            errors.append(f"processes died: {dead}")
        loaded = configs[-1]
        out.update(
            {
                "store": "mysql" if mysql is not None else "sqlite",
                "duration_s": args.duration,
                "runs": args.runs,
                "pumps": args.pumps,
                "pump_args": PUMP_ARGS,
                "tables": args.tables,
                "table_size": args.table_size,
                "rows_per_txn": args.rows_per_txn,
                "row_size": wl.layout.row_size,
                "configurations": configs,
                "threads": loaded["threads"],
                "ratio_txn_per_s": loaded["ratio_txn_per_s"],
                "added_latency_p50_pct": loaded["added_latency_p50_pct"],
                "added_latency_p99_pct": loaded["added_latency_p99_pct"],
                "old_target_added_latency_p50_pct": TARGET_ADDED_P50_PCT,
                "p50_on_vs_echo": loaded["p50_on_vs_echo"],
                "target_p50_on_vs_echo": TARGET_ON_VS_ECHO_P50,
                "target_met": (None if args.breakdown is False else all(bool(c["target_met"]) for c in configs)),
                "check": problems,
            }
        )
    except KeyboardInterrupt:
        log("interrupted: stopping processes")
        return 130
    finally:
        for db in dbs:
            with contextlib.suppress(Exception):
                db.close()
        for client in stand_ins:
            with contextlib.suppress(Exception):
                client.close()
        baselines = [b.stop for b in (echo, floor) if b is not None]
        for stop in (*(p.stop for p in pumps), pd.stop, etcd.stop, *baselines):
            with contextlib.suppress(Exception):
                stop()
        if mysql is not None:
            with contextlib.suppress(Exception):
                mysql.drop()
        tmp.cleanup()
    out["errors"] = errors[:20]
    out["ok"] = not errors
    out["total_s"] = round(time.monotonic() - began, 1)
    for c in out.get("configurations", []):
        by_mode = c.get("added_latency_p50_pct_by_mode")
        bar = (
            "run with --breakdown for the target"
            if c["p50_on_vs_echo"] is None
            else f"{'MET' if c['target_met'] else 'NOT met'}: p50 on / echo {c['p50_on_vs_echo']} "
            f"(target <= {TARGET_ON_VS_ECHO_P50}; the durable floor's {c['p50_floor_vs_echo']})"
        )
        log(
            f"{c['threads']} threads: binlog adds {c['added_latency_p50_pct']}% to p50 commit latency; {bar}; "
            f"txn/s ratio on/off {c['ratio_txn_per_s']}" + (f"; added p50 % by mode {by_mode}" if by_mode else "")
        )
    print(json.dumps(out, indent=2))
    if errors:
        log(f"FAILED: {errors[:3]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
