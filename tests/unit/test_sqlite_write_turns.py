"""upstream.store.sqlite.WriteTurns: this process's sqlite writers take the write lock first come, first
served, and a turn always ends (commit, rollback, a failed BEGIN, close), so no writer waits forever."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from upstream.store.base import LockConflictError
from upstream.store.sqlite import SqliteStore, WriteTurns


def wait_queued(turns: WriteTurns, n: int) -> None:
    """Until `n` threads hold or wait for a turn (the queue is private: read under its lock)."""
    done = threading.Event()

    def check() -> bool:
        with turns._lock:
            return len(turns._queue) >= n

    for _ in range(2000):
        if check():
            return
        done.wait(0.005)
    raise AssertionError(f"{n} writers never queued")


def new_store(tmp_path: Path) -> SqliteStore:
    return SqliteStore(tmp_path / "up.db", f"sqlite:///{tmp_path / 'up.db'}")


def test_turns_are_taken_in_arrival_order() -> None:
    turns = WriteTurns()
    turns.acquire(5)
    order: list[int] = []
    threads = []

    def writer(k: int) -> None:
        turns.acquire(5)
        order.append(k)
        turns.release()

    for k in range(5):
        t = threading.Thread(target=writer, args=(k,))
        t.start()
        threads.append(t)
        wait_queued(turns, k + 2)  # each waiter is queued before the next one starts
    turns.release()
    for t in threads:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]


def test_a_waiter_that_times_out_leaves_the_queue_and_the_next_one_still_gets_its_turn() -> None:
    turns = WriteTurns()
    turns.acquire(5)
    with pytest.raises(LockConflictError, match="waited 0s for the write lock"):
        turns.acquire(0.05)
    got = threading.Event()

    def writer() -> None:
        turns.acquire(5)
        got.set()
        turns.release()

    t = threading.Thread(target=writer)
    t.start()
    wait_queued(turns, 2)
    assert not got.is_set()
    turns.release()
    t.join(10)
    assert got.is_set()
    with turns._lock:
        assert not turns._queue


@pytest.mark.parametrize("end", ["commit", "rollback", "close"])
def test_every_end_of_a_data_transaction_ends_its_turn(tmp_path: Path, end: str) -> None:
    store = new_store(tmp_path)
    s = store.session()
    s.begin()
    s.execute("CREATE TABLE t (a INT)")
    getattr(s, end)()
    other = store.session()
    other.begin()  # would wait BUSY_TIMEOUT and raise if the turn had leaked
    other.execute("INSERT INTO t VALUES (1)" if end == "commit" else "CREATE TABLE t (a INT)")
    other.commit()
    other.close()
    if end != "close":
        s.close()


def test_a_begin_that_fails_ends_its_turn(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    s = store.session()
    s.conn.close()  # BEGIN IMMEDIATE on a closed connection fails
    with pytest.raises(Exception, match="closed"):
        s.begin()
    other = store.session()
    other.begin()
    other.rollback()
    other.close()


def test_a_status_write_waits_for_the_open_data_transaction(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    s = store.session()
    s.begin()
    entered = threading.Event()

    def status_write() -> None:
        with store.status_write():
            entered.set()

    t = threading.Thread(target=status_write)
    t.start()
    wait_queued(store._turns, 2)
    assert not entered.is_set()
    s.rollback()
    t.join(10)
    assert entered.is_set()
    s.close()


class _InterruptedEvent(threading.Event):
    def wait(self, timeout: float | None = None) -> bool:
        raise KeyboardInterrupt


def test_an_interrupted_waiter_leaves_the_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    turns = WriteTurns()
    turns.acquire(5)
    monkeypatch.setattr("upstream.store.sqlite.threading.Event", _InterruptedEvent)
    with pytest.raises(KeyboardInterrupt):
        turns.acquire(5)
    monkeypatch.undo()
    with turns._lock:
        assert len(turns._queue) == 1  # only the holder
    turns.release()
    turns.acquire(0.1)  # free again
    turns.release()


def test_an_interrupted_waiter_whose_turn_came_passes_it_on(monkeypatch: pytest.MonkeyPatch) -> None:
    turns = WriteTurns()
    monkeypatch.setattr("upstream.store.sqlite.threading.Event", _InterruptedEvent)
    with pytest.raises(KeyboardInterrupt):
        turns.acquire(5)  # first in the queue: its event was set before the interrupted wait
    monkeypatch.undo()
    with turns._lock:
        assert not turns._queue
    turns.acquire(0.1)
    turns.release()


def test_a_commit_that_fails_ends_its_turn(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    s = store.session()
    s.begin()
    s.conn.close()
    with pytest.raises(Exception, match="closed"):
        s.commit()
    other = store.session()
    other.begin()
    other.rollback()
    other.close()
