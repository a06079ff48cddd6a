"""common.backoff: delays, deadline, stop event, retry and poll_until, on a fake clock (no real waiting)."""

from __future__ import annotations

import threading

import pytest

from common.backoff import Backoff, StoppedError, WaitTimeoutError, poll_until, retry


class FakeTime:
    """A clock that only moves when something sleeps on it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_delays_double_up_to_the_cap() -> None:
    b = Backoff(0.05, 2.0, 1.0)
    assert [b.nth(i) for i in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    seq = b.delays()
    assert [next(seq) for _ in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.delay == 0.05  # neither touched the back-off


def test_linear_delays_with_a_step() -> None:
    b = Backoff(0.05, factor=1.0, step=0.05)
    assert [round(b.nth(i), 9) for i in range(4)] == [0.05, 0.1, 0.15, 0.2]


def test_base_above_cap_starts_at_the_cap() -> None:
    assert Backoff(5.0, 2.0, 1.0).delay == 1.0


def test_jitter_spreads_each_delay_within_its_fraction() -> None:
    lows = Backoff(1.0, 2.0, 10.0, jitter=0.5, rand=lambda: 0.0).delays()
    highs = Backoff(1.0, 2.0, 10.0, jitter=0.5, rand=lambda: 1.0).delays()
    assert [next(lows) for _ in range(5)] == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert [next(highs) for _ in range(5)] == [1.5, 3.0, 6.0, 10.0, 10.0]  # jitter never passes the cap


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="jitter"):
        Backoff(1.0, jitter=2.0)
    with pytest.raises(ValueError, match="base"):
        Backoff(-1.0)


def test_wait_sleeps_each_delay_in_turn_and_reset_starts_again() -> None:
    t = FakeTime()
    b = Backoff(0.1, 2.0, 0.3, clock=t.clock, sleep=t.sleep)
    for _ in range(4):
        assert b.wait() is False
    assert t.slept == [0.1, 0.2, 0.3, 0.3]
    assert b.attempt == 4
    b.reset()
    b.wait(limit=0.05)
    assert t.slept[-1] == 0.05
    assert b.delay == 0.2


def test_deadline_remaining_expired_and_outlasts() -> None:
    t = FakeTime()
    b = Backoff(1.0, 2.0, timeout=2.5, clock=t.clock, sleep=t.sleep)
    assert b.deadline == 102.5
    assert not b.outlasts()
    b.wait()  # 1 s
    assert b.remaining() == 1.5
    assert b.outlasts()  # 2 s more would pass it
    assert not b.outlasts(1.0)
    assert not b.expired()
    b.sleep(1.5)
    assert b.expired()
    b.sleep(-3.0)  # never a negative sleep
    assert t.slept[-1] == 0.0


def test_wait_on_a_stop_event_ends_early() -> None:
    stop = threading.Event()
    b = Backoff(0.001, stop=stop)
    assert b.wait() is False
    stop.set()
    assert b.wait() is True
    assert b.stopped()


def test_retry_returns_after_retriable_failures_and_reports_each() -> None:
    t = FakeTime()
    calls: list[int] = []
    seen: list[tuple[str, int, float]] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OSError(f"try {len(calls)}")
        return "done"

    got = retry(
        fn,
        Backoff(0.01, 2.0, clock=t.clock, sleep=t.sleep),
        attempts=5,
        on_retry=lambda exc, n, d: seen.append((str(exc), n, d)),
    )
    assert got == "done"
    assert seen == [("try 1", 1, 0.01), ("try 2", 2, 0.02)]
    assert t.slept == [0.01, 0.02]


def test_retry_raises_the_last_error_after_its_attempts() -> None:
    t = FakeTime()
    n = 0

    def fn() -> None:
        nonlocal n
        n += 1
        raise OSError(f"try {n}")

    with pytest.raises(OSError, match="try 3"):
        retry(fn, Backoff(0.01, clock=t.clock, sleep=t.sleep), attempts=3)
    assert t.slept == [0.01, 0.02]


def test_retry_raises_a_refused_error_at_once() -> None:
    t = FakeTime()

    def fn() -> None:
        raise KeyError("no")

    with pytest.raises(KeyError):
        retry(fn, Backoff(0.01, clock=t.clock, sleep=t.sleep), retriable=lambda e: isinstance(e, OSError))
    assert t.slept == []


def test_retry_gives_up_before_a_wait_that_would_pass_the_deadline() -> None:
    t = FakeTime()

    def fn() -> None:
        raise OSError("down")

    with pytest.raises(OSError, match="down"):
        retry(fn, Backoff(1.0, 2.0, timeout=4.0, clock=t.clock, sleep=t.sleep))
    assert t.slept == [1.0, 2.0]  # a third wait (4 s) would end past the deadline


def test_retry_stops_when_the_event_is_set() -> None:
    stop = threading.Event()
    stop.set()

    def fn() -> None:
        raise OSError("down")

    with pytest.raises(StoppedError, match="down"):
        retry(fn, Backoff(0.001, stop=stop))


def test_poll_until_returns_the_first_value() -> None:
    t = FakeTime()
    values = iter([None, False, 0])
    assert poll_until(lambda: next(values), 5.0, 0.1, what="x", clock=t.clock, sleep=t.sleep) == 0
    assert t.slept == [0.1, 0.1]


def test_poll_until_times_out_naming_what_it_waited_for() -> None:
    t = FakeTime()
    calls: list[float] = []

    def never() -> None:
        calls.append(t.now)

    with pytest.raises(WaitTimeoutError, match=r"timed out after 0\.5s waiting for the cluster id") as info:
        poll_until(never, 0.5, 0.25, what="the cluster id", clock=t.clock, sleep=t.sleep)
    assert info.value.what == "the cluster id"
    assert isinstance(info.value, TimeoutError)
    assert calls == [100.0, 100.25, 100.5]  # a last look at the deadline


def test_poll_until_stops_on_the_event() -> None:
    stop = threading.Event()
    stop.set()
    with pytest.raises(StoppedError, match="the thing"):
        poll_until(lambda: None, 5.0, 0.001, what="the thing", stop=stop)
