"""The loader: translated transactions -> parallel downstream transactions (docs/architecture.md#loader-and-causality).

    add(txn) ─► [input queue] ─► coordinator ─► per-worker queues ─► worker i: Executor i
                 byte budget      accumulate,                          chunks of txn_batch DMLs,
                 (add blocks)     causality,                           one downstream txn each,
                                  DDL barrier                          retried with backoff
                                        └──── batches complete ────► on_success(commit_ts), in order

* **Accumulation.**  The coordinator takes whole upstream transactions off the input queue and
  assigns their DMLs to workers until ``txn_batch * workers * 3`` DMLs are pending or the
  queue is momentarily empty; then it *dispatches* them as one batch.  Batches are pipelined:
  the coordinator goes on accumulating while workers execute.  A worker takes everything
  queued for it (several small batches included) and runs it in chunks of ``txn_batch`` DMLs,
  each one downstream transaction.  Upstream transaction atomicity is not kept downstream; the
  order of changes to one key is.
* **Causality** (:mod:`drainer.causality`) picks the worker of each DML.  Its key map lives
  until a reset, which happens only when nothing is in flight: on a conflict (after waiting for
  every worker), before each DDL, when it exceeds :data:`MAX_CAUSALITY_KEYS`, and whenever the
  workers are idle.  With ``enable_detect=False`` every DML goes to worker 0.
* **DDL** is a barrier: pending DMLs are dispatched, all workers finish, the DDL runs alone on
  worker 0's executor, then loading goes on.
* **Success** is reported per batch, in batch order, only once every batch before it has been
  committed too; a batch's transactions are reported in commit_ts order.  Empty transactions
  ride along in the current batch.
* **Errors.**  An executor raises :class:`ExecError`; retriable ones (lost connection,
  deadlock, lock wait timeout) are retried with exponential backoff (DML ``dml_retries``
  times, DDL ``ddl_retries``); a retried chunk runs in safe mode, so a commit that was lost
  with its connection cannot make the retry fail.  Anything else stops the loader: every later
  ``add``/``flush`` raises the error, and nothing more is reported.
* **Memory** is bounded by bytes: ``add`` blocks while the transactions added but not yet
  reported exceed ``max_inflight_bytes`` (one transaction is always admitted).  A transaction
  costs what its decoded DMLs take in memory (:func:`common.events.dml_memory`, well above
  their binlog bytes for small rows), not its binlog size.  Workers drop their DMLs before the
  success report that frees their bytes.
* **Parts.**  A transaction translated in parts (``Txn.partial``) is reported once, after its
  last part: until then its parts only count as work in flight (for ``flush`` and the budget).
* ``enable_dispatch=False``: one worker, and every upstream transaction is one downstream
  transaction of its own.
* **Merge** (``merge=True``, ``[syncer.to] merge``): the DMLs of a table with a mergeable primary
  key (:func:`drainer.merge.merge_key`) skip causality while they accumulate; when the batch is
  dispatched, each table's DMLs are merged by key (:func:`drainer.merge.merge_by_key`) and the
  merged changes go through causality (their own keys, so they stay ordered after earlier batches
  still in flight) to the workers, in units run in safe mode (``REPLACE``).  Other tables are
  loaded as without merge.  A conflict while placing merged changes runs what is placed as a batch
  of its own; the batch's transactions are reported only with the rest of their changes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from common.backoff import Backoff
from common.events import DDL, DML, TableShape, Txn, dml_memory
from drainer.causality import Causality, dml_keys, worker_of
from drainer.merge import merge_by_key, merge_key
from drainer.sinks.base import OnSuccess, Sink, SinkError

log = logging.getLogger(__name__)

__all__ = ["ExecError", "Executor", "ExecutorFactory", "Loader"]

DEFAULT_WORKER_COUNT = 16
DEFAULT_TXN_BATCH = 20
DEFAULT_MAX_INFLIGHT_BYTES = 16 << 20
"""Bytes of decoded DMLs (:func:`common.events.dml_memory`) between ``add`` and their success report."""
EXEC_LIMIT_MULTIPLE = 3
"""Accumulate up to txn_batch * worker_count * 3 DMLs before dispatching (original: execLimitMultiple)."""
DML_RETRIES = 100
"""Tries of one chunk (original: 100, 1 s apart)."""
DDL_RETRIES = 5
"""Tries of one DDL (original: 5, 1 s apart)."""
BACKOFF_FIRST = 0.05
BACKOFF_MAX = 1.0
MAX_CAUSALITY_KEYS = 1 << 17
"""Reset causality (after a flush) once it holds this many keys: about 140 bytes each (a key text and
its map entry), so at most about 18 MB; keys pile up while the workers are never idle (a catch-up)."""
TXN_OVERHEAD = 64
"""Bytes counted per transaction on top of what its DMLs take (or its ``size`` when it has none)."""
CLOSE_JOIN_TIMEOUT = 10.0
MERGEABLE_CACHE = 4096
"""Shapes whose mergeability is remembered (cleared when full)."""


class ExecError(SinkError):
    """An executor failed; ``retriable`` says whether the same work may be tried again."""

    def __init__(self, message: str, *, retriable: bool = False, code: int = 0) -> None:
        super().__init__(message)
        self.retriable = retriable
        self.code = code
        """The downstream's error code, 0 if none."""


