"""Benchmark of `binlog-spark replay`: rows/s of read-decode-compact at local[1] vs local[2], a full
replay into MariaDB, and the drainer's pipeline replaying the same history into MariaDB.

History (generated before any clock starts, written straight into two pump data directories through
the pump's own value log, `pump.storage.vlog.ValueLog`, 64 MiB files, no fsync: a pump process adds
nothing to what is measured and would take minutes to ingest a million rows over gRPC): one
sysbench-shaped table `sbtest(id BIGINT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))`, transactions
of `--rows-per-txn` (10) row changes encoded as TiDB does (`upstream.mutation.MutationLog`) and sent
to the two pumps in turn: inserts of ids 1..K, then updates of random live ids mixed with deletes
and re-inserts, `--changes` (1,000,000) row changes in all.  The DDL history (create database,
create table) goes to a JSON export, as `binlog-spark export-ddl` writes it.

Measured:

* `read_decode_compact`: stages 1-3 of replay (index pass, decode pass, compaction, materialized)
  on a fresh SparkSession per master, `local[1]` then `local[2]`, `--runs` (3) runs each; medians of
  row changes/s; `speedup` = local[2] / local[1] (target >= 1.5).
* `replay`: the whole `replay` into an empty MariaDB database (`local[2]`): stages 1-5, rows/s =
  row changes / seconds.
* `drainer`: what the drainer does with the same history, in one process: every binlog read back
  from the pump directories in commit_ts order, translated (`drainer.translator.translate`), applied
  by the drainer's loader (`MySQLSink`, its default workers and batch, normal mode) into another
  empty database; timed from the first read to the last flush (the pull over gRPC is not included,
  which favours the drainer).  `replay_vs_drainer` = replay rows/s / drainer rows/s (target > 1).

* `network`: read-decode-compact at `local[2]` reading the same history from live pumps over gRPC
  (`--from-pump-addrs`: etcd, pd-server and two pump processes started on the two data directories,
  which index the value logs once at start, before any clock) against reading the value-log files,
  runs alternating file / network; `ratio` = median of the per-pair ratios network / file (target
  >= 0.5).
* `standalone`: read-decode-compact from the files on a real standalone cluster (a master and two
  workers of one core each, `tools.sparkcluster`) against `local[2]`, alternating; `ratio` = median
  of the per-pair ratios standalone / local[2].

Both results are checked against the generator's model (row count and SUM(k)).  One JSON object on
stdout, progress on stderr, exit status 1 if a check failed.

Usage: `python bench/spark_replay.py [--changes N] [--runs N] [--mysql root@127.0.0.1:3306] [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from _pumpbench import env_info, install_sigterm, log, median

from common.pb import binlog_pb2
from common.schema.infoschema import InfoSchema
from common.schema.model import Job
from pump.storage.vlog import ValueLog
from spark_jobs.readers.ddl import write_export
from upstream.ddl import Column, Planner
from upstream.mutation import MutationLog
from upstream.workloads.gen import sysbench_text

TARGET_SPEEDUP = 1.5
TARGET_NETWORK = 0.5
PUMP_ARGS = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
BENCH_CONF = {"spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g"}
VLOG_FILE_SIZE = 64 << 20
COLUMNS = [
    Column("id", "BIGINT"),
    Column("k", "INT", nullable=False, default=0),
    Column("c", "CHAR(120)", nullable=False, default=""),
    Column("pad", "CHAR(60)", nullable=False, default=""),
]


@dataclass
class History:
    db: str
    jobs: list[Job]
    pumps: list[str]
    ddl_file: str
    changes: int = 0
    txns: int = 0
    bytes: int = 0
    live: dict[int, int] = field(default_factory=dict)
    """id -> k of the rows alive at the end (the model both results are checked against)."""

    def expected(self) -> tuple[int, int]:
        return len(self.live), sum(self.live.values())


def _jobs(db: str) -> tuple[list[Job], InfoSchema]:
    schema = InfoSchema()
    next_id = [1000]

    def alloc(n: int) -> int:
        first = next_id[0]
        next_id[0] += n
        return first

    plans: list[Callable[[Planner], Job]] = [
        lambda p: p.create_database(db),
        lambda p: p.create_table(db, "sbtest", COLUMNS, primary_key=["id"]),
    ]
    jobs = []
    for plan in plans:
        job = plan(Planner(schema, alloc, 1))
        schema.apply(job)
        jobs.append(job)
    return jobs, schema


def generate(base: Path, changes: int, rows_per_txn: int, seed: int) -> History:
    """Write the history into two pump data directories (see the module doc)."""
    rng = random.Random(seed)
    db = f"sparkbench_{uuid.uuid4().hex[:8]}"
    jobs, schema = _jobs(db)
    table = schema.table(db, "sbtest")
    version = schema.version
    pumps = [base / "pump0", base / "pump1"]
    logs = [ValueLog(p / "value", file_size=VLOG_FILE_SIZE, sync=False) for p in pumps]
    h = History(db, jobs, [str(p) for p in pumps], str(base / "ddl.json"))
    write_export(jobs, h.ddl_file)
    keys = max(1, changes // 4)
    ts = ((int(time.time() * 1000) - 3_600_000) << 18) + 1
    live = h.live
    dead: list[int] = []
    next_id = 1

    def row(i: int) -> dict[str, Any]:
        return {"id": i, "k": rng.randint(0, 1 << 20), "c": sysbench_text(rng, 120), "pad": sysbench_text(rng, 60)}

    try:
        while h.changes < changes:
            m = MutationLog()
            n = min(rows_per_txn, changes - h.changes)
            touched: set[int] = set()
            for _ in range(n):
                if next_id <= keys:
                    r = row(next_id)
                    m.insert(table, next_id, r)
                    live[next_id] = r["k"]
                    touched.add(next_id)
                    next_id += 1
                    continue
                pick = rng.random()
                if pick < 0.1 and dead:
                    i = dead.pop(rng.randrange(len(dead)))
                    r = row(i)
                    m.insert(table, i, r)
                    live[i] = r["k"]
                else:
                    i = rng.randrange(1, keys + 1)
                    while i not in live or i in touched:
                        i = rng.randrange(1, keys + 1)
                    old = {"id": i, "k": live[i], "c": "", "pad": ""}
                    if pick < 0.25:
                        m.delete(table, i, old)
                        del live[i]
                        dead.append(i)
                    else:
                        r = row(i)
                        m.update(table, i, old, r)
                        live[i] = r["k"]
                touched.add(i)
            pv = m.prewrite_value(version).SerializeToString()
            start, commit = ts, ts + 1
            ts += 2
            p = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start, prewrite_key=b"k", prewrite_value=pv)
            c = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start, commit_ts=commit, prewrite_key=b"k")
            vlog = logs[h.txns % 2]
            payloads = [p.SerializeToString(), c.SerializeToString()]
            vlog.append(payloads, commit)
            h.bytes += sum(len(x) + 16 for x in payloads)
            h.changes += n
            h.txns += 1
    finally:
        for v in logs:
            v.close()
    return h


# ------------------------------------------------------------------------------------------ MySQL
def _server(text: str) -> dict[str, Any]:
    cred, _, hostport = text.rpartition("@")
    user, _, password = cred.partition(":")
    host, _, port = hostport.partition(":")
    return {"host": host or "127.0.0.1", "port": int(port or 3306), "user": user or "root", "password": password}


def _query(server: dict[str, Any], sql: str) -> Any:
    conn = pymysql.connect(**server, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


def _check(server: dict[str, Any], physical_db: str, h: History) -> str | None:
    rows = _query(server, f"SELECT COUNT(*), COALESCE(SUM(k), 0) FROM `{physical_db}`.`sbtest`")
    got = tuple(int(x) for x in rows[0])
    want = h.expected()
    return None if got == want else f"{physical_db}.sbtest has (rows, sum k) {got}, expected {want}"


# ------------------------------------------------------------------------------------------ runs
def measure_rdc(h: History, master: str, runs: int, split: int) -> list[float]:
    from spark_jobs.replay.job import ReplayOptions
    from spark_jobs.session import make_session

    spark = make_session(master, app_name="spark-replay-bench", log_level="ERROR", conf=BENCH_CONF)
    try:
        opts = ReplayOptions(None, pump_dirs=tuple(h.pumps), split_size=split)
        return [_rdc_once(spark, h, opts, f"{master} run {i + 1}") for i in range(runs)]
    finally:
        spark.stop()


def _rdc_once(spark: Any, h: History, opts: Any, what: str) -> float:
    """One read-decode-compact; row changes/s, checked against the history."""
    from spark_jobs.replay.job import read_decode_compact

    t0 = time.perf_counter()
    d = read_decode_compact(spark, opts, h.jobs)
    secs = time.perf_counter() - t0
    d.final.unpersist()
    if d.changes != h.changes:
        raise RuntimeError(f"{what}: decoded {d.changes} row changes, generated {h.changes}")
    log(f"read-decode-compact {what}: {secs:.1f} s, {h.changes / secs:,.0f} row changes/s")
    return h.changes / secs


def _pairs(a: list[float], b: list[float]) -> dict[str, Any]:
    ratios = [y / x for x, y in zip(a, b, strict=True)]
    return {"ratio": round(median(ratios), 3), "pair_ratios": [round(r, 3) for r in ratios]}


class LivePumps:
    """etcd, pd-server and one pump process per data directory of the history (they serve it over gRPC)."""

    def __init__(self, h: History, base: Path) -> None:
        from tools.localcluster import EtcdProcess, PDProcess, PumpProcess

        self.etcd = EtcdProcess(base)
        self.pd = PDProcess(base, self.etcd.url)
        self.pumps = [PumpProcess(base, self.etcd.url, name=Path(d).name, extra_args=PUMP_ARGS) for d in h.pumps]
        for d, p in zip(h.pumps, self.pumps, strict=True):
            if Path(d) != p.data_dir:
                raise RuntimeError(f"pump data dir {p.data_dir} is not the history's {d}")

    def start(self) -> None:
        self.etcd.start()
        self.pd.start()
        for p in self.pumps:
            p.start(timeout=600)  # a pump indexes the value logs it finds before it is online

    def stop(self) -> None:
        for p in self.pumps:
            p.stop()
        self.pd.stop()
        self.etcd.stop()


def measure_network(h: History, live: LivePumps, runs: int, split: int) -> dict[str, Any]:
    """File read vs network read on one local[2] session, alternating."""
    from spark_jobs.readers.pump_net import live_windows
    from spark_jobs.replay.job import ReplayOptions
    from spark_jobs.session import make_session

    windows, stop_ts = live_windows(
        addrs=[p.addr for p in live.pumps], pd_urls=live.etcd.url, cluster_id=None, start_ts=None, stop_ts=None
    )
    files = ReplayOptions(None, pump_dirs=tuple(h.pumps), split_size=split, stop_ts=stop_ts)
    net = ReplayOptions(None, pump_windows=tuple(windows), stop_ts=stop_ts)
    spark = make_session("local[2]", app_name="spark-replay-bench", log_level="ERROR", conf=BENCH_CONF)
    a: list[float] = []
    b: list[float] = []
    try:
        for i in range(runs):
            a.append(_rdc_once(spark, h, files, f"files run {i + 1}"))
            b.append(_rdc_once(spark, h, net, f"network run {i + 1} ({len(windows)} windows)"))
    finally:
        spark.stop()
    return {
        "files_rows_per_s": round(median(a)),
        "network_rows_per_s": round(median(b)),
        **_pairs(a, b),
        "target_ratio": TARGET_NETWORK,
        "windows": len(windows),
    }


def measure_standalone(h: History, base: Path, runs: int, split: int) -> dict[str, Any]:
    """The files read on local[2] vs a master and two one-core workers, alternating (one session at a time)."""
    from spark_jobs.replay.job import ReplayOptions
    from spark_jobs.session import make_session
    from tools.sparkcluster import StandaloneCluster

    opts = ReplayOptions(None, pump_dirs=tuple(h.pumps), split_size=split)
    a: list[float] = []
    b: list[float] = []
    with StandaloneCluster(base / "spark-cluster") as cluster:
        conf = {**BENCH_CONF, **cluster.driver_conf()}
        for i in range(runs):
            for master, out in (("local[2]", a), (cluster.master_url, b)):
                spark = make_session(master, app_name="spark-replay-bench", log_level="ERROR", conf=conf)
                try:
                    out.append(_rdc_once(spark, h, opts, f"{master} run {i + 1}"))
                finally:
                    spark.stop()
    return {"local[2]_rows_per_s": round(median(a)), "standalone_rows_per_s": round(median(b)), **_pairs(a, b)}


def measure_replay(h: History, server: dict[str, Any], split: int, errors: list[str]) -> dict[str, Any]:
    from spark_jobs.replay.job import ReplayOptions, run_replay
    from spark_jobs.replay.target import MySQLTarget
    from spark_jobs.session import make_session

    prefix = "r_"
    target = MySQLTarget(server["host"], server["port"], server["user"], server["password"], prefix)
    spark = make_session("local[2]", app_name="spark-replay-bench", log_level="ERROR", conf=BENCH_CONF)
    try:
        t0 = time.perf_counter()
        summary = run_replay(spark, ReplayOptions(target, pump_dirs=tuple(h.pumps), split_size=split), h.jobs, out=log)
        secs = time.perf_counter() - t0
    finally:
        spark.stop()
    bad = _check(server, prefix + h.db, h)
    if bad:
        errors.append(f"replay: {bad}")
    return {
        "seconds": round(secs, 2),
        "rows_per_s": round(h.changes / secs),
        "stages": {s.name: round(s.seconds, 2) for s in summary.stages},
        "rows_written": summary.written,
        "rows_deleted": summary.deleted,
    }


def _read_history(h: History) -> list[binlog_pb2.Binlog]:
    """Every committed DML transaction as the drainer receives it: the commit with its prewrite's value."""
    from common.vlog_record import ValuePointer

    prewrites: dict[int, bytes] = {}
    commits: list[tuple[int, int]] = []
    for d in h.pumps:
        v = ValueLog(Path(d) / "value", file_size=VLOG_FILE_SIZE, sync=False)
        try:
            for _, payload in v.scan(ValuePointer(0, 0)):
                b = binlog_pb2.Binlog.FromString(payload)
                if b.tp == binlog_pb2.Prewrite:
                    prewrites[b.start_ts] = b.prewrite_value
                elif b.tp == binlog_pb2.Commit:
                    commits.append((b.commit_ts, b.start_ts))
        finally:
            v.close()
    commits.sort()
    return [
        binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=s, commit_ts=c, prewrite_value=prewrites.pop(s))
        for c, s in commits
    ]


