"""The playground's record of itself: ``<dir>/playground.json``, liveness checks and ``--stop``.

The file says which processes a playground started (pid and argv), on which ports, with
which downstream, and its status (``starting``, ``running``, ``kept``, ``stopped``).  It is
rewritten after every change, so a ``--stop`` finds even a half-started cluster.  A pid is
taken as ours only while ``/proc/<pid>/cmdline`` still equals the recorded argv, so a pid
reused by an unrelated process is never signalled.

A directory is locked (``fcntl.flock`` on ``<dir>/playground.lock``) for as long as a
playground process runs in it; a kept cluster outlives that lock, and its live pids are what
stop another playground from starting in the same directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

STATE_FILE = "playground.json"
LOCK_FILE = "playground.lock"
STATE_VERSION = 1
STOP_TIMEOUT = 15.0
"""Seconds a process gets to stop after SIGTERM before SIGKILL."""


@dataclass
class ProcRecord:
    name: str
    pid: int
    argv: list[str]
    log: str


@dataclass
class State:
    """What ``playground.json`` holds."""

    status: str = "starting"
    owner_pid: int = 0
    owner_argv: list[str] = field(default_factory=list)
    downstream: str = "sqlite"
    databases: list[str] = field(default_factory=list)
    """Logical databases the playground's workloads wrote (dropped downstream by ``--clean``)."""
    cluster_id: int = 0
    pumps: int = 0
    ports: dict[str, int] = field(default_factory=dict)
    processes: list[ProcRecord] = field(default_factory=list)
    version: int = STATE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> State:
        doc: dict[str, Any] = json.loads(text)
        procs = [ProcRecord(**p) for p in doc.pop("processes", [])]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in doc.items() if k in known}, processes=procs)

    def record(self, name: str, pid: int | None, argv: list[str], log: Path) -> None:
        """Note (or replace) the process called `name`."""
        self.processes = [p for p in self.processes if p.name != name]
        if pid is not None:
            self.processes.append(ProcRecord(name, pid, argv, str(log)))


def state_path(base: Path) -> Path:
    return base / STATE_FILE


def load_state(base: Path) -> State | None:
    """The recorded state, or None when there is none (or it is unreadable)."""
    try:
        return State.from_json(state_path(base).read_text())
    except (OSError, ValueError, TypeError):
        return None


def save_state(base: Path, state: State) -> None:
    """Write the state atomically (a reader never sees half a file)."""
    path = state_path(base)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.to_json())
    os.replace(tmp, path)


def cmdline(pid: int) -> list[str] | None:
    """The argv of a live process, None when it is gone (or unreadable: then only its existence is known)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return None
    except OSError:
        return [] if _exists(pid) else None
    if not raw:
        return None  # a zombie
    return raw.rstrip(b"\0").decode(errors="replace").split("\0")


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_alive(pid: int, argv: list[str]) -> bool:
    """The process `pid` is alive and still runs `argv` (not a reused pid)."""
    if pid <= 0:
        return False
    current = cmdline(pid)
    if current is None:
        return False
    if not Path("/proc").is_dir():
        return True  # no /proc: existence is all we can know
    return current == argv


def live_pids(state: State) -> list[tuple[str, int]]:
    """(name, pid) of the recorded processes, owner included, that still run."""
    found = [("playground", state.owner_pid)] if is_alive(state.owner_pid, state.owner_argv) else []
    found += [(p.name, p.pid) for p in state.processes if is_alive(p.pid, p.argv)]
    return found


class DirLock:
    """An exclusive, non-blocking lock on a playground directory, held while a playground runs in it."""

    def __init__(self, base: Path) -> None:
        self.path = base / LOCK_FILE
        self._file: IO[bytes] | None = None

    def acquire(self) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        f = open(self.path, "ab")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.close()
            return False
        self._file = f
        return True

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def signal_group(pid: int, sig: signal.Signals) -> None:
    """Signal the process group of `pid` (each playground process leads its own group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def wait_gone(pid: int, argv: list[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_alive(pid, argv):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def stop_recorded(base: Path, say: Any = print) -> int:
    """``binlog-playground --stop``: stop what the state of `base` says runs; the number of processes stopped.

    A playground process that still runs is asked to stop (SIGTERM: it stops its cluster in
    order).  Then every recorded process still alive gets SIGTERM, in reverse start order
    (drainer, pumps, pd-server, etcd), and SIGKILL after :data:`STOP_TIMEOUT`.
    """
    state = load_state(base)
    if state is None:
        return 0
    stopped = 0
    if is_alive(state.owner_pid, state.owner_argv):
        say(f"asking the playground process (pid {state.owner_pid}) to stop its cluster")
        os.kill(state.owner_pid, signal.SIGTERM)
        if not wait_gone(state.owner_pid, state.owner_argv, STOP_TIMEOUT * 4):
            say(f"playground process {state.owner_pid} did not stop; killing it")
            os.kill(state.owner_pid, signal.SIGKILL)
        stopped += 1
    for p in reversed(state.processes):
        if not is_alive(p.pid, p.argv):
            continue
        signal_group(p.pid, signal.SIGTERM)
        if wait_gone(p.pid, p.argv, STOP_TIMEOUT):
            say(f"stopped {p.name} (pid {p.pid})")
        else:
            signal_group(p.pid, signal.SIGKILL)
            wait_gone(p.pid, p.argv, 5.0)
            say(f"killed {p.name} (pid {p.pid}): it did not stop within {STOP_TIMEOUT:.0f}s")
        stopped += 1
    state = load_state(base) or state
    state.status = "stopped"
    save_state(base, state)
    return stopped
