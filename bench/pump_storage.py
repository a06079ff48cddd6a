"""Micro-benchmark of the pump storage engine (no gRPC): durable writes/s and pull binlogs/s.

* ``write_<n>t``: n threads call ``Storage.write_binlog`` directly, each writing transactions as
  TiDB does (a ~1 KB prewrite, then a small commit), sync-log on; binlogs/s and per-call p50/p99.
* ``pull``: after the writes, one ``pull_commit_binlogs`` reader from 0 up to maxCommitTS
  (each commit joined with its prewrite); binlogs/s and MB/s of payload.
* baseline ``raw_append_fsync_1t``: one thread appending 1 KB + ``fdatasync`` in a loop (the rate a
  writer without group commit cannot beat on this disk).

One JSON object goes to stdout.  Usage: ``python bench/pump_storage.py [--seconds S] [--dir DIR] [--keep]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import tso
from common.pb import binlog_pb2, gogo
from pump.storage.api import StorageOptions
from pump.storage.storage import Storage

VALUE = b"r" * 1000


class Clock:
    def __init__(self) -> None:
        self._ts = tso.compose(tso.now_ms(), 0)
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._ts += 1
            return self._ts


def raw_append(path: Path, seconds: float) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    buf = b"x" * 1024
    n = 0
    end = time.perf_counter() + seconds
    began = time.perf_counter()
    while time.perf_counter() < end:
        os.write(fd, buf)
        os.fdatasync(fd)
        n += 1
    elapsed = time.perf_counter() - began
    os.close(fd)
    return n / elapsed


def write_run(storage: Storage, threads: int, seconds: float) -> dict[str, Any]:
    clock = Clock()
    latencies: list[list[float]] = [[] for _ in range(threads)]
    counts = [0] * threads
    start_gate = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        lat = latencies[i]
        start_gate.wait()
        while time.perf_counter() < stop_at[0]:
            start = clock.next()
            p = gogo.encode_binlog(binlog_pb2.Prewrite, start, 0, prewrite_key=b"k", prewrite_value=VALUE)
            t0 = time.perf_counter()
            storage.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start), p)
            t1 = time.perf_counter()
            commit_ts = clock.next()
            c = gogo.encode_binlog(binlog_pb2.Commit, start, commit_ts, prewrite_key=b"k")
            storage.write_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start, commit_ts=commit_ts), c)
            t2 = time.perf_counter()
            lat.append(t1 - t0)
            lat.append(t2 - t1)
            counts[i] += 2

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in workers:
        t.start()
    stop_at[0] = time.perf_counter() + seconds
    began = time.perf_counter()
    start_gate.wait()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - began
    all_lat = sorted(x for lat in latencies for x in lat)
    total = sum(counts)
    return {
        "binlogs_per_s": round(total / elapsed),
        "binlogs": total,
        "p50_ms": round(all_lat[len(all_lat) // 2] * 1000, 3),
        "p99_ms": round(all_lat[int(len(all_lat) * 0.99)] * 1000, 3),
        "mean_ms": round(statistics.fmean(all_lat) * 1000, 3),
    }


def pull_run(storage: Storage) -> dict[str, Any]:
    assert storage.wait_indexed(60)
    top = storage.max_commit_ts()
    stop = threading.Event()
    n = 0
    size = 0
    began = time.perf_counter()
    for b in storage.pull_commit_binlogs(0, stop):
        n += 1
        size += len(b.payload)
        if b.commit_ts >= top:
            break
    elapsed = time.perf_counter() - began
    return {"binlogs_per_s": round(n / elapsed), "binlogs": n, "mb_per_s": round(size / elapsed / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--dir", type=Path, default=None, help="where to put the data (default: a temp dir)")
    ap.add_argument("--keep", action="store_true", help="keep the data directory afterwards")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-pump-storage-", dir=args.dir))
    opts = StorageOptions(stop_write_at_available_space=0)
    out: dict[str, Any] = {
        "bench": "pump_storage",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "binlog_bytes": len(VALUE),
    }
    try:
        out["raw_append_fsync_1t"] = {"writes_per_s": round(raw_append(base / "raw", args.seconds))}
        for threads in (1, 8, 64):
            s = Storage(base / f"w{threads}", opts)
            try:
                out[f"write_{threads}t"] = write_run(s, threads, args.seconds)
                if threads == 64:
                    out["pull"] = pull_run(s)
            finally:
                s.close()
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
