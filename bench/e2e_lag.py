"""Benchmark of end-to-end lag: upstream commit -> row visible downstream, with one of three pumps idle.

A private etcd, pd-server, three pumps and a drainer run as processes in a temp dir; the drainer
replicates into the MariaDB/MySQL at ``--mysql`` (default ``root@127.0.0.1:3306``, a fresh
database dropped at the end) or, with ``--downstream sqlite``, into its sqlite file.  The writer is
``upstream.Database`` on an sqlite store in this process.  Its pump client sends every binlog of a
transaction to one of the first two pumps (chosen by start_ts, so a commit follows its prewrite)
and never writes to the third: that pump is idle, and the drainer's merge can emit a binlog only
once the idle pump has sent something newer (a fake binlog).  The drainer runs with its defaults
(16 workers, txn-batch 20) except ``safe-mode-duration = 0s`` (the steady state, not the first 5
minutes after a start) and ``detect-interval = 1``.

Each transaction inserts one row with a unique id into ``lag_<random>.t``.  The writer notes
``time.monotonic()`` when ``commit()`` returns (the commit binlog is still on its way, as in TiDB);
a poller thread queries the downstream every ``--poll-interval`` seconds (autocommit, so each poll
sees what is committed) and notes, for each new id, when the poll that first returned it ended.
Lag = that time - commit time: an upper bound, at most one poll period (reported as
``poll_period_ms``) above the true value.

Two loads, each run ``--runs`` times for ``--duration`` seconds after a warm-up:

* ``moderate``: one writer thread paced at ``--rate`` txn/s (default 50);
* ``max``: ``--max-threads`` writer threads (default 4) as fast as they go.

Every id committed in a measured window must become visible (60 s grace), else the run fails.
Reported per mode and load: medians over runs of txn/s and of lag p50 / p99 / max (ms).
``--modes`` compares pump settings in the same run, each on a fresh cluster, runs interleaved:
``default`` (the pump's defaults) and ``original`` (``--gen-binlog-pull-interval 0``: fake binlogs
only after ``gen-binlog-interval`` = 3 s without writes, as the Go pump).  Target: moderate-rate
p99 <= 1500 ms in the ``default`` mode.  One JSON object goes to stdout, progress to stderr; exit
status 1 if a check failed.

``--breakdown`` splits each max-load transaction's lag into its parts: commit() returned -> its commit
binlog's RPC began (``client_queue``) -> the pump acked it (``commit_rpc``) -> it arrived on a
PullBinlogs stream of the bench's own from that pump (``pump_release``: what the pump held back) ->
its row was visible (``drainer``: the drainer's pull, its merge with the idle pump, apply, poll).  It
reports p50 / p99 of each part, their means over the slowest 1%, and ``hold_ms``: how long each
transaction held its pump's output (its prewrite RPC began -> its commit binlog's RPC began).

Usage: ``python bench/e2e_lag.py [--downstream mysql|sqlite] [--rate 50] [--duration S] [--runs N]
[--modes default,original] [--breakdown] [--quick]``.
"""

from __future__ import annotations

import os

# gRPC's fork handlers can deadlock a process that forks while gRPC shuts down in a thread (seen here
# when the second cluster's pumps were started); the children exec at once and need none.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import argparse
import contextlib
import json
import math
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import pymysql
from _pumpbench import TempDir, env_info, install_sigterm, log, median

from common.etcd import EtcdClient
from common.pb import binlog_pb2, pump_pb2, pump_pb2_grpc
from common.pd_client import TSOClient, read_cluster_id
from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess
from tools.procs import ProcessError, wait_for
from upstream.database import Database
from upstream.ddl import Column

