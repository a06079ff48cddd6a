"""Asks the commit resolver about prewrites whose commit has not arrived (upstream `storage.go resolve`).

Prewrites that waited at least `resolve-interval` here are handed to
`CommitResolver.resolve(prewrite, waited)` outside the sorter lock, as a minimal binlog (tp, start_ts
and prewrite_key, kept by the sorter: no vlog read), `waited` being the seconds since start_ts in
cluster time (so the status-row TTL and max-txn-timeout do not restart with the process):

* COMMITTED  -> the storage writes the commit binlog itself (tp=Commit, start_ts, the resolver's
  commit_ts, prewrite_key copied) through the normal write path; the sorter pairs it like any other.
* ROLLED_BACK -> the storage writes a rollback binlog (tp=Rollback, start_ts, commit_ts=0,
  prewrite_key), what TiDB itself would have sent.  Ours: the original only dropped the item from
  its sorter; a durable record makes start-up replay reach the same state without asking again.
* WAIT (or an error) -> asked again after another `resolve-interval`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from common import tso
from common.errors import BinlogError
from common.pb import binlog_pb2
from pump.storage.api import CommitResolver, NullObserver, StorageObserver, Verdict
from pump.storage.sorter import Sorter

__all__ = ["resolve_pass", "waited_since_start"]

log = logging.getLogger(__name__)


def waited_since_start(start_ts: int, wall: float) -> float:
    """Seconds since the transaction started, in cluster time (upstream compares PD time with
    start_ts): survives a pump restart, unlike the time the prewrite arrived here."""
    return max(0.0, wall - tso.physical(start_ts) / 1000)


def resolve_pass(
    resolver: CommitResolver,
    sorter: Sorter,
    sort_lock: threading.Lock,
    *,
    write: Callable[[binlog_pb2.Binlog], None],
    now: Callable[[], float],
    wall: Callable[[], float] = time.time,
    stop: threading.Event | None = None,
    observer: StorageObserver | None = None,
) -> int:
    """One round over the prewrites due; how many were asked about.

    The resolver sees a minimal prewrite (tp, start_ts, prewrite_key) built from what the sorter
    keeps: nothing is read back from the vlog.  `stop` is checked before every call, so a slow
    resolver delays close() by one call at most."""
    obs = observer or NullObserver()
    with sort_lock:
        due = sorter.due_for_resolve(now())
    asked = 0
    for i, (w, _) in enumerate(due):
        if stop is not None and stop.is_set():
            with sort_lock:  # not asked: due again later (due_for_resolve parked them)
                for rest, _ in due[i:]:
                    sorter.retry_later(rest.start_ts, now())
            break
        start_ts = w.start_ts
        waited = waited_since_start(start_ts, wall())
        try:
            prewrite = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts)
            if w.prewrite_key is not None:
                prewrite.prewrite_key = w.prewrite_key
            asked += 1
            obs.resolver_query()
            res = resolver.resolve(prewrite, waited)
            if res.verdict is Verdict.WAIT:
                log.debug("prewrite still pending start_ts=%d waited=%.1f reason=%s", start_ts, waited, res.reason)
                with sort_lock:
                    sorter.retry_later(start_ts, now())
                continue
            if res.verdict is Verdict.COMMITTED:
                if res.commit_ts <= start_ts:
                    raise BinlogError(f"resolver gave commit_ts {res.commit_ts} <= start_ts {start_ts}")
                tp, commit_ts = binlog_pb2.Commit, res.commit_ts
            else:
                tp, commit_ts = binlog_pb2.Rollback, 0
            done = binlog_pb2.Binlog(tp=tp, start_ts=start_ts, commit_ts=commit_ts)
            if w.prewrite_key is not None:
                done.prewrite_key = w.prewrite_key
            write(done)
            log.info(
                "prewrite resolved start_ts=%d commit_ts=%d verdict=%s waited=%.1f reason=%s",
                start_ts,
                commit_ts,
                res.verdict.value,
                waited,
                res.reason,
            )
        except Exception as e:  # the resolver is not ours: whatever it raises, ask again later
            log.error("resolving prewrite failed start_ts=%d: %s", start_ts, e)
            with sort_lock:
                sorter.retry_later(start_ts, now())
    return asked
