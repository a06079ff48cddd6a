"""Appending writer of a binlog directory (pb file sink, relay log).

Records go to `binlog-<index>-<datetime>` files (`names.py`) in the framing of `record.py`.  After a
write that leaves the file at or past `max_file_size` the writer moves on to a new file with the next
index, so records never span files.  On open the last file is reopened and appended to; a torn tail
left by a crash is cut back to the end of the last whole record first.  The directory (0700) is
locked with `flock` on `<dir>/.lock` while the writer is open; files are created 0600.

Not meant for concurrent writers: one instance owns the directory, and its methods serialise on an
internal lock (so `delete_before` may run from a GC thread).

Metrics (`metrics.py`): each record's payload size, the time of each write call (with its fdatasync
when `sync`), and corrupt spans found in a reopened last file.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Final

import crc32c

from common.binlogfile.metrics import METRICS
from common.binlogfile.names import Position, format_name, list_binlog_files
from common.binlogfile.reader import scan_file
from common.binlogfile.record import MAGIC, Corruption, Record
from common.errors import StorageError

__all__ = ["DEFAULT_MAX_FILE_SIZE", "DIR_MODE", "FILE_MODE", "LOCK_NAME", "BinlogFileWriter"]

log = logging.getLogger(__name__)

DEFAULT_MAX_FILE_SIZE: Final = 512 << 20  # pb syncer: 512 MiB (relay log upstream: 10 MiB)
DIR_MODE: Final = 0o700
FILE_MODE: Final = 0o600
LOCK_NAME: Final = ".lock"

_HEADER = struct.Struct("<IQ")
_CRC = struct.Struct("<I")
_datasync = getattr(os, "fdatasync", os.fsync)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BinlogFileWriter:
    """Append records to the binlog files of `directory`.

    `sync=True` makes every `write`/`write_many` durable (fdatasync) before it returns.
    """

    def __init__(
        self, directory: str | os.PathLike[str], max_file_size: int = DEFAULT_MAX_FILE_SIZE, sync: bool = True
    ) -> None:
        if max_file_size <= 0:
            raise ValueError(f"max_file_size must be positive, got {max_file_size}")
        self._dir = os.fspath(directory)
        self._max_file_size = max_file_size
        self._sync = sync
        self._mu = threading.Lock()
        self._closed = False
        self._fd = -1
        try:
            os.makedirs(self._dir, mode=DIR_MODE, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create binlog directory {self._dir!r}: {e}") from e
        self._lock_fd = self._lock_dir()
        try:
            self._index, self._offset, self._fd = self._open_last()
        except BaseException:
            os.close(self._lock_fd)
            raise
        log.info(
            "binlog writer open dir=%s fid=%d offset=%d max_file_size=%d sync=%s",
            self._dir,
            self._index,
            self._offset,
            max_file_size,
            sync,
        )

    # ------------------------------------------------------------------------------------------ open

    def _lock_dir(self) -> int:
        path = os.path.join(self._dir, LOCK_NAME)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
        except OSError as e:
            raise StorageError(f"cannot open lock file {path!r}: {e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StorageError(f"binlog directory {self._dir!r} is locked by another process ({path})") from None
        except OSError as e:
            os.close(fd)
            raise StorageError(f"cannot lock binlog directory {self._dir!r}: {e}") from e
        return fd

    def _open_last(self) -> tuple[int, int, int]:
        files = list_binlog_files(self._dir, include_archived=True)
        if not files:
            return self._create(0)
        last = files[-1]
        if last.archived:
            return self._create(last.index + 1)
        path = os.path.join(self._dir, last.name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except OSError as e:
            raise StorageError(f"cannot reopen binlog file {path!r}: {e}") from e
        try:
            offset = self._recover(path, fd, last.index)
        except BaseException:
            os.close(fd)
            raise
        if offset >= self._max_file_size:
            os.close(fd)
            return self._create(last.index + 1)
        return last.index, offset, fd

    def _recover(self, path: str, fd: int, index: int) -> int:
        """Cut a torn tail of the reopened last file; return the offset to append at."""
        try:
            with open(path, "rb", buffering=0) as f:
                size = os.fstat(f.fileno()).st_size
                good_end = 0
                for events in scan_file(f, 0, size):
                    for ev in events:
                        if isinstance(ev, Record):
                            good_end = ev.end
                        elif isinstance(ev, Corruption):
                            METRICS.corruption.inc()
                            log.warning(
                                "corrupt data in reopened binlog file fid=%d offset=%d length=%d reason=%s",
                                index,
                                ev.offset,
                                ev.length,
                                ev.reason,
                            )
            if size > good_end:
                os.ftruncate(fd, good_end)
                _datasync(fd)
                log.warning(
                    "truncated torn tail of binlog file fid=%d offset=%d cut_bytes=%d file=%s",
                    index,
                    good_end,
                    size - good_end,
                    path,
                )
        except OSError as e:
            raise StorageError(f"cannot recover binlog file {path!r}: {e}") from e
        return good_end

    def _create(self, index: int) -> tuple[int, int, int]:
        path = os.path.join(self._dir, format_name(index, time.time()))
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, FILE_MODE)
            _fsync_dir(self._dir)
        except OSError as e:
            raise StorageError(f"cannot create binlog file {path!r}: {e}") from e
        log.info("created binlog file fid=%d file=%s", index, path)
        return index, 0, fd

    # ------------------------------------------------------------------------------------------ write

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def position(self) -> Position:
        """(index of the file being written, offset where the next record will start)."""
        return Position(self._index, self._offset)

    @property
    def closed(self) -> bool:
        return self._closed

    def write(self, payload: bytes) -> Position:
        """Append one record; return its position."""
        return self.write_many((payload,))

    def write_many(self, payloads: Iterable[bytes]) -> Position:
        """Append records with one write call (and one fdatasync when `sync`); return the first's position.

        The batch always lands in one file; rotation happens after it.
        """
        parts: list[bytes] = []
        append = parts.append
        pack, pack_crc = _HEADER.pack, _CRC.pack
        observe_size = METRICS.write_size.observe
        for p in payloads:
            append(pack(MAGIC, len(p)))
            append(p)
            append(pack_crc(crc32c.crc32c(p)))
            observe_size(len(p))
        data = b"".join(parts)
        with self._mu:
            self._check_open()
            pos = Position(self._index, self._offset)
            if not data:
                return pos
            began = time.perf_counter()
            self._write_all(data)
            self._offset += len(data)
            if self._sync:
                self._fsync_locked()
            METRICS.write_duration.observe(time.perf_counter() - began)
            if self._offset >= self._max_file_size:
                self._rotate_locked()
            return pos

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += os.write(self._fd, view[written:])
        except OSError as e:
            # Do not leave half a record behind: later records would be appended after garbage.
            try:
                os.ftruncate(self._fd, self._offset)
            except OSError:
                log.exception("cannot cut a partial write of binlog file fid=%d offset=%d", self._index, self._offset)
            raise StorageError(f"write to binlog file fid={self._index} failed: {e}") from e

    def _rotate_locked(self) -> None:
        try:
            _datasync(self._fd)
            os.close(self._fd)
        except OSError as e:
            raise StorageError(f"cannot finish binlog file fid={self._index}: {e}") from e
        self._fd = -1
        log.info("rotating binlog file fid=%d size=%d", self._index, self._offset)
        self._index, self._offset, self._fd = self._create(self._index + 1)

    def flush(self) -> None:
        """Make everything written so far durable (writes are unbuffered: same as `fsync`)."""
        self.fsync()

    def fsync(self) -> None:
        """fdatasync the file being written."""
        with self._mu:
            self._check_open()
            self._fsync_locked()

    def _fsync_locked(self) -> None:
        try:
            _datasync(self._fd)
        except OSError as e:
            raise StorageError(f"fsync of binlog file fid={self._index} failed: {e}") from e

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"binlog writer of {self._dir!r} is closed")
        if self._fd < 0:
            raise StorageError(f"binlog writer of {self._dir!r} has no open file after an earlier error")

    # ------------------------------------------------------------------------------------------ gc

    def delete_before(self, index: int) -> list[str]:
        """Delete the files with an index below `index`, never the one being written; return their names."""
        with self._mu:
            bound = min(index, self._index)
            removed: list[str] = []
            for f in list_binlog_files(self._dir, include_archived=True):
                if f.index >= bound:
                    break
                try:
                    os.remove(os.path.join(self._dir, f.name))
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise StorageError(f"cannot delete binlog file {f.name!r}: {e}") from e
                removed.append(f.name)
                log.info("deleted binlog file fid=%d file=%s", f.index, f.name)
            return removed

    # ------------------------------------------------------------------------------------------ close

    def close(self) -> None:
        """fdatasync and close the current file, then release the directory lock.  Idempotent."""
        with self._mu:
            if self._closed:
                return
            self._closed = True
            try:
                if self._fd >= 0:
                    try:
                        _datasync(self._fd)
                    finally:
                        os.close(self._fd)
                        self._fd = -1
            except OSError as e:
                raise StorageError(f"cannot close binlog file fid={self._index}: {e}") from e
            finally:
                os.close(self._lock_fd)
            log.info("binlog writer closed dir=%s fid=%d offset=%d", self._dir, self._index, self._offset)

    def __enter__(self) -> BinlogFileWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
