"""Commit resolvers: the fate of a prewrite whose commit binlog has not arrived.

See docs/architecture.md#transaction-status.

`TxnStatusResolver` asks the upstream's txn-status store (common/txnstatus.py):

    committed                        -> COMMITTED with the store's commit_ts
    committed through another pump   -> ROLLED_BACK: this copy came from a prewrite attempt the
                                        client gave up on (it timed out) and then wrote to that
                                        pump; committing it too would deliver the transaction twice
    rolled back                      -> ROLLED_BACK
    pending, lock expired            -> ROLLED_BACK ("lock expired"), written back to the store
    pending, lock alive              -> WAIT, however long it takes (the original dropped
                                        commits slower than 10 minutes: its issue #1024)
    no row, age < status-row TTL     -> WAIT
    no row, age >= status-row TTL    -> ROLLED_BACK, a tombstone written to the store
    no row, no prewrite_key          -> the same after max-txn-timeout (a DDL: see below)
    store unreachable or bad row     -> WAIT (rate-limited warning); never raises

`waited_seconds` is the transaction's age: the pump's clock less start_ts's physical time.
The status-row TTL (`[upstream] status-row-ttl`, `common.txnstatus.DEFAULT_STATUS_ROW_TTL`)
is the longest a writer holds a transaction whose P-binlog may be on a pump without its
status row (the writer refuses a later row), so a transaction with no row past it is one
whose writer died or gave up: it is decided as TiKV decides an expired lock, not after
`max-txn-timeout`, which stays an upper bound for it (and the age after which a transaction
still pending with a live lock is logged).  The TTL applies to prewrites that carry a
`prewrite_key` (a transaction's primary key, as TiDB's DML prewrites do; the writer always
sets it).  A DDL's prewrite has none and the writer writes no status row for a DDL (its
commit is the publication of the job in etcd, which may take long), so an unknown keyless
prewrite still waits `max-txn-timeout` (10 min).

Giving a transaction up goes through `TxnStatusStore.rollback_abandoned`, which
re-checks and writes the roll-back atomically, so a writer that commits at the
same moment either wins (we answer COMMITTED) or is refused.  `NullResolver`
is used when no `[upstream] txn-status-dsn` is configured: it always waits.
`stats` counts store lookups (the original's `query_tikv_count`) and outcomes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from common.errors import UnavailableError
from common.pb import binlog_pb2
from common.txnstatus import DEFAULT_STATUS_ROW_TTL, TxnState, TxnStatus, TxnStatusStore
from pump.storage.api import DEFAULT_MAX_TXN_TIMEOUT, CommitResolver, Resolution, Verdict

log = logging.getLogger(__name__)

LOG_INTERVAL = 10.0
"""Seconds between repeated warnings of one kind (store down, long-pending transaction)."""

_WAIT_NO_STATUS = Resolution(Verdict.WAIT, reason="no transaction status yet")


@dataclass(frozen=True)
class ResolverStats:
    lookups: int = 0
    """Store lookups (one per resolve() call that reached the store code)."""
    committed: int = 0
    rolled_back: int = 0
    waits: int = 0
    errors: int = 0
    """Lookups that failed (store unreachable, malformed row)."""


class _Throttle:
    """Lets one message through per `interval` seconds and counts the ones it held back."""

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._last: float | None = None
        self._suppressed = 0

    def ready(self) -> int | None:
        """The number suppressed since the last message if one may be logged now, else None."""
        now = self._clock()
        if self._last is None or now - self._last >= self._interval or now < self._last:
            self._last = now
            suppressed, self._suppressed = self._suppressed, 0
            return suppressed
        self._suppressed += 1
        return None


class TxnStatusResolver:
    """`CommitResolver` backed by a `TxnStatusStore`. Thread-safe."""

    def __init__(
        self,
        store: TxnStatusStore,
        *,
        max_txn_timeout: float = DEFAULT_MAX_TXN_TIMEOUT,
        status_row_ttl: float = DEFAULT_STATUS_ROW_TTL,
        clock: Callable[[], float] = time.time,
        log_interval: float = LOG_INTERVAL,
        node_id: str | Collection[str] = "",
    ) -> None:
        """`node_id`: this pump's (or every id its data dir served under); a transaction committed through
        another pump is rolled back here."""
        if status_row_ttl <= 0:
            raise ValueError(f"status_row_ttl must be positive, got {status_row_ttl}")
        self._store = store
        self._node_ids = frozenset([node_id] if isinstance(node_id, str) else node_id) - {""}
        self._max_txn_timeout = max_txn_timeout
        self._no_row_timeout = min(status_row_ttl, max_txn_timeout)
        self._clock = clock
        self._lock = threading.Lock()
        self._stats = ResolverStats()
        self._unavailable_log = _Throttle(log_interval, clock)
        self._error_log = _Throttle(log_interval, clock)
        self._pending_log = _Throttle(log_interval, clock)
        log.info(
            "commit resolver reads transaction status from %s (no status row: rolled back at %.1fs old)",
            store.describe(),
            self._no_row_timeout,
        )

    @property
    def stats(self) -> ResolverStats:
        with self._lock:
            return self._stats

    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
        start_ts = prewrite.start_ts
        try:
            resolution = self._resolve(start_ts, waited_seconds, keyed=prewrite.HasField("prewrite_key"))
        except UnavailableError as exc:
            self._count(errors=1, waits=1)
            suppressed = self._unavailable_log.ready()
            if suppressed is not None:
                log.warning(
                    "start_ts=%d: txn-status store unreachable, waiting: %s (%d similar suppressed)",
                    start_ts,
                    exc,
                    suppressed,
                )
            return Resolution(Verdict.WAIT, reason=f"txn-status store unreachable: {exc}")
        except Exception as exc:
            self._count(errors=1, waits=1)
            suppressed = self._error_log.ready()
            if suppressed is not None:
                log.error(
                    "start_ts=%d: cannot resolve from the txn-status store, waiting: %s: %s (%d similar suppressed)",
                    start_ts,
                    type(exc).__name__,
                    exc,
                    suppressed,
                )
            return Resolution(Verdict.WAIT, reason=f"txn-status lookup failed: {exc}")
        self._count(
            committed=int(resolution.verdict is Verdict.COMMITTED),
            rolled_back=int(resolution.verdict is Verdict.ROLLED_BACK),
            waits=int(resolution.verdict is Verdict.WAIT),
        )
        return resolution

    def _resolve(self, start_ts: int, waited_seconds: float, *, keyed: bool) -> Resolution:
        self._count(lookups=1)
        status = self._store.get(start_ts)
        now_ms = int(self._clock() * 1000)
        if status is None:
            if waited_seconds < (self._no_row_timeout if keyed else self._max_txn_timeout):
                log.debug("start_ts=%d: no transaction status yet after %.1fs", start_ts, waited_seconds)
                return _WAIT_NO_STATUS
            status = self._store.rollback_abandoned(start_ts, now_ms)
            if status.state is TxnState.ROLLED_BACK:
                log.warning(
                    "start_ts=%d: no transaction status after %.0fs (limit %.1fs: %s); rolled back, "
                    "dropping the prewrite",
                    start_ts,
                    waited_seconds,
                    self._no_row_timeout if keyed else self._max_txn_timeout,
                    "status-row-ttl, at most max-txn-timeout" if keyed else "max-txn-timeout, no prewrite_key",
                )
                return Resolution(Verdict.ROLLED_BACK, reason=f"no transaction status after {waited_seconds:.0f}s")
        elif status.lock_expired(now_ms):
            status = self._store.rollback_abandoned(start_ts, now_ms)
            if status.state is TxnState.ROLLED_BACK:
                log.info("start_ts=%d: lock expired; dropping the prewrite", start_ts)
                return Resolution(Verdict.ROLLED_BACK, reason="lock expired")
        return self._verdict(status, waited_seconds)

    def _verdict(self, status: TxnStatus, waited_seconds: float) -> Resolution:
        if status.state is TxnState.COMMITTED and self._node_ids and status.pump_node_id not in {"", *self._node_ids}:
            log.warning(
                "start_ts=%d: committed through pump %s, not this one (%s): this copy of the prewrite is "
                "from an attempt the client gave up on; rolled back here",
                status.start_ts,
                status.pump_node_id,
                ", ".join(sorted(self._node_ids)),
            )
            return Resolution(Verdict.ROLLED_BACK, reason=f"committed through pump {status.pump_node_id}")
        if status.state is TxnState.COMMITTED:
            log.info("start_ts=%d commit_ts=%d: resolved as committed", status.start_ts, status.commit_ts)
            return Resolution(Verdict.COMMITTED, status.commit_ts, "committed in the txn-status store")
        if status.state is TxnState.ROLLED_BACK:
            log.info("start_ts=%d: resolved as rolled back", status.start_ts)
            return Resolution(Verdict.ROLLED_BACK, reason="rolled back in the txn-status store")
        if waited_seconds >= self._max_txn_timeout:
            suppressed = self._pending_log.ready()
            if suppressed is not None:
                log.warning(
                    "start_ts=%d: still pending with a live lock after %.0fs; waiting (%d similar suppressed)",
                    status.start_ts,
                    waited_seconds,
                    suppressed,
                )
        return Resolution(Verdict.WAIT, reason=f"lock alive until {status.ttl_deadline_ms} ms")

    def _count(self, **deltas: int) -> None:
        with self._lock:
            s = self._stats
            self._stats = ResolverStats(
                lookups=s.lookups + deltas.get("lookups", 0),
                committed=s.committed + deltas.get("committed", 0),
                rolled_back=s.rolled_back + deltas.get("rolled_back", 0),
                waits=s.waits + deltas.get("waits", 0),
                errors=s.errors + deltas.get("errors", 0),
            )

    def close(self) -> None:
        """Close the store. Idempotent."""
        self._store.close()


class NullResolver:
    """The resolver without a txn-status store: every unmatched prewrite waits."""

    def __init__(self) -> None:
        log.warning(
            "no [upstream] txn-status-dsn configured: a prewrite whose commit binlog never arrives "
            "will wait forever (the commit watermark stops behind it)"
        )

    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
        return Resolution(Verdict.WAIT, reason="no txn-status store configured")

    def close(self) -> None:
        pass


def open_resolver(
    txn_status_dsn: str | None,
    *,
    max_txn_timeout: float = DEFAULT_MAX_TXN_TIMEOUT,
    status_row_ttl: float = DEFAULT_STATUS_ROW_TTL,
    node_id: str | Collection[str] = "",
) -> CommitResolver:
    """The resolver for an `[upstream] txn-status-dsn` value: NullResolver when empty.

    Raises ConfigError for a malformed DSN; does not connect (an unreachable store means WAIT later).
    """
    if not txn_status_dsn or not txn_status_dsn.strip():
        return NullResolver()
    return TxnStatusResolver(
        TxnStatusStore.open(txn_status_dsn),
        max_txn_timeout=max_txn_timeout,
        status_row_ttl=status_row_ttl,
        node_id=node_id,
    )
