"""gRPC `binlog.Pump` over a `PumpStorage`: WriteBinlog and PullBinlogs (reference §1.4, §1.5).

Errors.  The original returns BOTH `WriteBinlogResp.errmsg` and a non-nil Go error, so its clients see a
gRPC error status and treat `err != nil || errmsg != ""` as failure.  grpcio cannot send a response
message together with a non-OK status, so a failed WriteBinlog aborts with a status code and the error
text as details; `errmsg` is therefore empty on every response that arrives (a success).  The codes:

    cluster id mismatch                         FAILED_PRECONDITION  "cluster id mismatch: ..."
    payload is not a binlog.Binlog              INVALID_ARGUMENT
    prewrite while the node is not online      UNAVAILABLE          "no online: <state>"
    no space (NoSpaceError)                     RESOURCE_EXHAUSTED   (the client does not retry it)
    storage closed / shutting down              UNAVAILABLE
    anything else                               INTERNAL             (logged with its traceback here;
                                                                      the client gets one line)

The liveness probe (empty payload: start_ts == commit_ts == 0, tp == Prewrite) takes the same checks as a
prewrite, as in the original: it succeeds, storing nothing, only while the node is online.

Capacity.  Every PullBinlogs stream holds a gRPC worker thread for as long as it is open, so at most
`max_pull_streams` (default half of the `GRPC_WORKERS` pool) are served at once; one more is refused
with RESOURCE_EXHAUSTED "too many pull streams", which leaves threads for WriteBinlog.  The server is
built with `maximum_concurrent_rpcs` = the pool size, so calls beyond it are refused by grpcio
(RESOURCE_EXHAUSTED) instead of queueing without bound.  WriteBinlog payload bytes in flight (from
before the payload is parsed until the storage returned) are bounded by `max_inflight_write_bytes`
(`[storage] max-inflight-write-bytes`, ours, default 256 MiB); a call waits for room (at most until its
deadline: DEADLINE_EXCEEDED), in arrival order, and a payload larger than the whole budget is admitted
alone.

PullBinlogs streams `PullBinlogResp` bytes made by `gogo.marshal_pull_resp` (byte-identical to the Go
pump; also ~45x cheaper than building the message for a 1 MiB payload) through a method handler whose
response serializer passes bytes through.  A stream ends only when the client cancels (`add_callback`
sets its stop event) or the server closes its streams (`close_streams`, then status UNAVAILABLE).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, Final

import grpc
from google.protobuf.message import DecodeError

from common.errors import BinlogError, NoSpaceError, StorageClosedError
from common.pb import binlog_pb2, gogo, pump_pb2
from common.registry import NodeState
from pump.metrics import FAIL, PULL_BINLOGS, SUCC, WRITE_BINLOG, PumpMetrics
from pump.storage.api import PumpStorage

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "binlog.Pump"
SLOW_RPC_SECONDS: Final = 1.0
"""A WriteBinlog taking at least this long is logged (original: 1 s)."""
GRPC_WORKERS: Final = 256
"""Thread pool of the gRPC server (and its maximum_concurrent_rpcs); every open PullBinlogs stream holds one thread."""
MAX_PULL_STREAMS: Final = GRPC_WORKERS // 2
"""PullBinlogs streams served at once; the other half of the pool is kept for WriteBinlog."""
DEFAULT_MAX_INFLIGHT_WRITE_BYTES: Final = 256 << 20
"""WriteBinlog payload bytes between arrival and the storage's return (ours)."""
_GRPC_INT_MAX: Final = 2**31 - 1


