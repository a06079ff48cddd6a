"""The TSO allocator core: hands out strictly increasing timestamps.

No I/O of its own: the clock and the persistence of the window's upper bound
are injected, so it is unit-tested with a fake clock.

Invariant: every physical part handed out is below `saved_upper`, and
`saved_upper` is persisted before any such timestamp leaves the allocator.
After a restart the allocator starts at ``max(now, last_saved_upper + 1)``, so
a restarted pd-server never hands out a timestamp at or below an earlier one,
even after `kill -9` or a clock that went backwards.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from common import tso
from common.errors import UnavailableError
from common.tso import MAX_LOGICAL

log = logging.getLogger(__name__)

DEFAULT_SAVE_INTERVAL_MS = 3000
"""How far ahead of the current physical time the window is persisted (PD: tso-save-interval 3 s)."""
_REFRESH_MARGIN_MS = 1000
"""tick() persists a new window when the current one has less than this left."""


class TsoAllocator:
    """Thread-safe allocator of TSO ranges.

    Locking: `_lock` guards the in-memory state and is never held while calling out.  The persist
    callback may block on etcd for seconds and may end the term (call `invalidate()`), so it runs
    outside `_lock`, under `_save_lock` only, which orders saves and which `allocate()` and
    `invalidate()` never take: a stuck save delays neither, and a save's callback may call any method
    except `tick()`.  Only `tick()` saves; `allocate()` never does I/O, and refuses to hand out a
    physical part at or past the saved upper bound (the caller retries once `tick()` saved more).
    """

    def __init__(
        self,
        last_saved_upper_ms: int,
        persist: Callable[[int], None],
        *,
        clock: Callable[[], int] = tso.now_ms,
        save_interval_ms: int = DEFAULT_SAVE_INTERVAL_MS,
    ) -> None:
        if save_interval_ms <= _REFRESH_MARGIN_MS:
            raise ValueError(f"save interval {save_interval_ms} ms must exceed {_REFRESH_MARGIN_MS} ms")
        self._persist = persist
        self._clock = clock
        self._save_interval = save_interval_ms
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        start = max(clock(), last_saved_upper_ms + 1)
        self._physical = start
        self._logical = 0
        self._valid = True
        persist(start + save_interval_ms)  # no other thread knows this allocator yet
        self._saved_upper = start + save_interval_ms
        log.info("tso allocator starts at physical=%d (last saved upper %d)", start, last_saved_upper_ms)

    @property
    def saved_upper(self) -> int:
        return self._saved_upper

    @property
    def valid(self) -> bool:
        return self._valid

    def invalidate(self) -> None:
        """Stop for good: this allocator's term is over (leadership lost). Idempotent; never waits for a save."""
        with self._lock:
            self._valid = False

    def _check_valid(self) -> None:
        if not self._valid:
            raise UnavailableError("this TSO allocator's leadership term is over")

    def _follow_clock(self) -> None:
        """Move the physical part up to the clock, but never to or past the saved upper bound (`_lock` held)."""
        target = min(self._clock(), self._saved_upper - 1)
        if target > self._physical:
            self._physical = target
            self._logical = 0

    def allocate(self, count: int = 1) -> int:
        """Reserve `count` consecutive timestamps; return the first."""
        if not 1 <= count < MAX_LOGICAL:
            raise ValueError(f"count {count} out of range 1..{MAX_LOGICAL - 1}")
        with self._lock:
            self._check_valid()
            if self._logical + count >= MAX_LOGICAL:
                physical = max(self._clock(), self._physical + 1)
                if physical >= self._saved_upper:
                    raise UnavailableError(
                        f"the TSO window up to {self._saved_upper} ms is used up and the next one is not saved yet"
                    )
                self._physical = physical
                self._logical = 0
            first = tso.compose(self._physical, self._logical)
            self._logical += count
            return first

    def tick(self) -> None:
        """Follow the wall clock and persist the window ahead of time (call every ~50 ms).

        Raises what the persist callback raises; nothing beyond the saved window is handed out then.
        """
        with self._save_lock:
            with self._lock:
                self._check_valid()
                self._follow_clock()
                ahead = max(self._clock(), self._physical)
                if self._saved_upper - ahead >= _REFRESH_MARGIN_MS:
                    return
            upper = ahead + self._save_interval
            self._persist(upper)  # outside _lock: may block on etcd, may end the term
            with self._lock:
                self._saved_upper = max(self._saved_upper, upper)
                self._follow_clock()
