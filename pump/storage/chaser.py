"""The slow chaser: keeps the vlog writer going when the index writer falls behind.

Normally the vlog writer hands every written entry to the index writer's queue.  When one
hand-off blocks longer than `slow-chaser-threshold` (3 s), the writer calls `turn_on(ptr)` with
the first entry it could not hand over and, while the chaser is on, stops handing entries over
at all: it only appends to the vlog, so WriteBinlog never waits for the index.

The chaser's loop wakes every `interval` (500 ms).  While on, it re-reads the vlog from the
first entry not handed over yet and feeds the index writer (a catch-up pass).  When a pass took
less than `quick_pass` (1 s) and no recovery was attempted in the last `recover_gap` (1 min), it
tries to recover: it takes the write lock (the vlog writer holds it while appending and handing
over, so the log cannot grow), runs a final catch-up bounded by `recovery_timeout` (1 s) and, if
that reached the end, turns itself off; the writer then hands entries over directly again.

All timings are constructor parameters; `step()` runs one iteration, so tests drive the state
machine without the thread.  (Upstream: `pump/storage/chaser.go`.)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from common.vlog_record import ValuePointer
from pump.storage.api import NullObserver, StorageObserver

__all__ = ["ChaserItem", "ChaserTimings", "SlowChaser"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5
DEFAULT_QUICK_PASS = 1.0
DEFAULT_RECOVERY_TIMEOUT = 1.0
DEFAULT_RECOVER_GAP = 60.0
_PUT_SLICE = 0.1  # an unbounded hand-off still wakes up this often to notice stop()


class ChaserItem(Protocol):
    @property
    def next_ptr(self) -> ValuePointer: ...


T = TypeVar("T", bound=ChaserItem)


class SlowChaser(Generic[T]):
    """`scan(ptr)` yields the entries of the vlog from `ptr` up to its current end;
    `output(item, timeout)` hands one to the index writer, False if it timed out."""

    def __init__(
        self,
        scan: Callable[[ValuePointer], Iterator[T]],
        output: Callable[[T, float], bool],
        *,
        interval: float = DEFAULT_INTERVAL,
        quick_pass: float = DEFAULT_QUICK_PASS,
        recovery_timeout: float = DEFAULT_RECOVERY_TIMEOUT,
        recover_gap: float = DEFAULT_RECOVER_GAP,
        clock: Callable[[], float] = time.monotonic,
        observer: StorageObserver | None = None,
    ) -> None:
        self._observer = observer or NullObserver()
        self._scan = scan
        self._output = output
        self._interval = interval
        self._quick_pass = quick_pass
        self._recovery_timeout = recovery_timeout
        self._recover_gap = recover_gap
        self._clock = clock
        self.write_lock = threading.Lock()
        """Held by the vlog writer around append + hand-off, and by the chaser while recovering."""
        self._on = False
        self._next: ValuePointer | None = None
        self._last_recovery: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.turned_on = 0
        self.turned_off = 0
        self.catch_ups = 0
        self.recoveries = 0

    def is_on(self) -> bool:
        return self._on

    @property
    def next_pointer(self) -> ValuePointer | None:
        """The first vlog entry not handed to the index writer yet (while on)."""
        return self._next

    def turn_on(self, first_not_handed: ValuePointer) -> None:
        """Called by the vlog writer, under `write_lock`, when a hand-off timed out."""
        if self._on:
            return
        self._next = first_not_handed
        self._on = True
        self.turned_on += 1
        self._observer.chaser("turned_on")
        log.warning("slow chaser turned on fid=%d offset=%d", first_not_handed.fid, first_not_handed.offset)

    # ----------------------------------------------------------------------------------- passes

    def catch_up(self, deadline: float | None = None) -> bool:
        """Hand over every entry from the first not handed over to the end of the vlog.

        True when the end was reached; False when `deadline` passed or the chaser was stopped
        first (what was handed over stays handed over)."""
        assert self._next is not None
        self.catch_ups += 1
        items = self._scan(self._next)
        try:
            for item in items:
                while True:
                    if self._stop.is_set():
                        return False
                    if deadline is None:
                        timeout = _PUT_SLICE
                    else:
                        timeout = deadline - self._clock()
                        if timeout <= 0:
                            return False
                    if self._output(item, timeout):
                        break
                    if deadline is not None:
                        return False
                self._next = item.next_ptr
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()
        return True

    def try_recover(self) -> bool:
        """Final catch-up under the write lock, bounded by `recovery_timeout`; turns off on success."""
        began = self._last_recovery = self._clock()
        self.recoveries += 1
        with self.write_lock:
            done = self.catch_up(self._clock() + self._recovery_timeout)
            if done:
                self._on = False
                self.turned_off += 1
        self._observer.chaser("recovery", self._clock() - began)
        if done:
            self._observer.chaser("turned_off")
            assert self._next is not None
            log.info("slow chaser recovered and turned off fid=%d offset=%d", self._next.fid, self._next.offset)
        else:
            log.info("slow chaser recovery attempt did not finish in time, staying on")
        return done

    def step(self) -> None:
        """One iteration of the loop: a catch-up pass while on, then maybe a recovery attempt."""
        if not self._on:
            return
        started = self._clock()
        done = self.catch_up()
        took = self._clock() - started
        self._observer.chaser("catch_up", took)
        if not done:
            return
        if took >= self._quick_pass:
            log.info("slow chaser catch-up pass took %.3fs, not recovering yet", took)
            return
        if self._last_recovery is not None and self._clock() - self._last_recovery < self._recover_gap:
            return
        self.try_recover()

    # ----------------------------------------------------------------------------------- thread

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pump-slow-chaser", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.step()
            except Exception:
                log.exception("slow chaser pass failed; retrying in %.1fs", self._interval)

    def stop(self) -> None:
        """Stop the loop (a pass in progress ends at its next hand-off) and join the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


@dataclass(frozen=True)
class ChaserTimings:
    """The slow chaser's timings (original values as defaults); tests shorten them."""

    interval: float = DEFAULT_INTERVAL
    quick_pass: float = DEFAULT_QUICK_PASS
    recovery_timeout: float = DEFAULT_RECOVERY_TIMEOUT
    recover_gap: float = DEFAULT_RECOVER_GAP
