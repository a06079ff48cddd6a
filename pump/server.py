"""gRPC `binlog.Pump` over a `PumpStorage`: WriteBinlog and PullBinlogs.

Contracts: docs/formats.md#writebinlog, docs/formats.md#pullbinlogs.

Errors.  The original returns BOTH `WriteBinlogResp.errmsg` and a non-nil Go error, so its clients see a
gRPC error status and treat `err != nil || errmsg != ""` as failure.  grpcio cannot send a response
message together with a non-OK status, so a failed WriteBinlog aborts with a status code and the error
text as details; `errmsg` is therefore empty on every response that arrives (a success).  The codes:

    cluster id mismatch                         FAILED_PRECONDITION  "cluster id mismatch: ..."
    payload is not a binlog.Binlog              INVALID_ARGUMENT     "payload is not a binlog: ..."
    an invalid binlog (pump/validate.py)        INVALID_ARGUMENT     "invalid binlog: <reason>"; nothing stored
    prewrite while the node is not online      UNAVAILABLE          "no online: <state>"
    no space (NoSpaceError: the disk guard, or  RESOURCE_EXHAUSTED   "no available space...": the client does
      ENOSPC / EDQUOT on the value log)                                not retry it
    storage closed / shutting down              UNAVAILABLE
    anything else                               INTERNAL             (logged with its traceback here;
                                                                      the client gets one line)

The liveness probe (empty payload: start_ts == commit_ts == 0, tp == Prewrite) takes the same checks as a
prewrite, as in the original: it succeeds, storing nothing, only while the node is online.

Threads.  The server is a `grpc.aio` server on one event loop thread (`GrpcServer`).  A thread per
call (the sync server) cost more than the storage itself: every WriteBinlog parked a worker thread
until its group commit was durable, and waking ~64 of them per fdatasync, each fighting for the GIL,
halved the throughput (bench/pump_write.py).  Now WriteBinlog never blocks the loop: a storage that
has `submit_binlog` (ours) queues the binlog and calls back from its writer thread, and the
callbacks of a whole group commit wake the loop once (`_Completions`).  Any other `PumpStorage`, or
ours when its write queue is full, is called on the server's thread pool.  Each PullBinlogs stream
reads the storage on a pool thread and hands the marshaled messages to the loop through a
byte-bounded `_Feed`.

Capacity.  At most `max_pull_streams` (default half of the `GRPC_WORKERS` pool) streams are served at
once; one more is refused with RESOURCE_EXHAUSTED "too many pull streams", which leaves pool threads
for writes.  The server is built with `maximum_concurrent_rpcs` = the pool size, so calls beyond it
are refused by grpcio (RESOURCE_EXHAUSTED) instead of queueing without bound.  WriteBinlog payload bytes
in flight (from before the payload is parsed until the storage returned) are bounded by
`max_inflight_write_bytes` (`[storage] max-inflight-write-bytes`, ours, default 256 MiB); a call waits
for room (at most until its deadline: DEADLINE_EXCEEDED), in arrival order, and a payload larger than
the whole budget is admitted alone.  A call cancelled after its binlog reached the storage keeps its
bytes counted until the storage is done with them.

PullBinlogs streams `PullBinlogResp` bytes made by `gogo.marshal_pull_resp` (byte-identical to the Go
pump; also ~45x cheaper than building the message for a 1 MiB payload) through a method handler whose
response serializer passes bytes through.  A stream ends only when the client cancels (its done
callback sets the stream's stop event) or the server closes its streams (`close_streams`, then status
UNAVAILABLE).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent import futures
from typing import Any, Final, Protocol, TypeAlias, TypeVar, runtime_checkable

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from common.errors import BinlogError, NoSpaceError, StorageClosedError
from common.pb import binlog_pb2, gogo, pump_pb2
from common.pull import GC_TS_METADATA
from common.registry import NodeState
from common.tls import TLS
from pump import validate
from pump.metrics import FAIL, PULL_BINLOGS, SUCC, WRITE_BINLOG, PumpMetrics
from pump.storage.api import PumpStorage

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "binlog.Pump"
SLOW_RPC_SECONDS: Final = 1.0
"""A WriteBinlog taking at least this long is logged (original: 1 s)."""
GRPC_WORKERS: Final = 256
"""The server's thread pool (pull streams, blocking storage writes) and its maximum_concurrent_rpcs."""
MAX_PULL_STREAMS: Final = GRPC_WORKERS // 2
"""PullBinlogs streams served at once; each holds a pool thread, the other half is kept for writes."""
DEFAULT_MAX_INFLIGHT_WRITE_BYTES: Final = 256 << 20
"""WriteBinlog payload bytes between arrival and the storage's return (ours)."""
PULL_FEED_BYTES: Final = 1 << 20
"""Marshaled messages a PullBinlogs stream's reader thread may have ready for the loop (one larger
message is let through alone)."""
_GRPC_INT_MAX: Final = 2**31 - 1
_STOP_SLICE: Final = 0.25
"""A pull stream's reader thread waiting for room sees its stop event within this many seconds."""
_EMPTY_RESP: Final = b""
"""`WriteBinlogResp()` serialized: errmsg is empty on every response that arrives."""
_PREWRITE: Final = binlog_pb2.Prewrite

