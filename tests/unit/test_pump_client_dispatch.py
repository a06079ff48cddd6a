"""Background commit delivery: retries off the workers, bounded close, futures always resolve."""

from __future__ import annotations

import threading
import time
from concurrent.futures import wait

from pump_client.dispatch import Dispatcher


class ScriptedJob:
    """Fails `failures` times (asking for `delay` each time), then succeeds."""

    def __init__(self, failures: int, delay: float = 0.01) -> None:
        self.failures = failures
        self.delay = delay
        self.steps = 0
        self.abandoned = False
        self.delivered = threading.Event()

    def step(self) -> float | None:
        self.steps += 1
        if self.steps <= self.failures:
            return self.delay
        self.delivered.set()
        return None

    def abandon(self) -> None:
        self.abandoned = True


def test_jobs_are_retried_until_delivered() -> None:
    d = Dispatcher(workers=2)
    try:
        jobs = [ScriptedJob(failures=i % 4) for i in range(20)]
        futures = [d.submit(j) for j in jobs]
        done, not_done = wait(futures, timeout=30)
        assert not not_done
        assert all(f.result() is None for f in done)
        assert [j.steps for j in jobs] == [i % 4 + 1 for i in range(20)]
        assert d.pending == 0
    finally:
        d.close(1.0)
        d.join()


def test_a_job_waiting_to_retry_does_not_hold_a_worker() -> None:
    d = Dispatcher(workers=1)
    try:
        stuck = ScriptedJob(failures=10_000, delay=0.2)
        d.submit(stuck)
        fast = [ScriptedJob(failures=0) for _ in range(50)]
        futures = [d.submit(j) for j in fast]
        _, not_done = wait(futures, timeout=10)
        assert not not_done
        assert all(j.delivered.is_set() for j in fast)
    finally:
        d.close(0.0)
        d.join()
    assert stuck.abandoned


def test_close_waits_for_pending_jobs_within_the_bound() -> None:
    d = Dispatcher(workers=2)
    job = ScriptedJob(failures=3, delay=0.05)
    future = d.submit(job)
    d.close(10.0)
    d.join()
    assert future.done()
    assert job.delivered.is_set()
    assert not job.abandoned


def test_close_abandons_what_is_left_after_the_bound() -> None:
    d = Dispatcher(workers=2)
    job = ScriptedJob(failures=1_000_000, delay=0.05)
    future = d.submit(job)
    started = time.monotonic()
    d.close(0.3)
    d.join()
    assert time.monotonic() - started < 5
    assert future.done()
    assert future.result() is None
    assert job.abandoned
    late = ScriptedJob(failures=0)
    assert d.submit(late).result(timeout=1) is None  # after close: abandoned, never raises
    assert late.abandoned
    assert late.steps == 0


def test_submit_blocks_when_max_pending_jobs_are_in_flight() -> None:
    d = Dispatcher(workers=1, max_pending=2)
    gate = threading.Event()

    class Gated(ScriptedJob):
        def step(self) -> float | None:
            gate.wait(10)
            return super().step()

    try:
        d.submit(Gated(0))
        d.submit(Gated(0))
        third_done = threading.Event()

        def third() -> None:
            d.submit(ScriptedJob(0)).result(10)
            third_done.set()

        t = threading.Thread(target=third)
        t.start()
        assert not third_done.wait(0.3)  # no room: submit blocks
        gate.set()
        assert third_done.wait(10)
        t.join()
    finally:
        gate.set()
        d.close(5.0)
        d.join()


def test_a_job_that_raises_is_dropped_and_its_future_resolves() -> None:
    class Boom(ScriptedJob):
        def step(self) -> float | None:
            raise RuntimeError("boom")

    d = Dispatcher(workers=1)
    try:
        assert d.submit(Boom(0)).result(5) is None
    finally:
        d.close(1.0)
        d.join()
