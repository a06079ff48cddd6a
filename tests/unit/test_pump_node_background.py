"""Background loops over MemoryStorage: fake binlogs when idle, GC ts and trigger, drainer purge warning."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest

from common import tso
from common.errors import TSOError
from common.pb import binlog_pb2
from common.registry import NodeKind, NodeState, NodeStatus
from pump.background import Background, drainers_at_risk, gc_ts_for, write_fake_binlog
from pump.memory_storage import MemoryStorage
from pump.metrics import PumpMetrics
from pump.node import ApproxClock
from tests.unit.test_pump_node import FakeRegistry, FakeTSO

HOUR_TS = (3600 * 1000) << 18


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def make_background(
    storage: MemoryStorage,
    registry: FakeRegistry | None = None,
    *,
    last_write: Callable[[], float] = lambda: 0.0,
    fake_interval: float = 3600.0,
    pull_fake_interval: float = 0.0,
    pulling: Callable[[], bool] = lambda: False,
    gc_keep: float = 3600.0,
    clock: ApproxClock | None = None,
    tso_source: FakeTSO | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> tuple[Background, PumpMetrics]:
    metrics = PumpMetrics()
    bg = Background(
        storage,
        tso_source or FakeTSO(),
        registry or FakeRegistry(),
        metrics,
        last_write=last_write,
        fake_interval=fake_interval,
        pull_fake_interval=pull_fake_interval,
        pulling=pulling,
        gc_keep=gc_keep,
        clock=clock,
        monotonic=monotonic,
    )
    return bg, metrics


def test_write_fake_binlog_is_a_rollback_with_start_equal_commit() -> None:
    storage = MemoryStorage()
    clock = ApproxClock()
    ts = write_fake_binlog(storage, FakeTSO(), clock)
    stored = storage.get_binlog(ts)
    assert stored is not None
    assert (stored.tp, stored.start_ts, stored.commit_ts) == (binlog_pb2.Rollback, ts, ts)
    assert storage.max_commit_ts() == ts
    assert clock.now() >= ts


class ManualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_fake_tick_writes_only_after_the_gap_without_writes() -> None:
    storage = MemoryStorage()
    now = ManualClock()
    last_write = [now.now]
    bg, _ = make_background(storage, last_write=lambda: last_write[0], fake_interval=3.0, monotonic=now)
    now.now += 2.9
    assert not bg.fake_tick()
    assert bg.fake_due_in() == pytest.approx(0.1)
    now.now += 0.1
    assert bg.fake_tick()
    assert storage.writes == 1
    now.now += 2.0
    last_write[0] = now.now  # a WriteBinlog: the gap starts again
    now.now += 2.9
    assert not bg.fake_tick()
    now.now += 0.1
    assert bg.fake_tick()
    now.now += 2.9
    assert not bg.fake_tick()  # measured from the last fake binlog too
    now.now += 0.1
    assert bg.fake_tick()
    assert storage.writes == 3


def test_the_short_gap_applies_only_while_a_drainer_pulls() -> None:
    storage = MemoryStorage()
    now = ManualClock()
    pulling = [False]
    bg, _ = make_background(
        storage,
        last_write=lambda: now.now - 1.0,
        fake_interval=3.0,
        pull_fake_interval=0.25,
        pulling=lambda: pulling[0],
        monotonic=now,
    )
    assert bg.fake_gap() == 3.0
    now.now += 0.5
    assert not bg.fake_tick()  # no drainer: the 3 s gap
    pulling[0] = True
    assert bg.fake_gap() == 0.25
    assert bg.fake_tick()
    now.now += 0.2
    assert not bg.fake_tick()
    now.now += 0.05
    assert bg.fake_tick()
    assert storage.writes == 2


def test_the_short_gap_is_capped_by_the_long_one_and_zero_turns_it_off() -> None:
    bg, _ = make_background(MemoryStorage(), fake_interval=1.0, pull_fake_interval=5.0, pulling=lambda: True)
    assert bg.fake_gap() == 1.0
    bg, _ = make_background(MemoryStorage(), fake_interval=1.0, pull_fake_interval=0.0, pulling=lambda: True)
    assert bg.fake_gap() == 1.0


def test_a_failed_fake_binlog_is_retried_after_the_long_gap() -> None:
    storage = FlakyStorage()
    now = ManualClock()
    bg, _ = make_background(
        storage, last_write=lambda: 0.0, fake_interval=1.0, pull_fake_interval=0.25, pulling=lambda: True, monotonic=now
    )
    now.now += 0.25
    with pytest.raises(OSError, match="Input/output"):
        bg.fake_tick()
    now.now += 0.5
    assert not bg.fake_tick()  # not retried at the short gap
    now.now += 0.5
    assert bg.fake_tick()
    now.now += 0.25
    assert bg.fake_tick()  # back to the short gap after a success
    assert storage.writes == 2


def test_a_fake_binlog_without_a_tso_is_retried_after_the_long_gap(caplog: pytest.LogCaptureFixture) -> None:
    class DownTSO(FakeTSO):
        down = True

        def get_ts(self, timeout: float | None = None) -> int:
            if self.down:
                raise TSOError("pd-server unreachable")
            return super().get_ts(timeout)

    storage = MemoryStorage()
    now = ManualClock()
    source = DownTSO()
    bg, _ = make_background(
        storage, fake_interval=3.0, pull_fake_interval=0.25, pulling=lambda: True, monotonic=now, tso_source=source
    )
    now.now += 0.25
    with caplog.at_level(logging.WARNING, logger="pump.background"):
        assert not bg.fake_tick()
    assert "cannot write a fake binlog (next try in 3.0s): pd-server unreachable" in caplog.text
    source.down = False
    now.now += 2.9
    assert not bg.fake_tick()
    now.now += 0.1
    assert bg.fake_tick()
    assert storage.writes == 1


def test_fake_loop_keeps_an_idle_pump_moving() -> None:
    storage = MemoryStorage()
    bg, _ = make_background(storage, fake_interval=0.01)
    bg.start()
    try:
        wait_until(lambda: storage.writes >= 3, "idle fake binlogs")
    finally:
        bg.stop()
    assert storage.max_commit_ts() > 0


def test_fake_loop_switches_to_the_short_gap_when_a_drainer_starts_pulling() -> None:
    storage = MemoryStorage()
    pulling = threading.Event()
    bg, _ = make_background(storage, fake_interval=3600.0, pull_fake_interval=0.01, pulling=pulling.is_set)
    bg.start()
    try:
        pulling.set()
        wait_until(lambda: storage.writes >= 3, "fake binlogs at the short gap")
    finally:
        bg.stop()


def test_gc_ts_is_tso_minus_keep() -> None:
    now = tso.compose(1_700_000_000_000, 17)
    assert gc_ts_for(now, 3600) == tso.compose(1_700_000_000_000 - 3_600_000, 0)
    assert gc_ts_for(now, 1e12) == 0


def test_gc_once_hands_the_gc_ts_to_the_storage() -> None:
    storage = MemoryStorage()
    source = FakeTSO()
    bg, _ = make_background(storage, gc_keep=0.5, tso_source=source)
    gc_ts = bg.gc_once()
    assert gc_ts is not None
    assert storage.gc_calls == [gc_ts]
    assert tso.physical(source.ts) - tso.physical(gc_ts) == 500


class SlowGCStorage(MemoryStorage):
    """MemoryStorage whose gc() blocks until `gate` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.gate = threading.Event()

    def gc(self, ts: int) -> None:
        self.entered.set()
        self.gate.wait(10)
        super().gc(ts)


