"""Asks the commit resolver about prewrites whose commit has not arrived (upstream `storage.go resolve`).

Prewrites that waited at least `resolve-interval` are read back from the vlog and handed to
`CommitResolver.resolve(prewrite, waited)`, outside the sorter lock:

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
from collections.abc import Callable

from common.errors import BinlogError
from common.pb import binlog_pb2
from pump.storage.api import CommitResolver, Verdict
from pump.storage.entry import parse_binlog
from pump.storage.sorter import Sorter
from pump.storage.vlog_record import ValuePointer

__all__ = ["resolve_pass"]

log = logging.getLogger(__name__)


def resolve_pass(
    resolver: CommitResolver,
    sorter: Sorter,
    sort_lock: threading.Lock,
    *,
    read: Callable[[ValuePointer], bytes],
    write: Callable[[binlog_pb2.Binlog], None],
    now: Callable[[], float],
) -> int:
    """One round over the prewrites due; how many were asked about."""
    with sort_lock:
        due = sorter.due_for_resolve(now())
    for w, waited in due:
        start_ts = w.start_ts
        try:
            prewrite = parse_binlog(read(w.ptr))
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
            if prewrite.HasField("prewrite_key"):
                done.prewrite_key = prewrite.prewrite_key
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
    return len(due)