class Executor(Protocol):
    """One downstream connection, used by one worker thread at a time."""

    def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        """Apply ``dmls`` in order as one downstream transaction (committed on return), or raise ExecError."""

    def execute_ddl(self, ddl: DDL, commit_ts: int) -> None:
        """Run one DDL (ignorable errors ignored), or raise ExecError."""

    def close(self) -> None: ...


ExecutorFactory = Callable[[int], Executor]
"""Makes the executor of worker ``i`` (connecting; may raise SinkError)."""


@dataclass(slots=True, eq=False)
class _Batch:
    seq: int
    commit_ts: list[int] = field(default_factory=list)
    parts: int = 0
    """Partial txns in the batch (added, never reported by commit_ts)."""
    nbytes: int = 0
    pending: int = 0
    """Units dispatched and not yet done."""
    dispatched: bool = False


@dataclass(slots=True, eq=False)
class _Unit:
    batch: _Batch
    dmls: list[DML]
    safe: bool
    ddl: DDL | None = None
    commit_ts: int = 0
    merged: bool = False
    """Merged changes (:mod:`drainer.merge`): always run in safe mode."""


class _StoppedError(Exception):
    """The loader is closing or failed; unwind the coordinator."""


class _Worker:
    def __init__(self, index: int, executor: Executor) -> None:
        self.index = index
        self.executor = executor
        self.units: deque[_Unit] = deque()
        self.cv = threading.Condition()
        self.thread: threading.Thread | None = None


