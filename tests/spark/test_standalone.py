"""A job on a real Spark standalone cluster (master + 2 workers on loopback), and a worker killed under it.

The driver runs in a subprocess: the test process holds the shared `local[2]` session, and a running
SparkContext cannot switch to another master.  It builds its session with `make_session(master_url,
conf=...)` plus what a driver on loopback needs (`spark.driver.host` / `spark.driver.bindAddress` =
127.0.0.1 and SPARK_LOCAL_IP=127.0.0.1), and `spark.scheduler.minRegisteredResourcesRatio=1.0` so its
first job waits for both executors instead of running every task on whichever registered first.

The master's `spark.worker.timeout` stays at Spark's default (60 s): a SIGKILLed worker's RPC
connection is closed by the kernel, and the master marks the worker DEAD as soon as it sees the
disconnect (measured: within ~0.1 s of the kill), without waiting for missed heartbeats.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tools.procs import wait_for
from tools.sparkcluster import NODE_ENV, StandaloneCluster, running

log = logging.getLogger(__name__)

pytestmark = [pytest.mark.spark, pytest.mark.functional]

JOB_TIMEOUT = 120.0
"""A driver's JVM start, two executors' start and the job: ~12 s here."""
NOTICE_TIMEOUT = 15.0
"""How long the master may take to count a SIGKILLed worker out (it takes well under a second)."""
SQUARES = sum(x * x for x in range(100))

DRIVER = r"""
import json, os, sys
from spark_jobs.session import make_session

master, conf, node_env = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spark = make_session(master, app_name="standalone-test", conf=conf, log_level="WARN")
sc = spark.sparkContext


def job():
    def task(x):
        import spark_jobs.readers.pump_net as code  # the job's own code: from the zip the session shipped

        return os.getpid(), os.environ.get(node_env), x * x, code.__file__

    rows = sc.parallelize(range(100), 4).map(task).collect()
    print(json.dumps({"driver": os.getpid(), "rows": rows}), flush=True)


job()
for _ in sys.stdin:  # one more job per line; end of input ends the application
    job()
spark.stop()
"""


class Driver:
    """The driver subprocess: each job's result is one JSON line on its stdout; stderr goes to a file."""

    def __init__(self, cluster: StandaloneCluster, log_path: Path) -> None:
        conf = {
            **cluster.driver_conf(),
            "spark.executor.memory": "512m",
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        }
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, cluster.master_url, json.dumps(conf), NODE_ENV],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stdout: IO[str] | None) -> None:
        assert stdout is not None
        for line in stdout:
            self._lines.put(line)
        self._lines.put(None)

    def result(self, timeout: float = JOB_TIMEOUT) -> dict[str, Any]:
        """The next job's result: {"driver": pid, "rows": [[python worker pid, NODE_ENV value, x*x, a module's
        file], ...]}."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no job result within {timeout:.0f}s; driver log:\n{self.log_tail()}") from None
            if line is None:
                raise AssertionError(f"the driver exited ({self.proc.wait()}); its log:\n{self.log_tail()}")
            if line.startswith('{"driver"'):
                loaded: dict[str, Any] = json.loads(line)
                return loaded

    def run_again(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("again\n")
        self.proc.stdin.flush()
        return self.result()

    def finish(self, timeout: float = 60.0) -> int:
        """End of input: the driver stops its session and exits; its exit status."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        return self.proc.wait(timeout)

    def close(self) -> None:
        """Kill the driver if it still runs; close its pipes and log."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)  # the driver has exited: its stdout reaches end of file
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()
        self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def test_a_job_runs_on_both_workers_and_survives_a_killed_one(standalone: StandaloneCluster, tmp_path: Path) -> None:
    cluster = standalone
    assert cluster.alive_workers() == 2
    driver = Driver(cluster, tmp_path / "driver.log")
    try:
        first = driver.result()
        rows = first["rows"]
        assert sum(square for _, _, square, _ in rows) == SQUARES
        assert {Path(f).parts[-4:] for *_, f in rows} == {
            ("tidb_binlog_code.zip", "spark_jobs", "readers", "pump_net.py")
        }
        pids = {pid for pid, *_ in rows}
        assert len(pids) >= 2, f"every task ran in one Python process: {pids}"
        assert first["driver"] not in pids, "tasks ran in the driver, not on executors"
        nodes = {node for _, node, *_ in rows}
        assert nodes == {cluster.node_tag("worker-0"), cluster.node_tag("worker-1")}

        # worker 0 runs its JVM, the application's executor JVM, the Python daemon and its worker
        victims = cluster.pids("worker-0")
        assert len(victims) >= 4, victims
        assert pids & set(victims)
        began = time.monotonic()
        cluster.kill_worker(0)
        assert not [pid for pid in victims if running(pid)]
        wait_for(lambda: cluster.alive_workers() == 1, NOTICE_TIMEOUT, "the master to count worker 0 out")
        log.info("the master counted worker 0 out %.2fs after the SIGKILL", time.monotonic() - began)

        # the application goes on with the executor it has left
        second = driver.run_again()
        assert sum(square for _, _, square, _ in second["rows"]) == SQUARES
        assert {node for _, node, *_ in second["rows"]} == {cluster.node_tag("worker-1")}
        assert driver.finish() == 0, driver.log_tail()
    finally:
        driver.close()

    began = time.monotonic()
    cluster.restart_worker(0)  # the session's cluster is whole again for the next test
    assert cluster.alive_workers() == 2
    log.info("worker 0 ALIVE again %.1fs after its restart", time.monotonic() - began)
