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
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final, NamedTuple

import plyvel

from common.errors import StorageError
from common.vlog_record import POINTER_SIZE, ValuePointer, decode_pointer

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
DEFAULT_WRITE_BUFFER: Final = 64 << 20  # original pump.toml tuning (goleveldb default: 4 MiB)

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


class Index:
    def __init__(self, directory: Path, *, write_buffer_size: int = DEFAULT_WRITE_BUFFER) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        try:
            self._db: Any = plyvel.DB(str(directory), create_if_missing=True, write_buffer_size=write_buffer_size)
        except plyvel.Error as e:
            raise StorageError(f"cannot open the index at {directory}: {e}") from e
        self._dir = directory
        log.info("index opened dir=%s", directory)

    # ------------------------------------------------------------------------------------ meta

    def get_int(self, key: bytes) -> int | None:
        raw = self._db.get(key)
        return None if raw is None else int(_I64.unpack(raw)[0])

    def get_pointer(self, key: bytes) -> ValuePointer | None:
        raw = self._db.get(key)
        return None if raw is None else decode_pointer(raw)

    def put_int(self, key: bytes, value: int) -> None:
        self._db.put(key, _I64.pack(value))

    # ----------------------------------------------------------------------------- ts entries

    def get(self, ts: int) -> ValuePointer | None:
        raw = self._db.get(ts_key(ts))
        return None if raw is None else decode_pointer(raw)

    def get_late(self, ts: int) -> ValuePointer | None:
        raw = self._db.get(late_key(ts))
        return None if raw is None else decode_pointer(raw)

    def get_decision(self, start_ts: int) -> Decision | None:
        raw = self._db.get(done_key(start_ts))
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
        with self._db.write_batch() as wb:
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

    def delete(self, keys: Iterable[bytes]) -> None:
        """Delete `keys` in one atomic batch."""
        self.write((), deletes=keys)

    def range(self, after: int, upto: int, limit: int) -> list[tuple[int, ValuePointer]]:
        """Up to `limit` `ts:` entries with after < ts <= upto, ascending."""
        if upto <= after:
            return []
        out: list[tuple[int, ValuePointer]] = []
        with self._db.iterator(start=ts_key(after + 1), stop=ts_key(upto), include_stop=True) as it:
            for key, raw in it:
                out.append((int.from_bytes(key[3:], "big"), decode_pointer(raw)))
                if len(out) >= limit:
                    break
        return out

    def iter_prefix(self, prefix: bytes) -> Iterator[tuple[int, ValuePointer]]:
        """Every (ts, pointer) under `ts:` or `late:`, ascending (for check())."""
        with self._db.iterator(prefix=prefix) as it:
            for key, raw in it:
                yield int.from_bytes(key[len(prefix) :], "big"), decode_pointer(raw)

    def iter_decisions(self) -> Iterator[tuple[int, Decision]]:
        """Every (start_ts, decision) under `done:`, ascending."""
        with self._db.iterator(prefix=DONE_PREFIX) as it:
            for key, raw in it:
                yield int.from_bytes(key[len(DONE_PREFIX) :], "big"), decode_decision(raw)

    def iter_ts_descending(self, upto: int) -> Iterator[tuple[int, ValuePointer]]:
        """`ts:` entries with ts <= `upto`, newest first."""
        with self._db.iterator(
            start=TS_PREFIX, stop=ts_key(min(upto, _TS_END - 1)), include_stop=True, reverse=True
        ) as it:
            for key, raw in it:
                yield int.from_bytes(key[len(TS_PREFIX) :], "big"), decode_pointer(raw)

    def has_prefix(self, prefix: bytes) -> bool:
        with self._db.iterator(prefix=prefix, include_value=False) as it:
            return next(it, None) is not None

    def count_prefix(self, prefix: bytes) -> int:
        with self._db.iterator(prefix=prefix, include_value=False) as it:
            return sum(1 for _ in it)

    def long_txns_above(self, ts: int) -> list[tuple[int, int]]:
        """(commit_ts, start_ts) of the `long:` entries with commit_ts > ts."""
        if ts >= _TS_END - 1:
            return []
        with self._db.iterator(start=long_key(ts + 1), stop=LONG_PREFIX[:-1] + b";") as it:
            return [(int.from_bytes(k[len(LONG_PREFIX) :], "big"), int(_I64.unpack(v)[0])) for k, v in it]

    def has(self, key: bytes) -> bool:
        return self._db.get(key) is not None

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
            with self._db.iterator(
                start=prefix + bytes(8),
                stop=prefix + stop_ts.to_bytes(8, "big"),
                include_stop=True,
                include_value=False,
            ) as it:
                keys = [k for _, k in zip(range(batch), it, strict=False)]
            if keys:
                with self._db.write_batch() as wb:
                    for k in keys:
                        wb.delete(k)
                return len(keys)
        return 0

    def close(self) -> None:
        if not self._db.closed:
            self._db.close()
            log.info("index closed dir=%s", self._dir)
