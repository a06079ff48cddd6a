"""Storage review fixes: long transactions and GC, slow resolver vs close, cluster-time waits,
resolver input without vlog reads, stale index keys, observer hooks, GC batches vs close."""

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
from pump.storage.index import ts_key
from pump.storage.storage import GC_KEEP_TSO, Storage
from tests.unit.test_pump_storage_support import (
    FAST_CHASER,
    FakeResolver,
    Tso,
    commit,
    fake,
    open_storage,
    options,
    prewrite,
    pull_upto,
    write,
)

ELEVEN_MIN_MS = 11 * 60 * 1000


def test_gc_keeps_the_prewrite_of_a_long_transaction_committed_above_the_gc_ts(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start, b"long-rows"))
        clock.jump_ms(ELEVEN_MIN_MS)
        f = clock.next()
        write(s, fake(f))  # behind the waiting prewrite: the watermark stays below
        c = clock.next()
        write(s, commit(start, c))
        f2 = clock.next()
        write(s, fake(f2))
        assert s.wait_indexed(10)
        assert s.max_commit_ts() == f2
        assert f - GC_KEEP_TSO > start  # the plain 10-minute margin would delete the prewrite
        s.gc(f)
        assert s.check() == []
        got = pull_upto(s, f, f2)
        assert [(b.start_ts, b.commit_ts) for b in got] == [(start, c), (f2, f2)]
        assert binlog_pb2.Binlog.FromString(got[0].payload).prewrite_value == b"long-rows"
    finally:
        s.close()
    s = open_storage(tmp_path)  # the long-transaction entry is durable
    try:
        clock.jump_ms(ELEVEN_MIN_MS)
        top = clock.next()
        write(s, fake(top))
        assert s.wait_indexed(10)
        assert s._index.long_txns_above(f) == [(c, start)]
        assert [b.commit_ts for b in pull_upto(s, f, f2)] == [c, f2]
        s.gc(f2)  # the commit is at or below the gc ts now: the prewrite may go
        assert s.get_binlog(start) is None
        assert s._index.long_txns_above(0) == [(c, start)]  # commit above the cutoff: kept a while
        s.gc(top - 1)
        assert s._index.long_txns_above(0) == []  # at or below the cutoff now: deleted
        assert s.check() == []
    finally:
        s.close()


def test_check_reports_a_commit_whose_prewrite_is_not_indexed(tmp_path: Path) -> None:
    clock = Tso()
    with open_storage(tmp_path) as s:
        start = clock.next()
        c = clock.next()
        write(s, commit(start, c))  # its prewrite went elsewhere
        assert s.wait_indexed(10)
        assert s.check() == [f"ts:{c} -> commit start_ts={start}: prewrite missing from the index"]


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


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[object, ...]] = []
        self.lock = threading.Lock()

    def _add(self, *e: object) -> None:
        with self.lock:
            self.events.append(e)

    def names(self) -> set[object]:
        with self.lock:
            return {e[0] for e in self.events}

    def of(self, name: str) -> list[tuple[object, ...]]:
        with self.lock:
            return [e for e in self.events if e[0] == name]

    def write_batch(self, binlogs: int, size_bytes: int, write_seconds: float, fsync_seconds: float) -> None:
        self._add("write_batch", binlogs, size_bytes, write_seconds, fsync_seconds)

    def rotate(self, seconds: float) -> None:
        self._add("rotate", seconds)

    def error(self, kind: str) -> None:
        self._add("error", kind)

    def decision_ignored(self, kind: str) -> None:
        self._add("decision_ignored", kind)

    def chaser(self, event: str, catch_up_seconds: float | None = None) -> None:
        self._add("chaser", event, catch_up_seconds)

    def resolver_query(self) -> None:
        self._add("resolver_query")

    def gc_done(self, done_gc_ts: int, deleted_kv: int) -> None:
        self._add("gc_done", done_gc_ts, deleted_kv)


