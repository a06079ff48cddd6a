"""Small concurrency primitives shared by the storage's threads and readers.

`Watermark` publishes maxCommitTS and wakes pullers when it advances (instead of the original's
100 ms poll).  `ReaderGate` lets readers (pull, get_binlog, gc, check) use the index and vlog
while the storage is open, and lets close() wait until the last of them has left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from common.errors import StorageClosedError

__all__ = ["ReaderGate", "Watermark"]


class Watermark:
    def __init__(self, value: int = 0) -> None:
        self._value = value
        self._closed = False
        self._cond = threading.Condition()

    @property
    def value(self) -> int:
        return self._value

    @property
    def closed(self) -> bool:
        return self._closed

    def advance(self, value: int) -> None:
        """Publish a new watermark (ignored unless higher) and wake every waiter."""
        if value > self._value:
            with self._cond:
                if value > self._value:
                    self._value = value
                    self._cond.notify_all()

    def wait_above(self, ts: int, timeout: float) -> int:
        """Wait up to `timeout` for the watermark to pass `ts`; the current value either way."""
        if self._value > ts or self._closed:
            return self._value
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._value <= ts and not self._closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return self._value

    def close(self) -> None:
        """Wake every waiter for good (the storage is closing)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


class ReaderGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @contextmanager
    def enter(self) -> Iterator[None]:
        """Run the block while the storage is open; StorageClosedError once it is closing."""
        with self._cond:
            if self._closed:
                raise StorageClosedError("storage is closed")
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                if self._active == 0:
                    self._cond.notify_all()

    def close(self) -> None:
        """Refuse new readers and wait for the ones inside to leave."""
        with self._cond:
            self._closed = True
            while self._active:
                self._cond.wait()
