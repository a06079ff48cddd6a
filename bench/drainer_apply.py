"""Benchmark of the drainer's apply path: rows/s into MariaDB through Loader + MySQLSink vs raw pymysql.

One table ``sbtest(id BIGINT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))`` (rows of about
200 bytes, sysbench's shape) in a fresh database on ``--mysql`` (default ``root@127.0.0.1:3306``),
dropped at the end.  Three loads of ``--rows`` rows each, as upstream transactions of
``--rows-per-txn`` (10) DMLs, built before the clock starts (translation is not measured):

* ``insert``: new rows into an empty table;
* ``update``: every row of a full table once, in random order, ``k``, ``c`` and ``pad`` changed;
* ``delete``: every row of a full table once, in random order;
* ``hot``: ``--rows`` updates of a table of ``--rows / 10`` rows, each of a random row (so a row
  is changed about 10 times): what ``merge`` collapses.

For each worker count in ``--workers`` (default 1, 4, 16), each run measures

* ``loader``: ``MySQLSink(worker_count=w, txn_batch=--txn-batch)`` (normal mode): ``add`` of
  every transaction, then ``flush``; connections are opened before the clock starts;
* ``merge``: the same with ``merge=True`` (``[syncer.to] merge``: each batch merged by primary key,
  applied as multi-row ``REPLACE`` and ``DELETE .. IN``);
* ``raw``: the same rows over ``w`` pymysql connections in ``w`` threads (rows split by id),
  ``--txn-batch`` rows per transaction: multi-row ``REPLACE INTO ... VALUES (..),(..)`` for
  inserts (pymysql ``executemany``), one ``UPDATE ... WHERE id = %s`` / ``DELETE ... WHERE id = %s``
  per row for updates and deletes.

in rotating order, after a table reset that is not timed.  Reported per load and worker count:
medians over ``--runs`` of rows/s (DMLs applied per second), ``ratio`` = loader / raw (target: >= 0.5
for every load), ``merge_ratio`` = merge / raw and ``merge_vs_loader`` = merge / loader;
every run's table contents are checked (row count and ``SUM(k)``).  One JSON object goes to
stdout, progress to stderr; exit status 1 if a check failed.

Usage: ``python bench/drainer_apply.py [--workers 1,4,16] [--rows N] [--runs N] [--quick]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

import pymysql
from _pumpbench import env_info, install_sigterm, log, median

from common.events import DML, DMLType, TableShape, Txn
from common.schema.infoschema import InfoSchema
from drainer.sinks.mysql import MySQLSink
from upstream.ddl import Column, Planner
from upstream.workloads.gen import sysbench_text

TARGET_RATIO = 0.5
LOADS = ("insert", "update", "delete", "hot")
MODES = ("loader", "merge", "raw")
HOT_SPREAD = 10
"""``hot``: updates per row, on average."""
COLUMNS = [
    Column("id", "BIGINT"),
    Column("k", "INT", nullable=False, default=0),
    Column("c", "CHAR(120)", nullable=False, default=""),
    Column("pad", "CHAR(60)", nullable=False, default=""),
]
ROW_BYTES = 8 + 4 + 120 + 60
Row = tuple[int, int, str, str]


def _server(text: str) -> dict[str, Any]:
    user_pw, _, hostport = text.rpartition("@")
    user, _, password = (user_pw or "root").partition(":")
    host, _, port = hostport.partition(":")
    return {"host": host or "127.0.0.1", "port": int(port or 3306), "user": user or "root", "password": password}


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.server = _server(args.mysql)
        self.db = f"bench_apply_{uuid.uuid4().hex[:8]}"
        self.rng = random.Random(args.seed)
        schema = InfoSchema()
        ids = itertools.count(1)
        schema.apply(Planner(schema, lambda n: next(ids), start_ts=1).create_database(self.db))
        job = Planner(schema, lambda n: next(ids), start_ts=1).create_table(
            self.db, "sbtest", COLUMNS, primary_key=["id"]
        )
        schema.apply(job)
        self.create_query = job.query
        self.shape = TableShape.of(self.db, schema.table(self.db, "sbtest"))
        self.ts = itertools.count(1000)

    def connect(self) -> pymysql.connections.Connection[Any]:
        return pymysql.connect(**self.server, database=self.db, charset="utf8mb4", autocommit=False)

    # ------------------------------------------------------------------ data
    def row(self, i: int) -> Row:
        r = self.rng
        return (i, r.randint(0, 1 << 30), sysbench_text(r, 120), sysbench_text(r, 60))

    def setup(self) -> None:
        conn = pymysql.connect(**self.server, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE `{self.db}` DEFAULT CHARACTER SET utf8mb4")
                cur.execute(f"USE `{self.db}`")
                cur.execute(self.create_query)
        finally:
            conn.close()

    def drop(self) -> None:
        conn = pymysql.connect(**self.server, autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{self.db}`")
        finally:
            conn.close()

    def reset(self, rows: Sequence[Row]) -> None:
        """Make the table hold exactly ``rows`` (not timed)."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("TRUNCATE TABLE sbtest")
                for i in range(0, len(rows), 1000):
                    cur.executemany("INSERT INTO sbtest (id, k, c, pad) VALUES (%s,%s,%s,%s)", rows[i : i + 1000])
            conn.commit()
        finally:
            conn.close()

    def check(self, rows: Sequence[Row]) -> str | None:
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*), COALESCE(SUM(k), 0) FROM sbtest")
                got = cur.fetchone()
        finally:
            conn.close()
        want = (len(rows), sum(r[1] for r in rows))
        return None if got is not None and tuple(map(int, got)) == want else f"table has {got}, expected {want}"

    def txns(self, dmls: list[DML]) -> list[Txn]:
        n = self.args.rows_per_txn
        out = []
        for i in range(0, len(dmls), n):
            ts = next(self.ts)
            part = dmls[i : i + n]
            for d in part:
                d.commit_ts = ts
            out.append(Txn(commit_ts=ts, dmls=part, size=sum(d.size for d in part)))
        return out

    # ------------------------------------------------------------------ one load
    def prepare(self, load: str) -> tuple[list[Row], list[Row], list[Txn], list[Row]]:
        """(table before, rows for the raw baseline, txns for the loader, table after)."""
        n = self.args.rows
        shape = self.shape
        if load == "insert":
            rows = [self.row(i) for i in range(1, n + 1)]
            dmls = [DML(DMLType.INSERT, shape, values=r, size=ROW_BYTES) for r in rows]
            return [], rows, self.txns(dmls), rows
        if load == "hot":
            current = {i: self.row(i) for i in range(1, max(1, n // HOT_SPREAD) + 1)}
            start = sorted(current.values())
            dmls, raw = [], []
            for _ in range(n):
                old = current[self.rng.randint(1, len(current))]
                new = (old[0], *self.row(old[0])[1:])
                current[old[0]] = new
                dmls.append(DML(DMLType.UPDATE, shape, values=new, old_values=old, size=2 * ROW_BYTES))
                raw.append(new)
            return start, raw, self.txns(dmls), sorted(current.values())
        before = [self.row(i) for i in range(1, n + 1)]
        order = self.rng.sample(before, n)
        if load == "update":
            after = {r[0]: (r[0], *self.row(r[0])[1:]) for r in order}
            dmls = [DML(DMLType.UPDATE, shape, values=after[r[0]], old_values=r, size=2 * ROW_BYTES) for r in order]
            return before, [after[r[0]] for r in order], self.txns(dmls), sorted(after.values())
        dmls = [DML(DMLType.DELETE, shape, old_values=r, size=ROW_BYTES) for r in order]
        return before, order, self.txns(dmls), []

    def run_loader(self, workers: int, txns: list[Txn], merge: bool = False) -> float:
        sink = MySQLSink(**self.server, worker_count=workers, txn_batch=self.args.txn_batch, merge=merge)
        done: list[int] = []
        sink.start(done.append)
        try:
            t0 = time.perf_counter()
            for txn in txns:
                sink.add(txn)
            sink.flush(600)
            elapsed = time.perf_counter() - t0
        finally:
            sink.close()
        assert done == [t.commit_ts for t in txns], "success reports out of order"
        return elapsed

    def run_raw(self, load: str, workers: int, rows: list[Row]) -> float:
        batch = self.args.txn_batch
        parts: list[list[Row]] = [[] for _ in range(workers)]
        for r in rows:
            parts[r[0] % workers].append(r)
        conns = [self.connect() for _ in range(workers)]
        errors: list[BaseException] = []

        def work(conn: pymysql.connections.Connection[Any], part: list[Row]) -> None:
            try:
                with conn.cursor() as cur:
                    for i in range(0, len(part), batch):
                        chunk = part[i : i + batch]
                        if load == "insert":
                            cur.executemany("REPLACE INTO sbtest (id, k, c, pad) VALUES (%s,%s,%s,%s)", chunk)
                        elif load in ("update", "hot"):
                            for r in chunk:
                                cur.execute("UPDATE sbtest SET k=%s, c=%s, pad=%s WHERE id=%s", (*r[1:], r[0]))
                        else:
                            for r in chunk:
                                cur.execute("DELETE FROM sbtest WHERE id=%s", (r[0],))
                        conn.commit()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(c, p)) for c, p in zip(conns, parts, strict=True)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        for c in conns:
            c.close()
        if errors:
            raise errors[0]
        return elapsed

    def measure(self, load: str, workers: int, errors: list[str]) -> dict[str, Any]:
        runs: dict[str, list[float]] = {mode: [] for mode in MODES}
        for run in range(self.args.runs):
            before, raw_rows, txns, after = self.prepare(load)
            order = MODES[run % len(MODES) :] + MODES[: run % len(MODES)]
            for mode in order:
                self.reset(before)
                if mode == "raw":
                    secs = self.run_raw(load, workers, raw_rows)
                else:
                    secs = self.run_loader(workers, txns, merge=mode == "merge")
                bad = self.check(after)
                if bad:
                    errors.append(f"{load} w={workers} {mode}: {bad}")
                runs[mode].append(len(raw_rows) / secs)
                log(f"{load:6} workers={workers:2} {mode:6} {runs[mode][-1]:9.0f} rows/s")
        loader, merge, raw = median(runs["loader"]), median(runs["merge"]), median(runs["raw"])
        return {
            "loader_rows_per_s": round(loader),
            "merge_rows_per_s": round(merge),
            "raw_rows_per_s": round(raw),
            "ratio": round(loader / raw, 3),
            "merge_ratio": round(merge / raw, 3),
            "merge_vs_loader": round(merge / loader, 3),
            "runs": {k: [round(v) for v in vs] for k, vs in runs.items()},
        }


def _workers(text: str) -> list[int]:
    out = [int(x) for x in text.split(",") if x.strip()]
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError("worker counts must be >= 1")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--mysql", default="root@127.0.0.1:3306", help="user[:password]@host:port of the server")
    ap.add_argument("--workers", type=_workers, default=[1, 4, 16], help="worker counts (default 1,4,16)")
    ap.add_argument("--rows", type=int, default=50_000, help="rows per load and run (default 50000)")
    ap.add_argument("--rows-per-txn", type=int, default=10, help="DMLs per upstream transaction (default 10)")
    ap.add_argument("--txn-batch", type=int, default=20, help="DMLs per downstream transaction (default 20)")
    ap.add_argument("--runs", type=int, default=3, help="runs; medians are reported (default 3)")
    ap.add_argument("--loads", default=",".join(LOADS), help="comma list of insert,update,delete,hot")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 run of 2000 rows")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.runs = 2000, 1
    loads = [x for x in args.loads.split(",") if x]
    if not set(loads) <= set(LOADS):
        ap.error(f"--loads: choose from {','.join(LOADS)}")
    install_sigterm()
    bench = Bench(args)
    errors: list[str] = []
    results: dict[str, dict[str, Any]] = {}
    bench.setup()
    try:
        for load in loads:
            results[load] = {str(w): bench.measure(load, w, errors) for w in args.workers}
    finally:
        bench.drop()
    ratios = {load: min(r["ratio"] for r in by_w.values()) for load, by_w in results.items()}
    out = {
        "bench": "drainer_apply",
        "rows": args.rows,
        "rows_per_txn": args.rows_per_txn,
        "txn_batch": args.txn_batch,
        "runs": args.runs,
        "workers": args.workers,
        "results": results,
        "min_ratio": ratios,
        "merge_vs_loader": {load: {w: r["merge_vs_loader"] for w, r in by_w.items()} for load, by_w in results.items()},
        "target_ratio": TARGET_RATIO,
        "target_met": all(r >= TARGET_RATIO for r in ratios.values()),
        "errors": errors,
        "env": env_info(),
    }
    print(json.dumps(out, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
