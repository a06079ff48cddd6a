"""The routing score a pump publishes (pump/score.py) and its wiring into the heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from common.registry import NodeState
from pump.memory_storage import MemoryStorage
from pump.metrics import PumpMetrics
from pump.node import ApproxClock, PumpNode
from pump.score import (
    DISK_REFERENCE_MIN,
    LATENCY_REFERENCE,
    LatencyEWMA,
    PumpScore,
    compute_score,
)
from tests.unit.test_pump_node import FakeRegistry, FakeTSO

GIB = 1 << 30
THRESHOLD = 10 * GIB


@pytest.mark.parametrize(
    ("available", "latency", "score"),
    [
        (50 * GIB, 0.002, 91),  # the module docstring's examples
        (50 * GIB, 0.020, 50),
        (15 * GIB, 0.002, 45),
        (10 * GIB, 0.0, 0),  # at the threshold: refuses writes
        (9 * GIB, None, 0),
        (50 * GIB, None, 100),  # no batch yet: latency factor 1
        (50 * GIB, 0.0, 100),
        (20 * GIB, None, 100),  # 2x the threshold: disk factor 1
        (THRESHOLD + 1, None, 1),  # writable pumps never publish 0
        (50 * GIB, 1000.0, 1),
    ],
)
def test_formula(available: int, latency: float | None, score: int) -> None:
    assert compute_score(available, THRESHOLD, latency) == score


def test_score_is_monotonic_in_free_space_and_latency() -> None:
    spaces = [THRESHOLD + i * GIB // 4 for i in range(1, 60)]
    by_space = [compute_score(a, THRESHOLD, 0.005) for a in spaces]
    assert by_space == sorted(by_space)
    latencies = [i / 1000 for i in range(0, 200, 5)]
    by_latency = [compute_score(50 * GIB, THRESHOLD, s) for s in latencies]
    assert by_latency == sorted(by_latency, reverse=True)
    assert compute_score(50 * GIB, THRESHOLD, LATENCY_REFERENCE) == 50


def test_small_thresholds_use_the_minimum_disk_reference() -> None:
    assert compute_score(DISK_REFERENCE_MIN // 2, 0, None) == 50
    assert compute_score(DISK_REFERENCE_MIN, 0, None) == 100
    assert compute_score(0, 0, None) == 0


def test_ewma() -> None:
    e = LatencyEWMA(alpha=0.5)
    seen = [e.value]
    for sample in (1.0, 0.0, 0.5):
        e.observe(sample)
        seen.append(e.value)
    assert seen == [None, 1.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="alpha"):
        LatencyEWMA(0)


def test_ewma_is_thread_safe_for_constant_samples() -> None:
    e = LatencyEWMA()

    def feed() -> None:
        for _ in range(2000):
            e.observe(0.25)

    threads = [threading.Thread(target=feed) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert e.value == pytest.approx(0.25)


def test_storage_metrics_feed_the_latency_tracker() -> None:
    metrics = PumpMetrics()
    assert metrics.storage.write_latency.value is None
    metrics.storage.write_batch(3, 4096, 0.001, 0.004)
    assert metrics.storage.write_latency.value == pytest.approx(0.005)


def test_pump_score_reads_the_storage_status() -> None:
    storage = MemoryStorage(capacity_bytes=100 * GIB, available_bytes=15 * GIB)
    latency = LatencyEWMA()
    score = PumpScore(latency, storage.status, THRESHOLD)
    assert score() == 50
    latency.observe(LATENCY_REFERENCE)
    assert score() == 25
    storage.available_bytes = THRESHOLD
    assert score() == 0


def node_with(score: Callable[[], int] | None) -> PumpNode:
    storage = MemoryStorage()
    return PumpNode(
        FakeRegistry(),
        FakeTSO(),
        ApproxClock(),
        node_id="pump-1",
        host="127.0.0.1:8250",
        max_commit_ts=storage.max_commit_ts,
        heartbeat_interval=1.0,
        score=score,
    )


def test_the_heartbeat_publishes_the_score_only_while_online() -> None:
    assert node_with(None).status(NodeState.ONLINE).score == 0  # no score source: 0, as the original
    node = node_with(lambda: 73)
    assert node.status(NodeState.ONLINE).score == 73
    assert node.status(NodeState.PAUSING).score == 0
    assert node.status(NodeState.PAUSED).score == 0
    assert node.status(NodeState.OFFLINE).score == 0

    def broken() -> int:
        raise RuntimeError("storage closed")

    assert node_with(broken).status(NodeState.ONLINE).score == 0
    assert node_with(lambda: 1000).status(NodeState.ONLINE).score == 100


def test_heartbeat_publishes_a_changing_score() -> None:
    registry = FakeRegistry()
    storage = MemoryStorage(capacity_bytes=100 * GIB, available_bytes=50 * GIB)
    latency = LatencyEWMA()
    node = PumpNode(
        registry,
        FakeTSO(),
        ApproxClock(),
        node_id="pump-1",
        host="127.0.0.1:8250",
        max_commit_ts=storage.max_commit_ts,
        heartbeat_interval=1.0,
        score=PumpScore(latency, storage.status, THRESHOLD),
    )
    node.register()
    assert registry.writes[-1].score == 100
    latency.observe(LATENCY_REFERENCE)
    node.heartbeat_once()
    assert registry.writes[-1].score == 50
