"""The bounded start_ts -> pump map."""

from __future__ import annotations

import logging
import threading

import pytest

from pump_client.tsmap import StartTsMap


def test_set_get_pop() -> None:
    m = StartTsMap(10)
    m.set(5, "p1")
    assert m.get(5) == "p1"
    assert len(m) == 1
    assert m.pop(5) == "p1"
    assert m.pop(5) is None
    assert m.get(5) is None


def test_overflow_evicts_the_oldest_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    m = StartTsMap(3)
    with caplog.at_level(logging.WARNING, logger="pump_client.tsmap"):
        for ts in range(1, 7):
            m.set(ts, f"p{ts}")
    assert len(m) == 3
    assert [m.get(ts) for ts in range(1, 7)] == [None, None, None, "p4", "p5", "p6"]
    assert m.evicted == 3
    warnings = [r for r in caplog.records if "start_ts map full" in r.getMessage()]
    assert len(warnings) == 1
    assert "start_ts=1" in warnings[0].getMessage()


def test_setting_again_refreshes_the_entry() -> None:
    m = StartTsMap(2)
    m.set(1, "a")
    m.set(2, "b")
    m.set(1, "c")  # 1 is now the newest
    m.set(3, "d")
    assert (m.get(1), m.get(2), m.get(3)) == ("c", None, "d")


def test_concurrent_writers_stay_within_the_bound() -> None:
    m = StartTsMap(1000)
    popped = [0] * 8

    def writer(k: int) -> None:
        base = k * 1_000_000
        for i in range(5000):
            m.set(base + i, "p")
            if i % 2 and m.pop(base + i) is not None:
                popped[k] += 1

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(m) <= 1000
    assert len(m) + m.evicted + sum(popped) == 8 * 5000  # every entry is accounted for exactly once


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_tracked_txns"):
        StartTsMap(0)