TARGET_P99_MS = 1500.0
PUMPS = 3
ACTIVE_PUMPS = 2
PUMP_ARGS = ["--heartbeat-interval", "1"]
MODES: dict[str, list[str]] = {"default": [], "original": ["--gen-binlog-pull-interval", "0"]}
DRAINER_ARGS = ["--detect-interval", "1", "--syncer.safe-mode-duration", "0s"]
TABLE = "t"
CATCH_UP_TIMEOUT = 60.0
WRITE_TIMEOUT = 30.0
START_ATTEMPTS = 3
LAG_PARTS = ("client_queue", "commit_rpc", "pump_release", "drainer")
"""The parts of a transaction's lag that `--breakdown` reports, in order (see `breakdown`)."""


# ------------------------------------------------------------------------------------ pump client


class ActivePumpsClient:
    """The writer's pump client: each transaction's binlogs go to one of `pumps` (by start_ts), never
    elsewhere.  Commit binlogs are sent in the background, as `PumpsClient.write_binlog_async`."""

    def __init__(self, pumps: Sequence[PumpProcess], cluster_id: int) -> None:
        self.cluster_id = cluster_id
        self._channels = [grpc.insecure_channel(p.addr) for p in pumps]
        self._stubs = [pump_pb2_grpc.PumpStub(c) for c in self._channels]
        self._async = ThreadPoolExecutor(8, thread_name_prefix="commit-binlog")
        self.async_errors: list[str] = []
        self.writes = [0] * len(pumps)
        self.commits: dict[int, tuple[int, float, float]] = {}
        """start_ts -> (commit_ts, monotonic time the commit binlog's RPC began, time the pump acked it)."""
        self.prewrites: dict[int, float] = {}
        """start_ts -> monotonic time the prewrite binlog's RPC began."""

    def _pump_of(self, start_ts: int) -> int:
        return ((start_ts * 0x9E3779B97F4A7C15) >> 40) % len(self._stubs)

    def write_binlog(self, b: binlog_pb2.Binlog) -> None:
        i = self._pump_of(b.start_ts)
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=b.SerializeToString())
        began = time.monotonic()
        resp = self._stubs[i].WriteBinlog(req, timeout=WRITE_TIMEOUT, wait_for_ready=True)
        if resp.errmsg:
            raise RuntimeError(resp.errmsg)
        if b.tp == binlog_pb2.Commit:
            self.commits[b.start_ts] = (b.commit_ts, began, time.monotonic())
        elif b.tp == binlog_pb2.Prewrite:
            self.prewrites[b.start_ts] = began
        self.writes[i] += 1

    def write_binlog_async(self, b: binlog_pb2.Binlog) -> Future[None]:
        fut = self._async.submit(self.write_binlog, b)
        fut.add_done_callback(self._check)
        return fut

    def _check(self, fut: Future[None]) -> None:
        exc = fut.exception()
        if exc is not None:
            self.async_errors.append(repr(exc))

    def close(self) -> None:
        self._async.shutdown(wait=True)
        for c in self._channels:
            c.close()


class StreamWatch:
    """`--breakdown`: a PullBinlogs stream of its own from each active pump (as a second drainer would
    pull), noting when each commit_ts first arrives: the time the pump released the binlog."""

    def __init__(self, pumps: Sequence[PumpProcess], cluster_id: int, start_ts: int) -> None:
        self.arrived: dict[int, float] = {}
        self.errors: list[str] = []
        self._calls: list[Any] = []
        self._channels = [grpc.insecure_channel(p.addr) for p in pumps]
        self._threads = [
            threading.Thread(target=self._run, args=(c, cluster_id, start_ts), name="stream-watch", daemon=True)
            for c in self._channels
        ]
        for t in self._threads:
            t.start()

    def _run(self, channel: grpc.Channel, cluster_id: int, start_ts: int) -> None:
        req = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=start_ts))
        call = pump_pb2_grpc.PumpStub(channel).PullBinlogs(req)
        self._calls.append(call)
        arrived = self.arrived
        try:
            for resp in call:
                now = time.monotonic()
                ts = binlog_pb2.Binlog.FromString(resp.entity.payload).commit_ts
                arrived.setdefault(ts, now)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                self.errors.append(f"{exc.code().name}: {exc.details()}")

    def close(self) -> None:
        for call in self._calls:
            call.cancel()
        for t in self._threads:
            t.join(5)
        for c in self._channels:
            c.close()


