"""What the storage pipeline knows about one stored binlog, without its payload.

An `Entry` travels from the vlog writer (or the slow chaser, or start-up replay) to the index
writer and the sorter: type, start/commit ts, where the record starts and where the next one does.
"""

from __future__ import annotations

from typing import NamedTuple

from google.protobuf.message import DecodeError

from common.errors import CodecError
from common.pb import binlog_pb2
from common.vlog_record import ValuePointer

__all__ = [
    "COMMIT",
    "PREWRITE",
    "ROLLBACK",
    "Entry",
    "index_ts",
    "is_fake",
    "is_probe",
    "max_ts",
    "parse_binlog",
    "prewrite_key_of",
]

PREWRITE = binlog_pb2.Prewrite
COMMIT = binlog_pb2.Commit
ROLLBACK = binlog_pb2.Rollback


class Entry(NamedTuple):
    tp: int
    start_ts: int
    commit_ts: int
    ptr: ValuePointer
    next_ptr: ValuePointer
    prewrite_key: bytes | None = None
    """A prewrite's prewrite_key (None otherwise): the resolver needs only this and start_ts."""

    @property
    def index_ts(self) -> int:
        return index_ts(self.tp, self.start_ts, self.commit_ts)


def index_ts(tp: int, start_ts: int, commit_ts: int) -> int:
    """The index key ts of a binlog: start_ts for a Prewrite, commit_ts for every other type."""
    return start_ts if tp == PREWRITE else commit_ts


def max_ts(start_ts: int, commit_ts: int) -> int:
    """The ts a record contributes to its file's maxTS (used by GC)."""
    return start_ts if start_ts > commit_ts else commit_ts


def is_fake(tp: int, start_ts: int, commit_ts: int) -> bool:
    """A fake binlog (pump heartbeat): tp=Rollback with start_ts == commit_ts > 0."""
    return tp == ROLLBACK and start_ts == commit_ts and commit_ts > 0


def is_probe(start_ts: int, commit_ts: int) -> bool:
    """The client's liveness probe (start_ts == commit_ts == 0): never stored."""
    return start_ts == 0 and commit_ts == 0


def parse_binlog(payload: bytes) -> binlog_pb2.Binlog:
    """Parse a stored payload; CodecError when it is not a binlog.Binlog."""
    try:
        return binlog_pb2.Binlog.FromString(payload)
    except DecodeError as e:
        raise CodecError(f"stored payload is not a binlog: {e}") from e


def prewrite_key_of(b: binlog_pb2.Binlog) -> bytes | None:
    """What an `Entry` keeps of a binlog for the resolver: a prewrite's prewrite_key, if set."""
    return b.prewrite_key if b.tp == PREWRITE and b.HasField("prewrite_key") else None