def measure_drainer(h: History, server: dict[str, Any], errors: list[str]) -> dict[str, Any]:
    from common.events import Txn
    from common.sql.values import mysql_decl
    from drainer.schema import DrainerSchema, MemoryJobSource
    from drainer.sinks.mysql import MySQLSink
    from drainer.translator import translate

    table = h.jobs[-1].table
    assert table is not None
    _query(server, f"CREATE DATABASE `{h.db}`")
    cols = ", ".join([mysql_decl(c) for c in table.columns] + ["PRIMARY KEY (`id`)"])
    _query(server, f"CREATE TABLE `{h.db}`.`sbtest` ({cols}) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")
    schema = DrainerSchema(MemoryJobSource(h.jobs))
    schema.load(h.jobs[-1].schema_version)
    sink = MySQLSink(**server)
    done: list[int] = []
    sink.start(done.append)
    translate_s = 0.0
    try:
        t0 = time.perf_counter()
        binlogs = _read_history(h)
        read_s = time.perf_counter() - t0
        for b in binlogs:
            t1 = time.perf_counter()
            _, dmls = translate(b, schema)
            translate_s += time.perf_counter() - t1
            sink.add(Txn(commit_ts=b.commit_ts, dmls=dmls, size=len(b.prewrite_value)))
        sink.flush(3600)
        secs = time.perf_counter() - t0
    finally:
        sink.close()
    bad = _check(server, h.db, h)
    if bad:
        errors.append(f"drainer: {bad}")
    log(f"drainer pipeline: {secs:.1f} s (read {read_s:.1f} s, translate {translate_s:.1f} s)")
    return {
        "seconds": round(secs, 2),
        "rows_per_s": round(h.changes / secs),
        "read_seconds": round(read_s, 2),
        "translate_seconds": round(translate_s, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--mysql", default="root@127.0.0.1:3306", help="user[:password]@host:port of MariaDB")
    ap.add_argument("--changes", type=int, default=1_000_000, help="row changes in the history (default 1000000)")
    ap.add_argument("--rows-per-txn", type=int, default=10, help="row changes per transaction (default 10)")
    ap.add_argument("--runs", type=int, default=3, help="read-decode-compact runs per master (default 3)")
    ap.add_argument("--split-size", type=int, default=64 << 20, help="bytes per read task (default 64 MiB)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", help="where to write the history (default: a temp dir, deleted at the end)")
    ap.add_argument("--skip-drainer", action="store_true", help="do not run the drainer baseline")
    ap.add_argument("--skip-network", action="store_true", help="do not run the network-read comparison")
    ap.add_argument("--skip-standalone", action="store_true", help="do not run the standalone-cluster comparison")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20000 row changes, 1 run, 1 MiB splits")
    args = ap.parse_args()
    if args.quick:
        args.changes, args.runs, args.split_size = 20_000, 1, 1 << 20
    install_sigterm()
    server = _server(args.mysql)
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="spark-replay-bench-"))
    errors: list[str] = []
    h: History | None = None
    try:
        t0 = time.perf_counter()
        h = generate(base, args.changes, args.rows_per_txn, args.seed)
        gen_s = time.perf_counter() - t0
        log(f"history: {h.changes:,} row changes in {h.txns:,} txns, {h.bytes / 2**20:.0f} MiB of vlog ({gen_s:.0f} s)")
        rdc = {m: measure_rdc(h, m, args.runs, args.split_size) for m in ("local[1]", "local[2]")}
        one, two = median(rdc["local[1]"]), median(rdc["local[2]"])
        replay = measure_replay(h, server, args.split_size, errors)
        drainer = None if args.skip_drainer else measure_drainer(h, server, errors)
        standalone = None if args.skip_standalone else measure_standalone(h, base, args.runs, args.split_size)
        network = None
        if not args.skip_network:
            live = LivePumps(h, base)
            try:
                t1 = time.perf_counter()
                live.start()
                log(f"pumps online on the history: {time.perf_counter() - t1:.0f} s")
                network = measure_network(h, live, args.runs, args.split_size)
            finally:
                live.stop()
    finally:
        if h is not None:
            for name in (h.db, "r_" + h.db):
                try:
                    _query(server, f"DROP DATABASE IF EXISTS `{name}`")
                except pymysql.MySQLError as exc:
                    log(f"cannot drop {name}: {exc}")
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    speedup = two / one
    vs_drainer = replay["rows_per_s"] / drainer["rows_per_s"] if drainer else None
    out = {
        "bench": "spark_replay",
        "row_changes": h.changes,
        "txns": h.txns,
        "rows_per_txn": args.rows_per_txn,
        "final_rows": len(h.live),
        "vlog_mib": round(h.bytes / 2**20, 1),
        "split_size": args.split_size,
        "generate_seconds": round(gen_s, 1),
        "read_decode_compact": {
            "local[1]": {"rows_per_s": round(one), "runs": [round(x) for x in rdc["local[1]"]]},
            "local[2]": {"rows_per_s": round(two), "runs": [round(x) for x in rdc["local[2]"]]},
            "speedup": round(speedup, 3),
            "target_speedup": TARGET_SPEEDUP,
        },
        "replay": replay,
        "drainer": drainer,
        "replay_vs_drainer": None if vs_drainer is None else round(vs_drainer, 2),
        "network_vs_files": network,
        "standalone_vs_local2": standalone,
        "target_met": speedup >= TARGET_SPEEDUP
        and (vs_drainer is None or vs_drainer > 1)
        and (network is None or network["ratio"] >= TARGET_NETWORK),
        "errors": errors,
        "env": {**env_info(), "cpus_used": os.cpu_count()},
    }
    print(json.dumps(out, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
