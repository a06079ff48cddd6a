"""Slow chaser state machine (the original's chaser tests, plus the writer integration)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from common.pb import binlog_pb2, gogo
from common.vlog_record import ValuePointer
from pump.storage.chaser import SlowChaser
from pump.storage.entry import Entry
from pump.storage.queues import BoundedQueue
from pump.storage.vlog import ValueLog
from pump.storage.writer import VlogWriter


class Item(NamedTuple):
    ptr: ValuePointer
    next_ptr: ValuePointer


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeLog:
    """A growing list of items standing in for the vlog; each item read costs `cost` fake seconds."""

    def __init__(self, clock: FakeClock) -> None:
        self.items: list[Item] = []
        self.clock = clock
        self.cost = 0.0
        self.scans = 0

    def add(self, n: int) -> None:
        for _ in range(n):
            off = len(self.items) * 10
            self.items.append(Item(ValuePointer(0, off), ValuePointer(0, off + 10)))

    def scan(self, start: ValuePointer) -> Iterator[Item]:
        self.scans += 1
        for it in list(self.items):
            if it.ptr >= start:
                self.clock.now += self.cost
                yield it


class Harness:
    def __init__(self, capacity: int = 1000, recovery_timeout: float = 0.05) -> None:
        self.clock = FakeClock()
        self.log = FakeLog(self.clock)
        self.out: BoundedQueue[Item] = BoundedQueue(capacity)
        self.chaser: SlowChaser[Item] = SlowChaser(
            self.log.scan,
            lambda item, timeout: self.out.put(item, 1, timeout),
            interval=0.01,
            quick_pass=1.0,
            recovery_timeout=recovery_timeout,
            recover_gap=60.0,
            clock=self.clock,
        )

    def drain(self) -> list[Item]:
        return self.out.get_batch(1 << 30, timeout=0) or []


def test_off_by_default_and_step_does_nothing() -> None:
    h = Harness()
    h.log.add(3)
    assert not h.chaser.is_on()
    h.chaser.step()
    assert h.log.scans == 0
    assert h.drain() == []


def test_turn_on_keeps_the_first_pointer_not_handed_over() -> None:
    h = Harness()
    h.chaser.turn_on(ValuePointer(0, 20))
    h.chaser.turn_on(ValuePointer(0, 50))  # already on: the earlier pointer stays
    assert h.chaser.is_on()
    assert h.chaser.next_pointer == ValuePointer(0, 20)
    assert h.chaser.turned_on == 1


def test_catch_up_hands_over_from_the_pointer_in_order() -> None:
    h = Harness()
    h.log.add(10)
    h.chaser.turn_on(ValuePointer(0, 30))
    assert h.chaser.catch_up() is True
    assert [it.ptr.offset for it in h.drain()] == [30, 40, 50, 60, 70, 80, 90]
    assert h.chaser.next_pointer == ValuePointer(0, 100)
    h.log.add(2)
    assert h.chaser.catch_up() is True
    assert [it.ptr.offset for it in h.drain()] == [100, 110]  # resumes, no duplicates


def test_quick_pass_recovers_and_turns_off() -> None:
    h = Harness()
    h.log.add(5)
    h.chaser.turn_on(ValuePointer(0, 0))
    h.chaser.step()
    assert not h.chaser.is_on()
    assert (h.chaser.turned_off, h.chaser.recoveries) == (1, 1)
    assert len(h.drain()) == 5


def test_slow_pass_does_not_try_to_recover() -> None:
    h = Harness()
    h.log.add(5)
    h.log.cost = 0.3  # 5 items: a 1.5 s pass
    h.chaser.turn_on(ValuePointer(0, 0))
    h.chaser.step()
    assert h.chaser.is_on()
    assert h.chaser.recoveries == 0
    h.log.cost = 0.0
    h.log.add(1)
    h.chaser.step()  # quick now
    assert not h.chaser.is_on()
    assert h.chaser.recoveries == 1
    assert len(h.drain()) == 6


def test_failed_recovery_stays_on_and_is_retried_after_the_gap() -> None:
    h = Harness(capacity=3)
    h.log.add(3)
    h.chaser.turn_on(ValuePointer(0, 0))
    assert h.chaser.catch_up() is True  # fills the output to capacity
    h.log.add(2)
    assert h.chaser.try_recover() is False  # output full: the bounded final pass times out
    assert h.chaser.is_on()
    assert h.chaser.recoveries == 1
    assert len(h.drain()) == 3
    h.chaser.step()  # a quick pass, but the last attempt was just now: no new attempt
    assert h.chaser.is_on()
    assert h.chaser.recoveries == 1
    assert len(h.drain()) == 2
    h.clock.now += 61.0
    h.chaser.step()
    assert not h.chaser.is_on()
    assert h.chaser.recoveries == 2


def test_does_not_recover_too_often() -> None:
    h = Harness()
    h.log.add(1)
    h.chaser.turn_on(ValuePointer(0, 0))
    h.chaser.step()
    assert not h.chaser.is_on()
    h.chaser.turn_on(ValuePointer(0, 10))  # slow again soon after
    for _ in range(5):
        h.log.add(1)
        h.clock.now += 5.0
        h.chaser.step()  # catches up each time, but within a minute of the last attempt
    assert h.chaser.is_on()
    assert h.chaser.recoveries == 1
    assert h.chaser.catch_ups == 7
    h.clock.now += 60.0
    h.chaser.step()
    assert not h.chaser.is_on()
    assert h.chaser.recoveries == 2
    assert len(h.drain()) == 6


def test_recovery_holds_the_write_lock() -> None:
    h = Harness()
    h.log.add(3)
    seen: list[bool] = []
    plain = h.chaser._output

    def output(item: Item, timeout: float) -> bool:
        seen.append(h.chaser.write_lock.locked())
        return plain(item, timeout)

    h.chaser._output = output
    h.chaser.turn_on(ValuePointer(0, 0))
    assert h.chaser.catch_up() is True
    h.log.add(2)
    assert h.chaser.try_recover() is True
    assert seen == [False, False, False, True, True]
    assert not h.chaser.write_lock.locked()


@pytest.mark.timeout(30)
def test_stop_while_on_returns_promptly() -> None:
    h = Harness(capacity=1)
    h.log.add(5)
    blocked = threading.Event()
    plain = h.chaser._output

    def output(item: Item, timeout: float) -> bool:
        ok = plain(item, timeout)
        if not ok:
            blocked.set()
        return ok

    h.chaser._output = output
    h.chaser.turn_on(ValuePointer(0, 0))
    h.chaser.start()
    assert blocked.wait(10)  # the pass is stuck on a full output
    h.chaser.stop()  # returns (joins) although the output never drains
    assert h.chaser.is_on()  # stopping does not pretend it caught up
    assert h.chaser.next_pointer == ValuePointer(0, 10)


def test_thread_turns_off_once_the_consumer_keeps_up() -> None:
    h = Harness()
    h.chaser._clock = time.monotonic  # real time for the threaded loop
    h.log.add(20)
    got: list[Item] = []
    with h.chaser.write_lock:
        h.chaser.turn_on(ValuePointer(0, 0))
    h.chaser.start()
    deadline = time.monotonic() + 10
    while h.chaser.is_on() and time.monotonic() < deadline:
        got.extend(h.out.get_batch(100, timeout=0.05) or [])
    h.chaser.stop()
    got.extend(h.drain())
    assert not h.chaser.is_on()
    assert [it.ptr.offset for it in got] == [i * 10 for i in range(20)]


# ------------------------------------------------------------------------------------------ writer


def _binlog(ts: int) -> tuple[int, int, int, bytes]:
    return binlog_pb2.Prewrite, ts, 0, gogo.encode_binlog(binlog_pb2.Prewrite, ts, 0, prewrite_value=b"x" * 200)


@pytest.mark.timeout(60)
def test_a_stalled_index_does_not_stall_write_binlog(tmp_path: Path) -> None:
    vlog = ValueLog(tmp_path, file_size=1 << 20, sync=False)
    index_queue: BoundedQueue[list[Entry]] = BoundedQueue(4)

    def scan(start: ValuePointer) -> Iterator[Entry]:
        for ptr, payload in vlog.scan(start):
            b = binlog_pb2.Binlog.FromString(payload)
            yield Entry(b.tp, b.start_ts, b.commit_ts, ptr, ptr.advance(len(payload)))

    chaser: SlowChaser[Entry] = SlowChaser(
        scan,
        lambda e, timeout: index_queue.put([e], 1, timeout),
        interval=0.02,
        recovery_timeout=0.5,
        recover_gap=0.05,
    )
    writer = VlogWriter(vlog, chaser, index_queue, max_batch_bytes=1 << 20, queue_bytes=1 << 20, handoff_timeout=0.1)
    writer.start()
    chaser.start()
    try:
        # The index writer is stalled: nobody drains index_queue (capacity 4).  40 writes all complete.
        for ts in range(1, 41):
            writer.submit(*_binlog(ts))
        assert chaser.is_on()
        assert chaser.turned_on == 1
        assert len(index_queue) == 4
        # The index writer comes back: everything arrives exactly once, in order, and the chaser turns off.
        got: list[Entry] = []
        deadline = time.monotonic() + 20
        while (len(got) < 40 or chaser.is_on()) and time.monotonic() < deadline:
            got.extend(e for entries in index_queue.get_batch(128, timeout=0.05) or [] for e in entries)
        assert [e.start_ts for e in got] == list(range(1, 41))
        assert not chaser.is_on()
        assert chaser.turned_off == 1
        # after recovery the writer hands over directly again
        writer.submit(*_binlog(41))
        nxt = index_queue.get_batch(128, timeout=5) or []
        assert [[e.start_ts for e in entries] for entries in nxt] == [[41]]
    finally:
        chaser.stop()
        writer.close()
        vlog.close()
