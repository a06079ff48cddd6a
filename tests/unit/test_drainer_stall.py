"""The stall report (drainer/stall.py): which pump holds the merge back, since when; with a fake clock."""

from __future__ import annotations

import http.client
import json
import logging
from collections.abc import Iterator

import pytest

from common.pb import binlog_pb2
from common.registry import NodeState, NodeStatus
from drainer.http_api import StatusServer
from drainer.merger import MergeItem, Merger
from drainer.metrics import DrainerMetrics
from drainer.stall import StalledPump, StallMonitor
from tests.unit.test_drainer_http import Backend
from tools import binlogctl
from tools.binlogctl.render import stall_notes, stalled_text

WALL0 = 1_700_000_000.0


class Clock:
    """A settable clock: `clock.t` seconds (monotonic), and wall time WALL0 + t."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t


def item(node_id: str, commit_ts: int) -> MergeItem:
    return MergeItem(node_id, binlog_pb2.Binlog(commit_ts=commit_ts), 10)


@pytest.fixture
def parts() -> tuple[Clock, Merger, StallMonitor]:
    clock = Clock()
    merger = Merger(0, clock=clock)
    monitor = StallMonitor(
        merger, 30.0, addrs=lambda: {"a": "10.0.0.1:8250", "b": "10.0.0.2:8250"}, clock=clock, wall=clock.wall
    )
    merger.add_source("a")
    merger.add_source("b")
    return clock, merger, monitor


def names(stalled: list[StalledPump]) -> list[str]:
    return [p.node_id for p in stalled]


def test_only_the_pump_holding_the_merge_back_is_named_and_only_after_the_configured_time(
    parts: tuple[Clock, Merger, StallMonitor],
) -> None:
    clock, merger, monitor = parts
    clock.t = 5
    assert merger.put(item("a", 5))
    clock.t = 20
    assert merger.put(item("a", 6))  # a keeps delivering (fake binlogs)
    assert merger.get(timeout=0) is None  # the merge waits for b
    clock.t = 29.9
    assert monitor.check() == []  # b silent for 29.9 s < 30 s
    clock.t = 31
    assert monitor.check() == [StalledPump("b", "10.0.0.2:8250", WALL0, 31.0, 0)]
    clock.t = 100  # a's last delivery was at 20 s, but a has binlogs waiting: it holds nothing back
    (b,) = monitor.check()
    assert (b.node_id, b.seconds, b.since) == ("b", 100.0, WALL0)
    assert b.to_json() == {"node_id": "b", "addr": "10.0.0.2:8250", "since": WALL0, "seconds": 100.0, "last_ts": 0}


def test_a_stall_clears_when_the_pump_delivers_again(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    clock, merger, monitor = parts
    assert merger.put(item("a", 5))
    assert merger.put(item("b", 4))
    got = merger.get(timeout=0)
    assert got is not None
    assert got.commit_ts == 4  # b's head is consumed: the merge waits for b again
    clock.t = 40
    assert merger.put(item("a", 7))
    (b,) = monitor.check()
    assert (b.node_id, b.seconds, b.last_ts, b.since) == ("b", 40.0, 4, WALL0)
    clock.t = 41
    assert merger.put(item("b", 8))
    assert monitor.check() == []


def test_both_pumps_silent_are_both_named(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    clock, _, monitor = parts
    clock.t = 31
    assert names(monitor.check()) == ["a", "b"]


def test_a_pump_removed_from_the_merge_is_not_reported(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    clock, merger, monitor = parts
    assert merger.put(item("a", 5))
    clock.t = 60
    assert names(monitor.check()) == ["b"]
    merger.remove_source("b")  # the collector does this when the pump goes offline
    assert monitor.check() == []
    assert monitor.stalled_seconds() == {"a": 0.0}


def test_logged_once_when_it_starts_and_once_when_it_clears(
    parts: tuple[Clock, Merger, StallMonitor], caplog: pytest.LogCaptureFixture
) -> None:
    clock, merger, monitor = parts
    caplog.set_level(logging.INFO, logger="drainer.stall")
    assert merger.put(item("a", 5))
    clock.t = 10
    monitor.check()
    assert caplog.records == []
    for t in (31, 32, 33, 60):
        clock.t = t
        monitor.check()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "pump b (10.0.0.2:8250) holds the merge back" in warnings[0].getMessage()
    assert merger.put(item("b", 6))
    monitor.check()
    monitor.check()
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert [r.getMessage() for r in infos] == ["pump b no longer holds the merge back"]
    assert len(caplog.records) == 2


def test_report_after_must_be_positive(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    _, merger, _ = parts
    with pytest.raises(ValueError, match="must be > 0"):
        StallMonitor(merger, 0)


def test_the_metrics_name_the_stalled_pump(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    clock, merger, monitor = parts
    metrics = DrainerMetrics(stalled=monitor.stalled_seconds)
    assert merger.put(item("a", 5))
    clock.t = 10
    lines = metrics.render().decode().splitlines()
    assert 'binlog_drainer_pump_stalled_seconds{nodeID="b"} 0.0' in lines
    assert 'binlog_drainer_pump_stalled{nodeID="b"} 0.0' in lines
    clock.t = 42
    lines = metrics.render().decode().splitlines()
    assert 'binlog_drainer_pump_stalled_seconds{nodeID="a"} 0.0' in lines
    assert 'binlog_drainer_pump_stalled_seconds{nodeID="b"} 42.0' in lines
    assert 'binlog_drainer_pump_stalled{nodeID="a"} 0.0' in lines
    assert 'binlog_drainer_pump_stalled{nodeID="b"} 1.0' in lines


# ---------------------------------------------------------------------------------------- binlogctl


def test_stalled_text() -> None:
    assert stalled_text({"stalled_pumps": []}) == "no stalled pump"
    doc = {
        "stalled_pumps": [
            {"node_id": "pump1", "addr": "127.0.0.1:8250", "since": 1.0, "seconds": 42.4, "last_ts": 99},
            {"node_id": "pump2", "addr": "", "since": 1.0, "seconds": 3.0, "last_ts": 0},
        ]
    }
    assert stalled_text(doc) == "stalled: pump1 at 127.0.0.1:8250 for 42s, last commit_ts 99; pump2 for 3s"
    assert stalled_text({"PumpPos": {}}) == "status unavailable: its /status has no stalled_pumps (an older drainer?)"
    assert stalled_text([]).startswith("status unavailable")
    assert stall_notes([("d1", "no stalled pump"), ("d2", "stalled: p for 5s")]) == (
        "(drainer d1: no stalled pump)\n(drainer d2: stalled: p for 5s)\n"
    )


@pytest.fixture
def drainer_http() -> Iterator[tuple[Backend, StatusServer]]:
    backend = Backend()
    server = StatusServer(backend, "127.0.0.1:0")
    server.start()
    yield backend, server
    server.stop()


def status_of(addr: str) -> NodeStatus:
    return NodeStatus(node_id="d1", host="127.0.0.1:1", state=NodeState.ONLINE, labels={"status-addr": addr})


def test_binlogctl_note_reads_the_drainers_status(drainer_http: tuple[Backend, StatusServer]) -> None:
    backend, server = drainer_http
    addr = f"127.0.0.1:{server.port}"
    assert binlogctl.drainer_stall_note(status_of(addr), 5) == "no stalled pump"
    backend.stalled = [{"node_id": "pump1", "addr": "h:8250", "since": 1.0, "seconds": 42.0, "last_ts": 7}]
    assert binlogctl.drainer_stall_note(status_of(addr), 5) == "stalled: pump1 at h:8250 for 42s, last commit_ts 7"


def test_binlogctl_note_says_when_the_status_cannot_be_fetched(drainer_http: tuple[Backend, StatusServer]) -> None:
    _, server = drainer_http
    port = server.port
    server.stop()
    note = binlogctl.drainer_stall_note(status_of(f"127.0.0.1:{port}"), 2)
    assert note.startswith(f"status unavailable: cannot reach 127.0.0.1:{port}: "), note
    no_addr = NodeStatus(node_id="d1", host="127.0.0.1:1", state=NodeState.ONLINE)
    assert binlogctl.drainer_stall_note(no_addr, 2) == "status unavailable: it publishes no status address"


def test_status_json_of_a_stalled_pump_over_http(parts: tuple[Clock, Merger, StallMonitor]) -> None:
    clock, merger, monitor = parts
    backend = Backend()
    backend.stalled = [p.to_json() for p in monitor.check()]
    assert backend.stalled == []
    clock.t = 35
    assert merger.put(item("a", 9))
    server = StatusServer(backend, "127.0.0.1:0")
    server.start()
    try:
        backend.stalled = [p.to_json() for p in monitor.check()]
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/status")
        doc = json.loads(conn.getresponse().read())
        conn.close()
    finally:
        server.stop()
    assert doc["stalled_pumps"] == [
        {"node_id": "b", "addr": "10.0.0.2:8250", "since": WALL0, "seconds": 35.0, "last_ts": 0}
    ]