T = TypeVar("T")
WriteContext: TypeAlias = "grpc.aio.ServicerContext[pump_pb2.WriteBinlogReq, bytes]"
PullContext: TypeAlias = "grpc.aio.ServicerContext[pump_pb2.PullBinlogReq, bytes]"
DoneCallback = Callable[[BaseException | None], None]


@runtime_checkable
class SubmittingStorage(Protocol):
    """A storage that can take a write without blocking (`pump.storage.storage.Storage.submit_binlog`)."""

    def submit_binlog(
        self, tp: int, start_ts: int, commit_ts: int, payload: bytes, *, prewrite_key: bytes | None, done: DoneCallback
    ) -> bool: ...


class _AbortError(Exception):
    """A failed WriteBinlog: `code` and `message` go to the client as the status."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ByteBudget:
    """A semaphore counted in bytes, admitting in arrival order; an oversized request is admitted alone.

    Used from one event loop only (not thread-safe); `in_use` may be read from anywhere."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    def try_acquire(self, n: int) -> bool:
        """Take `n` bytes if that needs no waiting."""
        if self._waiting or not self._fits(n):
            return False
        self.in_use += n
        return True

    async def acquire(self, n: int, timeout: float | None = None) -> bool:
        """Take `n` bytes; False when `timeout` seconds passed first."""
        if self.try_acquire(n):
            return True
        entry = (n, asyncio.get_running_loop().create_future())
        self._waiting.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await entry[1]
        except BaseException as exc:
            if entry[1].done() and not entry[1].cancelled():
                self.release(n)  # admitted just as the wait ended
            else:
                if entry in self._waiting:
                    self._waiting.remove(entry)
                self._admit()  # the ones behind may fit now
            if isinstance(exc, TimeoutError):
                return False
            raise
        return True

    def release(self, n: int) -> None:
        self.in_use -= n
        self._admit()

    def _fits(self, n: int) -> bool:
        return self.in_use == 0 or self.in_use + n <= self.limit

    def _admit(self) -> None:
        waiting = self._waiting
        while waiting:
            n, fut = waiting[0]
            if fut.done():  # given up
                waiting.popleft()
                continue
            if not self._fits(n):
                return
            waiting.popleft()
            self.in_use += n
            fut.set_result(None)