def test_trigger_gc_runs_once_and_says_when_gc_is_working() -> None:
    storage = SlowGCStorage()
    bg, _ = make_background(storage)
    bg.start()
    try:
        assert bg.trigger_gc()
        assert storage.entered.wait(10)
        assert not bg.trigger_gc()  # "gc is working"
        storage.gate.set()
        wait_until(lambda: len(storage.gc_calls) == 1 and bg.trigger_gc(), "gc to finish")
        wait_until(lambda: len(storage.gc_calls) == 2, "the second triggered gc")
    finally:
        storage.gate.set()
        bg.stop()


def test_drainers_at_risk() -> None:
    gc_ts = tso.compose(1_700_000_000_000, 0)
    drainers = [
        NodeStatus("old", "h:1", NodeState.ONLINE, max_commit_ts=gc_ts + 19 * HOUR_TS),
        NodeStatus("fresh", "h:2", NodeState.ONLINE, max_commit_ts=gc_ts + 21 * HOUR_TS),
        NodeStatus("gone", "h:3", NodeState.OFFLINE, max_commit_ts=0),
        NodeStatus("paused", "h:4", NodeState.PAUSED, max_commit_ts=gc_ts - 1),
    ]
    assert [d.node_id for d in drainers_at_risk(drainers, gc_ts)] == ["old", "paused"]


def test_detect_once_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    storage = MemoryStorage()
    source = FakeTSO()
    write_fake_binlog(storage, source)
    storage.gc(storage.max_commit_ts() - 1)
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=0))
    bg, metrics = make_background(storage, registry)
    with caplog.at_level(logging.ERROR, logger="pump.background"):
        assert bg.detect_once() == ["d1"]
    assert "drainer d1 checkpoint" in caplog.text
    value = metrics.registry.get_sample_value("binlog_pump_detected_drainer_binlog_purge_count_total", {"id": "d1"})
    assert value == 1.0


def test_detect_once_before_any_gc_is_quiet() -> None:
    registry = FakeRegistry()
    registry.create(NodeKind.DRAINER, NodeStatus("d1", "h:1", NodeState.ONLINE, max_commit_ts=0))
    bg, _ = make_background(MemoryStorage(), registry)
    assert bg.detect_once() == []


class FlakyStorage(MemoryStorage):
    """MemoryStorage whose gc() and write_binlog() raise OSError the first time each is called."""

    def __init__(self) -> None:
        super().__init__()
        self.gc_failures = 1
        self.write_failures = 1

    def gc(self, ts: int) -> None:
        if self.gc_failures:
            self.gc_failures -= 1
            raise OSError(28, "No space left on device")
        super().gc(ts)

    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        if self.write_failures:
            self.write_failures -= 1
            raise OSError(5, "Input/output error")
        super().write_binlog(binlog, payload)


def test_loops_survive_unexpected_errors(caplog: pytest.LogCaptureFixture) -> None:
    storage = FlakyStorage()
    bg, metrics = make_background(storage, fake_interval=0.01)
    bg.start()
    try:
        with caplog.at_level(logging.ERROR, logger="pump.background"):
            assert bg.trigger_gc()
            wait_until(lambda: storage.gc_failures == 0 and bg.trigger_gc(), "the failed gc to end")
            wait_until(lambda: len(storage.gc_calls) == 1, "a gc after the failed one")
            wait_until(lambda: storage.writes >= 2, "fake binlogs after the failed one")
    finally:
        bg.stop()
    assert metrics.background_error.labels(loop="gc")._value.get() == 1
    assert metrics.background_error.labels(loop="fake_binlog")._value.get() == 1
    assert any(r.exc_info and isinstance(r.exc_info[1], OSError) for r in caplog.records)
    assert b'binlog_pump_background_error_count{loop="gc"} 1.0' in metrics.render()
