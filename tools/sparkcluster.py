"""A real Spark standalone cluster on loopback: one master and N workers, each a JVM of its own.

The processes are started with the `spark-class` launcher of the pyspark wheel (SPARK_HOME is the
pyspark package directory), so nothing beyond the test extra and a Java runtime is needed:

    with StandaloneCluster(tmp_path, workers=2) as cluster:
        make_session(cluster.master_url, conf=cluster.driver_conf())   # in another process
        cluster.kill_worker(0)                                          # as a crash would

What a worker leaves behind is more than its own JVM.  For each application it launches an executor
JVM (a child in the worker's process group), and the executor starts `python -m pyspark.daemon`,
which moves itself into a process group of its own (`os.setpgid(0, 0)`) and forks the Python
workers there.  Signalling the worker's process group therefore misses the daemon and its forks.  So
every process of this cluster carries an environment variable naming its cluster and node
(`SPARK_STANDALONE_NODE=<cluster id>/worker-0`); executors and the Python daemon inherit the
worker's environment, and `/proc/<pid>/environ` tells us which processes belong to a node however
they were re-parented.  `kill_worker` and `stop` signal those processes (and their groups), and wait
until none is left.

Every process logs to `<workdir>/<node>.log`; a timeout or an early exit raises with the logs' tails.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import signal
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from tools.procs import ManagedProcess, ProcessError, free_ports, wait_for

log = logging.getLogger(__name__)

__all__ = ["NODE_ENV", "StandaloneCluster", "WorkerProcess", "running", "spark_class"]

HOST: Final = "127.0.0.1"
NODE_ENV: Final = "SPARK_STANDALONE_NODE"
"""Environment variable `<cluster id>/<node>` carried by every process of a node (see the module docstring)."""
START_TIMEOUT: Final = 90.0
STOP_TIMEOUT: Final = 20.0
_JSON_TIMEOUT: Final = 2.0


def spark_class() -> Path:
    """The `spark-class` launcher shipped in the pyspark wheel (bin/ of the package directory)."""
    import pyspark

    launcher = Path(pyspark.__file__).resolve().parent / "bin" / "spark-class"
    if not launcher.is_file():
        raise FileNotFoundError(f"no spark-class in the pyspark package: {launcher}")
    return launcher


@dataclass
class WorkerProcess:
    """One worker: its process (the Worker JVM, in a process group of its own) and its ports."""

    index: int
    process: ManagedProcess
    port: int = 0
    webui_port: int = 0

    @property
    def node(self) -> str:
        return f"worker-{self.index}"


def running(pid: int) -> bool:
    """Whether `pid` is a process that still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _node_pids(tag: str) -> list[int]:
    """Running processes whose environment holds `NODE_ENV=<tag>`."""
    needle = f"{NODE_ENV}={tag}".encode()
    found: list[int] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:  # gone, or not ours
            continue
        if needle in environ.split(b"\0") and running(int(entry.name)):
            found.append(int(entry.name))
    return found


