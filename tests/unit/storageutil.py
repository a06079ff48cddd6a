"""Shared helpers of the pump storage tests (binlog builders, TSO source, fake resolver, pull helper)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from common import tso
from common.pb import binlog_pb2, gogo
from pump.storage.api import PulledBinlog, Resolution, StorageOptions, Verdict
from pump.storage.chaser import ChaserTimings
from pump.storage.storage import Storage

FAST_CHASER = ChaserTimings(interval=0.02, quick_pass=1.0, recovery_timeout=0.5, recover_gap=0.05)


def options(**kw: object) -> StorageOptions:
    base: dict[str, object] = {
        "stop_write_at_available_space": 0,
        "value_log_file_size": 64 * 1024,
        "resolve_interval": 0.05,
        "slow_chaser_threshold": 0.2,
    }
    base.update(kw)
    return StorageOptions(**base)  # type: ignore[arg-type]


def open_storage(path: Path, **kw: object) -> Storage:
    return Storage(path, options(**kw), chaser_timings=FAST_CHASER)


class Tso:
    """Strictly increasing TSO values starting at a realistic physical time."""

    def __init__(self, physical_ms: int = 1_700_000_000_000) -> None:
        self._ts = tso.compose(physical_ms, 0)

    def next(self) -> int:
        self._ts += 1
        return self._ts

    def jump_ms(self, ms: int) -> None:
        self._ts += ms << tso.LOGICAL_BITS


Built = tuple[binlog_pb2.Binlog, bytes]


def _built(payload: bytes) -> Built:
    return binlog_pb2.Binlog.FromString(payload), payload


def prewrite(start_ts: int, value: bytes = b"", *, ddl_query: bytes | None = None, ddl_job_id: int = 0) -> Built:
    return _built(
        gogo.encode_binlog(
            binlog_pb2.Prewrite,
            start_ts,
            0,
            prewrite_key=b"pk-%d" % start_ts,
            prewrite_value=value or b"rows-of-%d" % start_ts,
            ddl_query=ddl_query,
            ddl_job_id=ddl_job_id,
        )
    )


def commit(start_ts: int, commit_ts: int) -> Built:
    return _built(gogo.encode_binlog(binlog_pb2.Commit, start_ts, commit_ts, prewrite_key=b"pk-%d" % start_ts))


def rollback(start_ts: int) -> Built:
    return _built(gogo.encode_binlog(binlog_pb2.Rollback, start_ts, 0, prewrite_key=b"pk-%d" % start_ts))


def fake(ts: int) -> Built:
    return _built(gogo.fake_binlog(ts))


def write(storage: Storage, built: Built) -> None:
    storage.write_binlog(built[0], built[1])


def pull(
    storage: Storage, last_ts: int, until: Callable[[list[PulledBinlog]], bool], timeout: float = 10.0
) -> list[PulledBinlog]:
    """Pull from `last_ts` until `until(items)` holds, or `timeout` passes (then return what came)."""
    stop = threading.Event()
    timer = threading.Timer(timeout, stop.set)
    timer.start()
    items: list[PulledBinlog] = []
    try:
        if until(items):
            return items
        for item in storage.pull_commit_binlogs(last_ts, stop):
            items.append(item)
            if until(items):
                break
    finally:
        timer.cancel()
        timer.join()
    return items


def pull_upto(storage: Storage, last_ts: int, top: int, timeout: float = 10.0) -> list[PulledBinlog]:
    """Everything with last_ts < commit_ts <= top."""
    return pull(storage, last_ts, lambda got: top <= last_ts or bool(got and got[-1].commit_ts >= top), timeout)


@dataclass
class FakeResolver:
    """A `CommitResolver` answering from a table (WAIT for unknown start_ts), recording the questions."""

    verdicts: dict[int, Resolution] = field(default_factory=dict)
    asked: list[tuple[int, float]] = field(default_factory=list)
    default: Resolution = field(default_factory=lambda: Resolution(Verdict.WAIT, reason="unknown"))
    cond: threading.Condition = field(default_factory=threading.Condition)
    closed: bool = False

    def resolve(self, prewrite: binlog_pb2.Binlog, waited_seconds: float) -> Resolution:
        with self.cond:
            self.asked.append((prewrite.start_ts, waited_seconds))
            self.cond.notify_all()
            return self.verdicts.get(prewrite.start_ts, self.default)

    def wait_asked(self, start_ts: int, times: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self._count(start_ts) >= times, timeout)

    def _count(self, start_ts: int) -> int:
        return sum(1 for s, _ in self.asked if s == start_ts)

    def set(self, start_ts: int, res: Resolution) -> None:
        with self.cond:
            self.verdicts[start_ts] = res

    def asked_about(self, start_ts: int) -> int:
        with self.cond:
            return self._count(start_ts)

    def close(self) -> None:
        self.closed = True
