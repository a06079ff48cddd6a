"""The TSO allocator core, with a fake clock and an in-memory window store."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from common import tso
from common.errors import UnavailableError
from pd.allocator import DEFAULT_SAVE_INTERVAL_MS, TsoAllocator


class FakeClock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


class Store:
    def __init__(self) -> None:
        self.saved: list[int] = []
        self.fail = False

    def persist(self, upper: int) -> None:
        if self.fail:
            raise UnavailableError("etcd down")
        self.saved.append(upper)


def test_compose_and_extract() -> None:
    ts = tso.compose(1_700_000_000_123, 5)
    assert tso.physical(ts) == 1_700_000_000_123
    assert tso.logical(ts) == 5
    assert ts == (1_700_000_000_123 << 18) + 5
    assert tso.to_datetime(ts).year == 2023
    with pytest.raises(ValueError, match="logical part"):
        tso.compose(1, 1 << 18)


def test_start_persists_window_before_serving() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    assert store.saved == [10_000 + DEFAULT_SAVE_INTERVAL_MS]
    assert tso.physical(alloc.allocate()) == 10_000


def test_allocations_strictly_increase_and_batches_are_consecutive() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    first = alloc.allocate(5)
    second = alloc.allocate(1)
    assert second == first + 5
    clock.ms += 1
    alloc.tick()
    third = alloc.allocate(1)
    assert tso.physical(third) == 10_001
    assert tso.logical(third) == 0
    assert third > second


def test_logical_overflow_moves_to_next_millisecond_without_waiting_for_the_clock() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    a = alloc.allocate(tso.MAX_LOGICAL - 10)
    b = alloc.allocate(20)  # does not fit in this ms
    assert tso.physical(b) == 10_001
    assert tso.logical(b) == 0
    assert b > a + tso.MAX_LOGICAL - 11


def test_restart_starts_above_saved_window_even_if_clock_went_back() -> None:
    store, clock = Store(), FakeClock(50_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    handed_out = [alloc.allocate() for _ in range(3)]
    clock.ms = 40_000  # the new host's clock is behind
    again = TsoAllocator(store.saved[-1], store.persist, clock=clock)
    assert again.allocate() > max(handed_out)


def test_window_is_extended_before_it_runs_out() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    for _ in range(20):
        clock.ms += 500
        alloc.tick()
        ts = alloc.allocate()
        assert tso.physical(ts) < alloc.saved_upper
    assert len(store.saved) > 2


def test_persist_failure_hands_out_nothing_beyond_the_window() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    upper = alloc.saved_upper
    store.fail = True
    clock.ms = upper + 5
    with pytest.raises(UnavailableError):
        alloc.tick()
    # logical space of the current ms still works, never past the saved window
    ts = alloc.allocate()
    assert tso.physical(ts) < upper


def test_bad_count_is_rejected() -> None:
    alloc = TsoAllocator(0, Store().persist, clock=FakeClock(1))
    for bad in (0, -1, tso.MAX_LOGICAL):
        with pytest.raises(ValueError, match="count"):
            alloc.allocate(bad)


def test_concurrent_allocations_are_unique() -> None:
    clock = FakeClock(10_000)
    alloc = TsoAllocator(0, Store().persist, clock=clock)
    results: list[list[int]] = [[] for _ in range(8)]

    def worker(i: int) -> None:
        for n in range(2000):
            if n % 500 == 0:
                clock.ms += 1
                alloc.tick()
            results[i].append(alloc.allocate())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    flat = [ts for r in results for ts in r]
    assert len(set(flat)) == len(flat)
    for r in results:
        assert r == sorted(r)
        assert len(set(r)) == len(r)


def _in_thread(fn: Callable[[], object], deadline: float = 5.0) -> tuple[threading.Thread, list[BaseException]]:
    """Run `fn` in a daemon thread and join it with a deadline; a deadlocked call leaves it alive."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(deadline)
    return thread, errors


def test_a_persist_failure_that_ends_the_term_does_not_deadlock_tick() -> None:
    # pd-server's window saver ends the term (invalidate()) when the leader-guarded put fails
    clock = FakeClock(10_000)
    store = Store()
    allocators: list[TsoAllocator] = []

    def persist(upper: int) -> None:
        if store.fail:
            allocators[0].invalidate()
            raise UnavailableError("lost pd leadership while saving the TSO window")
        store.persist(upper)

    alloc = TsoAllocator(0, persist, clock=clock)
    allocators.append(alloc)
    store.fail = True
    clock.ms = alloc.saved_upper + 5
    thread, errors = _in_thread(alloc.tick)
    assert not thread.is_alive(), "tick() deadlocked: the failed save ended the term under the allocator's lock"
    assert len(errors) == 1
    assert isinstance(errors[0], UnavailableError)
    assert not alloc.valid
    thread, errors = _in_thread(alloc.allocate)
    assert not thread.is_alive(), "allocate() blocked after the term ended"
    assert len(errors) == 1
    assert "term is over" in str(errors[0])


def test_allocate_does_not_wait_for_a_slow_persist() -> None:
    # a save stuck on a frozen etcd must not hold up timestamps inside the saved window, nor invalidate()
    clock = FakeClock(10_000)
    release = threading.Event()
    entered = threading.Event()
    slow = [False]

    def persist(upper: int) -> None:
        if slow[0]:
            entered.set()
            release.wait(30)

    alloc = TsoAllocator(0, persist, clock=clock)
    slow[0] = True
    clock.ms = alloc.saved_upper - 500  # within the refresh margin: tick() saves a new window
    ticker = threading.Thread(target=alloc.tick, daemon=True)
    ticker.start()
    try:
        assert entered.wait(5)
        thread, errors = _in_thread(alloc.allocate)
        assert not thread.is_alive(), "allocate() waited for the persist call"
        assert not errors
        thread, errors = _in_thread(alloc.invalidate)
        assert not thread.is_alive(), "invalidate() waited for the persist call"
        assert not errors
    finally:
        release.set()
        ticker.join(5)
    assert not alloc.valid


def test_timestamps_past_an_unsaved_window_are_refused_not_waited_for() -> None:
    store, clock = Store(), FakeClock(10_000)
    alloc = TsoAllocator(0, store.persist, clock=clock)
    upper = alloc.saved_upper
    store.fail = True
    clock.ms = upper + 100
    with pytest.raises(UnavailableError):
        alloc.tick()
    handed: list[int] = []
    refused: UnavailableError | None = None
    for _ in range(3 * tso.MAX_LOGICAL):
        try:
            handed.append(alloc.allocate(1000))
        except UnavailableError as exc:
            refused = exc
            break
    assert refused is not None
    assert "window" in str(refused)
    assert handed
    assert max(tso.physical(ts) for ts in handed) < upper
    store.fail = False
    alloc.tick()  # etcd answers again: the window moves on and timestamps flow
    assert tso.physical(alloc.allocate()) >= upper