class _Completions:
    """Ends storage writes on the event loop: thread-safe `done`, one loop wake-up per burst.

    The vlog writer finishes a whole group commit at once; the first `done` of a burst schedules a
    drain, the others only append.  The drain releases each write's budget bytes (even when its
    call was cancelled meanwhile) and resolves its future."""

    def __init__(self, loop: asyncio.AbstractEventLoop, budget: ByteBudget) -> None:
        self.loop = loop
        self._budget = budget
        self._lock = threading.Lock()
        self._ready: list[tuple[asyncio.Future[None], int, BaseException | None]] = []

    def callback(self, fut: asyncio.Future[None], size: int) -> DoneCallback:
        return functools.partial(self._done, fut, size)

    def _done(self, fut: asyncio.Future[None], size: int, error: BaseException | None) -> None:
        with self._lock:
            self._ready.append((fut, size, error))
            if len(self._ready) > 1:
                return  # a drain is scheduled already
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone, nobody waits
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            ready, self._ready = self._ready, []
        release = self._budget.release
        for fut, size, error in ready:
            release(size)
            if fut.done():
                continue  # the call was cancelled
            if error is None:
                fut.set_result(None)
            else:
                fut.set_exception(error)


def _write_blocking(storage: PumpStorage, binlog: binlog_pb2.Binlog, payload: bytes, done: DoneCallback) -> None:
    """A pool thread's storage write (a storage without `submit_binlog`, or a full write queue)."""
    try:
        storage.write_binlog(binlog, payload)
    except BaseException as exc:
        done(exc)
    else:
        done(None)


