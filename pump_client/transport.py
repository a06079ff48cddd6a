"""gRPC to the pumps: one channel per pump address, `binlog.Pump/WriteBinlog` calls.

This is the client's only gRPC boundary: a failed call becomes an `AttemptError` carrying the status
code (the retry policy decides what it means).  Calls do not wait for a connection
(`wait_for_ready=False`), so a dead pump fails at once with UNAVAILABLE instead of eating the deadline.
With `tls`, every channel is a TLS channel (the pumps' certificates are checked against the CA, and the
client's certificate is presented).  An UNAVAILABLE error says that TLS may be the cause: grpcio reports a
plaintext call to a TLS pump, or a handshake the pump refused, only as "Socket closed".

Reconnect: grpcio's channel backs off between connection attempts (up to minutes), so after a pump
restarts the client recreates the channel instead (`reset`).  Every channel has a generation; a reset
names the generation that failed, so many threads seeing the same failure replace the channel once.
The replaced channel is closed only after `retire_after` seconds (> the longest RPC deadline), so
calls still running on it are not cancelled by another thread's reset.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import grpc

from common.pb import pump_pb2, pump_pb2_grpc
from common.tls import TLS, connect_hint

log = logging.getLogger(__name__)

WRITE_METHOD = "/binlog.Pump/WriteBinlog"
DEFAULT_MAX_MESSAGE_SIZE = 2 * 1024**3 - 4 * 1024**2
"""grpc send limit: the pump's default `max-message-size` (2 GiB - 4 MiB, pump/config.py), so 1 GiB binlogs pass."""


class AttemptError(Exception):
    """One failed WriteBinlog call."""

    def __init__(self, code: grpc.StatusCode | None, message: str, generation: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.generation = generation

    def describe(self) -> str:
        return f"{self.code.name if self.code is not None else 'ERROR'}: {self.message}"


Request = pump_pb2.WriteBinlogReq | bytes
"""A WriteBinlog request: a message, or its wire bytes (pump_client/payload.py), sent without a copy."""


@dataclass
class _Conn:
    channel: grpc.Channel
    stub: pump_pb2_grpc.PumpStub
    raw: grpc.UnaryUnaryMultiCallable[bytes, pump_pb2.WriteBinlogResp]
    """WriteBinlog taking request bytes (no serializer)."""
    generation: int


class PumpTransport:
    """Channels to pump addresses; thread-safe."""

    def __init__(
        self,
        *,
        tls: TLS | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        retire_after: float = 30.0,
    ) -> None:
        self._credentials = None if tls is None else tls.channel_credentials()
        self._options = [
            ("grpc.max_send_message_length", max_message_size),
            ("grpc.max_receive_message_length", 4 * 1024**2),
        ]
        self._retire_after = retire_after
        self._lock = threading.Lock()
        self._conns: dict[str, _Conn] = {}
        self._retired: list[tuple[float, grpc.Channel]] = []
        self._generation = 0
        self._closed = False

    def _new_conn_locked(self, addr: str) -> _Conn:
        if self._credentials is None:
            channel = grpc.insecure_channel(addr, options=self._options)
        else:
            channel = grpc.secure_channel(addr, self._credentials, options=self._options)
        self._generation += 1
        raw: grpc.UnaryUnaryMultiCallable[bytes, pump_pb2.WriteBinlogResp] = channel.unary_unary(
            WRITE_METHOD, request_serializer=None, response_deserializer=pump_pb2.WriteBinlogResp.FromString
        )
        conn = _Conn(channel, pump_pb2_grpc.PumpStub(channel), raw, self._generation)
        self._conns[addr] = conn
        return conn

    def _conn(self, addr: str) -> _Conn:
        with self._lock:
            if self._closed:
                raise AttemptError(None, "pump client is closed", 0)
            conn = self._conns.get(addr)
            return conn if conn is not None else self._new_conn_locked(addr)

    def write(self, addr: str, request: Request, timeout: float) -> None:
        """One WriteBinlog call; AttemptError when it failed (status code, or errmsg)."""
        conn = self._conn(addr)
        try:
            if isinstance(request, bytes):
                resp = conn.raw(request, timeout=timeout, wait_for_ready=False)
            else:
                resp = conn.stub.WriteBinlog(request, timeout=timeout, wait_for_ready=False)
        except grpc.RpcError as exc:
            code = exc.code() if callable(getattr(exc, "code", None)) else None
            details = exc.details() if callable(getattr(exc, "details", None)) else str(exc)
            if code is grpc.StatusCode.UNAVAILABLE:
                details = f"{details or ''}{connect_hint(self._credentials is not None)}"
            raise AttemptError(code, details or "", conn.generation) from None
        except ValueError as exc:  # the channel was closed under us (client closing)
            raise AttemptError(None, str(exc), conn.generation) from None
        if resp.errmsg:  # an original pump sends errmsg with its error status; ours never does
            raise AttemptError(grpc.StatusCode.UNKNOWN, str(resp.errmsg), conn.generation)

    def reset(self, addr: str, generation: int | None = None) -> None:
        """Replace the channel to `addr` (only if it is still `generation`, when given)."""
        now = time.monotonic()
        with self._lock:
            conn = self._conns.get(addr)
            if self._closed or conn is None or (generation is not None and conn.generation != generation):
                return
            del self._conns[addr]
            self._retired.append((now, conn.channel))
            due = [ch for at, ch in self._retired if now - at >= self._retire_after]
            self._retired = [(at, ch) for at, ch in self._retired if now - at < self._retire_after]
        log.debug("reset channel to %s (generation %d)", addr, conn.generation)
        for channel in due:
            channel.close()

    def drop(self, addr: str) -> None:
        """Forget the channel to an address no pump uses any more."""
        self.reset(addr)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            channels = [c.channel for c in self._conns.values()] + [ch for _, ch in self._retired]
            self._conns.clear()
            self._retired.clear()
        for channel in channels:
            channel.close()
