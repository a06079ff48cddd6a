"""One commit binlog's delivery (CommitJob) with a fake pump and a fake clock."""

from __future__ import annotations

from dataclasses import replace

import grpc
import pytest

from common.pb import pump_pb2
from common.registry import NodeState
from pump_client.commit import CommitJob
from pump_client.membership import PumpInfo
from pump_client.retry import RetryPolicy
from pump_client.transport import AttemptError

PUMP = PumpInfo("p1", "127.0.0.1:8250", NodeState.ONLINE, True, 0, 0)


class Harness:
    def __init__(self, failures: int) -> None:
        self.now = 100.0
        self.failures = failures
        self.calls: list[tuple[str, float, bool]] = []
        self.finished: list[tuple[int, bool]] = []
        self.pump: PumpInfo | None = PUMP
        self.error = grpc.StatusCode.UNAVAILABLE

    def clock(self) -> float:
        return self.now

    def attempt(
        self, node_id: str, addr: str, request: pump_pb2.WriteBinlogReq | bytes, timeout: float, *, retry: bool
    ) -> AttemptError | None:
        self.calls.append((node_id, timeout, retry))
        if self.failures:
            self.failures -= 1
            return AttemptError(self.error, "down", 1)
        return None

    def job(self, policy: RetryPolicy) -> CommitJob:
        return CommitJob(
            "p1",
            7,
            8,
            pump_pb2.WriteBinlogReq(clusterID=1, payload=b"x"),
            policy,
            lookup=lambda node_id: self.pump,
            attempt=self.attempt,
            finish=lambda ts, ok: self.finished.append((ts, ok)),
            clock=self.clock,
        )


def run(h: Harness, job: CommitJob) -> list[float | None]:
    """Step until done, advancing the fake clock by each returned delay."""
    delays: list[float | None] = []
    while True:
        delay = job.step()
        delays.append(delay)
        if delay is None:
            return delays
        h.now += delay


def test_delivered_after_retries_every_ten_retry_intervals() -> None:
    h = Harness(failures=2)
    delays = run(h, h.job(RetryPolicy(write_timeout=15.0, commit_timeout=600.0, retry_interval=0.1)))
    assert delays == [pytest.approx(1.0), pytest.approx(1.0), None]
    assert [retry for _, _, retry in h.calls] == [False, True, True]
    # the per-attempt deadline (1 s) doubles on each attempt, within write_timeout
    assert [timeout for _, timeout, _ in h.calls] == [pytest.approx(1.0), pytest.approx(2.0), pytest.approx(4.0)]
    assert h.finished == [(7, True)]


def test_given_up_after_commit_timeout_never_raising() -> None:
    h = Harness(failures=10**9)
    delays = run(h, h.job(RetryPolicy(write_timeout=15.0, commit_timeout=10.0, retry_interval=0.1)))
    assert len(h.calls) == 12  # t = 0, 1, ..., 10 retried; at t = 11 elapsed > 10: given up
    assert delays[-1] is None
    assert h.finished == [(7, False)]
    assert h.calls[-1][1] == pytest.approx(0.5)  # the last attempt's deadline is cut (minimum 0.5 s)


def test_a_pump_that_left_the_registry_ends_the_job() -> None:
    h = Harness(failures=0)
    h.pump = None
    job = h.job(RetryPolicy())
    assert job.step() is None
    assert h.calls == []
    assert h.finished == [(7, False)]


def test_abandon_finishes_once() -> None:
    h = Harness(failures=0)
    job = h.job(RetryPolicy())
    job.abandon()
    job.abandon()
    assert h.finished == [(7, False)]


def test_a_commit_for_a_suspect_pump_waits_for_it_without_calling_then_goes_to_it() -> None:
    h = Harness(failures=0)
    h.pump = replace(PUMP, available=False, suspect=True, err_num=1)  # its last call timed out
    job = h.job(RetryPolicy())
    assert [job.step() for _ in range(3)] == [pytest.approx(1.0)] * 3
    assert h.calls == []  # no worker held by a frozen pump
    assert h.finished == []
    h.pump = PUMP  # a probe got an answer
    assert job.step() is None
    assert [node_id for node_id, _, _ in h.calls] == ["p1"]  # still the pump that took the prewrite
    assert h.finished == [(7, True)]


def test_a_commit_that_times_out_is_retried_on_the_same_pump_only() -> None:
    h = Harness(failures=2)
    h.error = grpc.StatusCode.DEADLINE_EXCEEDED
    delays = run(h, h.job(RetryPolicy()))
    assert delays == [pytest.approx(1.0), pytest.approx(1.0), None]
    assert {node_id for node_id, _, _ in h.calls} == {"p1"}
    assert h.finished == [(7, True)]


def test_a_suspect_pump_that_is_not_online_is_still_tried() -> None:
    h = Harness(failures=0)
    h.pump = replace(PUMP, state=NodeState.PAUSED, available=False, suspect=True)
    assert h.job(RetryPolicy()).step() is None
    assert len(h.calls) == 1  # no prober looks at it: waiting would only run into commit_timeout


def test_a_commit_still_gives_up_after_commit_timeout_while_its_pump_is_suspect() -> None:
    h = Harness(failures=10**9)
    h.pump = replace(PUMP, available=False, suspect=True)
    delays = run(h, h.job(RetryPolicy(commit_timeout=10.0, retry_interval=0.1)))
    assert delays[-1] is None
    assert len(h.calls) == 1  # one last try once the time is up, then given up
    assert h.finished == [(7, False)]


def test_a_commit_the_pump_calls_invalid_is_dropped_at_once_not_retried_for_commit_timeout() -> None:
    h = Harness(failures=10**9)
    h.error = grpc.StatusCode.INVALID_ARGUMENT
    delays = run(h, h.job(RetryPolicy()))
    assert delays == [None]
    assert len(h.calls) == 1
    assert h.finished == [(7, False)]
