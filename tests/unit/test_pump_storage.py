"""Storage: write/pull, watermark, resolver, disk guard, reopen, GC, damage, lock, slow index."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import NoSpaceError, StorageClosedError, StorageError
from common.pb import binlog_pb2, gogo
from common.vlog_record import HEADER_SIZE, encode_record
from pump.storage.api import PulledBinlog, Resolution, Verdict
from pump.storage.index import Index
from pump.storage.storage import GC_KEEP_TSO, Storage
from pump.storage.vlog import file_name
from tests.unit.storageutil import (
    FAST_CHASER,
    FakeResolver,
    Tso,
    commit,
    fake,
    open_storage,
    options,
    prewrite,
    pull,
    pull_upto,
    rollback,
    write,
)


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Storage]:
    s = open_storage(tmp_path / "pump")
    yield s
    s.close()


def txn(s: Storage, clock: Tso, value: bytes = b"") -> tuple[int, int]:
    start = clock.next()
    write(s, prewrite(start, value))
    c = clock.next()
    write(s, commit(start, c))
    return start, c


def merged(start: int, commit_ts: int, value: bytes, *, ddl_query: bytes | None = None, ddl_job_id: int = 0) -> bytes:
    return gogo.encode_binlog(
        binlog_pb2.Commit,
        start,
        commit_ts,
        prewrite_key=b"pk-%d" % start,
        prewrite_value=value,
        ddl_query=ddl_query,
        ddl_job_id=ddl_job_id,
    )


def test_write_pull_round_trip_merges_prewrite_data(storage: Storage) -> None:
    clock = Tso()
    s1 = clock.next()
    write(storage, prewrite(s1, b"rows-1"))
    s2 = clock.next()
    write(storage, prewrite(s2, b"ddl-rows", ddl_query=b"create table t (a int)", ddl_job_id=42))
    c2 = clock.next()
    write(storage, commit(s2, c2))
    c1 = clock.next()
    write(storage, commit(s1, c1))
    f = clock.next()
    write(storage, fake(f))
    s3 = clock.next()
    write(storage, prewrite(s3))
    write(storage, rollback(s3))
    assert storage.wait_indexed(10)
    assert storage.max_commit_ts() == f
    got = pull_upto(storage, 0, f)
    assert [(b.start_ts, b.commit_ts) for b in got] == [(s2, c2), (s1, c1), (f, f)]
    assert got[0].payload == merged(s2, c2, b"ddl-rows", ddl_query=b"create table t (a int)", ddl_job_id=42)
    assert got[1].payload == merged(s1, c1, b"rows-1")
    assert got[2].payload == gogo.fake_binlog(f)  # as stored
    assert storage.all_matched()
    assert storage.check() == []


def test_wait_indexed_returns_only_once_the_watermark_is_out(storage: Storage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Was: the index writer counted a batch as indexed before it published the batch's watermark, so
    wait_indexed could return while max_commit_ts still lagged by the last commit (a flaky model test).
    Publishing is slowed here so that the window, if it were open, is wide."""
    watermark = storage._watermark
    publish = watermark.advance

    def slow_advance(value: int) -> None:
        time.sleep(0.05)
        publish(value)

    monkeypatch.setattr(watermark, "advance", slow_advance)
    clock = Tso()
    for _ in range(5):
        _, c = txn(storage, clock)
        assert storage.wait_indexed(10)
        assert storage.max_commit_ts() == c


def test_pull_from_the_middle_gets_exactly_the_suffix(storage: Storage) -> None:
    clock = Tso()
    commits = [txn(storage, clock)[1] for _ in range(30)]
    assert storage.wait_indexed(10)
    got = pull_upto(storage, commits[11], commits[-1])
    assert [b.commit_ts for b in got] == commits[12:]
    assert pull_upto(storage, commits[-1], commits[-1]) == []


def test_pull_follows_new_writes(storage: Storage) -> None:
    clock = Tso()
    results: list[PulledBinlog] = []
    stop = threading.Event()
    total = 60
    last_commit: list[int] = []

    def puller() -> None:
        for b in storage.pull_commit_binlogs(0, stop):
            results.append(b)
            if len(results) == total:
                return

    t = threading.Thread(target=puller)
    t.start()
    for _ in range(total):
        last_commit.append(txn(storage, clock)[1])
    t.join(20)
    stop.set()
    t.join()
    assert [b.commit_ts for b in results] == last_commit


def test_pull_stops_on_stop_and_on_close(tmp_path: Path) -> None:
    s = open_storage(tmp_path)
    txn(s, Tso())
    stop = threading.Event()
    gen = s.pull_commit_binlogs(0, stop)
    assert next(gen).commit_ts == s.max_commit_ts()
    stop.set()
    assert list(gen) == []
    ended = threading.Event()

    def follow() -> None:
        for _ in s.pull_commit_binlogs(s.max_commit_ts(), threading.Event()):
            pass
        ended.set()

    t = threading.Thread(target=follow)
    t.start()
    s.close()
    t.join(10)
    assert ended.is_set()


