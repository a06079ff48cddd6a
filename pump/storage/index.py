"""The LevelDB index in `<data-dir>/kv/` (plyvel).

Keys (upstream `pump/storage/util.go`, `storage.go`):

    b"ts:"   + ts u64 big-endian  -> value pointer (12 bytes, see vlog_record)
              ts = start_ts for a Prewrite, commit_ts for every other type; big-endian keys make
              iteration follow ts order.
    b"late:" + ts u64 big-endian  -> value pointer of a commit the sorter ignored because its
              commit_ts was at or below the watermark when it arrived (ours: kept out of the
              `ts:` range so it never becomes visible, but still accounted for by `check()`).
    b"long:" + commit_ts u64 big-endian -> start_ts i64 little-endian: a commit whose prewrite is
              more than GC's 10-minute margin older (ours); GC keeps every key from the smallest
              such start_ts on while the commit is above the gc ts.
    b"done:" + start_ts u64 big-endian -> value pointer ‖ commit_ts i64 little-endian (20 bytes): the
              commit or rollback that decided the transaction (ours, see `decisions.py`); written in
              the batch that indexes that record, purged by GC with the start_ts.
    b"!binlog!decisions"     -> i64 little-endian 1: the index keeps `done:` keys (set at creation, or
              once an older index has been brought up to date at open)
    b"!binlog!gcts"          -> i64 little-endian
    b"!binlog!maxCommitTS"   -> i64 little-endian
    b"!binlog!handlePointer" -> value pointer: where the sorter resumes at start-up
    b"!binlog!headPointer"   -> value pointer: the first vlog position not indexed yet

Reopening.  LevelDB keeps a failed background write (a memtable flush or compaction that met
ENOSPC) as a sticky error: every later write fails with it, even once space is back, until the
database is opened again.  `recover_after(error)` closes and reopens it when the error is an I/O
error and the file system has room for the reopen (the log is turned into a table); readers wait
for the swap (each call holds the database for its duration), and while a reopen has failed
every call raises StorageError until the next one succeeds.  A scan (`iter_prefix` and the like)
holds the database until it is exhausted or closed: a caller must not start a reopen, nor wait for one,
while it holds a scan (the reopen then gives up after REOPEN_WAIT and is tried again later).
"""

from __future__ import annotations

import logging
import shutil
import struct
import threading
import time
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any, Final, NamedTuple

import plyvel

from common.errors import StorageError
from common.vlog_record import POINTER_SIZE, ValuePointer, decode_pointer
from pump.storage.api import LevelDBOptions

__all__ = [
    "DECISIONS_KEY",
    "GC_BATCH",
    "HANDLE_POINTER_KEY",
    "HEAD_POINTER_KEY",
    "Decision",
    "Index",
    "done_key",
    "late_key",
    "long_key",
    "ts_key",
]

log = logging.getLogger(__name__)

TS_PREFIX: Final = b"ts:"
LATE_PREFIX: Final = b"late:"
LONG_PREFIX: Final = b"long:"
DONE_PREFIX: Final = b"done:"
DECISIONS_KEY: Final = b"!binlog!decisions"
GC_TS_KEY: Final = b"!binlog!gcts"
MAX_COMMIT_TS_KEY: Final = b"!binlog!maxCommitTS"
HANDLE_POINTER_KEY: Final = b"!binlog!handlePointer"
HEAD_POINTER_KEY: Final = b"!binlog!headPointer"
GC_BATCH: Final = 1024  # keys per delete batch (original)

_I64 = struct.Struct("<q")
_TS_END = 1 << 64


def ts_key(ts: int) -> bytes:
    return TS_PREFIX + ts.to_bytes(8, "big")


def late_key(ts: int) -> bytes:
    return LATE_PREFIX + ts.to_bytes(8, "big")


def long_key(commit_ts: int) -> bytes:
    return LONG_PREFIX + commit_ts.to_bytes(8, "big")


def done_key(start_ts: int) -> bytes:
    return DONE_PREFIX + start_ts.to_bytes(8, "big")


class Decision(NamedTuple):
    """The commit (commit_ts > 0) or rollback (commit_ts 0) that decided a transaction, and where it is."""

    commit_ts: int
    ptr: ValuePointer

    def encode(self) -> bytes:
        return self.ptr.encode() + _I64.pack(self.commit_ts)


def decode_decision(raw: bytes) -> Decision:
    return Decision(int(_I64.unpack(raw[POINTER_SIZE:])[0]), decode_pointer(raw[:POINTER_SIZE]))


REOPEN_SPARE: Final = 1 << 20
"""Free bytes a reopen needs beyond twice the size of the LevelDB logs it turns into tables."""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # LevelDB removed it meanwhile
        return 0


