"""How `binlog-spark replay --from-pump-addrs` cuts the commit_ts window into tasks (pure; the probe of a
pump is a function of ours, given here; the real pumps are in tests/spark/test_replay_net.py)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.errors import PumpReadError
from common.pull import PumpWindow
from common.tso import compose
from spark_jobs.errors import InputError
from spark_jobs.readers.pump_net import PumpAddr, parse_pump_addrs, plan_windows

MS = 1 << 18
"""One millisecond of TSO."""


def probe(first: dict[str, int]) -> Callable[[PumpWindow], int]:
    def first_ts(w: PumpWindow) -> int:
        return first[w.name]

    return first_ts


@given(
    start_ms=st.integers(1, 10**12),
    span_ms=st.integers(1, 10**7),
    begin_ms=st.integers(0, 10**7),
    parts=st.integers(1, 50),
)
def test_windows_cover_the_pumps_history_in_the_window_exactly_once(
    start_ms: int, span_ms: int, begin_ms: int, parts: int
) -> None:
    after, upto = compose(start_ms, 3), compose(start_ms + span_ms, 5)
    first = compose(start_ms + begin_ms, 0) + 1  # the pump's first binlog after `after`
    ws = plan_windows(
        [PumpAddr("p", "h:1")], cluster_id=7, after=after, upto=upto, per_pump=parts, first=probe({"p": first})
    )
    assert 1 <= len(ws) <= parts
    assert ws[-1].upto == upto
    assert all(w.after < w.upto for w in ws)
    assert all(a.upto == b.after for a, b in itertools.pairwise(ws))  # no gap, no overlap
    assert ws[0].after == max(after, min(first - 1, upto - 1))  # nothing before the first binlog is missed
    assert all((w.name, w.addr, w.cluster_id) == ("p", "h:1", 7) for w in ws)


def test_every_pump_gets_its_windows_and_the_probe_sees_the_whole_window() -> None:
    seen: list[PumpWindow] = []

    def first_ts(w: PumpWindow) -> int:
        seen.append(w)
        return w.after + 1

    after, upto = compose(1000, 0), compose(1000 + 40, 0)
    ws = plan_windows(
        [PumpAddr("a", "a:1"), PumpAddr("b", "b:1")], cluster_id=1, after=after, upto=upto, per_pump=4, first=first_ts
    )
    assert [(w.after, w.upto) for w in seen] == [(after, upto), (after, upto)]
    assert [w.name for w in ws] == ["a", "b"] * 4  # the pumps in turn
    assert [w.upto for w in ws if w.name == "a"] == [compose(1010, 0), compose(1020, 0), compose(1030, 0), upto]


def test_a_probe_failure_and_an_empty_window_are_refused() -> None:
    def dead(w: PumpWindow) -> int:
        raise PumpReadError(f"pump {w.name} at {w.addr}: PullBinlogs failed after commit_ts 0: UNAVAILABLE")

    with pytest.raises(PumpReadError, match="pump a at a:1"):
        plan_windows([PumpAddr("a", "a:1")], cluster_id=1, after=0, upto=10 * MS, per_pump=2, first=dead)
    with pytest.raises(InputError, match="start ts 5 is not below stop ts 5"):
        plan_windows([PumpAddr("a", "a:1")], cluster_id=1, after=5, upto=5, per_pump=2, first=dead)


def test_pump_addresses() -> None:
    got = parse_pump_addrs(["h1:8250,h2:8250", "h1:8250", " h3:1 "])
    assert got == [PumpAddr("h1:8250", "h1:8250"), PumpAddr("h2:8250", "h2:8250"), PumpAddr("h3:1", "h3:1")]
    for bad in ("h1", ":8250", "h1:port", "h1:0", "h1:70000"):
        with pytest.raises(InputError, match="expected host:port"):
            parse_pump_addrs([bad])
    with pytest.raises(InputError, match="no pump address given"):
        parse_pump_addrs([" , "])


def test_a_ddl_still_running_at_stop_ts_is_not_in_the_schema_at_stop_ts() -> None:
    """A TRUNCATE that started inside the window but whose DDL binlog is not in it committed after
    stop-ts: a replay "up to just before it" keeps the old table (its rows), not the new empty one."""
    from common.schema.model import Job, JobType
    from spark_jobs.readers.pump_net import ddl_commit_times
    from spark_jobs.replay.ddl import effective_times, version_at

    def job(i: int, version: int, start_ts: int) -> Job:
        return Job(i, JobType.TRUNCATE_TABLE, 1, "d", 10 + i, "t", version, "q", start_ts=start_ts)

    before, seen_in_window, running = job(1, 1, 50), job(2, 2, 150), job(3, 3, 180)
    jobs = [before, seen_in_window, running]
    times = ddl_commit_times({2: 160}, jobs, after=100, stop_ts=200)
    assert times == {2: 160, 3: 201}  # job 1: committed before the window, its start_ts stands
    schedule = effective_times(jobs, times)
    assert version_at(schedule, 200) == 2
    assert version_at(effective_times(jobs, {2: 160}), 200) == 3  # what the read alone would have said