def test_probe_stores_nothing(storage: Storage) -> None:
    before = storage.status()
    write(storage, (binlog_pb2.Binlog(), b""))
    write(storage, (binlog_pb2.Binlog(tp=binlog_pb2.Commit), gogo.encode_binlog(binlog_pb2.Commit, 0, 0)))
    after = storage.status()
    assert after.write_count == before.write_count == 0
    assert (after.head_fid, after.head_offset) == (before.head_fid, before.head_offset)


def test_no_space_refuses_writes_but_accepts_fake_binlogs(tmp_path: Path) -> None:
    s = Storage(tmp_path, options(stop_write_at_available_space=1 << 62), chaser_timings=FAST_CHASER)
    try:
        clock = Tso()
        with pytest.raises(NoSpaceError, match="no available space"):
            write(s, prewrite(clock.next()))
        with pytest.raises(NoSpaceError):
            write(s, commit(clock.next(), clock.next()))
        f = clock.next()
        write(s, fake(f))
        assert s.wait_indexed(10)
        assert s.max_commit_ts() == f
        st = s.status()
        assert st.available_bytes > 0
        assert st.capacity_bytes >= st.available_bytes
        assert st.write_count == 1
    finally:
        s.close()


def test_resolver_verdicts(tmp_path: Path) -> None:
    resolver = FakeResolver()
    s = Storage(tmp_path, options(resolve_interval=0.02), resolver, chaser_timings=FAST_CHASER)
    try:
        clock = Tso()
        p_commit, p_rollback = clock.next(), clock.next()
        for start in (p_commit, p_rollback):
            write(s, prewrite(start, b"v-%d" % start))
        c = clock.next()
        resolver.set(p_commit, Resolution(Verdict.COMMITTED, c, "found committed"))
        resolver.set(p_rollback, Resolution(Verdict.ROLLED_BACK, reason="rolled back"))
        got = pull(s, 0, bool)
        assert [(b.start_ts, b.commit_ts) for b in got] == [(p_commit, c)]
        assert got[0].payload == merged(p_commit, c, b"v-%d" % p_commit)
        assert s.wait_indexed(10)
        assert s.all_matched()
        assert resolver.asked_about(p_commit) == 1
        assert resolver.asked_about(p_rollback) == 1
        assert all(waited >= 0.02 for _, waited in resolver.asked)
        stored = s.get_binlog(c)
        assert stored is not None
        assert stored.tp == binlog_pb2.Commit
        assert stored.prewrite_key == b"pk-%d" % p_commit
        # WAIT: asked again and again, and the watermark is held until it resolves
        p_wait = clock.next()
        write(s, prewrite(p_wait))
        f = clock.next()
        write(s, fake(f))
        assert resolver.wait_asked(p_wait, 3, timeout=10)
        assert s.max_commit_ts() == c
        assert s.status().pending_prewrites == 1
        assert not s.all_matched()
        c2 = clock.next()
        resolver.set(p_wait, Resolution(Verdict.COMMITTED, c2))
        got = pull_upto(s, c, c2)
        assert [b.commit_ts for b in got] == [f, c2]
        assert s.all_matched()
        assert s.check() == []
    finally:
        s.close()
    assert not resolver.closed  # the caller owns it


def test_reopen_after_close_keeps_everything(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path, value_log_file_size=2048)
    commits = [txn(s, clock, b"x" * 300)[1] for _ in range(20)]
    waiting = clock.next()
    write(s, prewrite(waiting))
    s.close()
    s = open_storage(tmp_path, value_log_file_size=2048)
    try:
        assert s.max_commit_ts() == commits[-1]
        assert s.status().pending_prewrites == 1
        assert [b.commit_ts for b in pull_upto(s, 0, commits[-1])] == commits
        c = clock.next()
        write(s, commit(waiting, c))
        assert [b.commit_ts for b in pull_upto(s, commits[-1], c)] == [c]
        assert s.check() == []
    finally:
        s.close()


def test_second_open_is_refused_while_locked(storage: Storage, tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="locked by another process"):
        Storage(tmp_path / "pump", options())


def test_close_is_idempotent_and_refuses_writes(tmp_path: Path) -> None:
    s = open_storage(tmp_path)
    s.close()
    s.close()
    with pytest.raises(StorageClosedError):
        write(s, prewrite(Tso().next()))
    s2 = open_storage(tmp_path)  # the lock was released
    s2.close()


def test_late_commit_never_becomes_visible(storage: Storage) -> None:
    clock = Tso()
    elsewhere_start = clock.next()
    old_commit = clock.next()
    _, c = txn(storage, clock)
    write(storage, commit(elsewhere_start, old_commit))  # below the watermark when it arrives
    f = clock.next()
    write(storage, fake(f))
    got = pull_upto(storage, 0, f)
    assert [b.commit_ts for b in got] == [c, f]
    assert storage.get_binlog(old_commit) is None
    assert storage.check() == []


