"""Observer hooks of the storage (what the metrics measure), and a puller that skips a record whose
index key names another binlog."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pump.storage.api import Resolution, Verdict
from pump.storage.index import ts_key
from pump.storage.storage import Storage
from tests.unit.storageutil import (
    FAST_CHASER,
    FakeResolver,
    Tso,
    commit,
    fake,
    options,
    prewrite,
    pull_upto,
    write,
)

ELEVEN_MIN_MS = 11 * 60 * 1000


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