def test_puller_skips_a_record_that_is_not_the_one_its_key_names(tmp_path: Path) -> None:
    obs = Recorder()
    clock = Tso()
    s = Storage(tmp_path, options(), chaser_timings=FAST_CHASER, observer=obs)
    try:
        s1 = clock.next()
        write(s, prewrite(s1))
        c1 = clock.next()
        write(s, commit(s1, c1))
        s2 = clock.next()
        write(s, prewrite(s2))
        c2 = clock.next()
        write(s, commit(s2, c2))
        assert s.wait_indexed(10)
        stale = s._index.get(c2)
        assert stale is not None
        s._index.write([(ts_key(c1), stale)])  # a key left pointing at another record
        got = pull_upto(s, 0, c2)
        assert [(b.start_ts, b.commit_ts) for b in got] == [(s2, c2)]
        assert ("error", "read_value") in obs.of("error")
    finally:
        s.close()


def test_observer_hooks(tmp_path: Path) -> None:
    obs = Recorder()
    resolver = FakeResolver()
    clock = Tso()
    s = Storage(
        tmp_path,
        options(resolve_interval=0.02, value_log_file_size=1024),
        resolver,
        chaser_timings=FAST_CHASER,
        observer=obs,
    )
    try:
        starts = []
        for _ in range(20):
            st = clock.next()
            starts.append(st)
            write(s, prewrite(st, b"x" * 100))
            write(s, commit(st, clock.next()))
        orphan = clock.next()
        write(s, commit(orphan - 100, orphan))  # prewrite elsewhere: feed_pre_write_value
        pending = clock.next()
        write(s, prewrite(pending))
        assert resolver.wait_asked(pending, 1, timeout=10)
        clock.jump_ms(ELEVEN_MIN_MS)
        resolver.set(pending, Resolution(Verdict.ROLLED_BACK))
        top = clock.next()
        write(s, fake(top))
        assert s.wait_indexed(10)
        deadline = time.monotonic() + 10
        while s.max_commit_ts() != top and time.monotonic() < deadline:
            time.sleep(0.01)
        pull_upto(s, 0, orphan)
        s.gc(top - 1)
        s._chaser.turn_on(s._vlog.end_pointer())
        deadline = time.monotonic() + 10
        while s._chaser.is_on() and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        s.close()
    batches = obs.of("write_batch")
    assert sum(int(str(b[1])) for b in batches) >= 43
    assert all(int(str(b[2])) > 0 and float(str(b[3])) >= 0 and float(str(b[4])) >= 0 for b in batches)
    assert obs.of("rotate")
    assert obs.of("resolver_query")
    assert ("error", "feed_pre_write_value") in obs.of("error")
    assert obs.of("gc_done") == [("gc_done", top - 1, obs.of("gc_done")[0][2])]
    assert int(str(obs.of("gc_done")[0][2])) > 0
    chaser_events = [e[1] for e in obs.of("chaser")]
    assert chaser_events[0] == "turned_on"
    assert {"catch_up", "recovery", "turned_off"} <= set(chaser_events)


def test_close_does_not_wait_for_a_long_gc_pass(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    start = clock.next()
    write(s, prewrite(start))
    write(s, commit(start, clock.next()))
    clock.jump_ms(ELEVEN_MIN_MS)
    write(s, fake(clock.next()))
    top = clock.next()
    write(s, fake(top))
    assert s.wait_indexed(10)
    calls: list[int] = []
    real = s._index.delete_batch_upto

    def slow_batch(ts: int, *, batch: int = 1024) -> int:
        calls.append(ts)
        time.sleep(0.05)
        return 1 if len(calls) < 200 else real(ts, batch=batch)  # a 10 s pass

    s._index.delete_batch_upto = slow_batch  # type: ignore[method-assign]
    gc = threading.Thread(target=s.gc, args=(top - 1,))
    gc.start()
    while not calls:
        time.sleep(0.01)
    began = time.monotonic()
    s.close()
    assert time.monotonic() - began < 2.0
    gc.join(5)
    assert not gc.is_alive()
    assert len(calls) < 100
