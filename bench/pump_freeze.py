"""Transactions per second through ``PumpsClient`` before and during a freeze (SIGSTOP) of one of 3 pumps.

A private etcd, pd-server and three pumps run as processes in a temp dir.  ``--writers`` threads each
loop over one transaction: a TSO start ts, a synchronous prewrite (``write_binlog``), a TSO commit ts,
and the commit sent as TiDB and the upstream writer send it (``write_binlog_async``).  A transaction
counts when its commit has been handed over.  After ``--before`` seconds one pump's process group is
stopped with SIGSTOP for ``--freeze`` seconds, then continued (SIGCONT, always, also on error).

The client runs with its defaults (only ``probe_interval`` is passed), so the same script measures
the code it is run with: ``PYTHONPATH=<checkout> python bench/pump_freeze.py`` from that checkout.

One JSON object goes to stdout, progress to stderr:

* ``rate_before``: txn/s over the ``--before`` window (its first second skipped as warm-up);
* ``rate_first_3s``: txn/s in the 3 s after the freeze began;
* ``rate_3s_to_6s``: txn/s in the next 3 s (the target: >= 0.5 of ``rate_before`` from 3 s on);
* ``rate_frozen_after_3s``: txn/s from 3 s after the freeze began until it ended;
* ``ratio_*``: those rates over ``rate_before``;
* ``longest_gap_s``: the longest time without any transaction completing while frozen;
* ``errors``: prewrites that raised.

Usage: ``python bench/pump_freeze.py [--writers N] [--before S] [--freeze S] [--keep]``.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _pumpbench import TempDir, env_info, install_sigterm, log, rnd

from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo
from common.pd_client import TSOClient
from pump_client import PumpsClient
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess

WINDOW = 3.0
PROBE_INTERVAL = 0.5


def prewrite(start_ts: int) -> binlog_pb2.Binlog:
    value = gogo.marshal_prewrite_value(binlog_pb2.PrewriteValue(schema_version=1))
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=b"k%d" % start_ts, prewrite_value=value
    )


class Load:
    """Writer threads; `done` holds the monotonic time each transaction completed."""

    def __init__(self, client: PumpsClient, tso: TSOClient, writers: int) -> None:
        self.client = client
        self.tso = tso
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.done: list[float] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._run, name=f"w{i}", daemon=True) for i in range(writers)]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            start_ts = self.tso.get_ts()
            try:
                self.client.write_binlog(prewrite(start_ts))
            except Exception as exc:
                with self.lock:
                    self.errors.append(repr(exc))
                continue
            commit_ts = self.tso.get_ts()
            self.client.write_binlog_async(
                binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=b"k")
            )
            now = time.monotonic()
            with self.lock:
                self.done.append(now)

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def rate(times: list[float], begin: float, end: float) -> float:
    n = bisect.bisect_left(times, end) - bisect.bisect_left(times, begin)
    return n / (end - begin) if end > begin else 0.0


def longest_gap(times: list[float], begin: float, end: float) -> float:
    inside = [begin] + [t for t in times if begin <= t < end] + [end]
    return max(b - a for a, b in itertools.pairwise(inside))


def signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def measure(base: Path, writers: int, before: float, freeze: float) -> dict[str, Any]:
    etcd = EtcdProcess(base)
    pd = PDProcess(base, etcd.url)
    pumps = [PumpProcess(base, etcd.url, name=f"pump{i}") for i in range(3)]
    frozen_pid: int | None = None
    stack = contextlib.ExitStack()
    with stack:
        etcd.start()
        stack.callback(etcd.stop)
        pd.start()
        stack.callback(pd.stop)
        for pump in pumps:
            pump.start()
            stack.callback(pump.stop)
        etcd_client = EtcdClient(etcd.url)
        stack.callback(etcd_client.close)
        tso = TSOClient(etcd_client)
        stack.callback(tso.close)
        client = PumpsClient(etcd.url, probe_interval=PROBE_INTERVAL)
        stack.callback(client.close, 5.0)
        load = Load(client, tso, writers)
        stack.callback(load.join)
        victim = pumps[2]
        log(f"{writers} writers for {before:.0f}s, then SIGSTOP {victim.name} for {freeze:.0f}s")
        began = time.monotonic()
        load.start()
        time.sleep(before)
        frozen_pid = victim.process.pid
        assert frozen_pid is not None
        stack.callback(signal_group, frozen_pid, signal.SIGCONT)
        frozen_at = time.monotonic()
        signal_group(frozen_pid, signal.SIGSTOP)
        time.sleep(freeze)
        thawed_at = time.monotonic()
        signal_group(frozen_pid, signal.SIGCONT)
        log("SIGCONT; stopping the writers")
        load.join()
        with load.lock:
            times = sorted(load.done)
            errors = list(load.errors)
    before_rate = rate(times, began + 1.0, frozen_at)
    first = rate(times, frozen_at, frozen_at + WINDOW)
    next_window = rate(times, frozen_at + WINDOW, frozen_at + 2 * WINDOW)
    after = rate(times, frozen_at + WINDOW, thawed_at)
    return {
        "writers": writers,
        "before_s": before,
        "freeze_s": freeze,
        "rate_before": rnd(before_rate),
        "rate_first_3s": rnd(first),
        "rate_3s_to_6s": rnd(next_window),
        "rate_frozen_after_3s": rnd(after),
        "ratio_first_3s": rnd(first / before_rate) if before_rate else None,
        "ratio_3s_to_6s": rnd(next_window / before_rate) if before_rate else None,
        "ratio_frozen_after_3s": rnd(after / before_rate) if before_rate else None,
        "longest_gap_s": rnd(longest_gap(times, frozen_at, thawed_at)),
        "transactions": len(times),
        "errors": len(errors),
        "first_errors": errors[:3],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--before", type=float, default=10.0)
    parser.add_argument("--freeze", type=float, default=20.0)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    args = parser.parse_args()
    install_sigterm()
    tmp = TempDir(args.keep, "pump-freeze-")
    try:
        result = measure(tmp.path, args.writers, args.before, args.freeze)
    finally:
        tmp.cleanup()
    result["code"] = str(Path(sys.modules["pump_client"].__file__ or "").parent)
    result["env"] = env_info()
    print(json.dumps(result, indent=2))
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
