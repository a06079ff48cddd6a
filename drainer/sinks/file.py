"""File sink (`db-type = "file"` / `"pb"`): every transaction as one `pb_binlog.Binlog` record, for reparo.

Files: binlogfile framing and names (docs/formats.md#binlogfile-framing, `common.binlogfile`) in
`[syncer.to] dir`, rotated after the record that takes a file to `max_file_size` (512 MiB);
`retention-time` days > 0 deletes the oldest files whose mtime is older than that (never the file being
written), at start and every hour.

Record payload: one `pb_binlog.Binlog` per transaction (docs/formats.md#pb-binlog-files), encoded by
:mod:`common.pbfile`.

Nothing is written for an empty transaction (fake binlog, everything filtered) or a DDL with `skip` set;
they are still reported, in order. A transaction is reported once its record is written and fsynced:
one writer thread writes whatever has queued up, fsyncs once, then reports the whole batch.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from common.binlogfile import BinlogFileWriter, list_binlog_files
from common.binlogfile.writer import DEFAULT_MAX_FILE_SIZE
from common.errors import BinlogError, CodecError
from common.events import Txn
from common.pbfile import txn_to_pb
from drainer.sinks.base import OnSuccess, Sink, SinkError

__all__ = [
    "DEFAULT_GC_INTERVAL",
    "DEFAULT_MAX_INFLIGHT_BYTES",
    "FileSink",
]

log = logging.getLogger(__name__)

DEFAULT_GC_INTERVAL: Final = 3600.0
DEFAULT_MAX_INFLIGHT_BYTES: Final = 64 * 1024**2
SECONDS_PER_DAY: Final = 86_400

# ----------------------------------------------------------------------------------------------- sink


class FileSink(Sink):
    """Writes pb binlog files; see the module doc. `purge_expired()` runs the retention GC now."""

    name = "file"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        retention_days: float = 0,
        gc_interval: float = DEFAULT_GC_INTERVAL,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        sync: bool = True,
        time_zone: _dt.tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = os.fspath(directory)
        self._retention = retention_days * SECONDS_PER_DAY
        self._gc_interval = gc_interval
        self._budget = max(1, max_inflight_bytes)
        self._sync = sync
        self._tz = time_zone
        self._clock = clock
        self._writer = BinlogFileWriter(self._dir, max_file_size, sync=False)
        self._cv = threading.Condition()
        self._queue: deque[tuple[int, bytes | None]] = deque()
        self._inflight = 0
        self._added = 0
        self._reported = 0
        self._error: BaseException | None = None
        self._closing = False
        self._closed = False
        self._on_success: OnSuccess | None = None
        self._thread: threading.Thread | None = None

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def inflight_bytes(self) -> int:
        """Bytes of encoded records queued and not yet written and fsynced."""
        return self._inflight

    def start(self, on_success: OnSuccess) -> None:
        with self._cv:
            if self._thread is not None or self._closing:
                raise SinkError("file sink: start() called twice or after close()")
            self._on_success = on_success
            self._thread = threading.Thread(target=self._run, name="file-sink", daemon=True)
            self._thread.start()
        log.info("file sink started dir=%s retention_days=%s", self._dir, self._retention / SECONDS_PER_DAY)

    def add(self, txn: Txn) -> None:
        self._raise_if_failed()
        try:
            binlog = txn_to_pb(txn, self._tz)
            payload = None if binlog is None else binlog.SerializeToString()
        except (CodecError, ValueError, TypeError) as exc:
            error = SinkError(f"file sink: cannot encode commit_ts={txn.commit_ts}: {exc}")
            self._fail(error)
            raise error from exc
        size = 0 if payload is None else len(payload)
        with self._cv:
            while self._error is None and not self._closing and self._inflight and self._inflight + size > self._budget:
                self._cv.wait()
            self._raise_if_failed()
            if self._closing:
                raise SinkError(f"file sink is closed; commit_ts={txn.commit_ts} not written")
            self._queue.append((txn.commit_ts, payload))
            self._inflight += size
            self._added += 1
            self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            target = self._added
            while self._reported < target:
                self._raise_if_failed()
                if self._closing:
                    raise SinkError("file sink closed before everything was written")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"file sink: {target - self._reported} transactions not written in {timeout}s")
                self._cv.wait(remaining)
            self._raise_if_failed()

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        try:
            self._writer.close()
        except BinlogError as exc:
            log.error("file sink: closing the binlog files failed: %s", exc)
        log.info("file sink closed dir=%s reported=%d", self._dir, self._reported)

    def error(self) -> BaseException | None:
        return self._error

    # ------------------------------------------------------------------------------------------ gc

    def purge_expired(self, now: float | None = None) -> list[str]:
        """Delete the oldest files last modified more than retention-time days ago; return their names.

        Files go in index order, stopping at the first one that is recent enough or is being written.
        """
        if self._retention <= 0:
            return []
        cutoff = (self._clock() if now is None else now) - self._retention
        current = self._writer.position.file_index
        stop = current
        for f in list_binlog_files(self._dir, include_archived=True):
            if f.index >= current:
                break
            try:
                mtime = os.stat(os.path.join(self._dir, f.name)).st_mtime
            except FileNotFoundError:
                continue
            if mtime >= cutoff:
                stop = f.index
                break
        removed = self._writer.delete_before(stop)
        if removed:
            log.info("file sink: deleted %d binlog files older than the retention time", len(removed))
        return removed

    # ------------------------------------------------------------------------------------------ worker

    def _run(self) -> None:
        next_gc = time.monotonic()
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._closing:
                        if self._retention > 0 and time.monotonic() >= next_gc:
                            break
                        wait = None if self._retention <= 0 else max(0.0, next_gc - time.monotonic())
                        self._cv.wait(wait)
                    if self._closing:
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                if self._retention > 0 and time.monotonic() >= next_gc:
                    next_gc = time.monotonic() + self._gc_interval
                    self._gc_quietly()
                if batch:
                    self._write_batch(batch)
        except BaseException as exc:
            self._fail(exc if isinstance(exc, SinkError) else SinkError(f"file sink failed: {exc}"))
            if not isinstance(exc, Exception):
                raise

    def _gc_quietly(self) -> None:
        try:
            self.purge_expired()
        except (BinlogError, OSError) as exc:
            log.warning("file sink: retention GC failed: %s", exc)

    def _write_batch(self, batch: list[tuple[int, bytes | None]]) -> None:
        size = 0
        for commit_ts, payload in batch:
            if payload is None:
                continue
            try:
                self._writer.write(payload)
            except BinlogError as exc:
                raise SinkError(f"file sink: cannot write commit_ts={commit_ts}: {exc}") from exc
            size += len(payload)
        if size and self._sync:
            try:
                self._writer.fsync()
            except BinlogError as exc:
                raise SinkError(f"file sink: cannot fsync up to commit_ts={batch[-1][0]}: {exc}") from exc
        on_success = self._on_success
        assert on_success is not None
        for commit_ts, _ in batch:
            on_success(commit_ts)
        with self._cv:
            self._inflight -= size
            self._reported += len(batch)
            self._cv.notify_all()

    # ------------------------------------------------------------------------------------------ errors

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            if self._error is None:
                self._error = exc
                log.error("%s", exc)
            self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            raise error if isinstance(error, SinkError) else SinkError(str(error))
