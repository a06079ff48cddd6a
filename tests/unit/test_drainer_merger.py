"""drainer/merger.py: the pure MergeCore (ordering, waiting, duplicates, sources) and the threaded Merger
(byte budget per source, close)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.pb import binlog_pb2
from drainer.merger import MergeCore, MergeItem, Merger

JOIN = 10.0


def item(node_id: str, commit_ts: int, size: int = 10) -> MergeItem:
    return MergeItem(
        node_id, binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=commit_ts - 1, commit_ts=commit_ts), size
    )


def valued(node_id: str, commit_ts: int, value: bytes) -> MergeItem:
    """An item as a puller makes it: the prewrite value kept apart (a view of the received bytes)."""
    m = item(node_id, commit_ts, size=len(value))
    m.prewrite_value = memoryview(value)
    return m


def cts(m: MergeItem | None) -> int | None:
    return None if m is None else m.commit_ts


def key(m: MergeItem | None) -> tuple[str, int] | None:
    return None if m is None else (m.node_id, m.commit_ts)


def drain(core: MergeCore, feeds: dict[str, list[int]]) -> list[tuple[str, int]]:
    """Feed every source from its list while it can, popping what the merge lets out."""
    out: list[tuple[str, int]] = []
    while True:
        for node_id in core.needs():
            if not feeds[node_id]:
                return out
            core.push(item(node_id, feeds[node_id].pop(0)))
        got = core.pop()
        if got is not None:
            out.append((got.node_id, got.commit_ts))


# ---------------------------------------------------------------------------------------------- MergeCore


def test_core_orders_three_sources() -> None:
    core = MergeCore()
    for s in ("a", "b", "c"):
        core.add_source(s)
    feeds = {"a": [1, 4, 7, 100], "b": [2, 5, 8, 100], "c": [3, 6, 9, 100]}
    out = drain(core, feeds)
    assert [ts for _, ts in out] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 100]
    assert [n for n, _ in out] == ["a", "b", "c"] * 3 + ["a"]
    assert core.latest_ts == 100
    assert core.pop() is None  # b@100 and c@100 wait: a needs a head again
    assert (core.duplicates, core.needs()) == (0, ["a"])
    core.remove_source("a")
    assert core.pop() is None  # b@100 dropped: a duplicate of a@100
    assert (core.duplicates, core.needs()) == (1, ["b"])


def test_core_waits_for_every_source() -> None:
    core = MergeCore(latest_ts=0)
    core.add_source("a")
    core.add_source("b")
    assert core.pop() is None  # nothing at all
    core.push(item("a", 5))
    assert core.needs() == ["b"]
    assert core.pop() is None  # b may still send something smaller than 5
    core.push(item("b", 3))
    got = core.pop()
    assert cts(got) == 3
    assert core.needs() == ["b"]
    assert core.pop() is None  # again waits for b
    core.push(item("b", 9))
    assert [core.pop(), core.pop()] == [item("a", 5), None]
    assert core.needs() == ["a"]


def test_core_no_sources_emits_nothing() -> None:
    core = MergeCore()
    assert core.pop() is None
    assert core.needs() == []


def test_core_drops_duplicates_and_disorder_and_counts_them() -> None:
    core = MergeCore(latest_ts=10)
    core.add_source("a")
    core.add_source("b")
    # at the checkpoint: duplicate; below it: disorder
    core.push(item("a", 10))
    core.push(item("b", 7))
    assert core.pop() is None  # b@7 dropped (disorder), b needs a new head
    assert (core.duplicates, core.disorders) == (0, 1)
    core.push(item("b", 12))
    assert core.pop() is None  # a@10 dropped (duplicate)
    assert (core.duplicates, core.disorders) == (1, 1)
    core.push(item("a", 12))
    first = core.pop()
    assert key(first) == ("a", 12)  # ties break by node id
    core.push(item("a", 20))
    assert core.pop() is None  # b@12 is a duplicate of a@12
    assert (core.duplicates, core.disorders) == (2, 1)
    assert core.latest_ts == 12


def test_core_push_checks_its_source() -> None:
    core = MergeCore()
    core.add_source("a")
    with pytest.raises(ValueError, match="unknown merge source"):
        core.push(item("x", 1))
    core.push(item("a", 1))
    with pytest.raises(ValueError, match="already has a head"):
        core.push(item("a", 2))


def test_core_add_and_remove_sources_while_running() -> None:
    core = MergeCore()
    core.add_source("a")
    core.push(item("a", 1))
    assert core.pop() == item("a", 1)
    core.push(item("a", 5))
    core.add_source("b")  # a new pump: the merge waits for it
    core.add_source("b")  # no-op
    assert core.sources == ["a", "b"]
    assert core.pop() is None
    core.push(item("b", 3))
    assert core.pop() == item("b", 3)
    # b goes offline while a@5 waits for it: removing b lets a through
    assert core.pop() is None
    assert core.remove_source("b") is None
    assert core.pop() == item("a", 5)
    # removing a source drops its head, and a stale heap entry is skipped afterwards
    core.add_source("c")
    core.push(item("a", 8))
    core.push(item("c", 6))
    assert core.remove_source("c") == item("c", 6)
    core.remove_source("nope")  # no-op
    assert core.pop() == item("a", 8)
    # a source removed and re-added gets a fresh head; the old entry must not count
    core.add_source("c")
    core.push(item("a", 20))
    core.push(item("c", 15))
    core.remove_source("c")
    core.add_source("c")
    core.push(item("c", 16))
    assert [core.pop(), core.pop()] == [item("c", 16), None]
    assert core.needs() == ["c"]


source_lists = st.dictionaries(
    keys=st.sampled_from(["p1", "p2", "p3", "p4"]),
    values=st.lists(st.integers(min_value=1, max_value=60), max_size=25).map(lambda xs: sorted(set(xs))),
    min_size=1,
)


def model(feeds: dict[str, list[int]], start: int) -> tuple[list[int], int, int]:
    """What any correct merge must do with fully drained sources: emit each commit_ts above the start
    once, in order; count the rest."""
    counts = Counter(ts for xs in feeds.values() for ts in xs)
    emitted = sorted(ts for ts in counts if ts > start)
    duplicates = sum(c - 1 for ts, c in counts.items() if ts > start) + counts.get(start, 0)
    disorders = sum(c for ts, c in counts.items() if ts < start)
    return emitted, duplicates, disorders


@settings(max_examples=300, deadline=None)
@given(feeds=source_lists, start=st.integers(min_value=0, max_value=30), seed=st.integers(0, 2**32))
def test_core_matches_a_sorted_list_model(feeds: dict[str, list[int]], start: int, seed: int) -> None:
    """Sources are fed in a random order; a source that ran dry is removed (as an offline pump), so every
    item eventually leaves the merge."""
    rng = random.Random(seed)
    core = MergeCore(latest_ts=start)
    for s in feeds:
        core.add_source(s)
    left = {s: list(xs) for s, xs in feeds.items()}
    out: list[int] = []
    while core.sources:
        needs = core.needs()
        if needs:
            s = rng.choice(needs)
            if left[s]:
                core.push(item(s, left[s].pop(0)))
            else:
                core.remove_source(s)
            if rng.random() < 0.5:
                continue  # pop attempts interleave with pushes
        got = core.pop()
        if got is not None:
            assert got.commit_ts > (out[-1] if out else start)
            out.append(got.commit_ts)
    emitted, duplicates, disorders = model(feeds, start)
    assert out == emitted
    assert (core.duplicates, core.disorders) == (duplicates, disorders)
    assert core.latest_ts == (emitted[-1] if emitted else start)


# ------------------------------------------------------------------------------------------------- Merger


def test_merger_bounds_each_source_by_bytes() -> None:
    merger = Merger(0, max_bytes_per_source=100)
    merger.add_source("a")
    assert merger.put(item("a", 1, size=60))
    assert merger.buffered_bytes("a") == 60
    assert not merger.put(item("a", 2, size=60), timeout=0.05)  # 120 > 100: blocks until the timeout
    assert merger.put(item("a", 2, size=40), timeout=0)  # 100 fits exactly

    done = threading.Event()

    def producer() -> None:
        if merger.put(item("a", 3, size=60)):
            done.set()

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert not done.wait(0.05)  # still blocked: the source holds 100 bytes
        first = merger.get(timeout=JOIN)
        assert cts(first) == 1
        assert done.wait(JOIN), "the producer was not released after get()"
        assert merger.buffered_bytes("a") == 100
    finally:
        merger.close()
        t.join(JOIN)
    assert not t.is_alive()


def test_merger_admits_an_oversized_binlog_alone() -> None:
    merger = Merger(0, max_bytes_per_source=10)
    merger.add_source("a")
    assert merger.put(item("a", 1, size=1000), timeout=0)
    assert not merger.put(item("a", 2, size=1), timeout=0)
    got = merger.get(timeout=JOIN)
    assert cts(got) == 1
    assert merger.buffered_bytes("a") == 0
    assert merger.put(item("a", 2, size=1), timeout=0)


def test_wait_room_lets_a_puller_wait_before_it_receives_the_next_binlog() -> None:
    merger = Merger(0, max_bytes_per_source=100)
    merger.add_source("a")
    assert not merger.wait_room("zz", timeout=0)  # unknown source: no room
    assert merger.wait_room("a", timeout=0)
    assert merger.put(item("a", 1, size=500), timeout=0)
    assert not merger.wait_room("a", timeout=0.02)  # a large binlog buffered: do not pull another
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(merger.wait_room("a", timeout=JOIN)))
    t.start()
    assert cts(merger.get(timeout=JOIN)) == 1
    t.join(JOIN)
    assert woke == [True]
    merger.close()
    assert not merger.wait_room("a", timeout=0)


def test_hold_until_released_keeps_a_taken_binlog_on_its_budget() -> None:
    merger = Merger(0, max_bytes_per_source=100, hold_until_released=True)
    merger.add_source("a")
    merger.add_source("b")
    assert merger.put(item("a", 1, size=500), timeout=0)
    assert merger.put(item("b", 2, size=30), timeout=0)
    assert cts(merger.get(timeout=JOIN)) == 1
    assert merger.buffered_bytes("a") == 500  # taken, not released: still a's
    assert not merger.wait_room("a", timeout=0)
    assert not merger.put(item("a", 3, size=1), timeout=0)
    merger.release("a", 500)
    assert merger.buffered_bytes("a") == 0
    assert merger.wait_room("a", timeout=0)
    assert merger.put(item("a", 3, size=40), timeout=0)
    # a dropped duplicate is never handed out, so its bytes go at once
    assert merger.put(item("b", 3, size=20), timeout=0)
    assert cts(merger.get(timeout=JOIN)) == 2
    assert cts(merger.get(timeout=JOIN)) == 3
    merger.release("a", 40)
    merger.release("b", 30)
    assert merger.buffered_bytes("b") == 20  # b's 3, a duplicate of a's, is b's head now
    assert merger.put(item("a", 4, size=10), timeout=0)
    assert merger.get(timeout=0) is None  # b's 3 is dropped when it comes up: nothing is handed out...
    assert merger.buffered_bytes("b") == 0  # ...and its bytes are gone without a release
    merger.release("zz", 5)  # unknown or removed source: nothing to do


def test_release_is_a_no_op_without_hold() -> None:
    merger = Merger(0, max_bytes_per_source=100)
    merger.add_source("a")
    assert merger.put(item("a", 1, size=60), timeout=0)
    assert merger.put(item("a", 2, size=30), timeout=0)
    assert cts(merger.get(timeout=JOIN)) == 1
    merger.release("a", 60)
    assert merger.buffered_bytes("a") == 30


def test_one_source_at_a_time_receives_ahead_of_need() -> None:
    """A source with a head (or buffered binlogs) receives only while no other source does; a source the
    merge waits for receives at once, and is woken when the merge starts waiting for it."""
    merger = Merger(0, max_bytes_per_source=100)
    for s in "abc":
        merger.add_source(s)
    for s, ts in (("a", 1), ("b", 2), ("c", 3)):
        assert merger.put(item(s, ts), timeout=0)
    assert merger.wait_room("a", timeout=0)  # a receives ahead of need (it has a head)
    assert not merger.wait_room("b", timeout=0.02)  # so b may not, though it has room
    merger.received("a")
    assert merger.wait_room("b", timeout=0)
    woke: list[bool] = []
    t = threading.Thread(target=lambda: woke.append(merger.wait_room("a", timeout=JOIN)))
    t.start()
    time.sleep(0.05)
    assert woke == []  # b receives; a has a head
    assert cts(merger.get(timeout=JOIN)) == 1  # a's head goes; the merge now waits for a
    assert merger.get(timeout=0) is None
    t.join(JOIN)
    assert woke == [True]  # needed: it receives while b does
    merger.received("a")
    merger.received("b")
    assert merger.wait_room("c", timeout=0)
    merger.remove_source("c")  # a removed source stops receiving
    assert merger.wait_room("b", timeout=0)


def test_merger_budget_is_per_source() -> None:
    merger = Merger(0, max_bytes_per_source=50)
    merger.add_source("a")
    merger.add_source("b")
    assert merger.put(item("a", 1, size=50), timeout=0)
    assert merger.put(item("b", 2, size=50), timeout=0)  # a's budget is a's
    assert not merger.put(item("a", 3, size=1), timeout=0)


def test_merger_close_unblocks_producers_and_the_consumer() -> None:
    merger = Merger(0, max_bytes_per_source=10)
    merger.add_source("a")
    merger.add_source("b")
    assert merger.put(item("a", 1, size=10))
    results: dict[str, object] = {}
    blocked_put = threading.Thread(target=lambda: results.update(put=merger.put(item("a", 2, size=10))))
    blocked_get = threading.Thread(target=lambda: results.update(get=merger.get()))  # waits for b
    unknown_put = threading.Thread(target=lambda: results.update(unknown=merger.put(item("zz", 2))))
    threads = [blocked_put, blocked_get, unknown_put]
    for t in threads:
        t.start()
    assert merger.get(timeout=0.05) is None
    merger.close()
    merger.close()  # idempotent
    for t in threads:
        t.join(JOIN)
        assert not t.is_alive()
    assert results == {"put": False, "get": None, "unknown": False}
    assert merger.closed
    assert not merger.put(item("b", 1), timeout=0)
    assert merger.get(timeout=0) is None


def test_merger_remove_source_unblocks_the_merge() -> None:
    merger = Merger(5)
    merger.add_source("a")
    merger.add_source("b")
    assert merger.put(item("a", 7))
    assert merger.get(timeout=0.05) is None  # waiting for b
    merger.remove_source("b")
    merger.remove_source("b")  # no-op
    got = merger.get(timeout=JOIN)
    assert cts(got) == 7
    assert merger.latest_ts() == 7
    assert merger.source_ids() == ["a"]


def test_merger_put_for_a_source_not_added_yet_waits_for_it() -> None:
    merger = Merger(0)
    assert not merger.put(item("a", 1), timeout=0.01)
    ok: list[bool] = []
    t = threading.Thread(target=lambda: ok.append(merger.put(item("a", 1))))
    t.start()
    merger.add_source("a")
    t.join(JOIN)
    assert ok == [True]
    got = merger.get(timeout=JOIN)
    assert cts(got) == 1
    merger.close()


def test_merger_drops_duplicates_and_frees_their_bytes() -> None:
    merger = Merger(10, max_bytes_per_source=100)
    merger.add_source("a")
    merger.add_source("b")
    for src, ts in (("a", 10), ("a", 11), ("b", 11), ("b", 12)):
        assert merger.put(item(src, ts, size=30), timeout=0)
    first = merger.get(timeout=JOIN)
    assert key(first) == ("a", 11)
    assert (merger.duplicates, merger.disorders) == (1, 0)  # a@10 equals the checkpoint
    assert merger.buffered_bytes("a") == 0
    assert merger.get(timeout=0.01) is None  # b@11 waits for a's next binlog
    assert merger.buffered_bytes("b") == 60
    assert merger.put(item("a", 13, size=30), timeout=0)
    assert key(merger.get(timeout=JOIN)) == ("b", 12)  # b@11 dropped as a duplicate of a@11
    assert (merger.duplicates, merger.buffered_bytes("b")) == (2, 0)


def test_merger_threads_against_the_model() -> None:
    """Producers on threads with a small budget, each removing its source when done and drained; the
    consumer sees the model's stream."""
    rng = random.Random(7)
    feeds = {f"p{i}": sorted(rng.sample(range(1, 3000), 400)) for i in range(4)}
    merger = Merger(100, max_bytes_per_source=64)

    sizes = {s: [rng.randrange(1, 40) for _ in xs] for s, xs in feeds.items()}

    def producer(node_id: str) -> None:
        for ts, size in zip(feeds[node_id], sizes[node_id], strict=True):
            assert merger.put(item(node_id, ts, size=size), timeout=JOIN)
        while merger.buffered_bytes(node_id) and not merger.closed:
            time.sleep(0.001)  # polls a condition: this source's last binlog left the merge
        merger.remove_source(node_id)

    for s in feeds:
        merger.add_source(s)
    threads = [threading.Thread(target=producer, args=(s,)) for s in feeds]
    for t in threads:
        t.start()
    out: list[int] = []
    try:
        while merger.source_ids():
            got = merger.get(timeout=0.05)
            if got is not None:
                out.append(got.commit_ts)
    finally:
        merger.close()
        for t in threads:
            t.join(JOIN)
    emitted, duplicates, disorders = model(feeds, 100)
    assert out == emitted
    assert (merger.duplicates, merger.disorders) == (duplicates, disorders)