def breakdown(
    ids: list[int], writer: Writer, client: ActivePumpsClient, watch: StreamWatch, seen: dict[int, float]
) -> dict[str, Any]:
    """Per transaction, where its lag went (ms): `client_queue` commit() returned -> the commit binlog's
    RPC began; `commit_rpc` -> the pump acked it; `pump_release` -> it arrived on an independent pull
    stream; `drainer` -> the row was visible downstream (the drainer's pull, merge, apply, and the
    poll).  p50 / p99 of each part, and each part's mean over the transactions at or above the lag's
    p99 (what holds the slowest ones back)."""
    parts: dict[str, list[float]] = {k: [] for k in LAG_PARTS}
    rows: list[tuple[float, tuple[float, ...]]] = []
    for i in ids:
        start_ts = writer.start_ts.get(i)
        c = client.commits.get(start_ts) if start_ts is not None else None
        if c is None or i not in seen:
            continue
        commit_ts, began, acked = c
        pulled = watch.arrived.get(commit_ts)
        if pulled is None:
            continue
        done = writer.committed[i]
        p = ((began - done) * 1000, (acked - began) * 1000, (pulled - acked) * 1000, (seen[i] - pulled) * 1000)
        for k, v in zip(parts, p, strict=True):
            parts[k].append(v)
        rows.append(((seen[i] - done) * 1000, p))
    if not rows:
        return {"txns": 0}
    # how long each transaction held its pump's watermark: prewrite sent -> commit binlog sent
    holds = [(c[1] - client.prewrites[st]) * 1000 for st, c in client.commits.items() if st in client.prewrites]
    cut = percentile([lag for lag, _ in rows], 0.99)
    slow = [p for lag, p in rows if lag >= cut]
    return {
        "txns": len(rows),
        **{k: {"p50": round(percentile(v, 0.5), 1), "p99": round(percentile(v, 0.99), 1)} for k, v in parts.items()},
        "slowest_1pct_mean_ms": {k: round(sum(p[n] for p in slow) / len(slow), 1) for n, k in enumerate(parts)},
        "hold_ms": {
            "p50": round(percentile(holds, 0.5), 1),
            "p99": round(percentile(holds, 0.99), 1),
            "max": round(max(holds), 1),
        }
        if holds
        else None,
    }


# --------------------------------------------------------------------------------------- downstream


def _mysql_parts(text: str) -> dict[str, Any]:
    user_pw, _, hostport = text.rpartition("@")
    user, _, password = (user_pw or "root").partition(":")
    host, _, port = hostport.partition(":")
    return {"host": host or "127.0.0.1", "port": int(port or 3306), "user": user or "root", "password": password}


