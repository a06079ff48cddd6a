"""An in-memory `PumpStorage` for unit and functional tests of the pump server (a fake of our interface).

It keeps the contract's observable semantics without any disk:

* probes (start_ts == commit_ts == 0) are accepted and not stored;
* `no_space = True` makes every write except fake binlogs raise NoSpaceError;
* prewrites are indexed by start_ts, commits and fake binlogs by commit_ts;
* the watermark `max_commit_ts` follows the original sorter: items are taken in arrival order and a
  prewrite at the head holds back everything after it until its commit (or rollback) arrives;
* pulls stream commits (prewrite fields merged in) and fake binlogs above `last_ts` and at or below the
  watermark, in commit_ts order, and follow new writes until `stop` is set or the storage closes.

Test hooks: `no_space`, `write_delay` (seconds each write sleeps), `gc_calls`, `writes`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from common.errors import NoSpaceError, StorageClosedError
from common.pb import binlog_pb2, gogo
from pump.storage.api import PulledBinlog, Resolution, StorageStatus, Verdict

log = logging.getLogger(__name__)

_POLL = 0.05


@dataclass(frozen=True)
class _Item:
    tp: int
    start_ts: int
    commit_ts: int


def is_fake(binlog: binlog_pb2.Binlog) -> bool:
    return binlog.tp == binlog_pb2.Rollback and binlog.start_ts == binlog.commit_ts != 0


class MemoryStorage:
    """Thread-safe in-memory PumpStorage (tests only)."""

    def __init__(self, capacity_bytes: int = 100 << 30, available_bytes: int = 50 << 30) -> None:
        self._cond = threading.Condition()
        self._prewrites: dict[int, binlog_pb2.Binlog] = {}
        self._commits: dict[int, binlog_pb2.Binlog] = {}
        self._finished: set[int] = set()  # start_ts of prewrites whose commit/rollback arrived
        self._arrivals: deque[_Item] = deque()
        self._max_commit_ts = 0
        self._gc_ts = 0
        self._closed = False
        self.no_space = False
        self.write_delay = 0.0
        self.capacity_bytes = capacity_bytes
        self.available_bytes = available_bytes
        self.writes = 0
        self.gc_calls: list[int] = []

    # ------------------------------------------------------------------------------------ writes
    def write_binlog(self, binlog: binlog_pb2.Binlog, payload: bytes) -> None:
        if binlog.start_ts == 0 and binlog.commit_ts == 0:
            return
        if self.write_delay:
            time.sleep(self.write_delay)
        with self._cond:
            if self._closed:
                raise StorageClosedError("storage is closed")
            if self.no_space and not is_fake(binlog):
                raise NoSpaceError("no available space")
            stored = binlog_pb2.Binlog.FromString(payload)
            if binlog.tp == binlog_pb2.Prewrite:
                self._prewrites[binlog.start_ts] = stored
            else:
                self._commits[binlog.commit_ts] = stored
                self._finished.add(binlog.start_ts)
            self._arrivals.append(_Item(binlog.tp, binlog.start_ts, binlog.commit_ts))
            self.writes += 1
            self._advance()
            self._cond.notify_all()

    def _advance(self) -> None:
        while self._arrivals:
            head = self._arrivals[0]
            if head.tp == binlog_pb2.Prewrite:
                if head.start_ts not in self._finished:
                    return
            elif head.commit_ts > self._max_commit_ts:
                self._max_commit_ts = head.commit_ts
            self._arrivals.popleft()

    # ------------------------------------------------------------------------------------- reads
    def pull_commit_binlogs(self, last_ts: int, stop: threading.Event) -> Iterator[PulledBinlog]:
        last = max(last_ts, self.gc_ts())
        while not stop.is_set():
            with self._cond:
                if self._closed:
                    return
                ready = sorted(ts for ts in self._commits if last < ts <= self._max_commit_ts)
                batch = [self._pulled(self._commits[ts]) for ts in ready]
                if not ready:
                    self._cond.wait(_POLL)
            for item in batch:
                if item is not None:
                    yield item
                if stop.is_set():
                    return
            if ready:
                last = ready[-1]

    def _pulled(self, commit: binlog_pb2.Binlog) -> PulledBinlog | None:
        if is_fake(commit):
            return PulledBinlog(commit.start_ts, commit.commit_ts, gogo.marshal_binlog(commit))
        prewrite = self._prewrites.get(commit.start_ts)
        if prewrite is None:
            log.error("prewrite of commit_ts=%d start_ts=%d is missing; skipped", commit.commit_ts, commit.start_ts)
            return None
        merged = binlog_pb2.Binlog()
        merged.CopyFrom(commit)
        merged.start_ts = prewrite.start_ts
        for name in ("prewrite_value", "ddl_query"):
            if prewrite.HasField(name):
                setattr(merged, name, getattr(prewrite, name))
        merged.ddl_job_id = prewrite.ddl_job_id
        merged.ddl_schema_state = prewrite.ddl_schema_state
        return PulledBinlog(merged.start_ts, merged.commit_ts, gogo.marshal_binlog(merged))

    def max_commit_ts(self) -> int:
        with self._cond:
            return self._max_commit_ts

    def gc_ts(self) -> int:
        with self._cond:
            return self._gc_ts

    def gc(self, ts: int) -> None:
        with self._cond:
            self.gc_calls.append(ts)
            if ts <= self._gc_ts or self._max_commit_ts <= ts:
                return
            self._gc_ts = ts
            for cts in [c for c in self._commits if c <= ts]:
                del self._commits[cts]

    def all_matched(self) -> bool:
        with self._cond:
            return all(start in self._finished for start in self._prewrites)

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None:
        with self._cond:
            found = self._commits.get(ts) or self._prewrites.get(ts)
            if found is None:
                return None
            copy = binlog_pb2.Binlog()
            copy.CopyFrom(found)
            return copy

    def status(self) -> StorageStatus:
        with self._cond:
            return StorageStatus(
                max_commit_ts=self._max_commit_ts,
                gc_ts=self._gc_ts,
                head_fid=0,
                head_offset=0,
                capacity_bytes=self.capacity_bytes,
                available_bytes=self.available_bytes,
                pending_prewrites=sum(1 for s in self._prewrites if s not in self._finished),
                chaser_on=False,
                write_count=self.writes,
            )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed


class WaitingResolver:
    """A CommitResolver that never decides (tests that use MemoryStorage need no resolver)."""

    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
        return Resolution(Verdict.WAIT, reason="test resolver")

    def close(self) -> None:
        return None
