"""Storage: a transaction is decided once (first commit or rollback wins) and served at most once."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from pump.storage.api import NullObserver
from pump.storage.check import check_storage
from pump.storage.index import DECISIONS_KEY, Index, done_key, late_key, ts_key
from pump.storage.storage import GC_KEEP_TSO, Storage
from pump.storage.vlog import ValueLog
from tests.unit.storageutil import (
    FAST_CHASER,
    Tso,
    commit,
    fake,
    options,
    prewrite,
    pull_upto,
    rollback,
    write,
)


class Ignored(NullObserver):
    def __init__(self) -> None:
        self.ignored: list[str] = []
        self.errors: list[str] = []

    def decision_ignored(self, kind: str) -> None:
        self.ignored.append(kind)

    def error(self, kind: str) -> None:
        self.errors.append(kind)


def open_storage(path: Path, observer: Ignored | None = None) -> Storage:
    return Storage(path, options(), chaser_timings=FAST_CHASER, observer=observer)


def served(s: Storage, top: int) -> list[tuple[int, int]]:
    assert s.wait_indexed(10)
    return [(b.start_ts, b.commit_ts) for b in pull_upto(s, 0, top)]


def marker(s: Storage, clock: Tso) -> int:
    """A fresh committed transaction: pulling up to its commit_ts sees everything written before."""
    start = clock.next()
    write(s, prewrite(start))
    c = clock.next()
    write(s, commit(start, c))
    return c


def test_second_commit_retried_commit_and_late_rollback_are_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Tso()
    obs = Ignored()
    s = open_storage(tmp_path, obs)
    try:
        start = clock.next()
        write(s, prewrite(start))
        c1 = clock.next()
        write(s, commit(start, c1))
        c2 = clock.next()
        with caplog.at_level(logging.WARNING, logger="pump.storage"):
            write(s, commit(start, c2))  # a second commit for a committed transaction
            write(s, commit(start, c1))  # the client retrying the same commit after a timeout
            write(s, rollback(start))  # a rollback after the commit
            top = marker(s, clock)
            got = served(s, top)
        assert [(st, c) for st, c in got if st == start] == [(start, c1)]
        assert sorted(obs.ignored) == ["commit", "commit", "rollback"]
        warnings = [r.getMessage() for r in caplog.records if "already decided" in r.getMessage()]
        assert len(warnings) == 1, warnings  # once per start_ts
        assert f"start_ts={start}" in warnings[0]
        assert s.get_binlog(c2) is None  # not in the visible index
        assert s.check() == []
        assert obs.errors == []
    finally:
        s.close()


def test_commit_after_rollback_is_ignored(tmp_path: Path) -> None:
    clock = Tso()
    obs = Ignored()
    s = open_storage(tmp_path, obs)
    try:
        start = clock.next()
        write(s, prewrite(start))
        write(s, rollback(start))
        c = clock.next()
        write(s, commit(start, c))
        top = marker(s, clock)
        assert [st for st, _ in served(s, top) if st == start] == []
        assert obs.ignored == ["commit"]
        assert s.check() == []
    finally:
        s.close()


def test_ignored_commit_does_not_raise_the_watermark(tmp_path: Path) -> None:
    """A bogus commit_ts on an ignored commit must not make a later real commit late."""
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start))
        c1 = clock.next()
        write(s, commit(start, c1))
        assert s.wait_indexed(10)
        write(s, commit(start, c1 + 1000))
        assert s.wait_indexed(10)
        assert s.max_commit_ts() == c1
    finally:
        s.close()


@pytest.mark.parametrize("how", ["reopen", "kv deleted"])
def test_decision_survives_a_restart_and_an_index_rebuild(tmp_path: Path, how: str) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    start = clock.next()
    write(s, prewrite(start))
    c1 = clock.next()
    write(s, commit(start, c1))
    c2 = clock.next()
    write(s, commit(start, c2))
    assert s.wait_indexed(10)
    s.close()
    if how == "kv deleted":
        shutil.rmtree(tmp_path / "kv")
    obs = Ignored()
    s = open_storage(tmp_path, obs)
    try:
        c3 = clock.next()
        write(s, commit(start, c3))
        write(s, rollback(start))
        top = marker(s, clock)
        assert [(st, c) for st, c in served(s, top) if st == start] == [(start, c1)]
        # a rebuilt index decides again from the value log, and counts the old duplicate again
        again = ["commit"] if how == "kv deleted" else []
        assert sorted(obs.ignored) == sorted(["commit", "rollback", *again])
        assert s.check() == []
    finally:
        s.close()


def test_two_commits_indexed_by_an_older_version_are_served_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index written before decisions were kept may hold two visible commits for one start_ts:
    opening it keeps the first (vlog order) and hides the other."""
    clock = Tso()
    s = open_storage(tmp_path)
    start = clock.next()
    write(s, prewrite(start))
    c1 = clock.next()
    write(s, commit(start, c1))
    c2 = clock.next()
    write(s, commit(start, c2))
    top = marker(s, clock)
    assert s.wait_indexed(10)
    s.close()
    idx = Index(tmp_path / "kv")  # make it look like the old version's index
    try:
        late = idx.get_late(c2)
        assert late is not None
        idx.delete([done_key(start), late_key(c2), DECISIONS_KEY])
        idx.write([(ts_key(c2), late)])
        vlog = ValueLog(tmp_path / "value", file_size=options().value_log_file_size)
        try:
            problems = check_storage(idx, vlog, head=vlog.end_pointer(), max_commit_ts=top, gc_ts=0, gc_cutoff=0)
        finally:
            vlog.close()
        assert any(f"start_ts {start} is indexed twice" in p for p in problems), problems
    finally:
        idx.close()
    obs = Ignored()
    with caplog.at_level(logging.WARNING, logger="pump.storage"):
        s = open_storage(tmp_path, obs)
    try:
        assert [(st, c) for st, c in served(s, top) if st == start] == [(start, c1)]
        assert obs.ignored == ["commit"]
        assert any("already decided" in r.getMessage() for r in caplog.records)
        assert s.check() == []
        c3 = clock.next()
        write(s, commit(start, c3))
        assert [(st, c) for st, c in served(s, marker(s, clock)) if st == start] == [(start, c1)]
    finally:
        s.close()


