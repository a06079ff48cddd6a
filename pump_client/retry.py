"""Retry decisions of the pump client (pure: values in, decisions out), docs/architecture.md#pump-client.

Prewrite (tp = Prewrite):
    loop: select a pump (re-selected on every retry) and send; on an error
      RESOURCE_EXHAUSTED       -> raise at once (not retried)
      INVALID_ARGUMENT         -> raise at once: the pump says the binlog itself is invalid, so every
                                  pump would refuse it (not retried)
      UNAVAILABLE              -> recreate that pump's channel, then as any other error
      any other error          -> count it against the pump, sleep `retry_interval`, retry
    the loop stops when elapsed > write_timeout AND retries > number of available pumps;
    then every online pump is tried once (unavailable ones included, fresh channel each), the first
    success makes that pump available again; if all fail: PumpClientError with the last error.
    Every pump whose attempt failed without a refusal (a timeout may still have been stored) then
    gets a rollback of that start_ts in the background, like a commit, except the pump that took
    the prewrite: its copy would otherwise wait for a commit that went elsewhere.
    DEADLINE_EXCEEDED and UNAVAILABLE also make the pump *suspect* (`makes_suspect`): no new
    prewrites go to it until a call or a probe succeeds (pump_client/membership.py); the original
    waited for `max_err_nums` consecutive errors, each taking up to `write_timeout`.
Commit / rollback:
    only the pump that took the prewrite, every 10 x retry_interval (1 s), until elapsed >
    commit_timeout (600 s); never an error for the caller.  Every error is retried here, RESOURCE_EXHAUSTED
    included (the pump may free space meanwhile, and giving up early only leaves more to its resolver),
    except INVALID_ARGUMENT: an invalid commit is dropped at once with an ERROR line (`refused`).
    While that pump is suspect and online no call is made (pump_client/commit.py).
Per-attempt deadline (`attempt_deadline`): `attempt_timeout` (1 s), doubled on each further attempt of
the same binlog, plus 1 s per ATTEMPT_BYTES_PER_SECOND of request (a 1 GiB prewrite is not cut off
in transit), never more than `write_timeout`.  The original gave every call the whole `write_timeout`
(its BinlogWriteTimeout, 15 s), so one frozen pump held each prewrite sent to it for 15 s.  The
last-resort pass still gives each pump the whole `write_timeout` (a pump that is merely slow still
takes the write), and a commit attempt also stops at its commit deadline (but gets at least
MIN_RPC_TIMEOUT).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

import grpc

DEFAULT_WRITE_TIMEOUT: Final = 15.0
"""Seconds: prewrite retry budget, longest call deadline (TiDB `[binlog] write-timeout`, 15 s)."""
DEFAULT_COMMIT_TIMEOUT: Final = 600.0
"""Seconds a commit/rollback binlog is retried on its pump (original CommitBinlogTimeout: 10 min)."""
DEFAULT_ATTEMPT_TIMEOUT: Final = 1.0
"""Seconds: deadline of a first attempt (ours; the original used write_timeout for every call)."""
ATTEMPT_BYTES_PER_SECOND: Final = 32 * 1024**2
"""A big request's deadline grows by 1 s per this many bytes (the slowest transfer still waited for)."""
DEFAULT_RETRY_INTERVAL: Final = 0.1
"""Seconds between prewrite retries (original RetryInterval: 100 ms); commits retry every 10x this."""
COMMIT_RETRY_FACTOR: Final = 10
MIN_RPC_TIMEOUT: Final = 0.5
"""A commit attempt near its deadline still gets this long."""


class Action(Enum):
    RETRY = "retry"
    RECONNECT = "reconnect"  # recreate the pump's channel, then retry
    FAIL = "fail"  # do not retry
    INVALID = "invalid"  # the binlog itself is invalid: no pump takes it, never retried


def on_error(code: grpc.StatusCode | None) -> Action:
    """What to do after a failed call with this status code (None: not a gRPC status)."""
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        return Action.FAIL
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return Action.INVALID
    if code is grpc.StatusCode.UNAVAILABLE:
        return Action.RECONNECT
    return Action.RETRY


def makes_suspect(code: grpc.StatusCode | None) -> bool:
    """A call that timed out or found no server: keep new prewrites away from that pump at once."""
    return code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE)


def prewrite_gives_up(elapsed: float, write_timeout: float, retries: int, available: int) -> bool:
    """Stop the select-and-retry loop (then the last-resort pass over every online pump runs)."""
    return elapsed > write_timeout and retries > available


@dataclass(frozen=True)
class RetryPolicy:
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    commit_timeout: float = DEFAULT_COMMIT_TIMEOUT
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT
    """Deadline of a first attempt; more than write_timeout means write_timeout."""

    def __post_init__(self) -> None:
        for name in ("write_timeout", "commit_timeout", "attempt_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.retry_interval < 0:
            raise ValueError(f"retry_interval must be >= 0, got {self.retry_interval!r}")

    @property
    def commit_interval(self) -> float:
        return self.retry_interval * COMMIT_RETRY_FACTOR

    def prewrite_gives_up(self, elapsed: float, retries: int, available: int) -> bool:
        return prewrite_gives_up(elapsed, self.write_timeout, retries, available)

    def attempt_deadline(self, attempts: int, size: int) -> float:
        """Deadline of a call after `attempts` earlier attempts of the same binlog, `size` request bytes."""
        grown = self.attempt_timeout * 2.0 ** min(attempts, 32) + size / ATTEMPT_BYTES_PER_SECOND
        return min(self.write_timeout, grown)

    def commit_gives_up(self, elapsed: float) -> bool:
        """True once a commit has been retried for longer than commit_timeout."""
        return elapsed > self.commit_timeout

    def commit_rpc_timeout(self, elapsed: float, attempts: int = 0, size: int = 0) -> float:
        """Deadline of one commit attempt: the attempt deadline, cut to what is left of commit_timeout."""
        return max(MIN_RPC_TIMEOUT, min(self.attempt_deadline(attempts, size), self.commit_timeout - elapsed))
