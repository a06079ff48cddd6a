"""Delivery of one commit or rollback binlog to the pump that took its prewrite (docs/architecture.md#pump-client).

`CommitJob.step()` makes one attempt and says what next: None when finished (delivered, or given up
after `commit_timeout`, or the pump left the registry), else the seconds until the next attempt
(`10 x retry_interval`).  The caller either loops over it (`PumpsClient.write_binlog`) or hands it to
the background dispatcher (`write_binlog_async`).  Nothing here raises to the caller: a commit that is
not delivered is logged, and the pump's resolver decides the transaction.

The commit always goes to that pump, available or not.  While the pump is *suspect* (a call to it
timed out or found no server, pump_client/membership.py) and still online, a step makes no call and
just waits another interval: the prober tells when the pump answers again.  So commits for a frozen
pump hold no worker thread, and commits for the other pumps are not delayed behind them.  Each call
has the short per-attempt deadline (retry.RetryPolicy.attempt_deadline), not the whole write_timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from common.registry import NodeState
from pump_client.membership import PumpInfo
from pump_client.retry import Action, RetryPolicy, on_error
from pump_client.transport import AttemptError, Request

log = logging.getLogger(__name__)

Lookup = Callable[[str], PumpInfo | None]
"""node id -> the pump as the client knows it now (None: no longer registered)."""


class Attempt(Protocol):
    """One call to a pump: the error, or None on success."""

    def __call__(
        self, node_id: str, addr: str, request: Request, timeout: float, *, retry: bool
    ) -> AttemptError | None: ...


Finish = Callable[[int, bool], None]
"""(start_ts, delivered): called exactly once when the job ends."""


class CommitJob:
    def __init__(
        self,
        node_id: str,
        start_ts: int,
        commit_ts: int,
        request: Request,
        policy: RetryPolicy,
        *,
        lookup: Lookup,
        attempt: Attempt,
        finish: Finish,
        clock: Callable[[], float] = time.monotonic,
        kind: str = "commit binlog",
    ) -> None:
        """`kind` names the binlog in log lines (the client's rollbacks of withdrawn prewrites say so)."""
        self.node_id = node_id
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.kind = kind
        self._request = request
        self._size = len(request) if isinstance(request, bytes) else request.ByteSize()
        self._policy = policy
        self._lookup = lookup
        self._attempt = attempt
        self._finish_cb = finish
        self._clock = clock
        self._begin = clock()
        self._attempts = 0
        self._skipped = 0
        self._finished = False

    def step(self) -> float | None:
        policy = self._policy
        pump = self._lookup(self.node_id)
        if pump is None:
            log.warning(
                "%s start_ts=%d commit_ts=%d dropped: pump node_id=%s is no longer registered",
                self.kind,
                self.start_ts,
                self.commit_ts,
                self.node_id,
            )
            self._finish(delivered=False)
            return None
        if pump.suspect and pump.state is NodeState.ONLINE and not policy.commit_gives_up(self._elapsed()):
            self._skipped += 1
            if self._skipped == 1:
                log.info(
                    "%s start_ts=%d waits for node_id=%s, which timed out or was unreachable "
                    "(no call until it answers a probe)",
                    self.kind,
                    self.start_ts,
                    self.node_id,
                )
            return policy.commit_interval
        timeout = policy.commit_rpc_timeout(self._elapsed(), self._attempts, self._size)
        err = self._attempt(pump.node_id, pump.addr, self._request, timeout, retry=self._attempts > 0)
        self._attempts += 1
        if err is None:
            if self._attempts > 1:
                log.info(
                    "%s start_ts=%d delivered to node_id=%s after %d attempts",
                    self.kind,
                    self.start_ts,
                    self.node_id,
                    self._attempts,
                )
            self._finish(delivered=True)
            return None
        if on_error(err.code) is Action.INVALID:
            log.error(
                "%s start_ts=%d commit_ts=%d refused by node_id=%s as invalid (%s); not retried: "
                "the pump's resolver decides the transaction",
                self.kind,
                self.start_ts,
                self.commit_ts,
                self.node_id,
                err.describe(),
            )
            self._finish(delivered=False)
            return None
        if policy.commit_gives_up(self._elapsed()):
            log.warning(
                "%s start_ts=%d commit_ts=%d dropped after %.0fs of retries on node_id=%s (last error %s); "
                "the pump's resolver decides the transaction",
                self.kind,
                self.start_ts,
                self.commit_ts,
                self._elapsed(),
                self.node_id,
                err.describe(),
            )
            self._finish(delivered=False)
            return None
        level = logging.WARNING if self._attempts == 1 else logging.DEBUG
        log.log(
            level,
            "%s start_ts=%d to node_id=%s failed (%s); retrying every %.1fs for up to %.0fs",
            self.kind,
            self.start_ts,
            self.node_id,
            err.describe(),
            policy.commit_interval,
            policy.commit_timeout,
        )
        return policy.commit_interval

    def abandon(self) -> None:
        log.warning(
            "pump client closing: %s start_ts=%d commit_ts=%d for node_id=%s not delivered",
            self.kind,
            self.start_ts,
            self.commit_ts,
            self.node_id,
        )
        self._finish(delivered=False)

    def _elapsed(self) -> float:
        return self._clock() - self._begin

    def _finish(self, *, delivered: bool) -> None:
        if not self._finished:
            self._finished = True
            self._finish_cb(self.start_ts, delivered)