def test_gc_purges_decisions_with_their_binlogs(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start))
        c1 = clock.next()
        write(s, commit(start, c1))
        straddling = clock.next()  # its decision goes with its start_ts, its commit stays
        write(s, prewrite(straddling))
        clock.jump_ms(5 * 60 * 1000)
        c2 = clock.next()
        write(s, commit(straddling, c2))
        clock.jump_ms(6 * 60 * 1000)
        gc_ts = clock.next()
        clock.jump_ms(1)
        write(s, fake(clock.next()))
        assert s.wait_indexed(10)
        assert s.decided_count() == 2
        assert c1 < straddling < gc_ts - GC_KEEP_TSO < c2 < gc_ts
        s.gc(gc_ts)
        assert s.decided_count() == 0
        assert s.check() == []
    finally:
        s.close()


def test_check_reports_a_start_ts_indexed_twice(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    start = clock.next()
    write(s, prewrite(start))
    c1 = clock.next()
    write(s, commit(start, c1))
    c2 = clock.next()
    write(s, commit(start, c2))
    assert s.wait_indexed(10)
    top = s.max_commit_ts()
    s.close()
    idx = Index(tmp_path / "kv")
    vlog = ValueLog(tmp_path / "value", file_size=options().value_log_file_size)
    try:
        late = idx.get_late(c2)
        assert late is not None
        idx.write([(ts_key(c2), late)])  # visible a second time
        problems = check_storage(idx, vlog, head=vlog.end_pointer(), max_commit_ts=top, gc_ts=0, gc_cutoff=0)
        assert any(f"start_ts {start} is indexed twice" in p for p in problems), problems
    finally:
        vlog.close()
        idx.close()


def test_pull_never_serves_a_commit_that_is_not_the_decision(tmp_path: Path) -> None:
    """Whatever puts a second commit of a start_ts in the visible index, pulls skip it."""
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start))
        c1 = clock.next()
        write(s, commit(start, c1))
        c2 = clock.next()
        write(s, commit(start, c2))
        top = marker(s, clock)
        assert s.wait_indexed(10)
        index = s._index  # planting the stale entry an older index may hold
        late = index.get_late(c2)
        assert late is not None
        index.write([(ts_key(c2), late)])
        assert [(st, c) for st, c in served(s, top) if st == start] == [(start, c1)]
        assert any(f"start_ts {start} is indexed twice" in p for p in s.check())
    finally:
        s.close()


def test_prewrite_stored_after_its_decision_does_not_hold_the_watermark(tmp_path: Path) -> None:
    """No resolver here: a prewrite arriving after its commit would otherwise wait forever."""
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start))
        c1 = clock.next()
        write(s, commit(start, c1))
        write(s, prewrite(start))  # a late copy of the prewrite
        top = marker(s, clock)
        assert [(st, c) for st, c in served(s, top) if st == start] == [(start, c1)]
        assert s.all_matched()
        assert s.max_commit_ts() == top
        assert s.check() == []
    finally:
        s.close()
    s = open_storage(tmp_path)  # the same after replay
    try:
        assert s.wait_indexed(10)
        assert s.all_matched()
        assert s.max_commit_ts() == top
    finally:
        s.close()


def test_gc_purging_an_orphan_commits_decision_leaves_check_clean(tmp_path: Path) -> None:
    """An orphan commit (no prewrite here) whose start_ts is below the GC cutoff and commit_ts above the
    gc ts: GC purges its decision with its start_ts, and check() does not call that a problem (found
    by the storage model test)."""
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        old = clock.next()
        clock.jump_ms(11 * 60 * 1000)
        gc_ts = clock.next()
        orphan_commit = clock.next()
        write(s, commit(old, orphan_commit))
        clock.jump_ms(1)
        write(s, fake(clock.next()))
        assert s.wait_indexed(10)
        assert old < gc_ts - GC_KEEP_TSO
        s.gc(gc_ts)
        assert s.decided_count() == 0
        assert s.check() == [f"ts:{orphan_commit} -> commit start_ts={old}: prewrite missing from the index"]
    finally:
        s.close()
