"""The value log: `%06d.vlog` files of framed binlog records in `<data-dir>/value/`.

One writer appends batches (one `pwrite` + one `fdatasync` per batch when sync is on) to the
current file and starts a new one when the write offset passes `file_size`, finalizing the old
file with a footer (see `vlog_record`).  Any number of readers use `read(ptr)` and `scan(from)`
(`os.pread`, no shared file position) while the writer appends: a file's published `end` only
moves after the bytes before it are written.  A reader holds a reference on the file it reads, so
GC unlinks at once but the descriptor is closed (once, under the lock) by whoever drops the last
reference: GC itself when no reader holds the file, else the last reader.

Opening trusts an ended file's footer (for the highest-numbered file only when its record headers
end exactly where the footer starts: a record's payload may end with footer-like bytes); any
other file is scanned to rebuild its maxTS.  Damaged
spans are reported (logged and counted in `open_report`) and skipped; damage at the tail of the
last file (a torn append) is truncated away so that new records follow the last good one.

A failed append (its write or its fdatasync) is cut off the file at once, so nothing of it is read
back, now or at the next open; if even the truncation fails, nothing more is appended until it
succeeds.  ENOSPC and EDQUOT raise NoSpaceError (the client is told RESOURCE_EXHAUSTED "no available
space"), anything else StorageError; either way the log goes on from its last good record.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from common.errors import CodecError, CorruptRecordError, NoSpaceError, StorageClosedError, StorageError
from common.vlog_record import (
    DEFAULT_MAX_PAYLOAD,
    FOOTER_SIZE,
    HEADER_SIZE,
    Corruption,
    DecodeEvent,
    Record,
    RecordDecoder,
    TornTail,
    ValuePointer,
    checksum,
    decode_footer,
    encode_footer,
    encode_header,
    parse_header,
)
from pump.storage.diskguard import NO_SPACE_ERRNOS
from pump.storage.entry import max_ts as record_max_ts
from pump.storage.entry import parse_binlog

__all__ = ["FINALIZE_SIZE_AT_CLOSE", "OpenReport", "ValueLog", "file_name", "payload_max_ts"]

log = logging.getLogger(__name__)

FINALIZE_SIZE_AT_CLOSE: Final = 50 * 1024  # original: finalizeFileSizeAtClose
DEFAULT_CHUNK_SIZE: Final = 1 << 20
_READ_AHEAD: Final = 4096
_NAME = re.compile(r"^(\d{6,})\.vlog$")


def file_name(fid: int) -> str:
    return f"{fid:06d}.vlog"


def payload_max_ts(payload: bytes) -> int:
    """max(start_ts, commit_ts) of a stored binlog payload (0 when it does not parse)."""
    try:
        b = parse_binlog(payload)
    except CodecError as e:
        log.warning("vlog record is not a binlog, maxTS not taken from it: %s", e)
        return 0
    return record_max_ts(b.start_ts, b.commit_ts)


@dataclass(slots=True)
class OpenReport:
    """What opening the log found: damage skipped and torn bytes cut off the last file."""

    scanned_files: int = 0
    corrupted_spans: int = 0
    corrupted_bytes: int = 0
    truncated_bytes: int = 0


class _LogFile:
    __slots__ = ("closed", "end", "ended", "fd", "fid", "max_ts", "path", "refs", "removed")

    def __init__(self, fid: int, path: Path, fd: int, *, end: int, max_ts: int, ended: bool) -> None:
        self.fid = fid
        self.path = path
        self.fd = fd  # read-only descriptor, shared by every reader (pread)
        self.end = end  # where the data (records) ends; a footer, if any, follows
        self.max_ts = max_ts
        self.ended = ended
        self.refs = 0
        self.removed = False
        self.closed = False  # fd closed; set (and fd closed) only under ValueLog._lock, exactly once

    def close_fd_locked(self) -> None:
        """Close the descriptor once it is removed and unreferenced (caller holds ValueLog._lock)."""
        if self.removed and self.refs == 0 and not self.closed:
            self.closed = True
            os.close(self.fd)


class ValueLog:
    def __init__(
        self,
        directory: Path,
        *,
        file_size: int,
        sync: bool = True,
        ts_of: Callable[[bytes], int] = payload_max_ts,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_payload: int = DEFAULT_MAX_PAYLOAD,
        on_rotate: Callable[[float], None] | None = None,
    ) -> None:
        self._on_rotate = on_rotate
        self.last_write_seconds = 0.0  # of the last append's write call (metrics)
        self.last_sync_seconds = 0.0  # of the last append's fdatasync
        self._dir = directory
        self._file_size = file_size
        self._sync = sync
        self._ts_of = ts_of
        self._chunk = chunk_size
        self._max_payload = max_payload
        self._lock = threading.Lock()  # file map, references, closed flag
        self._write_lock = threading.Lock()  # append / rotate / close
        self._files: dict[int, _LogFile] = {}
        self._closed = False
        self._torn_at: int | None = None  # where a failed write began in the active file, until cut off
        self.open_report = OpenReport()
        directory.mkdir(parents=True, exist_ok=True)
        fids = sorted(int(m.group(1)) for name in os.listdir(directory) if (m := _NAME.match(name)))
        for fid in fids:
            self._files[fid] = self._open_existing(fid, is_last=fid == fids[-1])
        if not fids or self._files[fids[-1]].ended:
            self._active = self._create(fids[-1] + 1 if fids else 0)
        else:
            self._active = self._files[fids[-1]]
        self._wfd = os.open(self._active.path, os.O_WRONLY)
        log.info(
            "vlog opened dir=%s files=%d fid=%d offset=%d corrupted_spans=%d truncated_bytes=%d",
            directory,
            len(self._files),
            self._active.fid,
            self._active.end,
            self.open_report.corrupted_spans,
            self.open_report.truncated_bytes,
        )

    # ------------------------------------------------------------------------------------- open

    def _open_existing(self, fid: int, *, is_last: bool) -> _LogFile:
        path = self._dir / file_name(fid)
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        footer = decode_footer(os.pread(fd, FOOTER_SIZE, size - FOOTER_SIZE)) if size >= FOOTER_SIZE else None
        if footer is not None and is_last and not self._records_end_at(fd, size - FOOTER_SIZE):
            # The file being appended to may end with user bytes that look like a footer (a record's
            # payload ending in maxTS + end magic): trust it only if the records end right before it.
            log.warning("vlog last file ends like a footer but its records do not, scanning fid=%d", fid)
            footer = None
        if footer is not None:
            return _LogFile(fid, path, fd, end=size - FOOTER_SIZE, max_ts=footer, ended=True)
        rep = self.open_report
        rep.scanned_files += 1
        max_ts = 0
        good_end = 0
        for events in self._events(fd, 0, size):
            for ev in events:
                if isinstance(ev, Record):
                    max_ts = max(max_ts, self._ts_of(ev.payload))
                    good_end = ev.end
                elif isinstance(ev, Corruption):
                    rep.corrupted_spans += 1
                    rep.corrupted_bytes += ev.length
                    log.warning(
                        "vlog corrupted data skipped fid=%d offset=%d length=%d reason=%s",
                        fid,
                        ev.offset,
                        ev.length,
                        ev.reason,
                    )
        if is_last and good_end < size:
            # Whatever follows the last good record of the file being appended to was never acknowledged
            # whole: cut it off, so that the next record follows the last good one.
            wfd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(wfd, good_end)
                os.fdatasync(wfd)
            finally:
                os.close(wfd)
            rep.truncated_bytes += size - good_end
            log.warning("vlog torn tail truncated fid=%d offset=%d length=%d", fid, good_end, size - good_end)
            size = good_end
        log.info("vlog file scanned (no footer) fid=%d size=%d max_ts=%d", fid, size, max_ts)
        return _LogFile(fid, path, fd, end=size, max_ts=max_ts, ended=False)

    def _records_end_at(self, fd: int, target: int) -> bool:
        """True when hopping from record header to record header from offset 0 lands exactly on
        `target` (header checks only, no CRC: cheap even for a large file)."""
        pos = 0
        buf = b""
        buf_at = 0
        while pos < target:
            if pos + HEADER_SIZE > target:
                return False
            rel = pos - buf_at
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(max(self._chunk, HEADER_SIZE), target - pos), pos)
                buf_at, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return False
            try:
                length, _ = parse_header(buf[rel : rel + HEADER_SIZE], max_payload=self._max_payload)
            except CorruptRecordError:
                return False
            pos += HEADER_SIZE + length
        return pos == target

    def _create(self, fid: int) -> _LogFile:
        path = self._dir / file_name(fid)
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        try:
            dfd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dfd)  # the new name is durable before records in it are acknowledged
            finally:
                os.close(dfd)
        except OSError:
            path.unlink(missing_ok=True)  # a later rotation creates it again
            raise
        f = _LogFile(fid, path, os.open(path, os.O_RDONLY), end=0, max_ts=0, ended=False)
        with self._lock:
            self._files[fid] = f
        log.info("vlog file created fid=%d", fid)
        return f

    # ------------------------------------------------------------------------------------ write

    def append(self, payloads: Sequence[bytes], max_ts: int) -> list[ValuePointer]:
        """Write `payloads` as consecutive records with one write (+ one fdatasync); their pointers.

        `max_ts` is the largest max(start_ts, commit_ts) of the batch.  The batch never spans two
        files: the log rotates after a write that leaves the offset past `file_size`.
        """
        with self._write_lock:
            if self._closed:
                raise StorageClosedError("value log is closed")
            f = self._active
            self._cut_torn_tail(f)
            offset = pos = f.end
            parts: list[bytes] = []
            ptrs: list[ValuePointer] = []
            for p in payloads:
                parts.append(encode_header(p))
                parts.append(p)
                ptrs.append(ValuePointer(f.fid, pos))
                pos += HEADER_SIZE + len(p)
            self._write_at(b"".join(parts), offset, sync=self._sync)
            f.max_ts = max(f.max_ts, max_ts)
            f.end = pos  # published: readers may now read up to here
            if pos > self._file_size:
                self._rotate()
            return ptrs

    def _write_at(self, buf: bytes, offset: int, *, sync: bool) -> None:
        fd = self._wfd
        try:
            began = time.perf_counter()
            n = os.pwrite(fd, buf, offset)
            while n < len(buf):
                n += os.pwrite(fd, memoryview(buf)[n:], offset + n)
            written = time.perf_counter()
            if sync:
                os.fdatasync(fd)
            self.last_write_seconds = written - began
            self.last_sync_seconds = time.perf_counter() - written if sync else 0.0
        except OSError as e:
            self._torn_at = offset  # never leave half a batch behind: cut now, else before the next append
            self._cut_torn_tail(self._active, raising=False)
            if e.errno in NO_SPACE_ERRNOS:
                raise NoSpaceError(f"no available space to write the value log: {e}") from e
            raise StorageError(f"value log write failed fid={self._active.fid} offset={offset}: {e}") from e

    def _cut_torn_tail(self, f: _LogFile, *, raising: bool = True) -> None:
        """Truncate the active file back to where a failed write began, if that is still to do.

        Until it is done nothing more is appended: a shorter batch written over a longer failed one
        would leave some of the failed records after it, to be found again by the scan at the next
        open.  Raises StorageError (or, `raising` False, logs) when the truncation fails again."""
        torn = self._torn_at
        if torn is None:
            return
        try:
            os.ftruncate(self._wfd, torn)
        except OSError as e:
            if raising:
                raise StorageError(f"value log cannot cut a failed write fid={f.fid} offset={torn}: {e}") from e
            log.error("vlog cannot truncate a failed write yet fid=%d offset=%d: %s", f.fid, torn, e)
            return
        self._torn_at = None

    def _drop_created(self, f: _LogFile) -> None:
        """Forget a file `_create` made for a rotation that then failed (a later one creates it again)."""
        with self._lock:
            self._files.pop(f.fid, None)
            f.removed = True
            f.close_fd_locked()
        try:
            f.path.unlink()
        except OSError as e:
            log.error("vlog cannot delete the file of a failed rotation fid=%d: %s", f.fid, e)

    def _finalize(self, f: _LogFile) -> None:
        self._write_at(encode_footer(f.max_ts), f.end, sync=True)
        f.ended = True

    def _rotate(self) -> None:
        old = self._active
        began = time.perf_counter()
        new: _LogFile | None = None
        try:
            self._finalize(old)
            new = self._create(old.fid + 1)
            wfd = os.open(new.path, os.O_WRONLY)
        except (OSError, StorageError, NoSpaceError) as e:
            # The batch is durable already; keep appending to the old file (from its last record on:
            # a footer written before the failure is cut off first) and rotate later.
            if old.ended:
                old.ended = False
                self._torn_at = old.end
                self._cut_torn_tail(old, raising=False)
            if new is not None:
                self._drop_created(new)
            log.error("vlog rotation failed fid=%d offset=%d: %s", old.fid, old.end, e)
            return
        os.close(self._wfd)
        self._wfd = wfd
        self._active = new
        log.info("vlog rotated fid=%d max_ts=%d size=%d new_fid=%d", old.fid, old.max_ts, old.end, new.fid)
        if self._on_rotate is not None:
            self._on_rotate(time.perf_counter() - began)

    # ------------------------------------------------------------------------------------- read

    def _acquire(self, fid: int) -> _LogFile:
        with self._lock:
            if self._closed:
                raise StorageClosedError("value log is closed")
            f = self._files.get(fid)
            if f is None:
                raise StorageError(f"vlog file fid={fid} does not exist (garbage-collected?)")
            f.refs += 1
            return f

    def _release(self, f: _LogFile) -> None:
        with self._lock:
            f.refs -= 1
            f.close_fd_locked()

    def read(self, ptr: ValuePointer) -> bytes:
        """The payload of the record at `ptr`; CorruptRecordError if it does not check out."""
        fid, offset = ptr
        f = self._acquire(fid)
        try:
            end = f.end
            if offset < 0 or offset + HEADER_SIZE > end:
                raise CorruptRecordError(f"vlog pointer beyond the data fid={fid} offset={offset} end={end}")
            head = os.pread(f.fd, min(_READ_AHEAD, end - offset), offset)
            length, crc = parse_header(head, max_payload=self._max_payload)
            total = HEADER_SIZE + length
            if offset + total > end:
                raise CorruptRecordError(f"vlog record runs past the data fid={fid} offset={offset} length={length}")
            payload = head[HEADER_SIZE:total] if total <= len(head) else os.pread(f.fd, length, offset + HEADER_SIZE)
            if len(payload) != length or checksum(payload) != crc:
                raise CorruptRecordError(f"vlog record checksum mismatch fid={fid} offset={offset}")
            return payload
        finally:
            self._release(f)

    def peek(self, ptr: ValuePointer, n: int) -> bytes:
        """The first `n` bytes (fewer if the record is shorter) of the payload at `ptr`, unchecked: the
        checksum covers the whole payload, so only `read` verifies it.  Reads no more than the header
        and those bytes, however large the record."""
        fid, offset = ptr
        f = self._acquire(fid)
        try:
            end = f.end
            if offset < 0 or offset + HEADER_SIZE > end:
                raise CorruptRecordError(f"vlog pointer beyond the data fid={fid} offset={offset} end={end}")
            head = os.pread(f.fd, min(HEADER_SIZE + n, end - offset), offset)
            length, _ = parse_header(head, max_payload=self._max_payload)
            return head[HEADER_SIZE : HEADER_SIZE + min(n, length)]
        finally:
            self._release(f)

    def _events(self, fd: int, start: int, end: int) -> Iterator[list[DecodeEvent]]:
        decoder = RecordDecoder(start, end=end, max_payload=self._max_payload)
        pos = start
        pending = b""
        while True:
            want = min(max(self._chunk, decoder.want - len(pending)), end - pos)
            data = os.pread(fd, want, pos) if want > 0 else b""
            pos += len(data)
            final = pos >= end or not data
            buf = pending + data if pending else data
            events, consumed = decoder.decode(buf, final)
            if events:
                yield events
            if final:
                return
            pending = buf[consumed:]

    def scan(self, start: ValuePointer) -> Iterator[tuple[ValuePointer, bytes]]:
        """(pointer, payload) of every good record from `start` on, in log order, read in chunks.

        Each file is read up to its end as published when the scan reaches it; the scan stops
        after the file that was being appended to at that moment (call again to see later
        records).  A start in a garbage-collected file begins at the next file that exists.
        """
        fid, offset = start
        first = True
        while True:
            with self._lock:
                if self._closed:
                    raise StorageClosedError("value log is closed")
                later = [k for k in self._files if k >= fid]
                if not later:
                    return
                nfid = min(later)
                f = self._files[nfid]
                f.refs += 1
                end = f.end
                active = f is self._active
            try:
                begin = offset if first and nfid == fid else 0
                if begin < end:
                    for events in self._events(f.fd, begin, end):
                        for ev in events:
                            if isinstance(ev, Record):
                                yield ValuePointer(nfid, ev.offset), ev.payload
                            else:
                                _log_scan_damage(nfid, ev)
            finally:
                self._release(f)
            if active:
                return
            first = False
            fid = nfid + 1

    # ------------------------------------------------------------------------------- inspection

    def end_pointer(self) -> ValuePointer:
        """Where the next record will be written."""
        f = self._active
        return ValuePointer(f.fid, f.end)

    def fids(self) -> list[int]:
        with self._lock:
            return sorted(self._files)

    def file_max_ts(self, fid: int) -> int:
        with self._lock:
            return self._files[fid].max_ts

    def is_ended(self, fid: int) -> bool:
        with self._lock:
            return self._files[fid].ended

    # ------------------------------------------------------------------------------- gc / close

    def gc(self, ts: int) -> list[int]:
        """Delete every file but the current one whose maxTS <= ts; the fids deleted."""
        removed: list[_LogFile] = []
        with self._lock:
            for fid in sorted(self._files):
                f = self._files[fid]
                if f is not self._active and f.max_ts <= ts:
                    del self._files[fid]
                    f.removed = True
                    f.close_fd_locked()  # else the last reader to release it closes it
                    removed.append(f)
        for f in removed:
            try:
                f.path.unlink()
            except OSError as e:
                log.error("vlog gc cannot delete fid=%d path=%s: %s", f.fid, f.path, e)
            log.info("vlog gc deleted fid=%d max_ts=%d gc_ts=%d", f.fid, f.max_ts, ts)
        return [f.fid for f in removed]

    def close(self) -> None:
        """Finalize the current file if it holds >= 50 KiB (spares a rescan at open); idempotent."""
        with self._write_lock:
            if self._closed:
                return
            f = self._active
            try:
                self._cut_torn_tail(f)  # a footer must follow the last record, not a failed write
                if f.end >= FINALIZE_SIZE_AT_CLOSE:
                    self._finalize(f)
                    log.info("vlog finalized at close fid=%d size=%d max_ts=%d", f.fid, f.end, f.max_ts)
            except (StorageError, NoSpaceError) as e:
                log.error("vlog cannot finalize at close fid=%d: %s", f.fid, e)
            os.close(self._wfd)
            with self._lock:
                self._closed = True
                for lf in self._files.values():
                    lf.removed = True
                    lf.close_fd_locked()
            log.info("vlog closed dir=%s", self._dir)


def _log_scan_damage(fid: int, ev: Corruption | TornTail) -> None:
    reason = ev.reason if isinstance(ev, Corruption) else "torn record"
    log.warning("vlog damaged data skipped fid=%d offset=%d length=%d reason=%s", fid, ev.offset, ev.length, reason)
