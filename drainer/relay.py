"""The drainer's relay log (`[syncer.relay] log-dir`): every transaction durable on local disk before it
is applied downstream, so the downstream can be made consistent without the upstream.

Writing (`RelaySink`, wrapping the mysql/tidb or sqlite sink):

* ``add`` encodes the transaction (`drainer.relay_codec`) and appends its record(s) to the relay
  files (binlogfile framing and names, rotated at `max-file-size`, 10 MiB); nothing is synced yet.
* One relay thread takes whatever has been appended, fdatasyncs once, then hands those transactions
  to the inner sink in order: no transaction reaches the downstream before its record is durable
  (group commit: one fdatasync covers every transaction that arrived meanwhile).  What waits for the
  thread is bounded by bytes (`max_pending_bytes`).
* When the inner sink reports a commit_ts applied, every relay file whose records are all at or
  below it is deleted (never the file being written).
* ``<log-dir>/relay.meta`` (JSON) keeps the cluster id, so a recovery with the upstream gone still
  finds the checkpoint, and the schema version of each relayed schema change (written before the
  change is applied), so the checkpoint it saves has the version its commit_ts belongs to.

Reading (`read_relay`): records in file order; a torn last record is end of log, a corrupted record
is skipped, counted and logged (`common.binlogfile`).  A transaction written in parts counts only
when both its markers are there and no record between them was skipped.  Records at or below the
checkpoint, and a commit_ts seen before (a replay after a restart writes it again), are passed over.

Recovery (`recover`) applies what `read_relay` yields after the checkpoint through a fresh sink in
safe mode.  The sqlite sink builds DDL from the job's table definitions, which a relay record does
not carry: with it, recovery stops before the first DDL (the rest waits for the upstream).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from google.protobuf.message import DecodeError

from common.binlogfile import BinlogFileWriter, Position, ReadStats, iter_records, list_binlog_files
from common.dirs import dir_error
from common.errors import BinlogError, CodecError, ConfigError, StorageError
from common.events import Txn, dml_memory
from common.pb import secondary_binlog_pb2 as spb
from drainer.relay_codec import ShapeCache, closing_marker, decode_record, encode_txn, marker_kind, opening_marker
from drainer.sinks.base import OnSuccess, Sink, SinkError, WrappingSink

__all__ = [
    "DEFAULT_MAX_PENDING_BYTES",
    "META_NAME",
    "RecoveryResult",
    "RelayError",
    "RelayMeta",
    "RelaySink",
    "read_relay",
    "recover",
]

log = logging.getLogger(__name__)

META_NAME: Final = "relay.meta"
MAX_VERSIONS: Final = 1000
DEFAULT_MAX_PENDING_BYTES: Final = 8 << 20
"""Bytes of decoded rows appended to the relay log but not yet handed to the inner sink."""
PROGRESS_EVERY: Final = 2.0


RELAY_DIR_OPTION: Final = "syncer.relay.log-dir"


class RelayError(BinlogError):
    """The relay log cannot be written or read; the message names the directory."""


def _txn_cost(txn: Txn) -> int:
    return sum(dml_memory(d) for d in txn.dmls) + txn.size


@dataclass(slots=True)
class RelayMeta:
    """``<log-dir>/relay.meta``: what a recovery without the upstream needs besides the records."""

    cluster_id: int
    versions: list[tuple[int, int]] = field(default_factory=list)
    """(commit_ts, schema version) of the newest schema changes relayed, ascending (at most `MAX_VERSIONS`)."""

    def version_at(self, commit_ts: int, floor: int) -> int:
        """The schema version in effect after applying everything up to `commit_ts` (at least `floor`)."""
        return max([floor] + [v for ts, v in self.versions if ts <= commit_ts])

    def write(self, directory: str) -> None:
        path = os.path.join(directory, META_NAME)
        tmp = path + ".tmp"
        doc = {"cluster-id": self.cluster_id, "schema-versions": [list(p) for p in self.versions[-MAX_VERSIONS:]]}
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise RelayError(f"cannot write {path!r}: {exc}") from exc

    @staticmethod
    def read(directory: str | os.PathLike[str]) -> RelayMeta:
        path = os.path.join(os.fspath(directory), META_NAME)
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            cid = doc["cluster-id"]
            versions = [(int(ts), int(v)) for ts, v in doc.get("schema-versions", [])]
        except FileNotFoundError:
            raise RelayError(f"relay log {os.fspath(directory)!r} has no {META_NAME}: it was never written") from None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RelayError(f"cannot read {path!r}: {exc}") from None
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise RelayError(f"{path!r}: cluster-id is not an integer: {cid!r}")
        return RelayMeta(cid, versions)


# ---------------------------------------------------------------------------------------------- sink


@dataclass(slots=True)
class _Queued:
    txn: Txn
    cost: int


class RelaySink(WrappingSink):
    """Relay log in front of `inner`; see the module doc."""

    def __init__(
        self,
        inner: Sink,
        directory: str | os.PathLike[str],
        *,
        cluster_id: int,
        max_file_size: int,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
    ) -> None:
        super().__init__(inner)
        self.name = f"relay+{inner.name}"
        self._dir = os.fspath(directory)
        self._budget = max(1, max_pending_bytes)
        try:
            self._last_ts = _file_last_ts(self._dir)  # before the writer cuts a torn tail: same answer
            self._writer = BinlogFileWriter(self._dir, max_file_size, sync=False)
        except StorageError as exc:
            raise RelayError(f"relay log {self._dir!r}: {exc}") from exc
        try:
            self._meta = RelayMeta.read(self._dir)
        except RelayError:
            self._meta = RelayMeta(cluster_id)
        if self._meta.cluster_id != cluster_id:
            raise RelayError(
                f"relay log {self._dir!r} belongs to cluster {self._meta.cluster_id}, this drainer to {cluster_id}: "
                "point [syncer.relay] log-dir at an empty directory"
            )
        self._meta.write(self._dir)
        self._cv = threading.Condition()
        self._queue: deque[_Queued] = deque()
        self._pending_bytes = 0
        self._in_parts: int | None = None  # commit_ts of the txn being written in parts
        self._error: BaseException | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self._on_success: OnSuccess = lambda ts: None
        self._gc_lock = threading.Lock()
        self.deleted_files = 0

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def inflight_bytes(self) -> int:
        """The inner sink's, plus what waits here for the relay log's fdatasync."""
        return self.inner.inflight_bytes + self._pending_bytes

    def start(self, on_success: OnSuccess) -> None:
        self._on_success = on_success
        self.inner.start(self._applied)
        self._thread = threading.Thread(target=self._run, name="relay-log", daemon=True)
        self._thread.start()
        log.info("relay log started dir=%s files=%d", self._dir, len(self._last_ts))

    def add(self, txn: Txn) -> None:
        self._raise_if_failed()
        try:
            payload = encode_txn(txn)
        except CodecError as exc:
            error = SinkError(f"relay log: cannot encode commit_ts={txn.commit_ts}: {exc}")
            self._fail(error)
            raise error from exc
        records: list[bytes] = []
        if txn.partial and self._in_parts != txn.commit_ts:
            records.append(opening_marker(txn.commit_ts))
            self._in_parts = txn.commit_ts
        if payload is not None:
            records.append(payload)
        if not txn.partial and self._in_parts == txn.commit_ts:
            records.append(closing_marker(txn.commit_ts))  # after the last part
            self._in_parts = None
        cost = _txn_cost(txn) + sum(len(r) for r in records)
        latest = self._meta.versions[-1][1] if self._meta.versions else 0
        if txn.schema_version > latest:
            self._meta.versions.append((txn.commit_ts, txn.schema_version))
            self._meta.write(self._dir)  # before the change can be applied
        with self._cv:
            while self._error is None and not self._closing and self._queue and self._over(cost):
                self._cv.wait()  # always admits one txn into an empty queue, whatever its size
            self._raise_if_failed()
            if self._closing:
                raise SinkError(f"relay log is closed; commit_ts={txn.commit_ts} not written")
            if records:
                try:
                    pos = self._writer.write_many(records)
                except StorageError as exc:
                    error = SinkError(f"relay log: cannot write commit_ts={txn.commit_ts}: {exc}")
                    self._fail_locked(error)
                    raise error from exc
                end = self._writer.position
                for index in range(pos.file_index, end.file_index + 1):
                    self._last_ts[index] = max(self._last_ts.get(index, 0), txn.commit_ts)
            self._queue.append(_Queued(txn, cost))
            self._pending_bytes += cost
            self._cv.notify_all()

    def _over(self, cost: int) -> bool:
        """Whether `cost` more bytes would overrun the budget of what waits for the relay thread."""
        return self._pending_bytes + cost > self._budget

    def _run(self) -> None:
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._closing:
                        self._cv.wait()
                    if not self._queue:
                        return
                    batch = list(self._queue)
                try:
                    self._writer.fsync()
                except StorageError as exc:
                    raise SinkError(f"relay log: fdatasync failed: {exc}") from exc
                for q in batch:  # durable: the downstream may have them now
                    self.inner.add(q.txn)
                    with self._cv:
                        self._queue.popleft()
                        self._pending_bytes -= q.cost
                        self._cv.notify_all()
                del batch, q
        except BaseException as exc:
            self._fail(exc if isinstance(exc, SinkError) else SinkError(f"relay log: {exc}"))

    def _applied(self, commit_ts: int) -> None:
        self._on_success(commit_ts)
        self._gc(commit_ts)

    def _gc(self, applied_ts: int) -> None:
        """Delete every file, older than the one being written, whose records are all applied."""
        with self._gc_lock:
            with self._cv:
                current = self._writer.position.file_index
                bound = None
                for index in sorted(self._last_ts):
                    if index >= current or self._last_ts[index] > applied_ts:
                        break
                    bound = index + 1
            if bound is None:
                return
            try:
                removed = self._writer.delete_before(bound)
            except StorageError as exc:
                log.warning("relay log GC: %s", exc)
                return
            with self._cv:
                for index in [i for i in self._last_ts if i < bound]:
                    del self._last_ts[index]
            self.deleted_files += len(removed)

    def flush(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._queue:
                self._raise_if_failed()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"relay log: {len(self._queue)} txn(s) not handed to the sink yet")
                self._cv.wait(left if left is None else min(left, 0.5))
            self._raise_if_failed()
        self.inner.flush(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify_all()
        self.inner.close()  # unblocks an `add` of the relay thread waiting for the sink's budget
        if self._thread is not None:
            self._thread.join(10.0)
        try:
            self._writer.close()
        except StorageError as exc:
            log.warning("relay log close: %s", exc)

    def error(self) -> BaseException | None:
        return self._error or self.inner.error()

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            self._fail_locked(exc)

    def _fail_locked(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
            log.error("relay log failed: %s", exc)
        self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        err = self.error()
        if err is not None:
            raise err if isinstance(err, SinkError) else SinkError(str(err))


def _file_last_ts(directory: str) -> dict[int, int]:
    """The newest commit_ts in each relay file already there (for the GC of files left by earlier runs)."""
    last: dict[int, int] = {}
    if not os.path.isdir(directory):
        return last
    for f in list_binlog_files(directory):
        last[f.index] = 0
    for pos, payload in iter_records(directory):
        b = _parse(payload, pos, directory)
        if b is not None:
            last[pos.file_index] = max(last[pos.file_index], b.commit_ts)
    return last


def _parse(payload: bytes, pos: Position, directory: str) -> spb.Binlog | None:
    b = spb.Binlog()
    try:
        b.ParseFromString(payload)
    except DecodeError as exc:
        log.warning("relay log %s: record at file %d offset %d does not parse, skipped: %s", directory, *pos, exc)
        return None
    return b


# ------------------------------------------------------------------------------------------- reading


@dataclass(slots=True)
class RelayStats:
    read: ReadStats = field(default_factory=ReadStats)
    undecodable: int = 0
    """Good records that are not relay records, or do not decode: skipped."""
    cut: int = 0
    """Transactions written in parts whose closing marker (or a part) is missing: left out."""

    @property
    def skipped(self) -> int:
        return self.read.skipped_records + self.undecodable


def _complete_groups(directory: str, stats: RelayStats) -> set[Position]:
    """Positions of the opening markers of transactions written in parts that are whole: closed by their
    closing marker, with every record between them read (none skipped as corrupted)."""
    whole: set[Position] = set()
    open_at: Position | None = None
    open_ts = 0
    skipped_at_open = 0
    for pos, payload in iter_records(directory, stats=stats.read):
        b = _parse(payload, pos, directory)
        if b is None:
            stats.undecodable += 1
            continue
        kind = marker_kind(b)
        if open_at is not None and (kind == "open" or b.commit_ts != open_ts):
            stats.cut += 1  # cut by a crash: what follows is another transaction, or the replay of this one
            open_at = None
        if kind == "open":
            open_at, open_ts, skipped_at_open = pos, b.commit_ts, stats.skipped
        elif kind == "close" and open_at is not None:
            if stats.skipped == skipped_at_open:
                whole.add(open_at)
            else:
                stats.cut += 1
            open_at = None
    if open_at is not None:
        stats.cut += 1
    return whole


def read_relay(directory: str | os.PathLike[str], after_ts: int, stats: RelayStats | None = None) -> Iterator[Txn]:
    """Every whole transaction of the relay log with commit_ts > `after_ts`, in order, each once.

    Parts come as the drainer applies them (``partial`` set on all but the last).  Raises RelayError
    when the directory cannot be read."""
    d = os.fspath(directory)
    st = stats if stats is not None else RelayStats()
    if not os.path.isdir(d):
        raise RelayError(f"relay log directory {d!r} does not exist")
    if not os.access(d, os.R_OK | os.X_OK):
        raise RelayError(f"relay log directory {d!r} is not readable")
    try:
        whole = _complete_groups(d, st)
        yield from _txns(d, after_ts, whole)
    except StorageError as exc:
        raise RelayError(f"relay log {d!r}: {exc}") from exc


def _txns(directory: str, after_ts: int, whole: set[Position]) -> Iterator[Txn]:
    shapes = ShapeCache()
    last = after_ts
    group_ts: int | None = None  # a whole transaction in parts being yielded
    held: Txn | None = None  # its newest part, yielded once we know whether it is the last
    passing_ts: int | None = None  # a transaction in parts passed over (cut, or at or below `last`)
    for pos, payload in iter_records(directory):
        b = _parse(payload, pos, directory)
        if b is None:
            continue
        ts, kind = b.commit_ts, marker_kind(b)
        if kind == "open":
            group_ts = passing_ts = None
            if pos in whole and ts > last:
                group_ts = ts
            else:
                passing_ts = ts
            continue
        if kind == "close":
            if group_ts == ts:
                if held is not None:
                    held.partial = False
                    yield held
                    held = None
                last = ts
            group_ts = passing_ts = None
            continue
        if passing_ts is not None and ts == passing_ts:
            continue
        passing_ts = None
        if group_ts is None and ts <= last:
            continue
        try:
            txn = decode_record(b, shapes)
        except CodecError as exc:
            raise RelayError(f"relay log {directory!r} file {pos.file_index} offset {pos.offset}: {exc}") from exc
        if group_ts is None:
            last = ts
            yield txn
            continue
        if held is not None:
            yield held
        txn.partial = True
        held = txn


# ------------------------------------------------------------------------------------------ recovery


@dataclass(slots=True)
class RecoveryResult:
    txns: int = 0
    rows: int = 0
    ddls: int = 0
    last_ts: int = 0
    """The newest commit_ts applied (the checkpoint's when nothing was)."""
    stopped_at_ddl: int = 0
    """commit_ts of a DDL the sink cannot run from the relay log alone (sqlite); 0 when none."""
    stats: RelayStats = field(default_factory=RelayStats)


def recover(
    directory: str | os.PathLike[str],
    checkpoint_ts: int,
    sink: Sink,
    *,
    ddl_supported: bool = True,
    flush_timeout: float = 600.0,
    progress: Callable[[RecoveryResult], None] | None = None,
) -> RecoveryResult:
    """Apply every whole relay transaction after `checkpoint_ts` through `sink` (in safe mode) and wait
    until it is applied.  The sink is started here and closed before returning."""
    result = RecoveryResult(last_ts=checkpoint_ts)
    applied: list[int] = []
    sink.set_safe_mode(True)
    sink.start(applied.append)
    try:
        next_report = time.monotonic() + PROGRESS_EVERY
        for txn in read_relay(directory, checkpoint_ts, result.stats):
            if txn.ddl is not None and not ddl_supported:
                result.stopped_at_ddl = txn.commit_ts
                break
            sink.add(txn)
            result.rows += len(txn.dmls)
            if not txn.partial:
                result.txns += 1
                result.ddls += txn.ddl is not None
            if progress is not None and time.monotonic() >= next_report:
                next_report = time.monotonic() + PROGRESS_EVERY
                progress(result)
        sink.flush(flush_timeout)
    finally:
        sink.close()
    if applied:
        result.last_ts = max(result.last_ts, applied[-1])
    return result


def relay_dir_ok(directory: str | os.PathLike[str]) -> None:
    """Raise unless `directory` can hold a relay log (created when missing): ConfigError naming the option
    for a path that cannot be a directory, RelayError for anything else (permissions, disk)."""
    p = Path(directory)
    try:
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        err = dir_error(RELAY_DIR_OPTION, p, exc, what="relay log directory")
        raise (err if isinstance(err, ConfigError) else RelayError(str(err))) from None
    if not os.access(p, os.R_OK | os.W_OK | os.X_OK):
        raise RelayError(f"relay log directory {os.fspath(p)!r} is not readable and writable by this user")