def _signal_all(pids: list[int], sig: signal.Signals) -> None:
    """`sig` to each pid and to its process group (a Python daemon leads a group of its forked workers);
    never to this process or its group."""
    own_group = os.getpgrp()
    for pid in pids:
        if pid == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group != own_group:
                os.killpg(group, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class StandaloneCluster:
    """A Spark standalone master and `workers` workers on 127.0.0.1, every file under `workdir`.

    `start()` returns once the master reports every worker ALIVE; `stop()` (idempotent, also run at
    interpreter exit) leaves no process of the cluster behind.  Should this process die without
    either, the master and worker JVMs get SIGKILL with it (ManagedProcess's parent-death signal) and
    the executors and Python daemons exit once their worker is gone (seen: nothing left after 1 s).

    `worker_timeout` sets `spark.worker.timeout` (seconds; Spark's default is 60) on the master, which
    marks a worker DEAD after that long without heartbeats, and on the workers, which send one every
    quarter of it: setting it on the master alone makes it count healthy workers out.  A SIGKILLed
    worker needs none of this: the master sees its connection close and marks it DEAD at once."""

    def __init__(
        self,
        workdir: Path,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        worker_timeout: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError("a cluster needs at least one worker")
        self.workdir = workdir
        self.id = uuid.uuid4().hex[:12]
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.worker_timeout = worker_timeout
        self._launcher = spark_class()
        self.spark_home = self._launcher.parent.parent
        self.port, self.webui_port = free_ports(2, HOST)
        for sub in ("logs", "pids", "conf", "local"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        self.master = ManagedProcess(
            "spark-master",
            [
                str(self._launcher),
                "org.apache.spark.deploy.master.Master",
                *("--host", HOST, "--port", str(self.port), "--webui-port", str(self.webui_port)),
            ],
            workdir / "master.log",
            env=self._env("master"),
            cwd=workdir,
        )
        self.workers: list[WorkerProcess] = [
            WorkerProcess(i, ManagedProcess(f"spark-worker-{i}", [], workdir / f"worker-{i}.log", cwd=workdir))
            for i in range(workers)
        ]
        self._killed: list[ManagedProcess] = []
        """Workers `kill_worker` killed (and not restarted): their exit is no error."""
        self._started = False
        self._stopped = False

    # ------------------------------------------------------------------------------------ addresses
    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def node_tag(self, node: str) -> str:
        """The value of NODE_ENV in the processes of `node` ("master", "worker-0", ...)."""
        return f"{self.id}/{node}"

    def pids(self, node: str) -> list[int]:
        """The running processes of `node`: its JVM and, on a worker, executors and their Python processes."""
        return _node_pids(self.node_tag(node))

    def python_pids(self, node: str) -> list[int]:
        """The Python processes of `node` (PySpark's daemon and its workers): a Python task ran there."""
        out = []
        for pid in self.pids(node):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"pyspark.daemon" in argv or b"pyspark.worker" in argv:  # `python -m pyspark.daemon` and its forks
                out.append(pid)
        return out

    @staticmethod
    def driver_conf() -> dict[str, str]:
        """What a driver on this machine needs to be reachable by the executors: a loopback address."""
        return {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST}

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self, timeout: float = START_TIMEOUT) -> StandaloneCluster:
        """Start the master, then the workers; return when the master reports all of them ALIVE."""
        if self._started:
            raise ProcessError("the cluster was started already")
        self._started = True
        atexit.register(self.stop)
        began = time.monotonic()
        try:
            self.master.start()
            self.master.wait_ready(self._master_answers, timeout)
            for worker in self.workers:
                self._start_worker(worker)
            self.wait_alive(len(self.workers), timeout - (time.monotonic() - began))
        except BaseException:
            self.stop()
            raise
        log.info("spark standalone cluster up in %.1fs: %s", time.monotonic() - began, self.master_url)
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM every node's process group (the workers first: each stops its executors), wait up to
        `timeout` for each, SIGKILL the group of one that does not exit; then SIGKILL whatever process of
        the cluster is left (a Python daemon leads a group of its own) and return when none runs."""
        if self._stopped:
            return
        self._stopped = True
        atexit.unregister(self.stop)
        began = time.monotonic()
        workers = [w.process for w in self.workers]
        for process in workers:  # all at once: the JVMs' shutdown hooks run in parallel
            if process.alive and process.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for process in [*workers, self.master]:
            process.stop(timeout)
        leftovers: list[str] = []
        for node in ["master", *(w.node for w in self.workers)]:
            try:
                self._kill_node(node)
            except ProcessError as exc:
                leftovers.append(str(exc))
        if leftovers:
            raise ProcessError("; ".join(leftovers))
        log.info("spark standalone cluster %s stopped in %.1fs", self.master_url, time.monotonic() - began)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------ workers
    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i`: its JVM, its executors and their Python daemons and workers, as a crash of
        that machine would; return when none of them runs any more."""
        worker = self.workers[i]
        self._killed.append(worker.process)
        worker.process.kill9()
        self._kill_node(worker.node)
        log.info("killed spark worker %d", i)

    def restart_worker(self, i: int, timeout: float = START_TIMEOUT) -> None:
        """Start worker `i` again (new ports, same work dir) and wait until the master counts it ALIVE."""
        worker = self.workers[i]
        if worker.process.alive:
            raise ProcessError(f"spark worker {i} is running")
        self._start_worker(worker)
        # every running worker, once the master has counted out the killed ones it still lists as ALIVE
        self.wait_alive(sum(1 for w in self.workers if w.process.alive), timeout)

    def alive_workers(self) -> int:
        """How many workers the master reports ALIVE (a dead worker stays listed, as DEAD)."""
        return sum(1 for w in self.state()["workers"] if w.get("state") == "ALIVE")

    def wait_alive(self, n: int, timeout: float) -> None:
        """Wait until the master reports exactly `n` workers ALIVE; raise with the logs' tails if not."""
        try:
            wait_for(lambda: self._alive_or_raise() == n, timeout, f"{n} ALIVE spark workers", interval=0.2)
        except TimeoutError as exc:
            raise ProcessError(f"{exc} (the master reports {self._alive_or_none()}); {self.logs()}") from exc

    def state(self) -> dict[str, Any]:
        """The master's JSON status (`/json/`): workers with their state, applications, ..."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=_JSON_TIMEOUT) as resp:
            loaded: dict[str, Any] = json.loads(resp.read())
        return loaded

    def logs(self, lines: int = 30) -> str:
        """The tail of every node's log, for an error message or a failed test's report."""
        parts = [f"===== {p.name} ({p.log_path}) =====\n{p.log_tail(lines)}" for p in self._processes()]
        return "\n".join(parts)

    # ------------------------------------------------------------------------------------ internals
    def _processes(self) -> list[ManagedProcess]:
        return [self.master, *(w.process for w in self.workers)]

    def _env(self, node: str) -> dict[str, str]:
        env = {
            **os.environ,
            "SPARK_HOME": str(self.spark_home),
            "SPARK_CONF_DIR": str(self.workdir / "conf"),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(self.workdir / "logs"),
            "SPARK_PID_DIR": str(self.workdir / "pids"),
            "SPARK_WORKER_DIR": str(self.workdir / "work"),
            "SPARK_LOCAL_DIRS": str(self.workdir / "local"),
            "PYSPARK_PYTHON": sys.executable,
            NODE_ENV: self.node_tag(node),
        }
        if self.worker_timeout is not None:  # read by both sides: the master's limit, the workers' heartbeats
            opts = f"-Dspark.worker.timeout={self.worker_timeout}"
            env["SPARK_MASTER_OPTS"] = env["SPARK_WORKER_OPTS"] = opts
        return env

    def _start_worker(self, worker: WorkerProcess) -> None:
        worker.port, worker.webui_port = free_ports(2, HOST)
        work_dir = self.workdir / worker.node
        work_dir.mkdir(parents=True, exist_ok=True)
        worker.process.argv = [
            str(self._launcher),
            "org.apache.spark.deploy.worker.Worker",
            *("--host", HOST, "--cores", str(self.worker_cores), "--memory", self.worker_memory),
            *("--port", str(worker.port), "--webui-port", str(worker.webui_port), "--work-dir", str(work_dir)),
            self.master_url,
        ]
        worker.process.env = self._env(worker.node)
        if worker.process in self._killed:
            self._killed.remove(worker.process)
        worker.process.start()

    def _master_answers(self) -> bool:
        try:
            self.state()
        except (urllib.error.URLError, OSError, ValueError):
            return False
        return True

    def _alive_or_raise(self) -> int:
        """ALIVE workers, -1 while the master does not answer; ProcessError when a node exited unasked."""
        exited = [p.name for p in self._processes() if p.proc is not None and not p.alive and p not in self._killed]
        if exited:
            raise ProcessError(f"{', '.join(exited)} exited; {self.logs()}")
        alive = self._alive_or_none()
        return -1 if alive is None else alive

    def _alive_or_none(self) -> int | None:
        try:
            return self.alive_workers()
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def _kill_node(self, node: str, timeout: float = 10.0) -> None:
        """SIGKILL every process of `node` (found by NODE_ENV) until none is left."""

        def none_left() -> bool:
            pids = self.pids(node)
            _signal_all(pids, signal.SIGKILL)
            return not pids

        try:
            wait_for(none_left, timeout, f"the processes of spark {node} to exit", interval=0.1)
        except TimeoutError as exc:
            raise ProcessError(f"{exc}: {self.pids(node)}") from exc