def test_commit_without_prewrite_is_skipped(storage: Storage) -> None:
    clock = Tso()
    orphan_start = clock.next()
    orphan = clock.next()
    write(storage, commit(orphan_start, orphan))  # its prewrite went to another pump
    _, c = txn(storage, clock)
    assert [b.commit_ts for b in pull_upto(storage, 0, c)] == [c]


def test_get_binlog(storage: Storage) -> None:
    clock = Tso()
    start, c = txn(storage, clock, b"abc")
    assert storage.wait_indexed(10)
    p = storage.get_binlog(start)
    assert p is not None
    assert p.tp == binlog_pb2.Prewrite
    assert p.prewrite_value == b"abc"
    got = storage.get_binlog(c)
    assert got is not None
    assert got.tp == binlog_pb2.Commit
    assert got.start_ts == start
    assert storage.get_binlog(c + 1000) is None


def test_gc(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path, value_log_file_size=1024)
    try:
        old = [txn(s, clock, b"o" * 200) for _ in range(10)]
        clock.jump_ms(20 * 60 * 1000)  # 20 minutes later
        mid = [txn(s, clock, b"m" * 200) for _ in range(10)]
        clock.jump_ms(20 * 60 * 1000)
        new = [txn(s, clock, b"n" * 200) for _ in range(10)]
        assert s.wait_indexed(10)
        files_before = len(list((tmp_path / "value").iterdir()))
        top = s.max_commit_ts()
        s.gc(top)  # unsafe: not below maxCommitTS
        assert s.gc_ts() == 0
        gc_ts = mid[-1][1]  # keeps 10 more minutes: `old` (20+ min before) goes, `mid` stays readable
        assert gc_ts - GC_KEEP_TSO > old[-1][1]
        s.gc(gc_ts)
        assert s.gc_ts() == gc_ts
        s.gc(gc_ts - 1)  # not above the current gc ts: ignored
        assert s.gc_ts() == gc_ts
        assert s.get_binlog(old[0][0]) is None
        assert s.get_binlog(old[-1][1]) is None
        assert s.get_binlog(mid[0][1]) is not None
        assert len(list((tmp_path / "value").iterdir())) < files_before
        assert not (tmp_path / "value" / file_name(0)).exists()
        # a pull from below the gc ts starts at the gc ts
        assert [b.commit_ts for b in pull_upto(s, 0, top)] == [c for _, c in new]
        assert [b.commit_ts for b in pull_upto(s, mid[4][1], top)] == [c for _, c in new]
        assert [b.commit_ts for b in pull_upto(s, new[4][1], top)] == [c for _, c in new[5:]]
        assert s.check() == []
    finally:
        s.close()
    s = open_storage(tmp_path, value_log_file_size=1024)
    try:
        assert s.gc_ts() == gc_ts
        assert s.check() == []
    finally:
        s.close()


def test_damaged_vlog_opens_reports_and_serves_every_intact_record(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    txns = [txn(s, clock, b"payload-%d" % i * 10) for i in range(10)]
    s.close()
    path = tmp_path / "value" / file_name(0)
    idx = Index(tmp_path / "kv")
    broken = idx.get(txns[4][1])  # the commit record of txn 4
    idx.close()
    assert broken is not None
    data = bytearray(path.read_bytes())
    data[broken.offset + HEADER_SIZE + 5] ^= 0x40
    torn = gogo.encode_binlog(binlog_pb2.Prewrite, clock.next(), 0, prewrite_value=b"never acknowledged")
    path.write_bytes(bytes(data) + encode_record(torn)[:14])  # a torn append: part of a header
    s = open_storage(tmp_path)
    try:
        rep = s.open_report
        assert rep.corrupted_spans == 1
        assert rep.truncated_bytes == 14
        got = pull_upto(s, 0, txns[-1][1])
        assert [b.commit_ts for b in got] == [c for i, (_, c) in enumerate(txns) if i != 4]
        problems = s.check()
        assert len(problems) == 1
        assert f"ts:{txns[4][1]}" in problems[0]
        _, c = txn(s, clock)  # writes go on after the damage
        assert pull_upto(s, txns[-1][1], c)[-1].commit_ts == c
    finally:
        s.close()


@pytest.mark.timeout(60)
def test_stalled_index_turns_on_the_chaser_and_everything_is_indexed_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = open_storage(tmp_path, kv_chan_cap=2, slow_chaser_threshold=0.05)
    gate = threading.Event()
    real_write = Index.write

    def stalled_write(self: Index, *args: object, **kw: object) -> None:
        gate.wait()
        real_write(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Index, "write", stalled_write)
    try:
        clock = Tso()
        commits = [txn(s, clock)[1] for _ in range(25)]  # 50 writes complete with the index stalled
        assert s.status().chaser_on
        assert s.max_commit_ts() == 0
        gate.set()
        assert s.wait_indexed(20)
        assert [b.commit_ts for b in pull_upto(s, 0, commits[-1])] == commits
        assert s.check() == []
    finally:
        gate.set()
        s.close()