class _Feed:
    """Messages from a reader thread to the event loop, bounded by bytes (one larger message passes alone)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, max_bytes: int, stop: threading.Event) -> None:
        self._loop = loop
        self._max = max_bytes
        self._stop = stop
        self._cond = threading.Condition()
        self._items: list[bytes] = []
        self._bytes = 0
        self._ended = False
        self._error: BaseException | None = None
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None

    # reader thread
    def wait_room(self) -> bool:
        """Wait until the feed holds less than its budget (the reader then reads the next binlog, so a
        large one is not read while another waits here); False once the consumer is gone or stopped."""
        with self._cond:
            while self._bytes >= self._max and not self._closed:
                if self._stop.is_set():
                    return False
                self._cond.wait(_STOP_SLICE)
            return not self._closed and not self._stop.is_set()

    def put(self, msg: bytes) -> bool:
        """Hand over `msg`, waiting while the feed is full; False once the consumer is gone or the stream
        is stopped."""
        with self._cond:
            while self._bytes and self._bytes + len(msg) > self._max and not self._closed:
                if self._stop.is_set():
                    return False
                self._cond.wait(_STOP_SLICE)
            if self._closed:
                return False
            self._items.append(msg)
            self._bytes += len(msg)
            self._wake()
            return True

    def end(self, error: BaseException | None = None) -> None:
        """No more messages (`error`: the reader failed with it)."""
        with self._cond:
            self._ended = True
            self._error = error
            self._wake()

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(_resolve, waiter)

    # event loop
    async def get(self) -> list[bytes] | None:
        """Every message ready (waiting for one); None at the end; raises the reader's error."""
        while True:
            with self._cond:
                if self._items:
                    items, self._items, self._bytes = self._items, [], 0
                    self._cond.notify()
                    return items
                if self._error is not None:
                    raise self._error
                if self._ended:
                    return None
                waiter = self._waiter = self._loop.create_future()
            await waiter

    def close(self) -> None:
        """The consumer is gone: a waiting `put` returns False."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class PumpService:
    """The servicer: request checks, the storage call, metrics.  Its handlers run on one event loop."""

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
        self._submitter = storage if isinstance(storage, SubmittingStorage) else None
        self._max_pull_streams = max_pull_streams
        self._write_budget = ByteBudget(max_inflight_write_bytes)
        self._completions: _Completions | None = None
        self._cluster_id = cluster_id
        self._state = state
        self._metrics = metrics
        self._lock = threading.Lock()
        self._streams: set[threading.Event] = set()
        self._closing = False
        self._write_count = 0
        self._last_write = time.monotonic()

    @property
    def write_count(self) -> int:
        """Binlogs stored through WriteBinlog so far (probes and failures excluded)."""
        with self._lock:
            return self._write_count

    @property
    def last_write(self) -> float:
        """`time.monotonic()` when the last binlog was stored through WriteBinlog (construction time
        before the first); the fake binlog loop measures the pump's idle gap from it."""
        with self._lock:
            return self._last_write

    @property
    def live_streams(self) -> int:
        with self._lock:
            return len(self._streams)

    @property
    def inflight_write_bytes(self) -> int:
        return self._write_budget.in_use

    # ------------------------------------------------------------------------------- WriteBinlog
    async def write_binlog(self, request: pump_pb2.WriteBinlogReq, context: WriteContext) -> bytes:
        started = time.monotonic()
        try:
            await self._write_within_budget(request, context)
        except _AbortError as failed:
            self._metrics.loss_binlog.inc()
            self._observe_write(started, False, request)  # before abort: it sends the status at once
            await context.abort(failed.code, failed.message)
        except BaseException:  # cancelled
            self._observe_write(started, False, request)
            raise
        self._observe_write(started, True, request)
        return _EMPTY_RESP

    def _observe_write(self, started: float, ok: bool, request: pump_pb2.WriteBinlogReq) -> None:
        elapsed = time.monotonic() - started
        self._metrics.observe_rpc(WRITE_BINLOG, ok, elapsed)
        if elapsed >= SLOW_RPC_SECONDS:
            log.warning("slow write binlog RPC: %.3fs (payload %d bytes)", elapsed, len(request.payload))

    async def _write_within_budget(self, request: pump_pb2.WriteBinlogReq, context: WriteContext) -> None:
        payload = request.payload
        size = len(payload)
        budget = self._write_budget
        if not budget.try_acquire(size) and not await budget.acquire(size, context.time_remaining()):
            raise _AbortError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"deadline passed waiting for room: {budget.limit} bytes of writes in flight",
            )
        written: asyncio.Future[None] | None = None
        binlog: binlog_pb2.Binlog | None = None
        try:
            binlog = self._check(request.clusterID, payload)
            if binlog is None:
                return  # the client's probe: success, nothing stored
            handed = time.monotonic()
            written = self._submit(binlog, payload, size)  # from here on, the completion releases the bytes
            await written
            self._metrics.storage.write_single(size, time.monotonic() - handed)
        except _AbortError:
            raise
        except NoSpaceError as exc:
            raise _AbortError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        except StorageClosedError as exc:
            raise _AbortError(grpc.StatusCode.UNAVAILABLE, f"pump is shutting down: {exc}") from None
        except BinlogError as exc:
            start_ts, commit_ts = (binlog.start_ts, binlog.commit_ts) if binlog is not None else (0, 0)
            log.error("write binlog start_ts=%d commit_ts=%d failed: %s", start_ts, commit_ts, exc)
            raise _AbortError(grpc.StatusCode.INTERNAL, f"write binlog failed: {exc}") from None
        except Exception as exc:
            start_ts, commit_ts = (binlog.start_ts, binlog.commit_ts) if binlog is not None else (0, 0)
            log.exception("write binlog start_ts=%d commit_ts=%d failed", start_ts, commit_ts)
            raise _AbortError(grpc.StatusCode.INTERNAL, f"write binlog failed: {type(exc).__name__}") from None
        finally:
            if written is None:
                budget.release(size)
        with self._lock:
            self._write_count += 1
            self._last_write = time.monotonic()

    def _check(self, cluster_id: int, payload: bytes) -> binlog_pb2.Binlog | None:
        """The request's binlog, or None for a probe; _AbortError when it is refused."""
        self._check_cluster(cluster_id)
        try:
            binlog = binlog_pb2.Binlog.FromString(payload)
        except DecodeError as exc:
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"payload is not a binlog: {exc}") from None
        reason = validate.refusal(binlog)
        if reason is not None:
            log.warning(
                "refused an invalid binlog start_ts=%d commit_ts=%d tp=%d: %s",
                binlog.start_ts,
                binlog.commit_ts,
                binlog.tp,
                reason,
            )
            raise _AbortError(grpc.StatusCode.INVALID_ARGUMENT, f"invalid binlog: {reason}")
        if binlog.tp == _PREWRITE:
            state = self._state()
            if state is not NodeState.ONLINE:
                raise _AbortError(grpc.StatusCode.UNAVAILABLE, f"no online: {state.value}")
        if validate.is_probe(binlog):
            return None
        return binlog

    def _submit(self, binlog: binlog_pb2.Binlog, payload: bytes, size: int) -> asyncio.Future[None]:
        """Hand the binlog to the storage; the future ends when it is durable.  Raises what the storage
        refuses at once (closed, no space)."""
        loop = asyncio.get_running_loop()
        completions = self._completions
        if completions is None or completions.loop is not loop:
            completions = self._completions = _Completions(loop, self._write_budget)
        written: asyncio.Future[None] = loop.create_future()
        done = completions.callback(written, size)
        submitter = self._submitter
        if submitter is not None:
            tp = binlog.tp
            key = binlog.prewrite_key if tp == _PREWRITE and binlog.HasField("prewrite_key") else None
            if submitter.submit_binlog(tp, binlog.start_ts, binlog.commit_ts, payload, prewrite_key=key, done=done):
                return written
        loop.run_in_executor(None, _write_blocking, self._storage, binlog, payload, done)
        return written

    def _check_cluster(self, cluster_id: int) -> None:
        if cluster_id != self._cluster_id:
            raise _AbortError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cluster id mismatch: request has {cluster_id}, this pump serves {self._cluster_id}",
            )

    # ------------------------------------------------------------------------------- PullBinlogs
    async def pull_binlogs(self, request: pump_pb2.PullBinlogReq, context: PullContext) -> AsyncIterator[bytes]:
        started = time.monotonic()
        try:
            self._check_cluster(request.clusterID)
        except _AbortError as failed:
            self._metrics.observe_rpc(PULL_BINLOGS, False, time.monotonic() - started)
            await context.abort(failed.code, failed.message)
        stop = threading.Event()
        with self._lock:
            closing = self._closing
            full = len(self._streams) >= self._max_pull_streams
            if not closing and not full:
                self._streams.add(stop)
        if closing:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "pump is shutting down")
        if full:
            self._metrics.observe_rpc(PULL_BINLOGS, False, time.monotonic() - started)
            log.warning("refused a pull stream from %s: %d streams open", context.peer(), self._max_pull_streams)
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many pull streams")
        context.add_done_callback(lambda _: stop.set())  # type: ignore[arg-type]  # grpc-stubs: a class
        offset = request.startFrom.offset
        peer = context.peer()
        gc_ts = self._storage.gc_ts()
        if offset < gc_ts:
            log.warning("pull binlogs from %s: start after commit_ts=%d is below the gc ts %d", peer, offset, gc_ts)
        log.info("pull binlogs from %s: start after commit_ts=%d", peer, offset)
        loop = asyncio.get_running_loop()
        feed = _Feed(loop, PULL_FEED_BYTES, stop)
        label = FAIL
        sent = 0
        broken = False
        try:  # from here on the finally gives the stream's slot back, also when the client leaves at once
            # What this pump still holds, for a reader that must not miss anything (binlog-spark replay
            # --from-pump-addrs): commits at or below the gc ts may be gone.  The original's drainer
            # ignores metadata it does not know.
            await context.send_initial_metadata(((GC_TS_METADATA, str(gc_ts)),))
            loop.run_in_executor(None, self._read_stream, offset, stop, feed)
            while (batch := await feed.get()) is not None:
                while batch:
                    yield batch.pop(0)  # a sent message is not kept while the next one is read
                    sent += 1
            label = SUCC
        except StorageClosedError:
            pass
        except asyncio.CancelledError:
            label = SUCC  # the client cancelled: the stream's normal end
            raise
        except Exception:
            log.exception("pull binlogs for %s failed after %d binlogs", peer, sent)
            broken = True
        finally:
            stop.set()
            feed.close()
            with self._lock:
                self._streams.discard(stop)
            self._metrics.observe_rpc(PULL_BINLOGS, label == SUCC, time.monotonic() - started)
            log.info("pull binlogs from %s ended after %d binlogs", peer, sent)
        if broken:
            await context.abort(grpc.StatusCode.INTERNAL, "pull binlogs failed on the pump")
        if not context.done():
            await context.abort(grpc.StatusCode.UNAVAILABLE, "pump is shutting down")

    def _read_stream(self, offset: int, stop: threading.Event, feed: _Feed) -> None:
        """A pool thread: the storage's stream, marshaled, into `feed` until `stop` or the consumer leaves."""
        try:
            items = iter(self._storage.pull_commit_binlogs(offset, stop))
            while feed.wait_room():  # the next binlog is read once there is room for it
                item = next(items, None)
                if item is None:
                    break
                msg = gogo.marshal_pull_resp(item.payload, item.start_ts, item.commit_ts)
                del item  # a binlog can be GBs: one copy at a time
                if not feed.put(msg):
                    break
                del msg
        except BaseException as exc:
            feed.end(exc)
        else:
            feed.end()

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
                response_serializer=_pass_through,
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
    """The pump's gRPC server: binlog.Pump on `addr` (and on a unix socket when given), served by a
    `grpc.aio` server on its own event loop thread, with a thread pool of `workers`.

    With `tls` both listeners are TLS (as the original's one set of server credentials): a client
    certificate signed by the CA is required, and cert-allowed-cn is checked by an interceptor."""

    def __init__(
        self,
        service: PumpService,
        addr: str,
        *,
        socket: str = "",
        max_message_size: int,
        workers: int = GRPC_WORKERS,
        tls: TLS | None = None,
    ) -> None:
        self._executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pump-grpc")
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._executor)
        self._thread = threading.Thread(target=self._run_loop, name="pump-grpc-loop", daemon=True)
        self._thread.start()
        self.addr = addr
        self._started = False
        self._stopped = False
        try:
            self._server, self.port = self._call(self._build(service, addr, socket, max_message_size, workers, tls=tls))
        except BaseException:
            self._close_loop()
            raise

    def _run_loop(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    @staticmethod
    async def _build(
        service: PumpService, addr: str, socket: str, max_message_size: int, workers: int, *, tls: TLS | None
    ) -> tuple[grpc.aio.Server, int]:
        size = min(max_message_size, _GRPC_INT_MAX)
        server = grpc.aio.server(
            maximum_concurrent_rpcs=workers,
            interceptors=None if tls is None else tls.aio_server_interceptors(),
            options=[
                ("grpc.max_receive_message_length", size),
                ("grpc.max_send_message_length", size),
                ("grpc.so_reuseport", 0),
            ],
        )
        handlers = service.method_handlers()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
        server.add_registered_method_handlers(SERVICE_NAME, handlers)  # type: ignore[attr-defined]
        creds = None if tls is None else tls.server_credentials()
        port = GrpcServer._bind(server, addr, creds)
        if socket:
            GrpcServer._bind(server, f"unix:{socket}", creds)
        return server, port

    @staticmethod
    def _bind(server: grpc.aio.Server, addr: str, creds: grpc.ServerCredentials | None) -> int:
        try:
            port = server.add_insecure_port(addr) if creds is None else server.add_secure_port(addr, creds)
        except RuntimeError as exc:
            raise BinlogError(f"cannot listen on {addr}: {exc}") from None
        if port == 0:
            raise BinlogError(f"cannot listen on {addr}")
        return port

    def start(self) -> None:
        self._call(self._server.start())
        self._started = True
        log.info("gRPC serving binlog.Pump at %s", self.addr)

    def stop(self, grace: float) -> None:
        """Stop within `grace` seconds (running RPCs are cancelled after it), then end the loop and join
        the pool's threads.

        Close the pull streams first (`PumpService.close_streams`): a stream's reader thread ends only
        then.  Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        try:
            self._call(self._server.stop(grace), grace + 1.0)
        except futures.TimeoutError:
            log.warning("gRPC server did not stop within %.1fs", grace + 1.0)
        self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._executor.shutdown(wait=True, cancel_futures=True)
