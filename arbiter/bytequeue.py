"""A FIFO between two threads bounded by the bytes it holds, not by its item count.

`put` blocks while the queue holds something and the new item would take it past `capacity`; an
item larger than the capacity is admitted alone, so nothing waits forever.  `get` frees the item's
bytes as it hands it out.  `close` wakes every waiter and drops what is queued: `put` then drops its
item and returns False, `get` returns None.  `close_intake` only stops the puts: `get` hands out what
is queued, then returns None (`finished` says when that is so).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Generic, TypeVar

__all__ = ["ByteQueue"]

T = TypeVar("T")


class ByteQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1 byte")
        self.capacity = capacity
        self._items: deque[tuple[T, int]] = deque()
        self._bytes = 0
        self._closed = False
        self._intake_closed = False
        self._cv = threading.Condition()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T, nbytes: int) -> bool:
        """Append `item` of `nbytes` bytes, waiting for room; False (item dropped) once closed."""
        with self._cv:
            while not self._no_intake() and self._items and self._bytes + nbytes > self.capacity:
                self._cv.wait()
            if self._no_intake():
                return False
            self._items.append((item, nbytes))
            self._bytes += nbytes
            self._cv.notify_all()
            return True

    def put_many(self, items: Sequence[tuple[T, int]]) -> bool:
        """`put` of each (item, nbytes) in order under one lock, waking the taker once per wait rather than
        once per item; False (the rest dropped) once closed."""
        with self._cv:
            added = False
            for item, nbytes in items:
                while not self._no_intake() and self._items and self._bytes + nbytes > self.capacity:
                    if added:
                        self._cv.notify_all()
                        added = False
                    self._cv.wait()
                if self._no_intake():
                    return False
                self._items.append((item, nbytes))
                self._bytes += nbytes
                added = True
            if added:
                self._cv.notify_all()
            return True

    def get(self, timeout: float | None = None) -> T | None:
        """The oldest item, waiting up to `timeout` seconds for one; None on timeout or once closed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._items:
                if self._closed or self._intake_closed:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cv.wait(left)
            if self._closed:
                return None
            item, nbytes = self._items.popleft()
            self._bytes -= nbytes
            self._cv.notify_all()
            return item

    def _no_intake(self) -> bool:
        return self._closed or self._intake_closed

    @property
    def finished(self) -> bool:
        """Nothing more will come out: closed, or intake closed and empty."""
        with self._cv:
            return self._closed or (self._intake_closed and not self._items)

    def close_intake(self) -> None:
        """Refuse further puts (waking any); what is queued can still be taken (idempotent)."""
        with self._cv:
            self._intake_closed = True
            self._cv.notify_all()

    def close(self) -> None:
        """Wake every waiter and drop what is queued (idempotent)."""
        with self._cv:
            self._closed = True
            self._items.clear()
            self._bytes = 0
            self._cv.notify_all()
