"""Sorter: pairing, watermark, late commits, resolve candidates, handle pointer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.vlog_record import ValuePointer
from pump.storage.entry import COMMIT, PREWRITE, ROLLBACK, Entry
from pump.storage.sorter import Sorter


class Feed:
    """Builds entries at consecutive vlog positions and pushes them."""

    def __init__(self, sorter: Sorter) -> None:
        self.sorter = sorter
        self.pos = 0
        self.now = 0.0

    def _push(self, tp: int, start_ts: int, commit_ts: int) -> bool:
        ptr = ValuePointer(0, self.pos)
        self.pos += 10
        return self.sorter.push(Entry(tp, start_ts, commit_ts, ptr, ValuePointer(0, self.pos)), self.now)

    def p(self, start_ts: int) -> bool:
        return self._push(PREWRITE, start_ts, 0)

    def c(self, start_ts: int, commit_ts: int) -> bool:
        return self._push(COMMIT, start_ts, commit_ts)

    def r(self, start_ts: int) -> bool:
        return self._push(ROLLBACK, start_ts, 0)

    def fake(self, ts: int) -> bool:
        return self._push(ROLLBACK, ts, ts)


def test_pairing_advances_the_watermark() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    assert s.watermark == 0
    assert not s.all_matched()
    assert s.pending == 1
    f.c(10, 11)
    assert s.watermark == 11
    assert s.all_matched()
    assert s.handle_pointer == ValuePointer(0, 20)  # past the last item, nothing held


def test_out_of_order_commits_wait_for_the_head_prewrite() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    f.p(20)
    f.c(20, 21)
    assert s.watermark == 0  # P10 unmatched at the head
    assert s.handle_pointer == ValuePointer(0, 0)
    f.c(10, 22)
    assert s.watermark == 22
    assert s.all_matched()


def test_rollback_matches_without_advancing() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    f.p(20)
    f.r(10)
    assert s.watermark == 0
    assert s.pending == 1
    f.c(20, 25)
    assert s.watermark == 25
    assert s.all_matched()


def test_watermark_never_passes_an_unmatched_prewrite() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(5)
    f.c(5, 6)
    f.p(10)
    for ts in (30, 40, 50):
        f.fake(ts)
    f.p(60)
    f.c(60, 61)
    assert s.watermark == 6
    assert s.handle_pointer == ValuePointer(0, 20)  # P10
    f.c(10, 70)
    assert s.watermark == 70


def test_late_commit_is_ignored_but_still_matches() -> None:
    s = Sorter(watermark=100)
    f = Feed(s)
    assert f.c(50, 90) is False  # below the watermark when it arrives
    assert f.c(51, 100) is False  # equal is late too
    assert s.watermark == 100
    assert s.late_count == 2
    assert f.fake(95) is False
    f.p(120)
    f.c(120, 130)
    assert s.watermark == 130
    # a duplicate commit of a transaction already passed
    assert f.c(120, 130) is False
    # a commit below the watermark for a waiting (retried) prewrite releases it, and is not visible
    f.p(110)
    assert s.pending == 1
    assert f.c(110, 125) is False
    assert s.all_matched()
    assert s.watermark == 130


def test_ignored_commit_releases_its_prewrite_but_never_raises_the_watermark() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    f.c(10, 20)
    assert s.watermark == 20
    f.p(10)  # the prewrite retried after its transaction was decided
    assert s.pending == 1
    ptr = ValuePointer(0, f.pos)
    f.pos += 10
    assert s.push(Entry(COMMIT, 10, 900, ptr, ValuePointer(0, f.pos)), 0.0, ignored=True) is False
    assert s.all_matched()
    assert s.watermark == 20  # not 900
    assert s.late_count == 0
    assert s.handle_pointer == ValuePointer(0, f.pos)
    assert f.c(30, 40) is True  # a real commit below the ignored one's commit_ts is still visible
    assert s.watermark == 40


def test_commit_above_watermark_but_behind_a_waiting_prewrite_is_visible() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    f.p(20)
    f.c(20, 40)
    assert f.c(33, 35) is True  # prewrite elsewhere; 35 > watermark 0 when it arrives
    f.c(10, 45)
    assert s.watermark == 45


def test_retried_prewrite_waits_for_one_commit() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(10)
    f.p(10)
    assert s.pending == 1
    f.c(10, 11)
    assert s.all_matched()
    assert s.watermark == 11


def test_resolve_candidates() -> None:
    s = Sorter(resolve_interval=1.0)
    f = Feed(s)
    f.now = 100.0
    f.p(10)
    f.now = 100.5
    f.p(20)
    assert s.due_for_resolve(100.9) == []
    due = s.due_for_resolve(101.2)
    assert [(w.start_ts, w.ptr, round(waited, 3)) for w, waited in due] == [(10, ValuePointer(0, 0), 1.2)]
    assert s.due_for_resolve(101.3) == []  # asked once: not due until retry_later
    due = s.due_for_resolve(101.6)
    assert [w.start_ts for w, _ in due] == [20]
    s.retry_later(10, 102.0)
    assert s.due_for_resolve(102.5) == []
    assert [w.start_ts for w, _ in s.due_for_resolve(103.0)] == [10]
    f.c(10, 30)
    s.retry_later(10, 104.0)  # already matched: ignored
    assert s.pending == 1
    assert [w.start_ts for w, _ in s.due_for_resolve(200.0, limit=5)] == []  # 20 still "asking"
    s.retry_later(20, 200.0)
    assert [w.start_ts for w, _ in s.due_for_resolve(201.0)] == [20]


@st.composite
def tidb_histories(draw: st.DrawFn, max_fakes: int = 0) -> list[tuple[str, int, int]]:
    """Arrival sequences obeying TiDB's order: start_ts < commit_ts, the prewrite arrives before the
    commit_ts is fetched, a commit arrives after its commit_ts was fetched.  With `max_fakes`, up to
    that many fake binlogs ("F", ts, ts) interleaved at any moment: the pump takes the ts from the TSO,
    then writes it (it arrives) some steps later."""
    n = draw(st.integers(min_value=1, max_value=12))
    fakes = draw(st.integers(min_value=0, max_value=max_fakes))
    clock = 0
    txns: list[dict[str, int]] = [{} for _ in range(n + fakes)]
    events: list[tuple[str, int, int]] = []
    # steps: 0 begin (start_ts), 1 prewrite arrives, 2 fetch commit_ts or decide rollback, 3 commit/rollback arrives
    # a fake (index >= n): 2 fetch its ts, 3 it arrives
    stage = [0] * n + [2] * fakes
    while any(s < 4 for s in stage):
        i = draw(st.sampled_from([k for k in range(n + fakes) if stage[k] < 4]))
        t = txns[i]
        if i >= n:
            if stage[i] == 2:
                clock += 1
                t["fake"] = clock
            else:
                events.append(("F", t["fake"], t["fake"]))
        elif stage[i] == 0:
            clock += 1
            t["start"] = clock
        elif stage[i] == 1:
            events.append(("P", t["start"], 0))
        elif stage[i] == 2:
            clock += 1
            t["commit"] = 0 if draw(st.integers(0, 5)) == 0 else clock
        else:
            events.append(("C" if t["commit"] else "R", t["start"], t["commit"]))
        stage[i] += 1
    return events


@settings(max_examples=200, deadline=None)
@given(tidb_histories())
def test_no_commit_of_a_real_history_is_late(events: list[tuple[str, int, int]]) -> None:
    s = Sorter()
    f = Feed(s)
    commits: list[int] = []
    for kind, start, commit in events:
        if kind == "P":
            f.p(start)
        elif kind == "R":
            f.r(start)
        else:
            assert f.c(start, commit) is True
            commits.append(commit)
        # the watermark is always a commit_ts already seen (and no later commit is at or below it)
        assert s.watermark == 0 or s.watermark in commits
    assert s.all_matched()
    assert s.watermark == max(commits, default=0)
    assert s.late_count == 0


@settings(max_examples=300, deadline=None)
@given(tidb_histories(max_fakes=8))
def test_fake_binlogs_at_any_moment_never_make_a_commit_late(events: list[tuple[str, int, int]]) -> None:
    """The fake binlog's safety does not depend on how often it is written (gen-binlog-pull-interval):
    a commit is never at or below the watermark when it arrives, whatever fakes came before it."""
    s = Sorter()
    f = Feed(s)
    for kind, start, commit in events:
        if kind == "P":
            f.p(start)
        elif kind == "R":
            f.r(start)
        elif kind == "F":
            f.fake(start)
        else:
            assert f.c(start, commit) is True, (start, commit, s.watermark)
    assert s.all_matched()


def test_items_held_follow_unfinished_prewrites_not_arrivals() -> None:
    s = Sorter()
    f = Feed(s)
    f.p(1)  # stuck at the head
    ts = 10
    for _ in range(5000):  # complete transactions behind it: prewrite, then commit
        f.p(ts)
        f.c(ts, ts + 1)
        ts += 2
    for _ in range(2000):
        f.fake(ts)
        ts += 1
    assert s.watermark == 0
    assert s.pending == 1
    assert s.held < 1100  # compacted: the stuck prewrite and a few runs, not 12000 items
    assert s.handle_pointer == ValuePointer(0, 0)
    f.c(1, ts)
    assert s.watermark == ts
    assert s.held == 0
    assert s.handle_pointer == ValuePointer(0, f.pos)


@settings(max_examples=200, deadline=None)
@given(tidb_histories(), st.integers(min_value=1, max_value=6))
def test_compaction_changes_nothing_observable(events: list[tuple[str, int, int]], compact_min: int) -> None:
    plain, tight = Sorter(compact_min=1 << 30), Sorter(compact_min=compact_min)
    feeds = [Feed(plain), Feed(tight)]
    for kind, start, commit in events:
        for f in feeds:
            if kind == "P":
                f.p(start)
            elif kind == "R":
                f.r(start)
            else:
                f.c(start, commit)
        assert tight.watermark == plain.watermark
        assert tight.handle_pointer == plain.handle_pointer
        assert tight.pending == plain.pending
        assert tight.held <= plain.held