class Downstream:
    """Reads the ids present downstream (a fresh connection per poller, autocommit)."""

    def __init__(self, kind: str, mysql: dict[str, Any], db: str, sqlite_path: Path) -> None:
        self.kind = kind
        self.mysql = mysql
        self.db = db
        self.sqlite_path = sqlite_path
        self.cluster_id = 0

    def drainer_args(self) -> list[str]:
        if self.kind == "sqlite":
            return ["--syncer.db-type", "sqlite", "--syncer.to.path", str(self.sqlite_path)]
        m = self.mysql
        return [
            "--syncer.db-type", "mysql",
            "--syncer.to.host", m["host"],
            "--syncer.to.port", str(m["port"]),
            "--syncer.to.user", m["user"],
            "--syncer.to.password", m["password"],
        ]  # fmt: skip

    def reader(self) -> Callable[[int], list[int]] | None:
        """A function `ids_above(low)`, or None while the table does not exist downstream yet."""
        if self.kind == "sqlite":
            if not self.sqlite_path.exists():
                return None
            lite = sqlite3.connect(self.sqlite_path, isolation_level=None, check_same_thread=False)
            name = f'"{self.db}.{TABLE}"'
            try:
                lite.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchall()
            except sqlite3.OperationalError:
                lite.close()
                return None
            return lambda low: [r[0] for r in lite.execute(f"SELECT id FROM {name} WHERE id > ?", (low,))]
        conn = pymysql.connect(**self.mysql, autocommit=True)
        sql = f"SELECT id FROM `{self.db}`.`{TABLE}` WHERE id > %s"
        try:
            with conn.cursor() as cur:
                cur.execute(sql, (0,))
        except pymysql.err.ProgrammingError:
            conn.close()
            return None

        def ids_above(low: int) -> list[int]:
            with conn.cursor() as cur:
                cur.execute(sql, (low,))
                return [int(r[0]) for r in cur.fetchall()]

        return ids_above

    def drop(self) -> None:
        if self.kind != "mysql":
            return
        conn = pymysql.connect(**self.mysql, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
                cur.execute("SHOW DATABASES LIKE 'tidb_binlog'")
                if cur.fetchone():
                    cur.execute("DELETE FROM tidb_binlog.checkpoint WHERE clusterID = %s", (self.cluster_id,))
        finally:
            conn.close()


class Poller:
    """A thread noting when each id first shows up downstream (the end of the poll that returned it)."""

    def __init__(self, read: Callable[[int], list[int]], interval: float) -> None:
        self._read = read
        self._interval = interval
        self.seen: dict[int, float] = {}
        self.low = 0  # every id <= low has been seen
        self.periods: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        last_end = time.monotonic()
        try:
            while not self._stop.is_set():
                ids = self._read(self.low)
                end = time.monotonic()
                self.periods.append(end - last_end)
                last_end = end
                seen = self.seen
                for i in ids:
                    if i not in seen:
                        seen[i] = end
                while self.low + 1 in seen:
                    self.low += 1
                if self._interval > 0:
                    self._stop.wait(self._interval)
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


# ------------------------------------------------------------------------------------------- writer


class Writer:
    """Inserts rows with increasing ids; `committed[id]` = monotonic time when commit() returned."""

    def __init__(self, db: Database, table: str) -> None:
        self.db = db
        self.table = table
        self.committed: dict[int, float] = {}
        self.start_ts: dict[int, int] = {}
        """id -> start_ts of the attempt that committed it."""
        self._next = 0
        self._lock = threading.Lock()
        self.errors: list[str] = []

    def _new_id(self) -> int:
        with self._lock:
            self._next += 1
            return self._next

    def one(self) -> int:
        i = self._new_id()

        def body(txn: Any) -> None:
            self.start_ts[i] = txn.start_ts
            txn.insert(self.table, {"id": i, "v": i})

        self.db.run(body)
        self.committed[i] = time.monotonic()
        return i

    def paced(self, rate: float, duration: float) -> tuple[list[int], float]:
        """One thread at `rate` txn/s for `duration` s (no catch-up bursts after a slow commit)."""
        ids: list[int] = []
        began = time.monotonic()
        step = 1.0 / rate
        due = began
        while True:
            now = time.monotonic()
            if now - began >= duration:
                break
            if due > now:
                time.sleep(due - now)
            ids.append(self.one())
            due = max(due + step, time.monotonic() - step)
        return ids, time.monotonic() - began

    def flat_out(self, threads: int, duration: float) -> tuple[list[int], float]:
        """`threads` threads as fast as they go for `duration` s."""
        ids: list[int] = []
        began = time.monotonic()
        lock = threading.Lock()

        def work() -> None:
            mine: list[int] = []
            try:
                while time.monotonic() - began < duration:
                    mine.append(self.one())
            except Exception as exc:
                self.errors.append(repr(exc))
            with lock:
                ids.extend(mine)

        ts = [threading.Thread(target=work, name=f"writer-{k}") for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return sorted(ids), time.monotonic() - began


# ------------------------------------------------------------------------------------------ cluster


class LagCluster:
    """etcd, pd-server, 3 pumps, a drainer, the writer and the poller for one mode."""

    def __init__(self, base: Path, args: argparse.Namespace, pump_args: list[str], tag: str) -> None:
        self.base = base
        self.args = args
        self.etcd = EtcdProcess(base)
        self.pd = PDProcess(base, self.etcd.url)
        self.pumps = [
            PumpProcess(base, self.etcd.url, name=f"pump{i}", extra_args=[*PUMP_ARGS, *pump_args]) for i in range(PUMPS)
        ]
        self.downstream = Downstream(args.downstream, _mysql_parts(args.mysql), f"lag_{tag}", base / "downstream.db")
        self.drainer: DrainerProcess | None = None
        self.client: ActivePumpsClient | None = None
        self.db: Database | None = None
        self.poller: Poller | None = None
        self.writer: Writer | None = None
        self.watch: StreamWatch | None = None

    def start(self) -> None:
        self.etcd.start()
        self.pd.start()
        for p in self.pumps:
            p.start()
        etcd = EtcdClient(self.etcd.url)
        tso = TSOClient(etcd)
        try:
            cid = read_cluster_id(etcd)
            start_ts = tso.get_ts()
        finally:
            tso.close()
            etcd.close()
        assert cid is not None
        self.downstream.cluster_id = cid
        extra = ["--initial-commit-ts", str(start_ts), *self.downstream.drainer_args()]
        self.drainer = DrainerProcess(self.base, self.etcd.url, extra_args=[*DRAINER_ARGS, *extra])
        self.drainer.start()
        self.client = ActivePumpsClient(self.pumps[:ACTIVE_PUMPS], cid)
        if self.args.breakdown:
            self.watch = StreamWatch(self.pumps[:ACTIVE_PUMPS], cid, start_ts)
        self.db = Database(self.etcd.url, f"sqlite:///{self.base / 'upstream.db'}", client=self.client)
        name = self.downstream.db
        self.db.create_database(name)
        self.db.create_table(
            name, TABLE, [Column("id", "BIGINT", nullable=False), Column("v", "BIGINT")], primary_key=["id"]
        )
        reader = self._wait_reader()
        self.poller = Poller(reader, self.args.poll_interval)
        self.poller.start()
        self.writer = Writer(self.db, f"{name}.{TABLE}")

    def _wait_reader(self) -> Callable[[int], list[int]]:
        got: list[Callable[[int], list[int]]] = []

        def ready() -> bool:
            r = self.downstream.reader()
            if r is not None:
                got.append(r)
            return bool(got)

        wait_for(ready, 60, "the table downstream", interval=0.1)
        return got[0]

    def dead(self) -> list[str]:
        procs = [self.etcd.process, self.pd.process, *(p.process for p in self.pumps)]
        if self.drainer is not None:
            procs.append(self.drainer.process)
        return [p.name for p in procs if not p.alive]

    def stop(self) -> None:
        if self.poller is not None:
            self.poller.stop()
        if self.watch is not None:
            self.watch.close()
        if self.db is not None:
            with contextlib.suppress(Exception):
                self.db.close()
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close()
        stops: list[Callable[[], object]] = []
        if self.drainer is not None:
            stops.append(self.drainer.stop)
        stops += [p.stop for p in self.pumps] + [self.pd.stop, self.etcd.stop]
        for stop in stops:
            with contextlib.suppress(Exception):
                stop()
        with contextlib.suppress(Exception):
            self.downstream.drop()


# ------------------------------------------------------------------------------------------ measure


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def lag_of(
    cluster: LagCluster, ids: list[int], elapsed: float, *, first_poll: int, errors: list[str], what: str
) -> dict[str, Any]:
    """Lag of the rows `ids` (waiting for them); `first_poll`: the poller's first period of this load."""
    poller, writer = cluster.poller, cluster.writer
    assert poller is not None
    assert writer is not None
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: all(i in poller.seen for i in ids) or poller.error is not None, CATCH_UP_TIMEOUT, what)
    if poller.error is not None:
        errors.append(f"{what}: poller failed: {poller.error!r}")
    missing = [i for i in ids if i not in poller.seen]
    if missing:
        errors.append(f"{what}: {len(missing)} of {len(ids)} rows never became visible, e.g. {missing[:5]}")
    lags = [(poller.seen[i] - writer.committed[i]) * 1000 for i in ids if i in poller.seen]
    periods = poller.periods[first_poll:] or [0.0]
    return {
        "txns": len(ids),
        "txn_per_s": round(len(ids) / elapsed, 1),
        "lag_ms": {
            "p50": round(percentile(lags, 0.5), 1) if lags else None,
            "p99": round(percentile(lags, 0.99), 1) if lags else None,
            "max": round(max(lags), 1) if lags else None,
            "mean": round(sum(lags) / len(lags), 1) if lags else None,
        },
        "poll_period_ms": round(median(periods) * 1000, 2),
        "missing": len(missing),
    }


def measure(cluster: LagCluster, args: argparse.Namespace, errors: list[str], label: str) -> dict[str, Any]:
    writer, poller = cluster.writer, cluster.poller
    assert writer is not None
    assert poller is not None
    writer.paced(args.rate, args.warmup)  # warm-up, not measured
    first = len(poller.periods)
    ids, elapsed = writer.paced(args.rate, args.duration)
    moderate = lag_of(cluster, ids, elapsed, first_poll=first, errors=errors, what=f"{label} moderate")
    first = len(poller.periods)
    ids, elapsed = writer.flat_out(args.max_threads, args.duration)
    flat = lag_of(cluster, ids, elapsed, first_poll=first, errors=errors, what=f"{label} max")
    if cluster.watch is not None and cluster.client is not None:
        flat["breakdown"] = breakdown(ids, writer, cluster.client, cluster.watch, poller.seen)
        if cluster.watch.errors:
            errors.append(f"{label}: breakdown pull streams failed: {cluster.watch.errors[:3]}")
    if writer.errors:
        errors.append(f"{label}: writer errors: {writer.errors[:3]}")
    client = cluster.client
    if client is not None:
        if client.async_errors:
            errors.append(f"{label}: commit binlog errors: {client.async_errors[:3]}")
        idle = client.writes[ACTIVE_PUMPS:] if len(client.writes) > ACTIVE_PUMPS else []
        if any(idle):
            errors.append(f"{label}: the idle pump got writes")
    return {"moderate": moderate, "max": flat}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for load in ("moderate", "max"):
        rs = [r[load] for r in runs]

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float | None:
            vals = [r["lag_ms"][key] for r in rs if r["lag_ms"][key] is not None]
            return round(median(vals), 1) if vals else None

        out[load] = {
            "txn_per_s": round(median([r["txn_per_s"] for r in rs]), 1),
            "lag_p50_ms": med("p50"),
            "lag_p99_ms": med("p99"),
            "lag_max_ms": med("max"),
            "poll_period_ms": round(median([r["poll_period_ms"] for r in rs]), 2),
        }
        parts = [r["breakdown"] for r in rs if r.get("breakdown", {}).get("txns")]
        if parts:
            out[load]["breakdown_median_ms"] = {
                k: {q: round(median([b[k][q] for b in parts]), 1) for q in ("p50", "p99")} for k in LAG_PARTS
            }
            out[load]["slowest_1pct_mean_ms"] = {
                k: round(median([b["slowest_1pct_mean_ms"][k] for b in parts]), 1) for k in LAG_PARTS
            }
    out["runs"] = runs
    return out


def start_cluster(base: Path, args: argparse.Namespace, pump_args: list[str], label: str) -> LagCluster:
    """A started cluster; a start that fails (e.g. a free port taken by another process meanwhile) is
    retried on a fresh one, twice."""
    for attempt in range(1, START_ATTEMPTS + 1):
        where = base / f"try{attempt}"
        cluster = LagCluster(where, args, pump_args, uuid.uuid4().hex[:8])
        log(f"{label}: starting the cluster under {where}")
        try:
            cluster.start()
        except (ProcessError, TimeoutError) as exc:
            cluster.stop()
            if attempt == START_ATTEMPTS:
                raise
            log(f"{label}: cluster start failed ({str(exc).splitlines()[0]}); again")
            continue
        return cluster
    raise AssertionError("unreachable")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--downstream", choices=("mysql", "sqlite"), default="mysql", help="default mysql")
    ap.add_argument("--mysql", default="root@127.0.0.1:3306", help="user[:password]@host:port of the server")
    ap.add_argument("--rate", type=float, default=50.0, help="moderate load, txn/s (default 50)")
    ap.add_argument("--max-threads", type=int, default=4, help="writer threads of the max load (default 4)")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per measured load (default 20)")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of unmeasured moderate load first (default 3)")
    ap.add_argument("--runs", type=int, default=3, help="runs per mode; medians are reported (default 3)")
    ap.add_argument("--modes", default="default,original", help=f"comma-separated, of {sorted(MODES)}")
    ap.add_argument("--poll-interval", type=float, default=0.002, help="sleep between polls, s (default 0.002)")
    ap.add_argument("--pump-args", default="", help="extra pump flags for every mode, space-separated")
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="split each max-load transaction's lag into its parts (an extra pull stream from each active pump)",
    )
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run of 5 s per load")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (data and logs)")
    args = ap.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        ap.error(f"unknown modes {unknown}: use {sorted(MODES)}")
    if args.quick:
        args.duration, args.runs, args.warmup = 5.0, 1, 2.0
    install_sigterm()
    began = time.monotonic()
    tmp = TempDir(args.keep, "bench-e2e-lag-")
    errors: list[str] = []
    results: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    out: dict[str, Any] = {"bench": "e2e_lag", **env_info()}
    try:
        for run in range(args.runs):
            order = modes if run % 2 == 0 else list(reversed(modes))
            for mode in order:
                label = f"run {run + 1}/{args.runs} {mode}"
                base = tmp.path / f"{mode}-{run + 1}"
                pump_args = [*MODES[mode], *args.pump_args.split()]
                cluster = start_cluster(base, args, pump_args, label)
                try:
                    r = measure(cluster, args, errors, label)
                    dead = cluster.dead()
                    if dead:
                        errors.append(f"{label}: processes died: {dead}")
                finally:
                    cluster.stop()
                results[mode].append(r)
                for load in ("moderate", "max"):
                    x = r[load]
                    log(
                        f"{label} {load}: {x['txn_per_s']} txn/s, lag p50 {x['lag_ms']['p50']} ms "
                        f"p99 {x['lag_ms']['p99']} ms max {x['lag_ms']['max']} ms (poll {x['poll_period_ms']} ms)"
                    )
    except KeyboardInterrupt:
        log("interrupted: stopping processes")
        return 130
    finally:
        tmp.cleanup()
    summaries = {m: summary(rs) for m, rs in results.items()}
    head = summaries[modes[0]]["moderate"]["lag_p99_ms"]
    out.update(
        {
            "downstream": args.downstream,
            "pumps": PUMPS,
            "idle_pumps": PUMPS - ACTIVE_PUMPS,
            "rate": args.rate,
            "max_threads": args.max_threads,
            "duration_s": args.duration,
            "runs": args.runs,
            "pump_args": {m: [*PUMP_ARGS, *MODES[m], *args.pump_args.split()] for m in modes},
            "drainer_args": DRAINER_ARGS,
            "modes": summaries,
            "target_p99_ms": TARGET_P99_MS,
            "target_mode": modes[0],
            "target_met": head is not None and head <= TARGET_P99_MS,
        }
    )
    out["errors"] = errors[:20]
    out["ok"] = not errors
    out["total_s"] = round(time.monotonic() - began, 1)
    for m, s in summaries.items():
        log(
            f"{m}: moderate p99 {s['moderate']['lag_p99_ms']} ms, max-rate {s['max']['txn_per_s']} txn/s "
            f"p99 {s['max']['lag_p99_ms']} ms"
        )
    print(json.dumps(out, indent=2))
    if errors:
        log(f"FAILED: {errors[:3]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
