"""The syncer: merged binlogs -> schema, filters, translation -> sink; checkpoint cadence; safe mode.

One thread takes binlogs from the merger in commit_ts order (docs/architecture.md#syncer-and-schema):

* ``ignore-txn-commit-ts`` and fake binlogs become empty txns: nothing to execute, but the
  sink reports them in order, so the checkpoint keeps moving on an idle cluster.
* A DDL binlog (``ddl_job_id > 0``) fetches its job from the DDL history and applies it to the
  schema.  A job that was cancelled, a table the filters skip, or ``sync-ddl = false`` still
  moves the checkpoint; a DDL rule match is sent with ``skip`` set (not executed).
* A DML binlog is decoded with the table info valid at its schema version; rows of filtered
  tables and filtered event types are dropped; what is left goes to the sink as one txn.  A sink
  that takes parts (the SQL sinks) gets it in parts of about :data:`TXN_PART_BYTES` of decoded
  DMLs, decoded as they go: a transaction of millions of rows is never in memory all at once.
  The binlog is dropped once translated.

Checkpoint: the sink reports successes in commit_ts order.  The saver thread writes
``commit_ts`` (and the schema version of the last DDL applied at or before it) every
``save_interval`` seconds when there is progress.  A DDL is a barrier: the sink applies
everything before it, the checkpoint is saved, the DDL runs alone, the checkpoint is saved
again; a crash never replays DMLs of an old table shape against a new one.  A binlog that
cannot be handled (unknown table id, a DDL the sink refuses) stops the syncer with an error:
nothing at or after it is ever reported, so the checkpoint never passes it.

Safe mode is forced for ``safe_mode_duration`` after every start, then follows ``safe-mode``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from common.errors import BinlogError
from common.events import DDL, DML, Txn, dml_memory
from common.filters import Filter
from common.pb import binlog_pb2
from drainer.checkpoint import Checkpoint
from drainer.malloc import trim
from drainer.merger import MergeItem, Merger
from drainer.metrics import DrainerMetrics
from drainer.schema import DDLJobNotFoundError, DrainerSchema
from drainer.sinks.base import Sink
from drainer.translator import is_fake, translate_iter

log = logging.getLogger(__name__)

SAVE_INTERVAL: Final = 3.0
"""Seconds between checkpoint saves while there is progress (original: 3 s)."""
SAFE_MODE_DURATION: Final = 300.0
"""Safe mode is forced this long after every start (original: 5 minutes)."""
POLL: Final = 0.2
BARRIER_POLL: Final = 0.5
"""How often a DDL barrier waiting for the sink checks for a stop (seconds)."""
TRIM_AFTER_BYTES: Final = 8 << 20
"""Free heap pages go back to the system after a binlog at least this large (`drainer.malloc.trim`)."""
TXN_PART_BYTES: Final = 4 << 20
"""A large transaction goes to a sink that takes parts in parts of about this many bytes of DMLs."""


class SyncerError(BinlogError):
    """A binlog the drainer cannot apply; the message names commit_ts and pump."""


@dataclass(slots=True)
class _Pending:
    commit_ts: int
    schema_version: int
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
        self._last_progress = clock()
        self._last_data = clock()
        self._data_pending = 0
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._started_at = clock()
        self._forced_safe = False
        self._first_binlog = True
        self._open_part: int | None = None
        """commit_ts of the txn whose parts are being added."""
        self._started = False
        self._save_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ---------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        last = self.checkpoint.last
        if last is not None and last.consistent:
            # from now on the downstream moves past the checkpoint: it is no longer a consistent point
            self._save(consistent=False, force=True)
        self._started_at = self._clock()  # until the first binlog; then safe mode runs from that one
        self._forced_safe = self.safe_mode_duration > 0
        self.sink.set_safe_mode(self._forced_safe or self.safe_mode)
        if self._forced_safe:
            log.info("safe mode forced for %.0fs from the first binlog", self.safe_mode_duration)
        elif last is not None and not last.consistent and not self.safe_mode:
            log.warning(
                "the last run did not stop cleanly (checkpoint commit_ts=%d is not consistent) and safe mode is "
                "off ([syncer] safe-mode-duration = 0, safe-mode = false): binlogs it applied after its last "
                "checkpoint are applied again as they are (into MySQL: plain INSERTs, and a duplicate key then "
                "stops the drainer); set safe-mode-duration (default 5m) to replay them idempotently",
                last.commit_ts,
            )
        self.sink.start(self._on_success)
        self._started = True
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
        deadline = time.monotonic() + flush_timeout  # one bound for the whole stop
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if not self._started:
            return  # never applied anything: the stored checkpoint stays exactly as it was
        consistent = self._error is None
        try:
            self.sink.flush(max(0.0, deadline - time.monotonic()))
        except (BinlogError, TimeoutError) as exc:
            log.warning("final flush failed: %s", exc)
            consistent = False
        with self._cond:
            consistent = consistent and not self._pending
        try:
            self._save(consistent=consistent, force=True)
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
                if self._first_binlog:
                    self._first_binlog = False
                    self._started_at = self._clock()
                node_id, size = item.node_id, item.size
                txns = self._txns_of(item)
                del item  # the binlog is held only while it is translated, not while `add` waits
                for txn in txns:
                    self._add(txn)
                    del txn
                self.merger.release(node_id, size)  # its pump may send the next one
                if size >= TRIM_AFTER_BYTES:
                    trim()  # decoding it churned the heap
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
        """The forced window counts from the first binlog after start: a merge blocked at start-up
        (a pump down) must not use up the window that covers the replay after a crash."""
        if self._forced_safe and not self._first_binlog and self._clock() - self._started_at >= self.safe_mode_duration:
            self._forced_safe = False
            log.info("forced safe mode over; safe-mode=%s from now on", self.safe_mode)
            self.sink.set_safe_mode(self.safe_mode)

    def _txns_of(self, item: MergeItem) -> Iterator[Txn]:
        """The txn of one binlog, or the parts of a large DML txn (the last one not partial)."""
        b = item.binlog
        ts = b.commit_ts
        if self.filter.skip_txn(ts):
            log.info("commit_ts=%d skipped (ignore-txn-commit-ts)", ts)
            yield Txn(ts, binlog=b)
        elif is_fake(b):
            yield Txn(ts, binlog=b)
        elif b.ddl_job_id > 0:
            yield self._ddl_txn(b, item.node_id)
        else:
            parts = self._dml_txns(item)
            del item, b
            yield from parts

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

    def _dml_txns(self, item: MergeItem) -> Iterator[Txn]:
        f = self.filter
        ts = item.binlog.commit_ts
        _, dmls = translate_iter(
            item.binlog,
            self.schema,
            node_id=item.node_id,
            skip_table=lambda shape: f.skip_table(shape.db, shape.table),
            prewrite_value=item.prewrite_value,
        )
        del item  # the rows' bytes stay referenced by `dmls` until the last is decoded
        part_bytes = TXN_PART_BYTES if self.sink.takes_parts else 0
        part: list[DML] = []
        size = 0
        for d in dmls:
            if f.skip_dml(d.shape.db, d.shape.table, d.tp):
                continue
            if part_bytes and size >= part_bytes:  # more follows: the last part is never empty
                yield Txn(ts, dmls=part, partial=True)
                part, size = [], 0
            part.append(d)
            if part_bytes:
                size += dml_memory(d)
        del dmls
        yield Txn(ts, dmls=part)

    def _add(self, txn: Txn) -> None:
        is_ddl = txn.ddl is not None and not txn.ddl.skip
        self._added_version = max(self._added_version, txn.schema_version)
        has_data = not txn.is_empty
        first = self._open_part != txn.commit_ts  # not a later part of a txn added in parts
        self._open_part = txn.commit_ts if txn.partial else None
        if first:  # pending from its first part until its commit_ts is reported (after its last part)
            with self._cond:
                self._pending.append(_Pending(txn.commit_ts, self._added_version, has_data))
                self._data_pending += has_data
        if self.metrics is not None:
            self.metrics.count_events(txn.dmls, is_ddl)
        if txn.ddl is None:
            self.sink.add(txn)
            return
        # A DDL is a barrier with a checkpoint on each side.  Before: so a crash after the DDL ran
        # never replays DMLs of the old table shape against the new one (a dropped column, a renamed
        # table: errors no retry or safe mode fixes); the replay starts at the DDL itself, whose
        # repeat fails with an ignorable "already exists / does not exist" error.  After: right away.
        self._barrier()
        self.sink.add(txn)
        self._barrier()

    def _barrier(self) -> None:
        """Wait until the sink applied everything added, then save the checkpoint there."""
        while True:
            try:
                self.sink.flush(BARRIER_POLL)
                break
            except TimeoutError:
                if self._stop.is_set():
                    raise SyncerError("stopped while waiting for the sink at a DDL") from None
        self._save(consistent=False)

    # ------------------------------------------------------------------------------ checkpoint
    def _on_success(self, commit_ts: int) -> None:
        with self._cond:
            moved = False
            while self._pending and self._pending[0].commit_ts <= commit_ts:
                p = self._pending.popleft()
                self._last_ts = p.commit_ts
                self._last_version = max(self._last_version, p.schema_version)
                if p.has_data:
                    self._data_pending -= 1
                    self._last_data = self._clock()
                moved = True
            if moved:
                self._last_progress = self._clock()

    def _saver(self) -> None:
        next_save = self._clock() + self.save_interval
        while True:
            with self._cond:
                while not self._stop.is_set():
                    left = next_save - self._clock()
                    if left <= 0:
                        break
                    self._cond.wait(left)
                if self._stop.is_set():
                    return
            next_save = self._clock() + self.save_interval
            try:
                self._save(consistent=False)
            except BinlogError as exc:
                self._fail(exc)
                return

    def _save(self, *, consistent: bool, force: bool = False) -> None:
        """Save the newest applied position (read under the save lock, so saves never go backwards);
        only when it moved, unless `force`."""
        with self._save_lock:
            with self._cond:
                ts, version = self._last_ts, self._last_version
                moved = ts > self._saved_ts or version > self._saved_version
            if not (moved or force):
                return
            try:
                self.checkpoint.save(ts, version, consistent=consistent)
            except BinlogError as exc:
                raise SyncerError(f"checkpoint save at commit_ts={ts} failed: {exc}") from exc
            if self.metrics is not None:
                self.metrics.saved(ts)
            with self._cond:
                self._saved_ts = max(self._saved_ts, ts)
                self._saved_version = max(self._saved_version, version)
        log.debug("checkpoint saved commit_ts=%d schema_version=%d consistent=%s", ts, version, consistent)
