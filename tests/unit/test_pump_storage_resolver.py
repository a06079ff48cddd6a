"""The commit resolver inside storage: close vs a slow resolver, free space and cluster time while it
blocks, and its input read from the index without value log reads."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from common import tso
from common.pb import binlog_pb2
from common.vlog_record import ValuePointer
from pump.storage import diskguard
from pump.storage.api import Resolution, Verdict
from pump.storage.storage import Storage
from tests.unit.storageutil import (
    FAST_CHASER,
    FakeResolver,
    Tso,
    open_storage,
    options,
    prewrite,
    pull_upto,
    write,
)


class SlowResolver(FakeResolver):
    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
        time.sleep(0.2)
        return super().resolve(prewrite, waited_seconds)


def test_close_does_not_wait_for_a_whole_slow_resolver_pass(tmp_path: Path) -> None:
    resolver = SlowResolver()
    s = Storage(tmp_path, options(resolve_interval=0.02), resolver, chaser_timings=FAST_CHASER)
    clock = Tso()
    starts = [clock.next() for _ in range(50)]
    for st in starts:
        write(s, prewrite(st))
    assert resolver.wait_asked(starts[0], 1, timeout=10)
    began = time.monotonic()
    s.close()
    took = time.monotonic() - began
    asked_at_close = len(resolver.asked)
    time.sleep(0.3)
    assert len(resolver.asked) == asked_at_close
    assert asked_at_close < 10  # stopped between calls, not after the 50 of the pass
    assert took < 1.0


def test_free_space_refreshed_while_the_resolver_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diskguard, "REFRESH_INTERVAL", 0.02)
    release = threading.Event()
    entered = threading.Event()

    class Blocking(FakeResolver):
        def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
            entered.set()
            release.wait(10)
            return Resolution(Verdict.WAIT)

    s = Storage(tmp_path, options(resolve_interval=0.02), Blocking(), chaser_timings=FAST_CHASER)
    refreshes: list[float] = []
    real = s._disk.refresh

    def counting_refresh() -> None:
        refreshes.append(time.monotonic())
        real()

    monkeypatch.setattr(s._disk, "refresh", counting_refresh)
    try:
        write(s, prewrite(Tso().next()))
        assert entered.wait(10)
        n = len(refreshes)
        deadline = time.monotonic() + 5
        while len(refreshes) < n + 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(refreshes) >= n + 3
    finally:
        release.set()
        s.close()


def test_waited_seconds_come_from_cluster_time(tmp_path: Path) -> None:
    resolver = FakeResolver()
    clock = Tso()
    start = clock.next()
    wall = tso.physical(start) / 1000 + 700.0  # the transaction started 700 s ago, whatever the pump did
    s = Storage(tmp_path, options(resolve_interval=0.02), resolver, chaser_timings=FAST_CHASER, wall_clock=lambda: wall)
    try:
        write(s, prewrite(start))
        assert resolver.wait_asked(start, 1, timeout=10)
        assert abs(resolver.asked[0][1] - 700.0) < 0.01
    finally:
        s.close()


def test_resolver_gets_start_ts_and_key_without_vlog_reads(tmp_path: Path) -> None:
    seen: list[binlog_pb2.Binlog] = []

    class Recording(FakeResolver):
        def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
            seen.append(prewrite)
            return super().resolve(prewrite, waited_seconds)

    resolver = Recording()
    clock = Tso()
    start = clock.next()
    s = open_storage(tmp_path)
    write(s, prewrite(start, b"big-rows"))
    s.close()
    s = Storage(tmp_path, options(resolve_interval=0.02), resolver, chaser_timings=FAST_CHASER)  # key from replay
    reads: list[ValuePointer] = []
    real_read = s._vlog.read

    def counting_read(ptr: ValuePointer) -> bytes:
        reads.append(ptr)
        return real_read(ptr)

    s._vlog.read = counting_read  # type: ignore[method-assign]
    try:
        c = clock.next()
        resolver.set(start, Resolution(Verdict.COMMITTED, c, "committed"))
        assert resolver.wait_asked(start, 1, timeout=10)
        assert seen[0] == binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start, prewrite_key=b"pk-%d" % start)
        assert reads == []
        got = pull_upto(s, 0, c)
        assert [(b.start_ts, b.commit_ts) for b in got] == [(start, c)]
        assert binlog_pb2.Binlog.FromString(got[0].payload).prewrite_value == b"big-rows"
    finally:
        s.close()