REOPEN_WAIT: Final = 10.0
"""Seconds a reopen waits for the calls in progress to finish."""


class Index:
    def __init__(self, directory: Path, *, options: LevelDBOptions | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._dir = directory
        self._options = (options or LevelDBOptions()).kwargs()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)  # the fast paths take `_lock` alone
        self._users = 0
        self._reopening = False
        self._closed = False
        self._db: Any = self._open()
        self.reopens = 0
        log.info("index opened dir=%s", directory)

    def _open(self) -> Any:
        try:
            return plyvel.DB(str(self._dir), create_if_missing=True, **self._options)
        except plyvel.Error as e:
            raise StorageError(f"cannot open the index at {self._dir}: {e}") from e

    def _enter(self) -> Any:
        """The database, held until `_leave()` (a reopen waits for it); StorageError while it is not open."""
        with self._lock:
            while self._reopening:
                self._cond.wait()
            db = self._db
            if db is None:
                raise StorageError(f"the index at {self._dir} is not open (its reopen failed; retried)")
            self._users += 1
            return db

    def _leave(self) -> None:
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._reopening:
                self._cond.notify_all()

    def recover_after(self, error: BaseException) -> bool:
        """Reopen the database after a failed write, when that may help: the error was LevelDB's I/O error
        (or the index is not open) and there is room to reopen.  True when it was reopened."""
        if not isinstance(error, (plyvel.IOError, StorageError)) or self._closed:
            return False
        try:
            need = REOPEN_SPARE + 2 * sum(_size(f) for f in self._dir.glob("*.log"))
            free = shutil.disk_usage(self._dir).free
        except OSError as e:
            log.warning("index not reopened: cannot measure %s: %s", self._dir, e)
            return False
        if free < need:
            log.warning("index not reopened yet: %d bytes free at %s, %d needed", free, self._dir, need)
            return False
        with self._cond:
            if self._reopening or self._closed:
                return False
            self._reopening = True
            deadline = time.monotonic() + REOPEN_WAIT
            while self._users:
                left = deadline - time.monotonic()
                if left <= 0:
                    self._reopening = False
                    self._cond.notify_all()
                    log.warning("index not reopened: calls still in progress after %.0fs", REOPEN_WAIT)
                    return False
                self._cond.wait(left)
        try:
            old, self._db = self._db, None
            if old is not None and not old.closed:
                old.close()
            self._db = self._open()  # close() waits for this (it sees _reopening)
            self.reopens += 1
            log.warning("index reopened at %s after: %s", self._dir, error)
            return True
        except StorageError as e:
            log.error("index reopen failed (retried with the next write): %s", e)
            return False
        finally:
            with self._cond:
                self._reopening = False
                self._cond.notify_all()

    # ------------------------------------------------------------------------------------ meta

    def _get(self, key: bytes) -> bytes | None:
        db = self._enter()
        try:
            raw: bytes | None = db.get(key)
            return raw
        finally:
            self._leave()

    def get_int(self, key: bytes) -> int | None:
        raw = self._get(key)
        return None if raw is None else int(_I64.unpack(raw)[0])

    def get_pointer(self, key: bytes) -> ValuePointer | None:
        raw = self._get(key)
        return None if raw is None else decode_pointer(raw)

    def put_int(self, key: bytes, value: int) -> None:
        db = self._enter()
        try:
            db.put(key, _I64.pack(value))
        finally:
            self._leave()

    # ----------------------------------------------------------------------------- ts entries

    def get(self, ts: int) -> ValuePointer | None:
        raw = self._get(ts_key(ts))
        return None if raw is None else decode_pointer(raw)

    def get_late(self, ts: int) -> ValuePointer | None:
        raw = self._get(late_key(ts))
        return None if raw is None else decode_pointer(raw)

    def get_decision(self, start_ts: int) -> Decision | None:
        raw = self._get(done_key(start_ts))
        return None if raw is None else decode_decision(raw)

    def write(
        self,
        entries: Iterable[tuple[bytes, ValuePointer]],
        *,
        ints: Iterable[tuple[bytes, int]] = (),
        pointers: Iterable[tuple[bytes, ValuePointer]] = (),
        decisions: Iterable[tuple[int, Decision]] = (),
        deletes: Iterable[bytes] = (),
    ) -> None:
        """One atomic batch: `deletes` first, then `(key, pointer)` entries, meta integers and
        pointers, and `(start_ts, decision)` pairs."""
        db = self._enter()
        try:
            with db.write_batch() as wb:
                put = wb.put
                for key in deletes:
                    wb.delete(key)
                for key, ptr in entries:
                    put(key, ptr.encode())
                for key, value in ints:
                    put(key, _I64.pack(value))
                for key, ptr in pointers:
                    put(key, ptr.encode())
                for start_ts, d in decisions:
                    put(done_key(start_ts), d.encode())
        finally:
            self._leave()

    def delete(self, keys: Iterable[bytes]) -> None:
        """Delete `keys` in one atomic batch."""
        self.write((), deletes=keys)

    def range(self, after: int, upto: int, limit: int) -> list[tuple[int, ValuePointer]]:
        """Up to `limit` `ts:` entries with after < ts <= upto, ascending."""
        if upto <= after:
            return []
        out: list[tuple[int, ValuePointer]] = []
        db = self._enter()
        try:
            with db.iterator(start=ts_key(after + 1), stop=ts_key(upto), include_stop=True) as it:
                for key, raw in it:
                    out.append((int.from_bytes(key[3:], "big"), decode_pointer(raw)))
                    if len(out) >= limit:
                        break
        finally:
            self._leave()
        return out

    def _scan(self, strip: bytes, **kw: Any) -> Iterator[tuple[bytes, bytes]]:
        """(key without the prefix `strip`, value) pairs of one iterator, holding the database until it is
        exhausted or closed."""
        db = self._enter()
        try:
            with db.iterator(**kw) as it:
                for key, raw in it:
                    yield key[len(strip) :], raw
        finally:
            self._leave()

    def iter_prefix(self, prefix: bytes) -> Generator[tuple[int, ValuePointer], None, None]:
        """Every (ts, pointer) under `ts:` or `late:`, ascending (for check()); holds the database (a
        reopen waits) until it is exhausted or closed."""
        for key, raw in self._scan(prefix, prefix=prefix):
            yield int.from_bytes(key, "big"), decode_pointer(raw)

    def iter_decisions(self) -> Iterator[tuple[int, Decision]]:
        """Every (start_ts, decision) under `done:`, ascending."""
        for key, raw in self._scan(DONE_PREFIX, prefix=DONE_PREFIX):
            yield int.from_bytes(key, "big"), decode_decision(raw)

    def iter_ts_descending(self, upto: int) -> Iterator[tuple[int, ValuePointer]]:
        """`ts:` entries with ts <= `upto`, newest first."""
        stop = ts_key(min(upto, _TS_END - 1))
        for key, raw in self._scan(TS_PREFIX, start=TS_PREFIX, stop=stop, include_stop=True, reverse=True):
            yield int.from_bytes(key, "big"), decode_pointer(raw)

    def _keys(self, limit: int | None = None, **kw: Any) -> list[bytes]:
        db = self._enter()
        try:
            with db.iterator(include_value=False, **kw) as it:
                return [k for _, k in zip(range(limit), it, strict=False)] if limit is not None else list(it)
        finally:
            self._leave()

    def has_prefix(self, prefix: bytes) -> bool:
        return bool(self._keys(1, prefix=prefix))

    def count_prefix(self, prefix: bytes) -> int:
        db = self._enter()
        try:
            with db.iterator(prefix=prefix, include_value=False) as it:
                return sum(1 for _ in it)
        finally:
            self._leave()

    def long_txns_above(self, ts: int) -> list[tuple[int, int]]:
        """(commit_ts, start_ts) of the `long:` entries with commit_ts > ts."""
        if ts >= _TS_END - 1:
            return []
        stop = LONG_PREFIX[:-1] + b";"
        return [
            (int.from_bytes(k, "big"), int(_I64.unpack(v)[0]))
            for k, v in self._scan(LONG_PREFIX, start=long_key(ts + 1), stop=stop)
        ]

    def has(self, key: bytes) -> bool:
        return self._get(key) is not None

    def delete_upto(self, ts: int, *, batch: int = GC_BATCH) -> int:
        """Delete the `ts:`, `late:`, `long:` and `done:` entries with ts <= `ts` in batches; how many were deleted."""
        deleted = 0
        while n := self.delete_batch_upto(ts, batch=batch):
            deleted += n
        return deleted

    def delete_batch_upto(self, ts: int, *, batch: int = GC_BATCH) -> int:
        """One batch of `delete_upto` (at most `batch` keys); 0 when nothing is left to delete."""
        stop_ts = min(ts, _TS_END - 1)
        for prefix in (TS_PREFIX, LATE_PREFIX, LONG_PREFIX, DONE_PREFIX):
            keys = self._keys(
                batch, start=prefix + bytes(8), stop=prefix + stop_ts.to_bytes(8, "big"), include_stop=True
            )
            if keys:
                self.write((), deletes=keys)
                return len(keys)
        return 0

    def close(self) -> None:
        """Close the database (after a reopen in progress, which it waits for).  Idempotent."""
        with self._cond:
            self._closed = True
            while self._reopening:
                self._cond.wait()
            db, self._db = self._db, None
        if db is not None and not db.closed:
            db.close()
            log.info("index closed dir=%s", self._dir)
