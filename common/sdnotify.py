"""systemd's notify protocol (sd_notify(3)), client side: tell the service manager when we serve and stop.

Protocol.  systemd passes `NOTIFY_SOCKET` in the environment of a `Type=notify` service: a filesystem
path (`/run/systemd/notify`) or an abstract socket name (`@name`, a leading NUL on the wire).  The
daemon sends newline-separated `KEY=VALUE` assignments as ONE datagram on an AF_UNIX SOCK_DGRAM socket:

    READY=1            start-up is finished: the daemon serves (systemd starts the units ordered after it)
    STOPPING=1         a shutdown began (systemd shows `deactivating` and stops waiting for READY)
    STATUS=<text>      one line shown by `systemctl status`
    WATCHDOG=1         keep-alive; required at least every WATCHDOG_USEC microseconds when systemd set it

With `NotifyAccess=main` systemd accepts datagrams only from the main pid, which is why the daemons
send them themselves and never from a child process.

`WATCHDOG_USEC` (and `WATCHDOG_PID`: the pid it is meant for; ignore it if that is not us) come with
`WatchdogSec=`.  `Watchdog` pings every WATCHDOG_USEC / 2 from a daemon thread: a process whose
interpreter is wedged (a deadlock holding the GIL, a stuck C call) stops pinging and systemd
restarts it.  It does not prove that every component makes progress.

Without `NOTIFY_SOCKET` (not under systemd, or under Type=simple) every call is a no-op, so daemons
call these unconditionally.  A send that fails is logged once and never stops the daemon.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Final

log = logging.getLogger(__name__)

ENV_SOCKET: Final = "NOTIFY_SOCKET"
ENV_WATCHDOG_USEC: Final = "WATCHDOG_USEC"
ENV_WATCHDOG_PID: Final = "WATCHDOG_PID"
_UNIX_PATH_MAX: Final = 108
"""sizeof(sockaddr_un.sun_path) on Linux: a longer path (or abstract name) cannot be addressed."""


def socket_address(value: str) -> str | bytes | None:
    """The sendto() address of a NOTIFY_SOCKET value, or None when it is empty or not a unix socket.

    `@name` is an abstract socket (bytes with a leading NUL); an absolute path is a filesystem
    socket.  Anything else (a relative path, systemd 253's `vsock:` addresses) is not ours to
    reach: the caller logs it and notifies nothing.
    """
    if not value:
        return None
    if value.startswith("@"):
        name = b"\0" + value[1:].encode()
        return name if len(name) <= _UNIX_PATH_MAX else None
    if value.startswith("/") and len(value.encode()) < _UNIX_PATH_MAX:
        return value
    return None


def watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Seconds between WATCHDOG=1 pings (half of WATCHDOG_USEC), or None when no watchdog is asked of `pid`.

    As sd_watchdog_enabled(3): WATCHDOG_USEC must be a positive integer, and WATCHDOG_PID, when set,
    must be `pid` (the variables are inherited by children, which must not ping for their parent).
    Raises ValueError naming the variable when one is set but malformed.
    """
    raw = env.get(ENV_WATCHDOG_USEC, "")
    if not raw:
        return None
    try:
        usec = int(raw)
    except ValueError:
        raise ValueError(f"{ENV_WATCHDOG_USEC}={raw!r} is not a whole number of microseconds") from None
    if usec <= 0:
        raise ValueError(f"{ENV_WATCHDOG_USEC}={raw!r} must be > 0")
    owner = env.get(ENV_WATCHDOG_PID, "")
    if owner:
        try:
            owner_pid = int(owner)
        except ValueError:
            raise ValueError(f"{ENV_WATCHDOG_PID}={owner!r} is not a pid") from None
        if owner_pid != pid:
            return None
    return usec / 1_000_000 / 2


class Notifier:
    """Sends notify datagrams to the socket named by NOTIFY_SOCKET; a no-op without one."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = dict(os.environ if env is None else env)
        raw = self._env.get(ENV_SOCKET, "")
        self._address = socket_address(raw)
        self._sock: socket.socket | None = None
        self._warned = False
        if raw and self._address is None:
            log.warning("%s=%r is not a unix socket this daemon can reach: systemd is not notified", ENV_SOCKET, raw)
        elif self._address is not None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def notify(self, *assignments: str) -> bool:
        """Send `KEY=VALUE` assignments as one datagram; True if it was sent.

        sendto() of one datagram is atomic, so the watchdog thread, the main thread and a signal
        handler may all call this without a lock (a lock could deadlock a handler that interrupts
        its own thread inside this method).
        """
        sock, address = self._sock, self._address
        if sock is None or address is None:
            return False
        message = "\n".join(assignments).encode()
        try:
            sock.sendto(message, address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("cannot notify systemd through %s: %s", self._env.get(ENV_SOCKET), exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.notify("READY=1", *((f"STATUS={_one_line(status)}",) if status else ()))

    def stopping(self, status: str = "") -> bool:
        return self.notify("STOPPING=1", *((f"STATUS={_one_line(status)}",) if status else ()))

    def status(self, text: str) -> bool:
        return self.notify(f"STATUS={_one_line(text)}")

    def watchdog_ping(self) -> bool:
        return self.notify("WATCHDOG=1")

    def start_watchdog(self) -> Watchdog | None:
        """Start pinging when systemd asked this process for a watchdog; None when it did not.

        A malformed WATCHDOG_USEC / WATCHDOG_PID is logged and treated as no watchdog (what
        sd_watchdog_enabled does): systemd then restarts us for the missing pings, which says more
        than a daemon that refuses to start.
        """
        if not self.enabled:
            return None
        try:
            interval = watchdog_interval(self._env, os.getpid())
        except ValueError as exc:
            log.warning("no watchdog pings: %s", exc)
            return None
        if interval is None:
            return None
        dog = Watchdog(self, interval)
        dog.start()
        return dog

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


class Watchdog:
    """A daemon thread that sends WATCHDOG=1 every `interval` seconds until `stop()`."""

    def __init__(self, notifier: Notifier, interval: float) -> None:
        self.interval = interval
        self._notifier = notifier
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sd-watchdog", daemon=True)

    def start(self) -> None:
        log.info("systemd watchdog: pinging every %.3fs", self.interval)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._notifier.watchdog_ping()
            if self._stop.wait(self.interval):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


def _one_line(text: str) -> str:
    """STATUS= ends at a newline, which would start a new (bogus) assignment."""
    return " ".join(text.split())
