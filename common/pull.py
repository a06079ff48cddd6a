"""Reading one pump's committed binlogs of a commit_ts window over gRPC, then stopping (pure client).

The drainer's `Puller` follows a pump forever; a batch job (`binlog-spark replay --from-pump-addrs`)
needs a window (after, upto] read once.  `pull_window` calls `binlog.Pump/PullBinlogs` with
``startFrom.offset = after`` and yields each commit the pump sends (paired with its prewrite by the
pump: the commit binlog carries the prewrite value) until the first binlog with commit_ts > upto
arrives.  The pump's fake binlogs carry fresh timestamps every few seconds, so a live pump always
passes `upto` once `upto` is a timestamp from the past.

What it refuses, each with one line naming the pump (`PumpReadError`):

* a pump that cannot be reached, refuses the cluster id, or fails the stream;
* a window that starts below the pump's gc ts: the pump announces its gc ts in the stream's initial
  metadata (`GC_TS_METADATA`), and commits at or below it may be gone;
* a stream that sends nothing for `idle_timeout` seconds (a pump that is paused, frozen, or whose
  watermark waits for a transaction that never ends) -- the error says the last commit_ts read;
* a payload that is not a binlog, or a stream whose commit_ts goes backwards.

Memory: responses are read as raw bytes and the prewrite value stays a view of the received
message (:mod:`common.pb.wire`); one binlog at a time is held, and the HTTP/2 window is fixed at
`STREAM_WINDOW_BYTES` so a pump does not send far ahead of the reader.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError

from common.errors import CodecError, PumpReadError
from common.pb import binlog_pb2, pump_pb2
from common.pb.wire import pull_entity, split_binlog

__all__ = [
    "GC_TS_METADATA",
    "PULL_METHOD",
    "STREAM_WINDOW_BYTES",
    "PulledCommit",
    "PumpReadError",
    "PumpWindow",
    "channel_options",
    "first_ts",
    "pull_window",
]

log = logging.getLogger(__name__)

PULL_METHOD: Final = "/binlog.Pump/PullBinlogs"
GC_TS_METADATA: Final = "binlog-gc-ts"
"""Initial metadata of a PullBinlogs stream: the pump's gc ts (decimal); commits at or below it may be gone."""
STREAM_WINDOW_BYTES: Final = 4 << 20
"""HTTP/2 read-ahead of a pull stream (grpc's default with BDP probing off is 64 KiB, too small for a
remote pump: 4 MiB per round trip is 80 MB/s at 50 ms)."""
MAX_MESSAGE_SIZE: Final = 2**31 - 1
"""Receive limit (grpcio takes a 32-bit int)."""
DEFAULT_IDLE_TIMEOUT: Final = 60.0
"""Seconds a stream may send nothing before the read fails (20 of the original's 3 s fake-binlog intervals)."""

MAX_TS: Final = 2**63 - 1
_FAKE: Final = binlog_pb2.Rollback


@dataclass(frozen=True, slots=True)
class PumpWindow:
    """One read: pump `name` at `addr`, commits with after < commit_ts <= upto."""

    name: str
    addr: str
    cluster_id: int
    after: int
    upto: int
    tls_pem: tuple[bytes, bytes | None, bytes | None] | None = None
    """(CA, certificate, key) PEM bytes when the pump serves TLS (bytes, so a task can carry them)."""
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT


@dataclass(slots=True)
class PulledCommit:
    """A commit (or DDL commit) binlog as the pump paired it; `prewrite_value` is a view of the message."""

    binlog: binlog_pb2.Binlog
    prewrite_value: memoryview | None
    size: int


class _IdleWatch:
    """Cancels a call that has waited `timeout` seconds for its next message."""

    def __init__(self, call: Any, timeout: float) -> None:
        self._call = call
        self._timeout = timeout
        self._cond = threading.Condition()
        self._since: float | None = None
        self._done = False
        self.fired = False
        self._thread = threading.Thread(target=self._run, name="pull-idle", daemon=True)
        self._thread.start()

    def waiting(self, yes: bool) -> None:
        with self._cond:
            self._since = time.monotonic() if yes else None
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            self._done = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._done:
                since = self._since
                if since is None:
                    self._cond.wait()
                    continue
                left = since + self._timeout - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self.fired = True
                self._call.cancel()
                return


def channel_options(max_message_size: int = MAX_MESSAGE_SIZE) -> list[tuple[str, int]]:
    """The options of a channel that pulls binlogs: messages up to `max_message_size`, the HTTP/2 window
    fixed at STREAM_WINDOW_BYTES (no BDP probing, which grows it)."""
    return [
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.max_send_message_length", max_message_size),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
    ]


