"""One pump's binlog stream into the merger (the original's `drainer/pump.go`).

See docs/architecture.md#collector-and-pullers.

A `Puller` owns a thread that calls `binlog.Pump/PullBinlogs{clusterID, startFrom.offset = last_ts}`
and hands each binlog to `Merger.put` under the pump's node id.  `last_ts` is the highest commit_ts
the merger accepted from this pump; every (re)connection resumes after it, so nothing is lost or
repeated across reconnects.

* A stream error (pump down, restarted, shutting down) is logged, and after `reconnect_interval`
  the puller dials again on a fresh channel, for as long as it lives.  The first failure, and then one
  every FAILURE_LOG_INTERVAL while they go on, is a WARNING.
* A stream that delivers nothing for `idle_timeout` (30 s) while the puller waits for it is cancelled
  and dialled again from `last_ts`: the nemesis suite found a drainer waiting 4 minutes on a stream
  whose pump was gone while a partition dropped what it sent (a half-open connection: the drainer
  sends nothing on a server stream, so it never learns).  Silence is not always death: a pump serves
  nothing while its watermark waits for a slow transaction's commit (fake binlogs wait too), and a
  very large binlog on a slow link takes long to arrive.  So each idle cancel doubles this puller's
  timeout (up to MAX_IDLE_TIMEOUT) until a message arrives, which resets it: a healthy quiet pump is
  redialled a few times (cheap, from the same offset), and a slow large binlog gets the time it needs.
  Only time spent waiting for the stream counts, not time the merger keeps the puller waiting.  gRPC
  keepalive pings would find a half-open connection too, but a Go pump's default policy answers
  pings more often than every 5 minutes with GOAWAY.
* A payload that does not parse as `binlog.Binlog` is fatal: `error` is set, `on_error` is called with
  a message naming the pump and the offset, and the thread stops.
* `pause()` ends the stream and does not dial again until `resume()` (a paused pump has exited; its
  source stays in the merger, which then waits for it).
* `tls`: the stream runs over TLS (the pump's certificate checked against the CA, this drainer's
  certificate presented); the pump is dialled at its registered host:port.
* `compressor = "gzip"` asks for gzip on the call; the receive size limit is large (2 GiB - 1) as in
  the original.
* Memory: responses arrive as raw bytes and are read in place (:mod:`common.pb.wire`): the binlog's
  prewrite value stays a view of the received message, never copied.  The next binlog is received
  only when `Merger.wait_room` allows it (room in the pump's merge buffer; one pump at a time
  receives ahead of need, as a receive costs grpcio about three times the binlog), and the stream's
  HTTP/2 window is fixed at :data:`common.pull.STREAM_WINDOW_BYTES`: with grpc's default BDP probing the window
  grows, and a pump sends the next 64 MiB binlogs into the channel's buffers while the puller waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import grpc
from google.protobuf.message import DecodeError

from common.errors import CodecError
from common.pb import pump_pb2
from common.pb.wire import pull_entity, split_binlog
from common.pull import PULL_METHOD, channel_options
from common.tls import TLS, connect_hint
from drainer.errors import PullerError
from drainer.malloc import trim
from drainer.merger import MergeItem, Merger

if TYPE_CHECKING:
    from drainer.metrics import DrainerMetrics

log = logging.getLogger(__name__)

DEFAULT_RECONNECT_INTERVAL: Final = 1.0
"""Seconds between a stream error and the next PullBinlogs (original: 1 s)."""
DEFAULT_MAX_MESSAGE_SIZE: Final = 2**31 - 1
"""Receive limit (original: MaxInt - 4 MiB; grpcio takes a 32-bit int)."""
LARGE_BINLOG_BYTES: Final = 10 << 20
"""A binlog at least this large is logged (original: 10 MiB)."""
CLOSE_JOIN_TIMEOUT: Final = 10.0
"""`close()` waits at most this long for the thread."""
DEFAULT_IDLE_TIMEOUT: Final = 30.0
"""Seconds a stream may deliver nothing before it is cancelled and dialled again (10 fake-binlog intervals)."""
MAX_IDLE_TIMEOUT: Final = 3600.0
"""The idle timeout doubles after each idle cancel up to this (a 2 GiB binlog at 1 MB/s takes 35 minutes)."""
FAILURE_LOG_INTERVAL: Final = 30.0
"""While reconnects keep failing, one WARNING per this many seconds (the others are DEBUG)."""
_PUT_SLICE: Final = 0.2
"""A blocked `Merger.put` re-checks whether the puller is closing this often."""

COMPRESSORS: Final[dict[str, grpc.Compression | None]] = {"": None, "gzip": grpc.Compression.Gzip}


class Puller:
    """Pulls one pump's binlogs into the merger on a thread, reconnecting from `last_ts` on errors."""

    def __init__(
        self,
        node_id: str,
        addr: str,
        cluster_id: int,
        start_ts: int,
        merger: Merger,
        *,
        compressor: str = "",
        on_error: Callable[[BaseException], None] | None = None,
        reconnect_interval: float = DEFAULT_RECONNECT_INTERVAL,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        metrics: DrainerMetrics | None = None,
        tls: TLS | None = None,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    ) -> None:
        if compressor not in COMPRESSORS:
            raise ValueError(f"unknown compressor {compressor!r}: use one of {sorted(COMPRESSORS)}")
        self.node_id = node_id
        self.addr = addr
        self.cluster_id = cluster_id
        self.last_ts = start_ts
        """The highest commit_ts the merger accepted from this pump (the resume offset)."""
        self.error: BaseException | None = None
        self._merger = merger
        self._compression = COMPRESSORS[compressor]
        self._on_error = on_error
        self._reconnect_interval = reconnect_interval
        self._credentials = None if tls is None else tls.channel_credentials()
        self._max_message_size = min(max_message_size, 2**31 - 1)
        self._cond = threading.Condition()
        self._paused = False
        self._closed = False
        self._call: Any = None  # the live PullBinlogs call (a grpc.Call and iterator)
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._warned_at = float("-inf")
        self._base_idle_timeout = idle_timeout
        self.idle_timeout = idle_timeout
        """The current idle timeout: doubled by each idle cancel, reset by a message."""
        self._idle_cancelled: object | None = None
        """The call the watchdog cancelled (its CANCELLED error is not a failure to report)."""
        self._waiting_since: float | None = None
        """time.monotonic() since which the thread waits for the stream's next message (None: it does not)."""
        self.idle_cancels = 0
        """Streams cancelled for silence (for tests and logs)."""
        self._watchdog: threading.Thread | None = None
        self._metrics = None if metrics is None else metrics.source(node_id)  # pull latency, binlog size

    # ---------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        with self._cond:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._run, name=f"puller-{self.node_id}", daemon=True)
            self._thread.start()
            self._watchdog = threading.Thread(target=self._watch_idle, name=f"puller-idle-{self.node_id}", daemon=True)
            self._watchdog.start()
        log.info("puller started node_id=%s addr=%s offset=%d", self.node_id, self.addr, self.last_ts)

    @property
    def paused(self) -> bool:
        with self._cond:
            return self._paused

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def pause(self) -> None:
        """Stop pulling (the current stream is cancelled) until `resume()`."""
        with self._cond:
            if self._paused or self._closed:
                return
            self._paused = True
            self._cancel_locked()
        log.info("puller paused node_id=%s at offset=%d", self.node_id, self.last_ts)

    def resume(self) -> None:
        with self._cond:
            if not self._paused or self._closed:
                return
            self._paused = False
            self._failures = 0
            self._cond.notify_all()
        log.info("puller resumed node_id=%s from offset=%d", self.node_id, self.last_ts)

    def set_addr(self, addr: str) -> None:
        """Pull from `addr` from now on (the pump moved); the current stream is cancelled."""
        with self._cond:
            if addr == self.addr:
                return
            log.info("puller node_id=%s address %s -> %s", self.node_id, self.addr, addr)
            self.addr = addr
            self._cancel_locked()
            self._cond.notify_all()

    def close(self) -> None:
        """Cancel the stream and stop the thread (joined within a bound).  Idempotent."""
        with self._cond:
            first = not self._closed
            self._closed = True
            self._cancel_locked()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CLOSE_JOIN_TIMEOUT)
            if thread.is_alive():
                log.warning("puller node_id=%s did not stop within %.0fs", self.node_id, CLOSE_JOIN_TIMEOUT)
        if first:
            log.info("puller closed node_id=%s at offset=%d", self.node_id, self.last_ts)

    def _cancel_locked(self) -> None:
        if self._call is not None:
            self._call.cancel()

    def _watch_idle(self) -> None:
        """Cancel the stream when the thread has waited `idle_timeout` for its next message."""
        with self._cond:
            while not self._closed:
                self._cond.wait(min(1.0, self._base_idle_timeout / 4))
                since, call = self._waiting_since, self._call
                if since is None or call is None or self._paused or self._closed:
                    continue
                if time.monotonic() - since < self.idle_timeout:
                    continue
                self.idle_cancels += 1
                self._waiting_since = None
                self._idle_cancelled = call
                waited, self.idle_timeout = self.idle_timeout, min(self.idle_timeout * 2, MAX_IDLE_TIMEOUT)
                log.warning(
                    "pull stream of node_id=%s at %s delivered nothing for %.0fs: dialling again from offset=%d "
                    "(next idle limit %.0fs; a pump whose watermark waits for a slow transaction is quiet too)",
                    self.node_id,
                    self.addr,
                    waited,
                    self.last_ts,
                    self.idle_timeout,
                )
                call.cancel()

    # ------------------------------------------------------------------------------- thread
    def _run(self) -> None:
        try:
            while self._wait_runnable():
                self._pull_once()
                with self._cond:
                    if self._closed or self._paused:
                        continue
                    self._cond.wait(self._reconnect_interval)
        except PullerError as exc:
            self._fail(exc)
        except BaseException as exc:  # a bug: report it rather than die silently
            log.exception("puller node_id=%s failed", self.node_id)
            self._fail(PullerError(f"pump {self.node_id}: puller failed: {exc!r}"))

    def _wait_runnable(self) -> bool:
        """Wait while paused; False once closed (or the merger is)."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or not self._paused)
            return not self._closed and not self._merger.closed

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        if self._on_error is not None:
            self._on_error(exc)
        else:
            log.error("%s", exc)

    def _pull_once(self) -> None:
        """One PullBinlogs stream, until it fails or the puller is paused / closed."""
        options = channel_options(self._max_message_size)
        with self._cond:
            addr = self.addr
            offset = self.last_ts
        if self._credentials is None:
            channel = grpc.insecure_channel(addr, options=options)
        else:
            channel = grpc.secure_channel(addr, self._credentials, options=options)
        try:
            req = pump_pb2.PullBinlogReq(clusterID=self.cluster_id, startFrom=pump_pb2.Pos(offset=offset))
            pull = channel.unary_stream(
                PULL_METHOD, request_serializer=pump_pb2.PullBinlogReq.SerializeToString, response_deserializer=None
            )  # raw response bytes: read in place, not copied by a parse
            call: Any = pull(req, compression=self._compression)
            with self._cond:
                if self._closed or self._paused or addr != self.addr:
                    call.cancel()
                    return
                self._call = call
            log.debug("pulling node_id=%s addr=%s offset=%d", self.node_id, addr, offset)
            while self._wait_room():
                with self._cond:
                    self._waiting_since = time.monotonic()
                try:
                    raw = next(call, None)
                finally:
                    with self._cond:
                        self._waiting_since = None
                    self._merger.received(self.node_id)
                if raw is None:
                    log.warning("pull stream of node_id=%s ended without an error; reconnecting", self.node_id)
                    return
                accepted = self._accept(raw)
                del raw
                if not accepted:
                    return
        except grpc.RpcError as exc:
            self._stream_failed(addr, exc)
        finally:
            with self._cond:
                call_now, self._call = self._call, None
                self._idle_cancelled = None
            if call_now is not None:
                call_now.cancel()
            channel.close()

    def _stream_failed(self, addr: str, exc: grpc.RpcError) -> None:
        now = time.monotonic()
        with self._cond:
            if self._closed or self._paused:
                return  # we cancelled it
            if self._idle_cancelled is not None and self._idle_cancelled is self._call:
                return  # the idle watchdog cancelled it, and said so
            self._failures += 1
            failures = self._failures
            warn = failures == 1 or now - self._warned_at >= FAILURE_LOG_INTERVAL
            if warn:
                self._warned_at = now
        code_of = getattr(exc, "code", None)
        details_of = getattr(exc, "details", None)
        code = code_of().name if callable(code_of) else type(exc).__name__
        details = details_of() if callable(details_of) else str(exc)
        if code == "UNAVAILABLE":
            details += connect_hint(self._credentials is not None)
        log.log(
            logging.WARNING if warn else logging.DEBUG,
            "pull stream of node_id=%s at %s failed (%s: %s; %d failures in a row); reconnecting every %.1fs "
            "from offset=%d",
            self.node_id,
            addr,
            code,
            details,
            failures,
            self._reconnect_interval,
            self.last_ts,
        )

    def _wait_room(self) -> bool:
        """Wait until this pump's merge buffer has room; False when the puller should stop."""
        while not self._merger.wait_room(self.node_id, timeout=_PUT_SLICE):
            with self._cond:
                if self._closed or self._paused or self._merger.closed:
                    return False
        return True

    def _accept(self, raw: bytes) -> bool:
        """Read one response and put it into the merger; False when the puller should stop."""
        meta_ts, size = 0, len(raw)
        try:
            payload, meta_ts = pull_entity(raw)
            size = len(payload)
            binlog, prewrite_value = split_binlog(payload)
        except (CodecError, DecodeError) as exc:
            raise PullerError(
                f"pump {self.node_id} at {self.addr}: cannot unmarshal the binlog after offset={self.last_ts} "
                f"(meta commit_ts={meta_ts}, {size} bytes): {exc}"
            ) from exc
        del payload
        commit_ts = binlog.commit_ts
        if self._metrics is not None:
            self._metrics.received(commit_ts, size)
        if self._failures:
            log.info("pull stream of node_id=%s is back after %d failures", self.node_id, self._failures)
            self._failures = 0
        if self.idle_timeout != self._base_idle_timeout:
            with self._cond:
                self.idle_timeout = self._base_idle_timeout
        if commit_ts <= self.last_ts:
            log.warning(
                "pump node_id=%s sent commit_ts=%d not after offset=%d; skipped", self.node_id, commit_ts, self.last_ts
            )
            return True
        if size >= LARGE_BINLOG_BYTES:
            log.info("large binlog node_id=%s commit_ts=%d size=%d", self.node_id, commit_ts, size)
            trim()  # its receive left the heap full of freed chunks
        item = MergeItem(self.node_id, binlog, size, prewrite_value)
        while not self._merger.put(item, timeout=_PUT_SLICE):
            with self._cond:
                if self._closed or self._merger.closed:
                    return False
        self.last_ts = commit_ts
        return True
