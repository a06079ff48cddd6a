"""Retry decisions of the pump client (pure functions)."""

from __future__ import annotations

import grpc
import pytest

from pump_client.retry import (
    ATTEMPT_BYTES_PER_SECOND,
    DEFAULT_ATTEMPT_TIMEOUT,
    MIN_RPC_TIMEOUT,
    Action,
    RetryPolicy,
    makes_suspect,
    on_error,
    prewrite_gives_up,
)


@pytest.mark.parametrize(
    ("code", "action"),
    [
        (grpc.StatusCode.RESOURCE_EXHAUSTED, Action.FAIL),
        (grpc.StatusCode.INVALID_ARGUMENT, Action.INVALID),
        (grpc.StatusCode.UNAVAILABLE, Action.RECONNECT),
        (grpc.StatusCode.DEADLINE_EXCEEDED, Action.RETRY),
        (grpc.StatusCode.INTERNAL, Action.RETRY),
        (grpc.StatusCode.FAILED_PRECONDITION, Action.RETRY),
        (None, Action.RETRY),
    ],
)
def test_error_actions(code: grpc.StatusCode | None, action: Action) -> None:
    assert on_error(code) is action


def test_prewrite_gives_up_only_when_both_time_and_retries_are_spent() -> None:
    assert not prewrite_gives_up(elapsed=20.0, write_timeout=15.0, retries=2, available=2)
    assert not prewrite_gives_up(elapsed=1.0, write_timeout=15.0, retries=100, available=2)
    assert prewrite_gives_up(elapsed=15.1, write_timeout=15.0, retries=3, available=2)
    assert prewrite_gives_up(elapsed=15.1, write_timeout=15.0, retries=1, available=0)


def test_policy_defaults_are_the_originals() -> None:
    p = RetryPolicy()
    assert (p.write_timeout, p.commit_timeout, p.retry_interval) == (15.0, 600.0, 0.1)
    assert p.commit_interval == pytest.approx(1.0)


def test_commit_gives_up_after_commit_timeout() -> None:
    p = RetryPolicy(commit_timeout=5.0)
    assert not p.commit_gives_up(4.9)
    assert not p.commit_gives_up(5.0)
    assert p.commit_gives_up(5.01)


def test_commit_rpc_deadline_is_cut_to_what_is_left_but_not_below_the_minimum() -> None:
    p = RetryPolicy(write_timeout=15.0, commit_timeout=20.0, attempt_timeout=15.0)
    assert p.commit_rpc_timeout(0.0) == 15.0
    assert p.commit_rpc_timeout(10.0) == 10.0
    assert p.commit_rpc_timeout(19.9) == MIN_RPC_TIMEOUT
    assert p.commit_rpc_timeout(30.0) == MIN_RPC_TIMEOUT


@pytest.mark.parametrize(
    "kwargs",
    [{"write_timeout": 0}, {"commit_timeout": -1}, {"retry_interval": -0.1}, {"attempt_timeout": 0}],
)
def test_bad_values_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        RetryPolicy(**kwargs)


@pytest.mark.parametrize(
    ("code", "suspect"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, True),
        (grpc.StatusCode.UNAVAILABLE, True),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, False),
        (grpc.StatusCode.INTERNAL, False),
        (grpc.StatusCode.UNKNOWN, False),
        (None, False),
    ],
)
def test_a_timeout_or_no_server_makes_the_pump_suspect(code: grpc.StatusCode | None, suspect: bool) -> None:
    assert makes_suspect(code) is suspect


def test_attempt_deadline_starts_short_doubles_and_stays_within_write_timeout() -> None:
    p = RetryPolicy(write_timeout=15.0, attempt_timeout=1.0)
    assert p.attempt_timeout == DEFAULT_ATTEMPT_TIMEOUT == 1.0
    assert [p.attempt_deadline(n, 0) for n in range(6)] == [1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    assert p.attempt_deadline(10**6, 0) == 15.0  # no overflow for a long retry loop


def test_attempt_deadline_grows_with_the_request_size() -> None:
    p = RetryPolicy(write_timeout=15.0, attempt_timeout=1.0)
    assert p.attempt_deadline(0, 64 * ATTEMPT_BYTES_PER_SECOND // 32) == pytest.approx(3.0)
    assert p.attempt_deadline(0, 1 << 30) == 15.0  # 1 GiB: the original's whole write_timeout


def test_attempt_timeout_above_write_timeout_means_write_timeout() -> None:
    p = RetryPolicy(write_timeout=0.3, attempt_timeout=1.0)
    assert p.attempt_deadline(0, 0) == 0.3
    assert p.commit_rpc_timeout(0.0) == MIN_RPC_TIMEOUT  # never below the commit minimum


def test_commit_attempt_deadline_is_the_attempt_deadline() -> None:
    p = RetryPolicy(write_timeout=15.0, commit_timeout=600.0, attempt_timeout=1.0)
    assert p.commit_rpc_timeout(0.0) == 1.0
    assert p.commit_rpc_timeout(5.0, attempts=2) == 4.0