def _channel(w: PumpWindow) -> grpc.Channel:
    options = channel_options()
    if w.tls_pem is None:
        return grpc.insecure_channel(w.addr, options=options)
    ca, cert, key = w.tls_pem
    return grpc.secure_channel(w.addr, grpc.ssl_channel_credentials(ca, key, cert), options=options)


def _gc_ts(call: Any) -> int | None:
    for key, value in call.initial_metadata() or ():
        if key == GC_TS_METADATA:
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _where(w: PumpWindow) -> str:
    return f"pump {w.name} at {w.addr}"


def pull_window(w: PumpWindow, *, fake: bool = False) -> Iterator[PulledCommit]:
    """Every commit binlog of the window in commit_ts order (fake binlogs too when `fake`).

    Raises PumpReadError (see the module doc); the stream is cancelled when the caller stops early.
    """
    channel = _channel(w)
    pull = channel.unary_stream(
        PULL_METHOD, request_serializer=pump_pb2.PullBinlogReq.SerializeToString, response_deserializer=None
    )
    call: Any = pull(pump_pb2.PullBinlogReq(clusterID=w.cluster_id, startFrom=pump_pb2.Pos(offset=w.after)))
    watch = _IdleWatch(call, w.idle_timeout)
    last = w.after
    try:
        watch.waiting(True)
        try:
            gc_ts = _gc_ts(call)
        except grpc.RpcError as exc:
            raise _stream_error(w, exc, watch, last) from None
        unannounced = gc_ts is None  # said once the stream works (a failed call has no metadata either)
        if gc_ts is not None and w.after < gc_ts:
            raise PumpReadError(
                f"{_where(w)} has garbage-collected binlogs committed at or before its gc ts {gc_ts}; the window "
                f"starts after commit_ts {w.after}, so its first missing ts is {w.after + 1}: replay from a start "
                f"ts above {gc_ts} with a margin, as the gc ts moves on (--start-ts, with the downstream restored "
                "to that ts), or from a copy of the pump's data directory (--from-pumps)"
            )
        while True:
            watch.waiting(True)
            try:
                raw = next(call, None)
            except grpc.RpcError as exc:
                raise _stream_error(w, exc, watch, last) from None
            finally:
                watch.waiting(False)
            if raw is None:
                raise PumpReadError(f"{_where(w)} ended the stream after commit_ts {last}, before {w.upto}")
            item = _read(w, raw, last)
            del raw
            if unannounced:
                unannounced = False
                log.warning("%s did not announce its gc ts: the window cannot be checked for gc'd binlogs", _where(w))
            ts = item.binlog.commit_ts
            if ts > w.upto:
                return
            last = ts
            if item.binlog.tp == _FAKE and not fake:
                continue
            yield item
    finally:
        call.cancel()
        watch.close()
        channel.close()


def _read(w: PumpWindow, raw: bytes, last: int) -> PulledCommit:
    try:
        payload, _ = pull_entity(raw)
        binlog, value = split_binlog(payload)
    except (CodecError, DecodeError) as exc:
        raise PumpReadError(f"{_where(w)}: the binlog after commit_ts {last} is not a binlog: {exc}") from None
    if binlog.commit_ts <= last:
        raise PumpReadError(
            f"{_where(w)} sent commit_ts {binlog.commit_ts} after {last}: its stream is not in commit_ts order"
        )
    return PulledCommit(binlog, value, len(payload))


def _stream_error(w: PumpWindow, exc: grpc.RpcError, watch: _IdleWatch, last: int) -> PumpReadError:
    if watch.fired:
        until = "" if w.upto == MAX_TS else f" (the window ends at {w.upto})"
        return PumpReadError(
            f"{_where(w)} sent nothing for {w.idle_timeout:g}s after commit_ts {last}{until}: it is paused, frozen "
            "or offline, or its watermark waits for a transaction that is still open (up to the upstream's "
            "transaction timeout); raise --pull-timeout for the latter"
        )
    code = exc.code() if callable(getattr(exc, "code", None)) else None
    details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
    name = code.name if code is not None else type(exc).__name__
    return PumpReadError(f"{_where(w)}: PullBinlogs failed after commit_ts {last}: {name}: {details}")


def first_ts(w: PumpWindow) -> int:
    """The commit_ts of the first binlog (fake binlogs included) the pump holds after `w.after`: where its
    history in a window starting there really begins.  Checks what `pull_window` checks (reachable, the
    cluster id, the gc ts); waits at most `w.idle_timeout` for a pump that holds nothing newer yet."""
    for item in pull_window(replace(w, upto=MAX_TS), fake=True):
        return int(item.binlog.commit_ts)
    raise PumpReadError(f"{_where(w)} ended the stream without a binlog after commit_ts {w.after}")
