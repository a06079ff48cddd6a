"""The syncer: merged binlogs -> schema, filters, translation -> sink; checkpoint cadence; safe mode.

One thread takes binlogs from the merger in commit_ts order (reference §3.4):

* ``ignore-txn-commit-ts`` and fake binlogs become empty txns: nothing to execute, but the
  sink reports them in order, so the checkpoint keeps moving on an idle cluster.
* A DDL binlog (``ddl_job_id > 0``) fetches its job from the DDL history and applies it to the
  schema.  A job that was cancelled, a table the filters skip, or ``sync-ddl = false`` still
  moves the checkpoint; a DDL rule match is sent with ``skip`` set (not executed).
* A DML binlog is decoded with the table info valid at its schema version; rows of filtered
  tables and filtered event types are dropped; what is left goes to the sink as one txn.

Checkpoint: the sink reports successes in commit_ts order.  The saver thread writes
``commit_ts`` (and the schema version of the last DDL applied at or before it) right after a
DDL succeeded, else every ``save_interval`` seconds when there is progress.  A binlog that
cannot be handled (unknown table id, a DDL the sink refuses) stops the syncer with an error:
nothing at or after it is ever reported, so the checkpoint never passes it.

Safe mode is forced for ``safe_mode_duration`` after every start, then follows ``safe-mode``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from common.errors import BinlogError
from common.pb import binlog_pb2
from drainer.checkpoint import Checkpoint
from drainer.events import DDL, DMLType, Txn
from drainer.filters import Filter
from drainer.merger import MergeItem, Merger
from drainer.metrics import DrainerMetrics
from drainer.schema import DDLJobNotFoundError, DrainerSchema
from drainer.sinks.base import Sink
from drainer.translator import is_fake, translate

log = logging.getLogger(__name__)

SAVE_INTERVAL: Final = 3.0
"""Seconds between checkpoint saves while there is progress (original: 3 s)."""
SAFE_MODE_DURATION: Final = 300.0
"""Safe mode is forced this long after every start (original: 5 minutes)."""
POLL: Final = 0.2
_EVENT_NAMES: Final = {DMLType.INSERT: "Insert", DMLType.UPDATE: "Update", DMLType.DELETE: "Delete"}


class SyncerError(BinlogError):
    """A binlog the drainer cannot apply; the message names commit_ts and pump."""


@dataclass(slots=True)
class _Pending:
    commit_ts: int
    schema_version: int
    is_ddl: bool
    has_data: bool


@dataclass(slots=True)
class SyncerStatus:
    last_ts: int
    """The newest commit_ts applied downstream (with everything before it)."""
    saved_ts: int
    schema_version: int
    last_progress: float
    """time.monotonic() of the last success report that moved `last_ts`."""


class Syncer:
    def __init__(
        self,
        merger: Merger,
        schema: DrainerSchema,
        sink: Sink,
        checkpoint: Checkpoint,
        filt: Filter,
        *,
        start_ts: int,
        schema_version: int,
        sync_ddl: bool = True,
        safe_mode: bool = False,
        safe_mode_duration: float = SAFE_MODE_DURATION,
        save_interval: float = SAVE_INTERVAL,
        on_fatal: Callable[[BaseException], None] | None = None,
        metrics: DrainerMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.merger = merger
        self.schema = schema
        self.sink = sink
        self.checkpoint = checkpoint
        self.filter = filt
        self.sync_ddl = sync_ddl
        self.safe_mode = safe_mode
        self.safe_mode_duration = safe_mode_duration
        self.save_interval = save_interval
        self._on_fatal = on_fatal
        self.metrics = metrics
        self._clock = clock
        self._cond = threading.Condition()
        self._pending: deque[_Pending] = deque()
        self._added_version = schema_version
        self._last_ts = start_ts
        self._last_version = schema_version
        self._saved_ts = start_ts
        self._saved_version = schema_version
        self._ddl_done = False
        self._last_progress = clock()
        self._last_data = clock()
        self._data_pending = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._started_at = clock()
        self._forced_safe = False
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        self._started_at = self._clock()  # safe mode is forced for safe_mode_duration from here
        self._forced_safe = self.safe_mode_duration > 0
        self.sink.set_safe_mode(self._forced_safe or self.safe_mode)
        if self._forced_safe:
            log.info("safe mode forced for %.0fs after start", self.safe_mode_duration)
        self.sink.start(self._on_success)
        for name, target in (("syncer", self._run), ("checkpoint-saver", self._saver)):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def error(self) -> BaseException | None:
        return self._error

    def status(self) -> SyncerStatus:
        with self._cond:
            return SyncerStatus(self._last_ts, self._saved_ts, self._last_version, self._last_progress)

    def idle_for(self) -> float:
        """Seconds since the last DML or DDL was applied; 0 while some are still in flight."""
        with self._cond:
            return 0.0 if self._data_pending else self._clock() - self._last_data

    def stop(self, flush_timeout: float = 30.0) -> None:
        """Stop taking binlogs (a DDL job still awaited is given up on: that binlog is not added), wait for
        the sink to apply what it has, save a final checkpoint.

        The checkpoint is saved ``consistent=true`` only when everything added was applied and the
        syncer did not fail."""
        self._stop.set()
        self.schema.close()  # a DDL job still awaited: stop waiting for it
        with self._cond:
            self._cond.notify_all()
        for t in self._threads:
            t.join(timeout=flush_timeout)
        consistent = self._error is None
        try:
            self.sink.flush(flush_timeout)
        except (BinlogError, TimeoutError) as exc:
            log.warning("final flush failed: %s", exc)
            consistent = False
        with self._cond:
            consistent = consistent and not self._pending
            ts, version = self._last_ts, self._last_version
        try:
            self._save(ts, version, consistent=consistent)
        except BinlogError as exc:
            log.error("final checkpoint save failed: %s", exc)

    # ------------------------------------------------------------------------------- main loop
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._check_safe_mode()
                sink_error = self.sink.error()
                if sink_error is not None:
                    raise SyncerError(f"sink failed: {sink_error}") from sink_error
                item = self.merger.get(timeout=POLL)
                if item is None:
                    continue
                txn = self._txn_of(item)
                self._add(txn)
        except DDLJobNotFoundError as exc:
            if self._stop.is_set():  # stop() gave up on the job: that binlog was not added, no failure
                log.info("stopped while waiting for a DDL job: %s", exc)
                return
            self._fail(exc)
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        log.error("syncer stopped: %s", exc)
        if self._error is None:
            self._error = exc
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        if self._on_fatal is not None:
            self._on_fatal(exc)

    def _check_safe_mode(self) -> None:
        if self._forced_safe and self._clock() - self._started_at >= self.safe_mode_duration:
            self._forced_safe = False
            log.info("forced safe mode over; safe-mode=%s from now on", self.safe_mode)
            self.sink.set_safe_mode(self.safe_mode)

    def _txn_of(self, item: MergeItem) -> Txn:
        b = item.binlog
        ts = b.commit_ts
        if self.filter.skip_txn(ts):
            log.info("commit_ts=%d skipped (ignore-txn-commit-ts)", ts)
            return Txn(ts, binlog=b)
        if is_fake(b):
            return Txn(ts, binlog=b)
        if b.ddl_job_id > 0:
            return self._ddl_txn(b, item.node_id)
        return self._dml_txn(b, item)

    def _ddl_txn(self, b: binlog_pb2.Binlog, node_id: str) -> Txn:
        ts = b.commit_ts
        if b.ddl_query.lower().startswith(b"select setval"):
            return Txn(ts, binlog=b)
        ddl = self.schema.handle_ddl(b.ddl_job_id, ts)
        if self.metrics is not None:
            self.metrics.ddl_jobs.inc()
        if ddl is None:
            log.info("commit_ts=%d ddl job %d not done: skipped", ts, b.ddl_job_id)
            return Txn(ts, binlog=b)
        version = ddl.job.schema_version
        if (ddl.table and self.filter.skip_table(ddl.db, ddl.table)) or (
            not ddl.table and self.filter.skip_schema(ddl.job.schema_name)
        ):
            log.info("commit_ts=%d ddl %r filtered", ts, ddl.query)
            return Txn(ts, binlog=b, schema_version=version, ddl=None)
        if not self.sync_ddl or self.filter.skip_ddl(ddl.db, ddl.table, ddl.query):
            log.info("commit_ts=%d ddl %r not executed (sync-ddl or a DDL filter)", ts, ddl.query)
            ddl = DDL(ddl.db, ddl.table, ddl.query, ddl.job, ddl.before, skip=True)
        log.info("commit_ts=%d pump=%s ddl job %d: %s", ts, node_id, ddl.job.id, ddl.query)
        return Txn(ts, ddl=ddl, binlog=b, size=b.ByteSize(), schema_version=version)

    def _dml_txn(self, b: binlog_pb2.Binlog, item: MergeItem) -> Txn:
        _, dmls = translate(b, self.schema, node_id=item.node_id)
        f = self.filter
        kept = [
            d
            for d in dmls
            if not f.skip_table(d.shape.db, d.shape.table) and not f.skip_dml(d.shape.db, d.shape.table, d.tp)
        ]
        return Txn(b.commit_ts, dmls=kept, binlog=b, size=item.size)

    def _add(self, txn: Txn) -> None:
        is_ddl = txn.ddl is not None and not txn.ddl.skip
        self._added_version = max(self._added_version, txn.schema_version)
        has_data = not txn.is_empty
        with self._cond:
            self._pending.append(_Pending(txn.commit_ts, self._added_version, is_ddl or txn.ddl is not None, has_data))
            self._data_pending += has_data
        if self.metrics is not None:
            ev = self.metrics.event
            for d in txn.dmls:
                ev.labels(_EVENT_NAMES[d.tp]).inc()
            if is_ddl:
                ev.labels("DDL").inc()
        self.sink.add(txn)

    # ------------------------------------------------------------------------------ checkpoint
    def _on_success(self, commit_ts: int) -> None:
        with self._cond:
            moved = False
            while self._pending and self._pending[0].commit_ts <= commit_ts:
                p = self._pending.popleft()
                self._last_ts = p.commit_ts
                self._last_version = max(self._last_version, p.schema_version)
                self._ddl_done = self._ddl_done or p.is_ddl
                if p.has_data:
                    self._data_pending -= 1
                    self._last_data = self._clock()
                moved = True
            if moved:
                self._last_progress = self._clock()
                if self._ddl_done:
                    self._cond.notify_all()

    def _saver(self) -> None:
        next_save = self._clock() + self.save_interval
        while True:
            with self._cond:
                while not self._ddl_done and not self._stop.is_set():
                    left = next_save - self._clock()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stop.is_set():
                    return
                ts, version = self._last_ts, self._last_version
                self._ddl_done = False
            next_save = self._clock() + self.save_interval
            if ts > self._saved_ts or version > self._saved_version:
                try:
                    self._save(ts, version, consistent=False)
                except BinlogError as exc:
                    self._fail(SyncerError(f"checkpoint save at commit_ts={ts} failed: {exc}"))
                    return

    def _save(self, ts: int, version: int, *, consistent: bool) -> None:
        self.checkpoint.save(ts, version, consistent=consistent)
        if self.metrics is not None:
            self.metrics.saved(ts)
        with self._cond:
            self._saved_ts = max(self._saved_ts, ts)
            self._saved_version = max(self._saved_version, version)
        log.debug("checkpoint saved commit_ts=%d schema_version=%d consistent=%s", ts, version, consistent)
