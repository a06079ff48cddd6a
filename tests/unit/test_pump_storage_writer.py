"""Write queue and vlog writer: non-blocking submission with callbacks, and the wait for company."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import NoSpaceError, StorageClosedError, StorageError
from common.pb import binlog_pb2
from pump.storage.api import NullObserver
from pump.storage.queues import BoundedQueue
from pump.storage.storage import Storage
from tests.unit.storageutil import (
    FAST_CHASER,
    Built,
    Tso,
    commit,
    fake,
    options,
    prewrite,
    pull_upto,
)

DEADLINE = 10.0

# ------------------------------------------------------------------------------------------ queue


def test_put_nowait_admits_while_there_is_room_and_an_oversized_item_alone() -> None:
    q: BoundedQueue[str] = BoundedQueue(100)
    assert q.put_nowait("a", 60)
    assert not q.put_nowait("b", 60)  # 120 > 100
    assert q.put_nowait("c", 40)
    assert q.get_batch(10) == ["a", "c"]
    assert q.put_nowait("huge", 500)  # larger than the budget: admitted into an empty queue
    assert not q.put_nowait("d", 1)
    assert q.cost == 500


def test_put_nowait_on_a_closed_queue_raises() -> None:
    q: BoundedQueue[str] = BoundedQueue(100)
    q.close()
    with pytest.raises(StorageClosedError):
        q.put_nowait("a")


def test_wait_for_returns_at_once_when_enough_is_queued() -> None:
    q: BoundedQueue[str] = BoundedQueue(1000)
    q.put_nowait("a", 10)
    q.put_nowait("b", 10)
    began = time.monotonic()
    q.wait_for(2, 1000, DEADLINE)
    q.wait_for(5, 20, DEADLINE)  # the cost is reached
    assert time.monotonic() - began < DEADLINE / 2


def test_wait_for_gives_up_after_its_timeout() -> None:
    q: BoundedQueue[str] = BoundedQueue(1000)
    q.put_nowait("a")
    began = time.monotonic()
    q.wait_for(2, 1000, 0.05)
    assert time.monotonic() - began >= 0.05
    assert len(q) == 1


@pytest.mark.parametrize("wake", ["count", "cost", "close"])
def test_wait_for_is_woken_when_the_batch_is_big_enough_or_the_queue_closes(wake: str) -> None:
    q: BoundedQueue[str] = BoundedQueue(1000)
    q.put_nowait("a", 1)
    returned = threading.Event()

    def waiter() -> None:
        q.wait_for(3, 100, DEADLINE)
        returned.set()

    t = threading.Thread(target=waiter)
    t.start()
    try:
        q.put_nowait("b", 1)
        assert not returned.wait(0.1)  # 2 items, cost 2: not yet
        if wake == "count":
            q.put_nowait("c", 1)
        elif wake == "cost":
            q.put(("d"), 98)
        else:
            q.close()
        assert returned.wait(DEADLINE / 2)
    finally:
        q.close()
        t.join(DEADLINE)


# ------------------------------------------------------------------------------ submit_binlog


class Done:
    """A `done` callback that records its calls (from the vlog writer thread)."""

    def __init__(self) -> None:
        self.calls: list[BaseException | None] = []
        self.event = threading.Event()

    def __call__(self, error: BaseException | None) -> None:
        self.calls.append(error)
        self.event.set()

    def wait(self) -> BaseException | None:
        assert self.event.wait(DEADLINE), "done was not called"
        assert len(self.calls) == 1
        return self.calls[0]


def submit(s: Storage, built: Built, done: Done) -> bool:
    b, payload = built
    key = b.prewrite_key if b.tp == binlog_pb2.Prewrite and b.HasField("prewrite_key") else None
    return s.submit_binlog(b.tp, b.start_ts, b.commit_ts, payload, prewrite_key=key, done=done)


class RecordingObserver(NullObserver):
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, kind: str) -> None:
        self.errors.append(kind)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = Storage(tmp_path / "pump", options(), chaser_timings=FAST_CHASER)
    yield s
    s.close()


def test_submitted_binlogs_are_durable_when_done_is_called(storage: Storage) -> None:
    clock = Tso()
    start = clock.next()
    p, c = Done(), Done()
    assert submit(storage, prewrite(start, b"value"), p)
    assert p.wait() is None
    commit_ts = clock.next()
    assert submit(storage, commit(start, commit_ts), c)
    assert c.wait() is None
    assert storage.status().write_count == 2
    assert storage.wait_indexed(DEADLINE)
    [got] = pull_upto(storage, 0, commit_ts)
    assert (got.start_ts, got.commit_ts) == (start, commit_ts)
    stored = storage.get_binlog(start)
    assert stored is not None
    assert stored.prewrite_value == b"value"


def test_submitted_probe_is_done_at_once_and_stores_nothing(storage: Storage) -> None:
    done = Done()
    assert storage.submit_binlog(binlog_pb2.Prewrite, 0, 0, b"", prewrite_key=None, done=done)
    assert done.calls == [None]  # called before submit_binlog returned
    assert storage.status().write_count == 0


def test_submit_refuses_at_once_when_closed(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER)
    s.close()
    done = Done()
    with pytest.raises(StorageClosedError):
        submit(s, prewrite(Tso().next()), done)
    assert done.calls == []


def test_submit_refuses_when_no_space_but_takes_fake_binlogs(tmp_path: Path) -> None:
    observer = RecordingObserver()
    s = Storage(tmp_path, options(stop_write_at_available_space=1 << 62), chaser_timings=FAST_CHASER, observer=observer)
    try:
        clock = Tso()
        refused = Done()
        with pytest.raises(NoSpaceError, match="no available space"):
            submit(s, prewrite(clock.next()), refused)
        assert refused.calls == []
        assert observer.errors == ["write_binlog"]
        f, done = clock.next(), Done()
        assert submit(s, fake(f), done)
        assert done.wait() is None
        assert s.wait_indexed(DEADLINE)
        assert s.max_commit_ts() == f
    finally:
        s.close()


def test_submit_says_false_when_the_write_queue_is_full(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(write_queue_bytes=4096), chaser_timings=FAST_CHASER)
    clock = Tso()
    stalled = s._chaser.write_lock  # the vlog writer takes it for every batch
    stalled.acquire()
    dones: list[Done] = []
    try:
        first = Done()
        assert submit(s, prewrite(clock.next(), b"a" * 1000), first)  # taken by the writer, which then stalls
        deadline = time.monotonic() + DEADLINE
        while len(s._writer._queue) or s._writer._queue.cost:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        while True:
            d = Done()
            if not submit(s, prewrite(clock.next(), b"b" * 1000), d):
                break
            dones.append(d)
        assert 1 <= len(dones) <= 4  # 4096 bytes of queue
        assert all(not d.calls for d in [first, *dones])
    finally:
        stalled.release()
    assert all(d.wait() is None for d in [first, *dones])
    s.close()
    assert s.status().write_count == 1 + len(dones)


def test_a_failed_batch_reaches_every_callback_and_the_observer(
    storage: Storage, monkeypatch: pytest.MonkeyPatch
) -> None:
    observer = RecordingObserver()
    monkeypatch.setattr(storage, "_observer", observer)

    def broken(payloads: object, max_ts: int) -> None:
        raise StorageError("disk on fire")

    monkeypatch.setattr(storage._vlog, "append", broken)
    done = Done()
    assert submit(storage, prewrite(Tso().next()), done)
    error = done.wait()
    assert isinstance(error, StorageError)
    assert "disk on fire" in str(error)
    assert observer.errors == ["write_binlog"]


def test_a_raising_callback_does_not_stop_the_writer(storage: Storage, caplog: pytest.LogCaptureFixture) -> None:
    clock = Tso()

    def bad(error: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    b, payload = prewrite(clock.next())
    assert storage.submit_binlog(b.tp, b.start_ts, 0, payload, prewrite_key=None, done=bad)
    done = Done()
    assert submit(storage, prewrite(clock.next()), done)
    assert done.wait() is None
    assert storage.status().write_count == 2
    assert any("write callback failed" in r.getMessage() for r in caplog.records)


def test_close_finishes_queued_submissions(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER)
    clock = Tso()
    dones = [Done() for _ in range(20)]
    for d in dones:
        assert submit(s, prewrite(clock.next()), d)
    s.close()
    assert all(d.wait() is None for d in dones)
    assert s.status().write_count == 20


# ----------------------------------------------------------------------------- wait for company


def test_a_lone_writer_never_waits_for_company(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER, group_commit_delay=DEADLINE)
    try:
        clock = Tso()
        began = time.monotonic()
        for _ in range(20):
            start = clock.next()
            for built in (prewrite(start), commit(start, clock.next())):
                done = Done()
                assert submit(s, built, done)
                assert done.wait() is None
        assert time.monotonic() - began < DEADLINE / 2  # no batch waited for the delay
        assert s._writer.batch_count == 40
    finally:
        s.close()


def test_after_a_batch_of_n_the_writer_waits_for_n_binlogs(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER, group_commit_delay=DEADLINE)
    writer = s._writer
    clock = Tso()
    try:
        with s._chaser.write_lock:  # stall the writer, so that three binlogs queue up behind the first
            first = Done()
            assert submit(s, prewrite(clock.next()), first)
            deadline = time.monotonic() + DEADLINE
            while len(writer._queue):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            three = [Done() for _ in range(3)]
            for d in three:
                assert submit(s, prewrite(clock.next()), d)
        assert first.wait() is None
        assert all(d.wait() is None for d in three)
        assert writer.batch_count == 2  # [first], then the three together

        batches = writer.batch_count
        late = [Done()]
        assert submit(s, prewrite(clock.next()), late[0])
        assert not late[0].event.wait(0.2)  # waits for company: the previous batch had three
        for _ in range(2):
            late.append(Done())
            assert submit(s, prewrite(clock.next()), late[-1])
        assert all(d.wait() is None for d in late)  # the third one ended the wait, long before the delay
        assert writer.batch_count == batches + 1
    finally:
        s.close()


def test_the_wait_for_company_ends_after_the_delay(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER, group_commit_delay=0.2)
    clock = Tso()
    try:
        with s._chaser.write_lock:
            first = Done()
            assert submit(s, prewrite(clock.next()), first)
            deadline = time.monotonic() + DEADLINE
            while len(s._writer._queue):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            two = [Done(), Done()]
            for d in two:
                assert submit(s, prewrite(clock.next()), d)
        assert all(d.wait() is None for d in [first, *two])
        alone = Done()
        began = time.monotonic()
        assert submit(s, prewrite(clock.next()), alone)
        assert alone.wait() is None  # nobody came: written after the delay
        assert time.monotonic() - began >= 0.2
    finally:
        s.close()


def test_a_full_batch_does_not_wait_for_company(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(max_batch_bytes=2048), chaser_timings=FAST_CHASER, group_commit_delay=DEADLINE)
    clock = Tso()
    try:
        with s._chaser.write_lock:
            first = Done()
            assert submit(s, prewrite(clock.next()), first)
            deadline = time.monotonic() + DEADLINE
            while len(s._writer._queue):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            two = [Done(), Done()]
            for d in two:
                assert submit(s, prewrite(clock.next(), b"x" * 100), d)
        assert all(d.wait() is None for d in [first, *two])
        big = Done()
        began = time.monotonic()
        assert submit(s, prewrite(clock.next(), b"y" * 4096), big)  # fills a batch by itself
        assert big.wait() is None
        assert time.monotonic() - began < DEADLINE / 2
    finally:
        s.close()