class Loader:
    """Runs transactions through ``worker_count`` executors; see the module docstring."""

    def __init__(
        self,
        factory: ExecutorFactory,
        *,
        worker_count: int = DEFAULT_WORKER_COUNT,
        txn_batch: int = DEFAULT_TXN_BATCH,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        safe_mode: bool = False,
        enable_detect: bool = True,
        enable_dispatch: bool = True,
        dml_retries: int = DML_RETRIES,
        ddl_retries: int = DDL_RETRIES,
        backoff: tuple[float, float] = (BACKOFF_FIRST, BACKOFF_MAX),
        name: str = "loader",
        merge: bool = False,
    ) -> None:
        if worker_count < 1 or txn_batch < 1:
            raise ValueError("worker_count and txn_batch must be at least 1")
        self.name = name
        self._factory = factory
        self.per_txn = not enable_dispatch
        self.worker_count = 1 if self.per_txn else worker_count
        self.txn_batch = txn_batch
        self.detect = enable_detect
        self.max_inflight_bytes = max_inflight_bytes
        self.dml_retries = max(1, dml_retries)
        self.ddl_retries = max(1, ddl_retries)
        self.backoff = backoff
        self._safe_mode = safe_mode
        self.merge = merge
        self._limit = txn_batch * self.worker_count * EXEC_LIMIT_MULTIPLE
        self._take = txn_batch * EXEC_LIMIT_MULTIPLE  # DMLs a worker takes off its queue at once (whole units)

        self._cv = threading.Condition()  # guards everything below
        self._report_lock = threading.Lock()  # held while reporting, so reports never interleave
        self._inflight_bytes = 0
        self._blocked = 0
        self._added = 0
        self._reported = 0
        self._error: SinkError | None = None
        self._closed = False
        self._started = False
        self._batches: deque[_Batch] = deque()  # dispatched, in order, not yet reported
        self._on_success: OnSuccess = lambda ts: None

        self._input: queue.SimpleQueue[tuple[Txn, int] | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._workers: list[_Worker] = []
        self._coordinator: threading.Thread | None = None
        # coordinator-only state
        self._causality = Causality()
        self._pending: list[list[DML]] = [[] for _ in range(self.worker_count)]
        self._npending = 0
        self._merging: dict[tuple[str, str], list[DML]] = {}  # (db, table) -> DMLs to merge at dispatch
        self._nmerging = 0
        self._merged: list[list[DML]] = [[] for _ in range(self.worker_count)]  # placed merged changes
        self._placing = False
        self._mergeable: dict[int, tuple[TableShape, bool]] = {}  # id(shape) -> (shape, has a merge key)
        self._seq = 0
        self._current = _Batch(0)

    # ------------------------------------------------------------------ Sink-facing API
    def start(self, on_success: OnSuccess) -> None:
        if self._started:
            raise SinkError(f"{self.name}: already started")
        self._on_success = on_success
        try:
            for i in range(self.worker_count):
                self._workers.append(_Worker(i, self._factory(i)))
        except BaseException:
            for w in self._workers:
                w.executor.close()
            self._workers.clear()
            raise
        self._started = True
        for w in self._workers:
            w.thread = threading.Thread(target=self._work, args=(w,), name=f"{self.name}-w{w.index}", daemon=True)
            w.thread.start()
        self._coordinator = threading.Thread(target=self._coordinate, name=f"{self.name}-coord", daemon=True)
        self._coordinator.start()
        log.info(
            "%s started: worker_count=%d txn_batch=%d detect=%s dispatch=%s",
            self.name,
            self.worker_count,
            self.txn_batch,
            self.detect,
            not self.per_txn,
        )

    def add(self, txn: Txn) -> None:
        cost = self._cost(txn)
        with self._cv:
            self._check()
            if self._inflight_bytes > 0 and self._inflight_bytes + cost > self.max_inflight_bytes:
                self._blocked += 1
                try:
                    while self._inflight_bytes > 0 and self._inflight_bytes + cost > self.max_inflight_bytes:
                        self._cv.wait()
                        self._check()
                finally:
                    self._blocked -= 1
            self._inflight_bytes += cost
            self._added += 1
        self._input.put((txn, cost))

    def flush(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while True:
                if self._error is not None:
                    raise self._error
                if self._reported >= self._added:
                    return
                if self._closed:
                    raise SinkError(f"{self.name} is closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"{self.name}: {self._added - self._reported} txn(s) not applied yet")
                self._cv.wait(left)

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        self._stop.set()
        self._input.put(None)
        for w in self._workers:
            with w.cv:
                w.cv.notify_all()
        threads = [self._coordinator] + [w.thread for w in self._workers]
        deadline = time.monotonic() + CLOSE_JOIN_TIMEOUT  # one bound for all of them
        for t in threads:
            if t is not None and t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))
                if t.is_alive():
                    log.warning("%s: thread %s still busy after %.0fs", self.name, t.name, CLOSE_JOIN_TIMEOUT)
        for w in self._workers:
            if w.thread is None or not w.thread.is_alive():
                try:
                    w.executor.close()
                except Exception:
                    log.exception("%s: closing executor %d failed", self.name, w.index)
        log.info("%s closed: %d txn(s) added, %d reported", self.name, self._added, self._reported)

    def error(self) -> SinkError | None:
        return self._error

    def set_safe_mode(self, on: bool) -> None:
        if on != self._safe_mode:
            log.info("%s: safe mode %s", self.name, "on" if on else "off")
        self._safe_mode = on

    @property
    def safe_mode(self) -> bool:
        return self._safe_mode

    @property
    def inflight_bytes(self) -> int:
        """Bytes of the transactions added and not yet reported."""
        return self._inflight_bytes

    @property
    def blocked_adds(self) -> int:
        """``add`` calls waiting for the byte budget right now."""
        return self._blocked

    def _check(self) -> None:
        if self._error is not None:
            raise self._error
        if self._closed:
            raise SinkError(f"{self.name} is closed")
        if not self._started:
            raise SinkError(f"{self.name}: add() before start()")

    def _fail(self, exc: BaseException) -> None:
        err = exc if isinstance(exc, SinkError) else SinkError(f"{self.name}: {type(exc).__name__}: {exc}")
        if err is not exc:
            err.__cause__ = exc
        with self._cv:
            if self._error is None:
                self._error = err
                log.error("%s failed: %s", self.name, err)
            self._cv.notify_all()
        self._stop.set()
        self._input.put(None)
        for w in self._workers:
            with w.cv:
                w.cv.notify_all()

    # ------------------------------------------------------------------ coordinator
    def _coordinate(self) -> None:
        try:
            while not self._stop.is_set():
                item = self._input.get()
                while item is not None:
                    self._process(*item)
                    if self._npending + self._nmerging >= self._limit or self.per_txn:
                        self._dispatch()
                    item = None  # no reference to a txn's DMLs while waiting for the next one
                    try:
                        item = self._input.get_nowait()
                    except queue.Empty:
                        break
                if self._stop.is_set():
                    return
                self._dispatch()  # the input is momentarily empty
        except _StoppedError:
            return
        except BaseException as exc:
            log.exception("%s: coordinator crashed", self.name)
            self._fail(exc)

    def _process(self, txn: Txn, cost: int) -> None:
        batch = self._current
        if txn.ddl is not None and not txn.ddl.skip:
            self._dispatch()
            self._wait_idle()
            self._causality.reset()
            self._seq += 1
            ddl_batch = _Batch(self._seq, [txn.commit_ts], nbytes=cost)
            self._submit(ddl_batch, [(0, _Unit(ddl_batch, [], False, txn.ddl, txn.commit_ts))])
            self._wait_idle()
            return
        if txn.dmls:
            if self._npending == 0 and not self.per_txn and self._idle():
                self._causality.reset()
            for dml in txn.dmls:
                if dml.commit_ts == 0:
                    dml.commit_ts = txn.commit_ts
                if self.merge and self._mergeable_shape(dml.shape):
                    self._merging.setdefault((dml.shape.db, dml.shape.table), []).append(dml)
                    self._nmerging += 1
                    continue
                w = self._assign(dml)  # may dispatch, which replaces self._pending
                self._pending[w].append(dml)
                self._npending += 1
            batch = self._current  # _assign may have dispatched the earlier part
        if txn.partial:
            batch.parts += 1
        else:
            batch.commit_ts.append(txn.commit_ts)
        batch.nbytes += cost

    @staticmethod
    def _cost(txn: Txn) -> int:
        """Budget bytes of ``txn``: what its DMLs take in memory, else its size (a DDL, an empty txn)."""
        if txn.dmls:
            return sum(map(dml_memory, txn.dmls)) + TXN_OVERHEAD
        return txn.size + TXN_OVERHEAD

    def _assign(self, dml: DML) -> int:
        if not self.detect or self.worker_count == 1:
            return 0
        keys = dml_keys(dml)
        group = self._causality.add(keys)
        if group is None or len(self._causality) > MAX_CAUSALITY_KEYS:
            log.debug("%s: causality conflict at commit_ts %d, flushing all workers", self.name, dml.commit_ts)
            self._dispatch()
            self._wait_idle()
            self._causality.reset()
            group = self._causality.add(keys)
            assert group is not None
        return worker_of(group, self.worker_count)

    def _mergeable_shape(self, shape: TableShape) -> bool:
        hit = self._mergeable.get(id(shape))
        if hit is None or hit[0] is not shape:
            if len(self._mergeable) >= MERGEABLE_CACHE:
                self._mergeable.clear()
            hit = (shape, merge_key(shape) is not None)  # the entry holds the shape: its id is not reused
            self._mergeable[id(shape)] = hit
        return hit[1]

    def _place_merged(self) -> None:
        """Merge each table's accumulated DMLs and give the merged changes to workers (see the module doc)."""
        groups, self._merging, self._nmerging = self._merging, {}, 0
        self._placing = True
        try:
            for key in list(groups):
                for dml in merge_by_key(groups.pop(key)):
                    w = self._assign(dml)  # a conflict dispatches what is placed so far (see _dispatch)
                    self._merged[w].append(dml)
                    self._npending += 1
        finally:
            self._placing = False

    def _dispatch(self) -> None:
        if self._merging and not self._placing:
            self._place_merged()
        self._seq += 1
        if self._placing:
            # a causality conflict while placing merged changes: run those placed so far on their own;
            # the transactions stay in the current batch, reported after the rest of their changes
            batch = _Batch(self._seq)
        else:
            batch = self._current
            self._current = _Batch(self._seq)
        if not batch.commit_ts and not batch.parts and self._npending == 0:
            return
        safe = self._safe_mode
        units = [(w, _Unit(batch, dmls, safe)) for w, dmls in enumerate(self._pending) if dmls]
        units += [(w, _Unit(batch, dmls, True, merged=True)) for w, dmls in enumerate(self._merged) if dmls]
        self._pending = [[] for _ in range(self.worker_count)]
        if self.merge:
            self._merged = [[] for _ in range(self.worker_count)]
        self._npending = 0
        self._submit(batch, units)

    def _submit(self, batch: _Batch, units: list[tuple[int, _Unit]]) -> None:
        with self._cv:
            batch.pending = len(units)
            batch.dispatched = True
            self._batches.append(batch)
        for w, unit in units:
            worker = self._workers[w]
            with worker.cv:
                worker.units.append(unit)
                worker.cv.notify()
        if not units:
            self._report_ready()

    def _idle(self) -> bool:
        with self._cv:
            return not self._batches

    def _wait_idle(self) -> None:
        with self._cv:
            while self._batches:
                if self._error is not None or self._closed:
                    raise _StoppedError
                self._cv.wait()
            if self._error is not None or self._closed:
                raise _StoppedError

    # ------------------------------------------------------------------ reporting
    def _unit_done(self, batch: _Batch) -> None:
        with self._cv:
            batch.pending -= 1
        self._report_ready()

    def _report_ready(self) -> None:
        with self._report_lock:
            with self._cv:
                ready: list[_Batch] = []
                while self._batches and self._batches[0].pending == 0 and self._error is None and not self._closed:
                    ready.append(self._batches.popleft())
            if not ready:
                return
            for b in ready:
                for ts in b.commit_ts:
                    self._on_success(ts)
            with self._cv:
                self._reported += sum(len(b.commit_ts) + b.parts for b in ready)
                self._inflight_bytes -= sum(b.nbytes for b in ready)
                self._cv.notify_all()

    # ------------------------------------------------------------------ workers
    def _work(self, w: _Worker) -> None:
        try:
            while True:
                with w.cv:
                    while not w.units and not self._stop.is_set():
                        w.cv.wait()
                    if self._stop.is_set():
                        return
                    if self.per_txn or w.units[0].ddl is not None:
                        units = [w.units.popleft()]
                    else:
                        units = []
                        taken = 0
                        while w.units and w.units[0].ddl is None and taken < self._take:
                            units.append(w.units.popleft())
                            taken += len(units[-1].dmls)
                self._run(w, units)
                batches = [u.batch for u in units]
                del units  # the DMLs go before the report frees their budget
                for batch in batches:
                    self._unit_done(batch)
        except _StoppedError:
            return
        except BaseException as exc:
            self._fail(exc)

    def _run(self, w: _Worker, units: list[_Unit]) -> None:
        first = units[0]
        if first.ddl is not None:
            what = f"DDL at commit_ts {first.commit_ts}"
            self._retry(partial(self._exec_ddl, w.executor, first.ddl, first.commit_ts), self.ddl_retries, what, False)
            return
        if self.merge:
            # merged changes in safe mode, the others as their mode says; they are of different tables
            # (a table merges or not for as long as its shape lives, and a DDL is a barrier), so either
            # may go first
            plain = [u for u in units if not u.merged]
            if plain:
                self._run_dmls(w, plain, any(u.safe for u in plain))
            merged = [u for u in units if u.merged]
            if merged:
                self._run_dmls(w, merged, True)
        else:
            self._run_dmls(w, units, any(u.safe for u in units))

    def _run_dmls(self, w: _Worker, units: list[_Unit], safe: bool) -> None:
        dmls = units[0].dmls if len(units) == 1 else [d for u in units for d in u.dmls]
        step = len(dmls) if self.per_txn else self.txn_batch
        for i in range(0, len(dmls), step):
            chunk = dmls[i : i + step]
            what = f"{len(chunk)} DML(s) at commit_ts {chunk[0].commit_ts}..{chunk[-1].commit_ts}"
            self._retry(partial(w.executor.execute_dmls, chunk), self.dml_retries, what, safe)

    @staticmethod
    def _exec_ddl(executor: Executor, ddl: DDL, commit_ts: int, safe: bool) -> None:
        executor.execute_ddl(ddl, commit_ts)

    def _retry(self, fn: Callable[[bool], None], tries: int, what: str, safe: bool) -> None:
        backoff = Backoff(self.backoff[0], 2.0, self.backoff[1], stop=self._stop)
        for attempt in range(1, tries + 1):
            if self._stop.is_set():
                raise _StoppedError
            try:
                fn(safe)
                return
            except ExecError as exc:
                if not exc.retriable:
                    raise ExecError(f"{what}: {exc}") from exc
                if attempt >= tries:
                    raise ExecError(f"{what}: gave up after {tries} tries: {exc}") from exc
                log.warning(
                    "%s: %s failed (try %d of %d), again in %.2fs: %s",
                    self.name,
                    what,
                    attempt,
                    tries,
                    backoff.delay,
                    exc,
                )
            except Exception as exc:
                raise ExecError(f"{what}: {type(exc).__name__}: {exc}") from exc
            if backoff.wait():
                raise _StoppedError
            safe = True  # the failed try may have committed before its connection broke


class LoaderSink(Sink):
    """A SQL sink: the `Sink` methods are its `loader`'s (subclasses build `self.loader`)."""

    safe_mode_aware = True
    loader: Loader

    @property
    def takes_parts(self) -> bool:
        """Parts of a large txn, unless every upstream txn must be one downstream txn (no dispatch)."""
        return not self.loader.per_txn

    def start(self, on_success: OnSuccess) -> None:
        self.loader.start(on_success)

    def add(self, txn: Txn) -> None:
        self.loader.add(txn)

    def flush(self, timeout: float | None = None) -> None:
        self.loader.flush(timeout)

    def close(self) -> None:
        self.loader.close()

    def error(self) -> BaseException | None:
        return self.loader.error()

    def set_safe_mode(self, on: bool) -> None:
        self.loader.set_safe_mode(on)

    @property
    def inflight_bytes(self) -> int:
        return self.loader.inflight_bytes
