"""The contract between the pump's storage and the rest of the pump.

The server (gRPC, HTTP, node lifecycle) uses storage only through `PumpStorage`;
the storage asks the upstream about unfinished transactions only through
`CommitResolver`.  Both sides are built and tested against these definitions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from common.pb import binlog_pb2

DEFAULT_VALUE_LOG_FILE_SIZE = 500 * 1024 * 1024
DEFAULT_KV_CHAN_CAP = 1 << 20
DEFAULT_SLOW_WRITE_THRESHOLD = 1.0
DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE = 10 * 1024**3
DEFAULT_RESOLVE_INTERVAL = 1.0
DEFAULT_MAX_TXN_TIMEOUT = 600.0
DEFAULT_SLOW_CHASER_THRESHOLD = 3.0
DEFAULT_MAX_BATCH_BYTES = 1 << 20
DEFAULT_WRITE_QUEUE_BYTES = 64 << 20
DEFAULT_KV_WRITE_BUFFER = 64 << 20


@dataclass(frozen=True)
class LevelDBOptions:
    """The index's LevelDB options (plyvel.DB keywords), from `[storage.kv]`: the original's goleveldb keys
    that LevelDB has an equivalent for.  Defaults are the original pump's."""

    write_buffer_size: int = DEFAULT_KV_WRITE_BUFFER
    """`write-buffer`: bytes of the memtable before it is written to a table."""
    lru_cache_size: int = 8 << 20
    """`block-cache-capacity`: the block cache."""
    block_size: int = 4096
    """`block-size`: uncompressed bytes per table block."""
    block_restart_interval: int = 16
    """`block-restart-interval`: keys between restart points of prefix compression."""
    max_file_size: int = 64 << 20
    """`compaction-table-size`: bytes of a table file before compaction starts a new one (goleveldb's
    CompactionTableSize is this LevelDB option; LevelDB's own default is 2 MiB)."""

    def kwargs(self) -> dict[str, int]:
        return {
            "write_buffer_size": self.write_buffer_size,
            "lru_cache_size": self.lru_cache_size,
            "block_size": self.block_size,
            "block_restart_interval": self.block_restart_interval,
            "max_file_size": self.max_file_size,
        }


"""The original pump.toml's `[storage.kv] write-buffer` (goleveldb's own default: 4 MiB)."""


@dataclass(frozen=True)
class StorageOptions:
    """Storage tuning; the pump's `[storage]` config section maps onto it (defaults = original's)."""

    value_log_file_size: int = DEFAULT_VALUE_LOG_FILE_SIZE
    sync_log: bool = True
    kv_chan_cap: int = DEFAULT_KV_CHAN_CAP
    slow_write_threshold: float = DEFAULT_SLOW_WRITE_THRESHOLD
    stop_write_at_available_space: int = DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE
    resolve_interval: float = DEFAULT_RESOLVE_INTERVAL
    max_txn_timeout: float = DEFAULT_MAX_TXN_TIMEOUT
    slow_chaser_threshold: float = DEFAULT_SLOW_CHASER_THRESHOLD
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    """Group commit: a write batch grows to this many bytes at most (original: 1 MiB)."""
    write_queue_bytes: int = DEFAULT_WRITE_QUEUE_BYTES
    """Bytes of binlogs waiting for the vlog writer before write_binlog blocks (memory bound)."""
    kv: LevelDBOptions = LevelDBOptions()
    """The index's LevelDB options (`[storage.kv]`)."""


@dataclass(frozen=True)
class PulledBinlog:
    """One binlog as PullBinlogs streams it.

    `payload` is a marshaled `binlog.Binlog`: a Commit with start_ts, prewrite_value,
    ddl_query, ddl_job_id and ddl_schema_state copied from its prewrite, or a fake
    binlog (tp=Rollback, start_ts == commit_ts) as stored.
    """

    start_ts: int
    commit_ts: int
    payload: bytes


class Verdict(Enum):
    COMMITTED = "committed"  # write the commit binlog with `commit_ts`
    ROLLED_BACK = "rolled_back"  # drop the prewrite
    WAIT = "wait"  # ask again later


