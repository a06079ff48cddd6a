"""SIGTERM / SIGINT handled on an ordinary thread, never inside a Python signal handler.

A Python signal handler runs in the main thread between two bytecodes, possibly while that thread
holds a lock: `threading.Event.wait()` holds its condition's plain (non-reentrant) `Lock` on the way
in and out of the wait, and a logging call or a node transition holds others.  A handler that takes
such a lock again (`Event.set()`, a state change) deadlocks the main thread for good, and the
process then ignores every further SIGTERM.  So the handler here does one thing that takes no
Python lock, writing the signal number to a pipe; a daemon thread reads the pipe and calls
`on_signal(signum)` with no lock of the main thread's held.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_QUIT = 0
"""Written by close(): no signal has number 0."""


class SignalWatcher:
    """Installs handlers for `signals` (main thread only) that hand each one to `on_signal` on a thread;
    close() puts the previous handlers back."""

    def __init__(self, on_signal: Callable[[int], None], signals: Iterable[int] = STOP_SIGNALS) -> None:
        self._on_signal = on_signal
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # a full pipe drops a signal instead of blocking the handler
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="signals", daemon=True)
        self._thread.start()
        self._previous = {signum: signal.signal(signum, self._handler) for signum in signals}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(OSError):  # pipe full: a stop is already under way
            os.write(self._write_fd, bytes([signum]))

    def _run(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == _QUIT:
                    return
                try:
                    self._on_signal(signum)
                except Exception:
                    log.exception("handling signal %d failed", signum)

    def close(self) -> None:
        """Put the previous handlers back and stop the thread (main thread only). Idempotent.

        The handler runs only in the main thread, so once close() (also in the main thread) has put
        the previous handlers back, nothing writes to the pipe any more and it can be closed."""
        if self._closed:
            return
        self._closed = True
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        with contextlib.suppress(OSError):
            os.write(self._write_fd, bytes([_QUIT]))
        self._thread.join(timeout=5)
        os.close(self._write_fd)
        if not self._thread.is_alive():  # else a callback is stuck: its read end stays open
            os.close(self._read_fd)
