"""Background delivery of commit binlogs (`PumpsClient.write_binlog_async`).

A job is stepped on a small pool of worker threads.  `step()` makes one attempt and returns None when
the job is finished, or the seconds to wait before the next attempt.  Waiting jobs sit in a timer heap,
not on a worker, so commits stuck on a dead pump (retried every second for up to 10 minutes) never
hold up commits bound for healthy pumps.

Bounds: `workers` threads; at most `max_pending` unfinished jobs (`submit` blocks while that many are
pending: back-pressure instead of unbounded memory).  `close(timeout)` stops intake, lets pending jobs
finish until the timeout, then abandons the rest (`abandon()` is called, their futures resolve).
Futures always resolve with None: a commit is never reported as failed.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Final, Protocol

log = logging.getLogger(__name__)

DEFAULT_WORKERS: Final = 4
DEFAULT_MAX_PENDING: Final = 65_536


class Job(Protocol):
    def step(self) -> float | None:
        """One attempt: None when done (delivered or given up), else seconds until the next one."""
        ...

    def abandon(self) -> None:
        """The dispatcher closes before the job finished."""
        ...


class Dispatcher:
    def __init__(self, *, workers: int = DEFAULT_WORKERS, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pump-client-commit")
        self._slots = threading.BoundedSemaphore(max_pending)
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Job, Future[None]]] = []
        self._seq = itertools.count()
        self._pending: dict[Future[None], Job] = {}
        self._closing = False
        self._timer = threading.Thread(target=self._timer_loop, name="pump-client-commit-timer", daemon=True)
        self._timer.start()

    @property
    def pending(self) -> int:
        with self._cond:
            return len(self._pending)

    def submit(self, job: Job) -> Future[None]:
        future: Future[None] = Future()
        future.set_running_or_notify_cancel()
        acquired = False
        while not acquired:
            acquired = self._slots.acquire(timeout=0.1)
            with self._cond:
                if self._closing:
                    break
        with self._cond:
            if self._closing:
                if acquired:
                    self._slots.release()
                job.abandon()
                future.set_result(None)
                return future
            self._pending[future] = job
            self._pool.submit(self._run, job, future)  # under the lock: close() cannot shut the pool meanwhile
        return future

    def _run(self, job: Job, future: Future[None]) -> None:
        try:
            delay = job.step()
        except Exception:
            log.exception("commit delivery failed unexpectedly; dropping it")
            delay = None
        with self._cond:
            if future.done() or future not in self._pending:
                return  # abandoned by close() meanwhile
            if delay is not None:
                heapq.heappush(self._heap, (time.monotonic() + delay, next(self._seq), job, future))
                self._cond.notify_all()
                return
            del self._pending[future]
            self._cond.notify_all()
        self._slots.release()
        future.set_result(None)

    def _timer_loop(self) -> None:
        while True:
            with self._cond:
                while not self._closing and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    self._cond.wait(timeout)
                if self._closing:
                    return
                _, _, job, future = heapq.heappop(self._heap)
                self._pool.submit(self._run, job, future)  # under the lock: close() cannot shut the pool meanwhile

    def close(self, timeout: float) -> None:
        """Stop intake, wait up to `timeout` for pending jobs (retries keep running), abandon the rest.

        Steps still running keep their worker until their RPC ends: `join()` waits for them (close the
        channels first to end them at once).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            if self._closing:
                return
            while self._pending and time.monotonic() < deadline:
                self._cond.wait(max(0.0, deadline - time.monotonic()))
            self._closing = True
            left = list(self._pending.items())
            self._pending.clear()
            self._heap.clear()
            self._cond.notify_all()
            self._pool.shutdown(wait=False, cancel_futures=True)
        self._timer.join()
        if left:
            log.warning(
                "closing with %d commit/rollback binlogs undelivered; the pumps' resolvers decide them", len(left)
            )
        for future, job in left:
            job.abandon()
            if not future.done():
                future.set_result(None)
            self._slots.release()

    def join(self) -> None:
        """Wait for the worker threads (after close())."""
        self._pool.shutdown(wait=True)