@dataclass(frozen=True)
class Resolution:
    verdict: Verdict
    commit_ts: int = 0
    reason: str = ""


class CommitResolver(Protocol):
    """Decides the fate of a prewrite whose commit binlog has not arrived.

    Called by the storage after `resolve-interval` of waiting, then again on later
    wake-ups until it returns something other than WAIT.  Must not block for long
    (bounded by its own timeouts); errors are its own business (return WAIT).
    """

    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StorageStatus:
    max_commit_ts: int
    gc_ts: int
    head_fid: int
    head_offset: int
    capacity_bytes: int
    available_bytes: int
    pending_prewrites: int
    chaser_on: bool
    write_count: int
    write_queue_bytes: int = 0
    """Bytes of binlogs waiting for the value-log writer (0 for a storage without such a queue)."""


class PumpStorage(Protocol):
    """What the pump server needs from its storage. Every method is thread-safe."""

    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        """Store one binlog durably; return only once it is on disk (when sync-log is on).

        `payload` is `binlog` marshaled.  A binlog with start_ts == commit_ts == 0 is a
        probe: nothing is stored.  Raises NoSpaceError when free space is below the
        threshold (fake binlogs are still accepted), StorageClosedError after close().
        """
        ...

    def pull_commit_binlogs(self, last_ts: int, stop: threading.Event) -> Iterator[PulledBinlog]:
        """Commit and fake binlogs with commit_ts > last_ts in ascending order, forever.

        Follows new writes; only stops when `stop` is set or the storage closes.  A
        commit whose prewrite is missing is skipped (logged).  A `last_ts` below the
        gc ts starts at the gc ts (logged as a possible loss).
        """
        ...

    def max_commit_ts(self) -> int:
        """The watermark: no binlog with commit_ts <= this can still appear."""
        ...

    def gc_ts(self) -> int: ...

    def gc(self, ts: int) -> None:
        """Forget binlogs at or below `ts` (keeping 10 extra minutes); ignored if unsafe."""
        ...

    def all_matched(self) -> bool:
        """True when no prewrite is waiting for its commit."""
        ...

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None:
        """The binlog indexed at `ts` (start_ts of a prewrite, commit_ts otherwise)."""
        ...

    def status(self) -> StorageStatus: ...

    def close(self) -> None:
        """Stop intake, flush, finalize the vlog, persist pointers. Idempotent."""
        ...


class StorageObserver(Protocol):
    """Hooks through which the storage reports what the original's metrics measure (docs/architecture.md#metrics).

    The pump's metrics module implements it; every method must be cheap and must not raise.
    """

    def write_batch(self, binlogs: int, size_bytes: int, write_seconds: float, fsync_seconds: float) -> None:
        """One group-commit batch: binlogs in it, bytes, time of the write call and of fdatasync."""
        ...

    def rotate(self, seconds: float) -> None: ...

    def error(self, kind: str) -> None:
        """kind: write_binlog | write_binlog_batch | batch_write_kv | read_value | feed_pre_write_value."""
        ...

    def chaser(self, event: str, catch_up_seconds: float | None = None) -> None:
        """event: turned_on | turned_off | catch_up | recovery."""
        ...

    def resolver_query(self) -> None: ...

    def gc_done(self, done_gc_ts: int, deleted_kv: int) -> None: ...

    def decision_ignored(self, kind: str) -> None:
        """kind: commit | rollback, for a transaction already decided (see `decisions.py`)."""
        ...


class NullObserver:
    """A StorageObserver that records nothing (the default)."""

    def write_batch(self, binlogs: int, size_bytes: int, write_seconds: float, fsync_seconds: float) -> None:
        pass

    def rotate(self, seconds: float) -> None:
        pass

    def error(self, kind: str) -> None:
        pass

    def chaser(self, event: str, catch_up_seconds: float | None = None) -> None:
        pass

    def resolver_query(self) -> None:
        pass

    def gc_done(self, done_gc_ts: int, deleted_kv: int) -> None:
        pass

    def decision_ignored(self, kind: str) -> None:
        pass
