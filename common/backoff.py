"""Waiting between tries: exponential back-off, retry and poll-until, in one place.

Every retry loop of the project takes its delays from a :class:`Backoff`: the first delay `base`, each
next one ``delay * factor + step`` (factor 2: doubling; factor 1 with a step: growing linearly), never
more than `cap`, each optionally spread by `jitter` (a fraction: a delay of d waits between d * (1 -
jitter) and d * (1 + jitter), capped).  A back-off may carry an overall deadline (`timeout` seconds from
its creation or :meth:`Backoff.reset`) and a stop :class:`threading.Event`: its waits end early when the
event is set, so a closing component never sleeps out a delay.

Loops whose control flow is their own (several kinds of errors, messages naming the attempt, a give-up
rule of their own) keep it and ask a `Backoff` for the delay and the wait.  :func:`retry` is the plain
loop: call, and on a retriable error wait and call again, up to a number of attempts or the deadline.
:func:`poll_until` waits for a condition (a value to appear) and names what it waited for when it times
out.

The clock, the sleep and the random source can be injected, so the delays are testable without time
passing.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from common.errors import BinlogError

T = TypeVar("T")

Clock = Callable[[], float]
Sleep = Callable[[float], None]


class WaitTimeoutError(BinlogError, TimeoutError):
    """:func:`poll_until` ran out of time; `what` names what it waited for."""

    def __init__(self, what: str, timeout: float) -> None:
        self.what = what
        self.timeout = timeout
        super().__init__(f"timed out after {timeout:.1f}s waiting for {what}")


class StoppedError(BinlogError):
    """The stop event was set while :func:`retry` or :func:`poll_until` waited."""


class Backoff:
    """The delays of one retry loop, its deadline and its stop event (see the module docstring).

    Not thread-safe: one loop owns it.  `delay` is the next wait; :meth:`wait` waits it and moves on to
    the next one; :meth:`reset` starts again from `base` (and restarts the deadline)."""

    def __init__(
        self,
        base: float,
        factor: float = 2.0,
        cap: float = math.inf,
        *,
        step: float = 0.0,
        jitter: float = 0.0,
        timeout: float | None = None,
        stop: threading.Event | None = None,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if base < 0 or factor < 0 or cap < 0 or step < 0 or not 0 <= jitter <= 1:
            raise ValueError(f"bad back-off: base={base} factor={factor} cap={cap} step={step} jitter={jitter}")
        self.base = base
        self.factor = factor
        self.cap = cap
        self.step = step
        self.jitter = jitter
        self.timeout = timeout
        self.stop = stop
        self._clock = clock
        self._sleep = sleep
        self._rand = rand
        self.attempt = 0
        """Waits so far since the start (or the last reset)."""
        self._delay = min(base, cap)
        self._deadline = math.inf if timeout is None else clock() + timeout

    # ------------------------------------------------------------------ delays
    def _next(self, delay: float) -> float:
        return min(delay * self.factor + self.step, self.cap)

    def _jittered(self, delay: float) -> float:
        if not self.jitter:
            return delay
        return min(delay * (1 - self.jitter + 2 * self.jitter * self._rand()), self.cap)

    @property
    def delay(self) -> float:
        """The next wait (before jitter)."""
        return self._delay

    def nth(self, n: int) -> float:
        """The `n`-th delay from the start (0: `base`), without jitter; the back-off's state is not touched."""
        d = min(self.base, self.cap)
        for _ in range(n):
            d = self._next(d)
        return d

    def delays(self) -> Iterator[float]:
        """The delays from the start, jittered, endlessly (a fresh sequence; the back-off's state is not touched)."""
        d = min(self.base, self.cap)
        while True:
            yield self._jittered(d)
            d = self._next(d)

    def advance(self) -> float:
        """The next delay (jittered), moving on to the one after without waiting."""
        d = self._jittered(self._delay)
        self._delay = self._next(self._delay)
        self.attempt += 1
        return d

    def reset(self) -> None:
        """Start again: the next delay is `base`, the deadline `timeout` from now."""
        self._delay = min(self.base, self.cap)
        self.attempt = 0
        if self.timeout is not None:
            self._deadline = self._clock() + self.timeout

    # ------------------------------------------------------------------ deadline and stop
    @property
    def deadline(self) -> float:
        """The clock's time the back-off ends at (infinity without a timeout)."""
        return self._deadline

    def remaining(self) -> float:
        """Seconds until the deadline (negative once past it; infinity without a timeout)."""
        return self._deadline - self._clock()

    def expired(self) -> bool:
        """True once the deadline has come."""
        return self._clock() >= self._deadline

    def outlasts(self, delay: float | None = None) -> bool:
        """True when waiting `delay` (default: the next delay) would reach or pass the deadline."""
        return self._clock() + (self._delay if delay is None else delay) >= self._deadline

    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    def sleep(self, seconds: float) -> bool:
        """Wait `seconds` (at least 0) on the stop event, or sleep without one; True if the stop event is set."""
        seconds = max(0.0, seconds)
        if self.stop is not None:
            return self.stop.wait(seconds)
        self._sleep(seconds)
        return False

    def wait(self, limit: float | None = None) -> bool:
        """Wait the next delay (at most `limit` seconds), then move on to the next delay.

        True when the stop event is set (the wait ended early, or it was set already)."""
        d = self.advance()
        return self.sleep(d if limit is None else min(d, limit))


def retry(
    fn: Callable[[], T],
    backoff: Backoff,
    *,
    attempts: int | None = None,
    retriable: Callable[[Exception], bool] = lambda exc: True,
    on_retry: Callable[[Exception, int, float], None] | None = None,
) -> T:
    """Call `fn` until it returns; between failed tries wait the back-off's next delay.

    An error `retriable` refuses, the error of the last of `attempts` tries, or one whose next wait would
    pass the back-off's deadline is raised as it is.  `on_retry(error, attempt, delay)` (attempt from 1)
    is called before each wait, to log it.  StoppedError (from the error) when the stop event is set."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except Exception as exc:
            if not retriable(exc) or (attempts is not None and attempt >= attempts) or backoff.outlasts():
                raise
            if backoff.stopped():
                raise StoppedError(f"stopped after {attempt} tries: {exc}") from exc
            delay = backoff.advance()
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            if backoff.sleep(delay):
                raise StoppedError(f"stopped after {attempt} tries: {exc}") from exc


def poll_until(
    predicate: Callable[[], T | None],
    timeout: float,
    interval: float,
    *,
    what: str,
    stop: threading.Event | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> T:
    """Call `predicate` every `interval` seconds until it returns a value (neither None nor False); return it.

    WaitTimeoutError naming `what` when the value has not come `timeout` seconds after the first call (the
    predicate is called once more at or after the deadline before giving up); StoppedError when `stop` is
    set.  Errors of `predicate` go through."""
    b = Backoff(interval, factor=1.0, timeout=timeout, stop=stop, clock=clock, sleep=sleep)
    while True:
        value = predicate()
        if value is not None and value is not False:
            return value
        if b.expired():
            raise WaitTimeoutError(what, timeout)
        if b.wait():
            raise StoppedError(f"stopped while waiting for {what}")
