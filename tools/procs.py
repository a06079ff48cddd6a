"""Real processes on loopback: start, wait for readiness, stop, kill -9, restart.

Used by the local playground and by the test harness, so both run the same
way: every process writes its log to a file, readiness is a condition polled
with a deadline (never a fixed sleep), and a process that dies while we wait
for it raises with the tail of its log.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from common.backoff import poll_until

log = logging.getLogger(__name__)


_PR_SET_PDEATHSIG = 1


_SETPRIV = shutil.which("setpriv")
"""util-linux `setpriv --pdeathsig`: the child dies with its parent without a `preexec_fn`.  A
`preexec_fn` forces a plain fork(), and in a process with gRPC threads gRPC's fork handlers can then
abort the child (`epoll_wait ... Bad file descriptor`); the `prctl` below is only the fallback."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the parent's own cleanup still stops the child


class ProcessError(RuntimeError):
    """A managed process failed to start, died, or did not become ready."""


_PORT_CLASH = re.compile(r"address already in use|cannot listen on|failed to bind", re.IGNORECASE)
"""What a process of ours logs when its port is taken: etcd says "bind: address already in use", pump,
drainer and pd-server "cannot listen on <addr>: ..." (gRPC's own text is "Failed to bind")."""


def port_clash(log_text: str) -> bool:
    """Whether a process that exited with this log failed because a port it was to listen on was taken."""
    return _PORT_CLASH.search(log_text) is not None


def swap_port(argv: Sequence[str], host: str, old: int, new: int) -> list[str]:
    """`argv` with every `host:old` (not followed by another digit) written `host:new`."""
    pattern = re.compile(re.escape(f"{host}:{old}") + r"(?!\d)")
    return [pattern.sub(f"{host}:{new}", a) for a in argv]


_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_PICKED_PORT = 10000
"""Ports are picked in [10000, start of the kernel's ephemeral range): a port handed out by bind(0) is
an ephemeral one, and any outgoing connection of any process may take it as its source port before
our process listens on it (or between a stop and a restart on the same port)."""


def _pickable_range() -> range | None:
    try:
        low = int(_EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return range(_LOWEST_PICKED_PORT, low) if low - _LOWEST_PICKED_PORT >= 1000 else None


def _bound_sockets(n: int, host: str) -> list[socket.socket]:
    """`n` sockets bound to distinct free ports of `host`, below the ephemeral range where it can be."""
    socks: list[socket.socket] = []
    pickable = _pickable_range()
    try:
        for port in random.sample(pickable, min(len(pickable), 50 * n)) if pickable else []:
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((host, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < n:  # no usable range, or it is full: let the kernel choose
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on `host`, outside the kernel's ephemeral range."""
    return free_ports(1, host)[0]


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """`n` distinct TCP ports that are free right now (all bound at once, so none is handed out twice)."""
    socks = _bound_sockets(n, host)
    try:
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(cond: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll `cond` until it is true or raise TimeoutError (`common.backoff.WaitTimeoutError`) naming `what`."""
    poll_until(lambda: True if cond() else None, timeout, interval, what=what)


class ManagedProcess:
    """One child process with its own log file and process group."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = True,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(os.environ if env is None else env)
        self.cwd = cwd
        self.die_with_parent = die_with_parent
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive:
            raise ProcessError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as logf:
            logf.write(f"--- start {self.name}: {' '.join(self.argv)}\n".encode())
            logf.flush()
            self._log_start = logf.tell()
            argv, preexec = self.argv, None
            if self.die_with_parent:
                if _SETPRIV:  # exec-time death signal: no Python code between fork and exec
                    argv = [_SETPRIV, "--pdeathsig", "KILL", "--", *self.argv]
                else:
                    preexec = _die_with_parent
            self.proc = subprocess.Popen(
                argv,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=preexec,  # noqa: PLW1509
            )
        log.info("started %s (pid %d)", self.name, self.proc.pid)

    def wait_ready(self, cond: Callable[[], bool], timeout: float) -> None:
        """Wait until `cond()`; raise with the log tail if the process exits first."""

        def check() -> bool:
            if not self.alive:
                code = self.proc.returncode if self.proc else None
                raise ProcessError(f"{self.name} exited with status {code}; log tail:\n{self.log_tail()}")
            return cond()

        try:
            wait_for(check, timeout, f"{self.name} to become ready")
        except TimeoutError as exc:
            raise ProcessError(f"{exc}; log tail:\n{self.log_tail()}") from exc

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after `timeout`. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", self.name, timeout)
                self.kill9()
        self._reap_group()
        return self.proc.returncode

    def kill9(self) -> None:
        """SIGKILL the whole process group, as a crash would."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired as exc:
            raise ProcessError(f"{self.name} (pid {self.proc.pid}) survived SIGKILL for 10 s") from exc
        self._reap_group()

    def _reap_group(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def log_since_start(self) -> str:
        """What the process wrote since its last `start()` (the log file is appended to across starts)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def python_module_argv(module: str, *args: str) -> list[str]:
    """argv that runs one of our modules with the current interpreter."""
    return [sys.executable, "-m", module, *args]