class _AbortError(Exception):
    """A failed WriteBinlog: `code` and `message` go to the client as the status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ByteBudget:
    """A semaphore counted in bytes, admitting in arrival order; an oversized request is admitted alone."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._in_use = 0
        self._waiting: deque[object] = deque()

    @property
    def in_use(self) -> int:
        with self._cond:
            return self._in_use

    def acquire(self, n: int, timeout: float | None = None) -> bool:
        """Take `n` bytes; False when `timeout` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        token = object()
        with self._cond:
            self._waiting.append(token)
            try:
                while not (self._waiting[0] is token and self._fits(n)):
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
                self._in_use += n
                return True
            finally:
                self._waiting.remove(token)
                self._cond.notify_all()

    def _fits(self, n: int) -> bool:
        return self._in_use == 0 or self._in_use + n <= self.limit

    def release(self, n: int) -> None:
        with self._cond:
            self._in_use -= n
            self._cond.notify_all()


class PumpService:
    """The servicer: request checks, the storage call, metrics.  Thread-safe."""

    def __init__(
        self,
        storage: PumpStorage,
        cluster_id: int,
        state: Callable[[], NodeState],
        metrics: PumpMetrics,
        *,
        max_pull_streams: int = MAX_PULL_STREAMS,
        max_inflight_write_bytes: int = DEFAULT_MAX_INFLIGHT_WRITE_BYTES,
    ) -> None:
        self._storage = storage
        self._max_pull_streams = max_pull_streams
        self._write_budget = ByteBudget(max_inflight_write_bytes)
        self._cluster_id = cluster_id
        self._state = state
        self._metrics = metrics
        self._lock = threading.Lock()
        self._streams: set[threading.Event] = set()
        self._closing = False
        self._write_count = 0

    @property
    def write_count(self) -> int:
        """Binlogs stored through WriteBinlog so far (probes and failures excluded)."""
        with self._lock:
            return self._write_count

    @property
    def live_streams(self) -> int:
        with self._lock:
            return len(self._streams)

    # ------------------------------------------------------------------------------- WriteBinlog
    def write_binlog(self, request: pump_pb2.WriteBinlogReq, context: grpc.ServicerContext) -> pump_pb2.WriteBinlogResp:
        started = time.monotonic()
        ok = False
        try:
            self._write_within_budget(request, context)
            ok = True
            return pump_pb2.WriteBinlogResp()
        except _AbortError as failed:
            self._metrics.loss_binlog.inc()
            context.abort(failed.code, failed.message)
        finally:
            elapsed = time.monotonic() - started
            self._metrics.observe_rpc(WRITE_BINLOG, ok, elapsed)
            if elapsed >= SLOW_RPC_SECONDS:
                log.warning("slow write binlog RPC: %.3fs (payload %d bytes)", elapsed, len(request.payload))

    @property
    def inflight_write_bytes(self) -> int:
        return self._write_budget.in_use

    def _write_within_budget(self, request: pump_pb2.WriteBinlogReq, context: grpc.ServicerContext) -> None:
        size = len(request.payload)
        if not self._write_budget.acquire(size, context.time_remaining()):
            raise _AbortError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"deadline passed waiting for room: {self._write_budget.limit} bytes of writes in flight",
            )
        try:
            self._write(request)
        finally:
            self._write_budget.release(size)

    def _write(self, request: pump_pb2.WriteBinlogReq) -> None:
        self._check_cluster(request.clusterID)
        try:
            binlog = binlog_pb2.Binlog.FromString(request.payload)
        except DecodeError as exc:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"payload is not a binlog: {exc}") from None
        if binlog.tp == binlog_pb2.Prewrite:
            state = self._state()
            if state is not NodeState.ONLINE:
                raise _AbortError(grpc.StatusCode.UNAVAILABLE, f"no online: {state.value}")
        if binlog.start_ts == 0 and binlog.commit_ts == 0:
            return  # the client's probe: success, nothing stored
        try:
            self._storage.write_binlog(binlog, request.payload)
        except NoSpaceError as exc:
            raise _AbortError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except StorageClosedError as exc:
            raise _AbortError(grpc.StatusCode.UNAVAILABLE, f"pump is shutting down: {exc}") from None
        except BinlogError as exc:
            log.error("write binlog start_ts=%d commit_ts=%d failed: %s", binlog.start_ts, binlog.commit_ts, exc)
            raise _AbortError(grpc.StatusCode.INTERNAL, f"write binlog failed: {exc}") from None
        except Exception as exc:
            log.exception("write binlog start_ts=%d commit_ts=%d failed", binlog.start_ts, binlog.commit_ts)
            raise _AbortError(grpc.StatusCode.INTERNAL, f"write binlog failed: {type(exc).__name__}") from None
        with self._lock:
            self._write_count += 1

    def _check_cluster(self, cluster_id: int) -> None:
        if cluster_id != self._cluster_id:
            raise _AbortError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cluster id mismatch: request has {cluster_id}, this pump serves {self._cluster_id}",
            )

    # ------------------------------------------------------------------------------- PullBinlogs
    def pull_binlogs(self, request: pump_pb2.PullBinlogReq, context: grpc.ServicerContext) -> Iterator[bytes]:
        started = time.monotonic()
        try:
            self._check_cluster(request.clusterID)
        except _AbortError as failed:
            self._metrics.observe_rpc(PULL_BINLOGS, False, time.monotonic() - started)
            context.abort(failed.code, failed.message)
        stop = threading.Event()
        with self._lock:
            closing = self._closing
            full = len(self._streams) >= self._max_pull_streams
            if not closing and not full:
                self._streams.add(stop)
        if closing:
            context.abort(grpc.StatusCode.UNAVAILABLE, "pump is shutting down")
        if full:
            self._metrics.observe_rpc(PULL_BINLOGS, False, time.monotonic() - started)
            log.warning("refused a pull stream from %s: %d streams open", context.peer(), self._max_pull_streams)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many pull streams")
        if not context.add_callback(stop.set):
            stop.set()  # the RPC is already over
        offset = request.startFrom.offset
        peer = context.peer()
        log.info("pull binlogs from %s: start after commit_ts=%d", peer, offset)
        label = FAIL
        sent = 0
        try:
            for item in self._storage.pull_commit_binlogs(offset, stop):
                yield gogo.marshal_pull_resp(item.payload, item.start_ts, item.commit_ts)
                sent += 1
            label = SUCC
        except StorageClosedError:
            pass
        except Exception:
            log.exception("pull binlogs for %s failed after %d binlogs", peer, sent)
            context.abort(grpc.StatusCode.INTERNAL, "pull binlogs failed on the pump")
        finally:
            with self._lock:
                self._streams.discard(stop)
            self._metrics.rpc_duration.labels(method=PULL_BINLOGS, label=label).observe(time.monotonic() - started)
            log.info("pull binlogs from %s ended after %d binlogs", peer, sent)
        if context.is_active():
            context.abort(grpc.StatusCode.UNAVAILABLE, "pump is shutting down")

    def close_streams(self) -> None:
        """End every PullBinlogs stream (their clients get UNAVAILABLE) and refuse new ones."""
        with self._lock:
            self._closing = True
            streams = list(self._streams)
        for stop in streams:
            stop.set()
        log.info("closed %d pull streams", len(streams))

    # ---------------------------------------------------------------------------------- handlers
    def method_handlers(self) -> dict[str, grpc.RpcMethodHandler[Any, Any]]:
        return {
            "WriteBinlog": grpc.unary_unary_rpc_method_handler(
                self.write_binlog,
                request_deserializer=pump_pb2.WriteBinlogReq.FromString,
                response_serializer=pump_pb2.WriteBinlogResp.SerializeToString,
            ),
            "PullBinlogs": grpc.unary_stream_rpc_method_handler(
                self.pull_binlogs,
                request_deserializer=pump_pb2.PullBinlogReq.FromString,
                response_serializer=_pass_through,
            ),
        }


def _pass_through(data: bytes) -> bytes:
    return data


class GrpcServer:
    """The pump's gRPC server: binlog.Pump on `addr` (and on a unix socket when given)."""

    def __init__(
        self,
        service: PumpService,
        addr: str,
        *,
        socket: str = "",
        max_message_size: int,
        workers: int = GRPC_WORKERS,
    ) -> None:
        size = min(max_message_size, _GRPC_INT_MAX)
        self._executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pump-grpc")
        self._server = grpc.server(
            self._executor,
            maximum_concurrent_rpcs=workers,
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", 0),
            ],
        )
        handlers = service.method_handlers()
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        self._server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
        self.addr = addr
        self.port = self._bind(addr)
        if socket:
            self._bind(f"unix:{socket}")
        self._started = False
        self._stopped = False

    def _bind(self, addr: str) -> int:
        try:
            port = self._server.add_insecure_port(addr)
        except RuntimeError as exc:
            raise BinlogError(f"cannot listen on {addr}: {exc}") from None
        if port == 0:
            raise BinlogError(f"cannot listen on {addr}")
        return port

    def start(self) -> None:
        self._server.start()
        self._started = True
        log.info("gRPC serving binlog.Pump at %s", self.addr)

    def stop(self, grace: float) -> None:
        """Stop within `grace` seconds (running RPCs are cancelled after it), then join the handler threads.

        Close the pull streams first (`PumpService.close_streams`): a stream's thread ends only then.
        Idempotent.
        """
        if self._stopped:
            return
        self._stopped = True
        done = self._server.stop(grace)
        if not done.wait(grace + 1.0):
            log.warning("gRPC server did not stop within %.1fs", grace + 1.0)
        self._executor.shutdown(wait=True, cancel_futures=True)
