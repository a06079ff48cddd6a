"""A closable FIFO bounded by a cost budget (bytes or items), drained in batches.

`put` blocks while the budget is used up (one item larger than the whole budget is admitted
alone, so nothing can wait forever), `put_nowait` says False instead; `get_batch` takes
everything already queued up to a count and cost limit without waiting for more, which is what
group commit needs; `wait_for` lets the consumer wait (bounded) for a batch to grow, woken once
when it has, not on every put.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Generic, TypeVar

from common.errors import StorageClosedError

__all__ = ["BoundedQueue"]

T = TypeVar("T")


class BoundedQueue(Generic[T]):
    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._items: deque[tuple[T, int]] = deque()
        self._cost = 0
        self._closed = False
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._enough = threading.Condition(self._lock)
        self._want_count = 0  # 0: nobody in wait_for
        self._want_cost = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def cost(self) -> int:
        return self._cost

    def put(self, item: T, cost: int = 1, timeout: float | None = None) -> bool:
        """Queue `item`; False if the budget stayed full for `timeout` seconds.  Raises
        StorageClosedError once the queue is closed."""
        with self._lock:
            if self._cost and self._cost + cost > self._capacity and not self._closed:
                deadline = None if timeout is None else time.monotonic() + timeout
                while self._cost and self._cost + cost > self._capacity and not self._closed:
                    if deadline is None:
                        self._not_full.wait()
                    else:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            return False
                        self._not_full.wait(remaining)
            if self._closed:
                raise StorageClosedError("queue closed")
            self._add(item, cost)
            return True

    def put_nowait(self, item: T, cost: int = 1) -> bool:
        """Queue `item` if the budget has room now (the same rule as `put`), else False.  Raises
        StorageClosedError once the queue is closed."""
        with self._lock:
            if self._closed:
                raise StorageClosedError("queue closed")
            if self._cost and self._cost + cost > self._capacity:
                return False
            self._add(item, cost)
            return True

    def _add(self, item: T, cost: int) -> None:
        self._items.append((item, cost))
        self._cost += cost
        self._not_empty.notify()
        if self._want_count and (len(self._items) >= self._want_count or self._cost >= self._want_cost):
            self._want_count = 0
            self._enough.notify()

    def wait_for(self, count: int, cost: int, timeout: float | None = None) -> None:
        """Wait (up to `timeout` seconds) until `count` items or `cost` are queued, or the queue is closed."""
        with self._lock:
            if self._closed or len(self._items) >= count or self._cost >= cost:
                return
            self._want_count, self._want_cost = count, cost
            try:
                self._enough.wait(timeout)
            finally:
                self._want_count = 0

    def get_batch(self, max_items: int, max_cost: int | None = None, timeout: float | None = None) -> list[T] | None:
        """Up to `max_items` items (and `max_cost`, but at least one) already queued, waiting up to
        `timeout` for the first; [] on timeout; None when the queue is closed and empty."""
        with self._lock:
            if not self._items:
                if self._closed:
                    return None
                self._not_empty.wait(timeout)
                if not self._items:
                    return None if self._closed else []
            items = self._items
            out: list[T] = []
            total = 0
            while items and len(out) < max_items:
                item, cost = items[0]
                if out and max_cost is not None and total + cost > max_cost:
                    break
                items.popleft()
                out.append(item)
                total += cost
            self._cost -= total
            self._not_full.notify_all()
            return out

    def close(self) -> None:
        """No more puts; gets drain what is queued, then return None."""
        with self._lock:
            self._closed = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
            self._enough.notify_all()
