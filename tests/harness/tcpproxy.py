"""A TCP forwarder in the host namespace that can delay or cut the traffic it carries.

Each accepted connection gets a connection to the target and, per direction, a reader thread and a
writer thread joined by a bounded queue: the reader stamps each chunk with a release time (now plus a
uniform delay drawn from that direction's `(lo, hi)` ms), the writer sends the chunks in order once
their time has come.  So a delay adds latency without capping throughput, and the bytes of a
connection keep their order.  EOF from one side is passed on as a half-close once the queued bytes
are sent; an error on either side closes both.

`cut()` closes every open connection with a reset and resets new ones as soon as they are accepted
(the listening port stays ours, so `restore()` cannot lose it); `restore()` accepts again.
`blackhole()` makes every connection open now drop what it carries, both ways, for good, while its
sockets stay open: what a client sees of a peer that vanished without a FIN or RST (a host gone, an
address moved); new connections work normally.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import random
import select
import socket
import struct
import threading
import time

log = logging.getLogger(__name__)

CHUNK = 65536
QUEUE_CHUNKS = 32
"""Per direction at most this many chunks wait in the proxy; the reader then blocks (back-pressure)."""
MAX_CONNECTIONS = 256
CONNECT_TIMEOUT = 5.0

UP = "up"
"""Client to target."""
DOWN = "down"
"""Target to client."""

_EOF = b""


def _reset(sock: socket.socket) -> None:
    """Close `sock` with a RST (SO_LINGER 0) so the peer sees the connection fail at once."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Conn:
    def __init__(self, proxy: TcpProxy, client: socket.socket, target: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.target = target
        self.closed = threading.Event()
        self.dropping = False
        self._lock = threading.Lock()
        self._done = 0
        self.threads: list[threading.Thread] = []
        for direction, src, dst in ((UP, client, target), (DOWN, target, client)):
            q: queue.Queue[tuple[float, bytes]] = queue.Queue(QUEUE_CHUNKS)
            self.threads.append(threading.Thread(target=self._read, args=(direction, src, q), daemon=True))
            self.threads.append(threading.Thread(target=self._write, args=(dst, q), daemon=True))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def _put(self, q: queue.Queue[tuple[float, bytes]], item: tuple[float, bytes]) -> bool:
        while not self.closed.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _read(self, direction: str, src: socket.socket, q: queue.Queue[tuple[float, bytes]]) -> None:
        try:
            while not self.closed.is_set():
                data = src.recv(CHUNK)
                lo, hi = self.proxy.delay_ms(direction)
                release = time.monotonic() + (random.uniform(lo, hi) / 1000.0 if hi > 0 else 0.0)
                if not self._put(q, (release, data)) or not data:
                    return
        except OSError:
            self.close(reset=True)

    def _write(self, dst: socket.socket, q: queue.Queue[tuple[float, bytes]]) -> None:
        try:
            while not self.closed.is_set():
                try:
                    release, data = q.get(timeout=0.2)
                except queue.Empty:
                    continue
                wait = release - time.monotonic()
                if wait > 0 and self.closed.wait(wait):
                    return
                if self.dropping:
                    continue
                if data == _EOF:
                    with contextlib.suppress(OSError):
                        dst.shutdown(socket.SHUT_WR)
                    with self._lock:
                        self._done += 1
                        both = self._done == 2
                    if both:
                        self.close(reset=False)
                    return
                dst.sendall(data)
        except OSError:
            self.close(reset=True)

    def close(self, reset: bool) -> None:
        with self._lock:
            if self.closed.is_set():
                return
            self.closed.set()
        for s in (self.client, self.target):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            if reset:
                _reset(s)
            else:
                with contextlib.suppress(OSError):
                    s.close()
        self.proxy._forget(self)


class TcpProxy:
    """Forwards `listen_host:listen_port` to `target_host:target_port`, with settable delay and cut."""

    def __init__(self, listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
        self.listen_host = listen_host
        self.listen_port = listen_port
        self.target_host = target_host
        self.target_port = target_port
        self._delay: dict[str, tuple[float, float]] = {UP: (0.0, 0.0), DOWN: (0.0, 0.0)}
        self._cut = False
        self._lock = threading.Lock()
        self._conns: set[_Conn] = set()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.accepted = 0

    @property
    def address(self) -> str:
        return f"{self.listen_host}:{self.listen_port}"

    def describe(self) -> str:
        return f"proxy {self.address} -> {self.target_host}:{self.target_port}"

    def delay_ms(self, direction: str) -> tuple[float, float]:
        with self._lock:
            return self._delay[direction]

    def set_delay(self, lo_ms: float, hi_ms: float | None = None, direction: str = "both") -> None:
        """Delay each chunk by a uniform `lo_ms..hi_ms` in `direction` ("up", "down" or "both")."""
        hi = lo_ms if hi_ms is None else hi_ms
        if not 0 <= lo_ms <= hi:
            raise ValueError(f"bad delay range {lo_ms}..{hi}")
        with self._lock:
            for d in (UP, DOWN) if direction == "both" else (direction,):
                if d not in self._delay:
                    raise ValueError(f"bad direction {direction!r}")
                self._delay[d] = (float(lo_ms), float(hi))

    def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.listen_host, self.listen_port))
            sock.listen(128)
        except OSError as exc:
            sock.close()
            raise OSError(f"{self.describe()}: cannot listen: {exc}") from exc
        self.listen_port = sock.getsockname()[1]
        self._sock = sock
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.address}", daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._sock], [], [], 0.2)
            if not ready:
                continue
            try:
                client, _ = self._sock.accept()
            except OSError:
                continue
            with self._lock:
                refuse = self._cut or len(self._conns) >= MAX_CONNECTIONS
            if refuse:
                _reset(client)
                continue
            threading.Thread(target=self._open, args=(client,), daemon=True).start()

    def _open(self, client: socket.socket) -> None:
        try:
            target = socket.create_connection((self.target_host, self.target_port), timeout=CONNECT_TIMEOUT)
        except OSError as exc:
            log.info("%s: target unreachable: %s", self.describe(), exc)
            _reset(client)
            return
        target.settimeout(None)
        for s in (client, target):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(self, client, target)
        with self._lock:
            if self._cut or self._stop.is_set():
                _reset(client)
                _reset(target)
                return
            self._conns.add(conn)
            self.accepted += 1
        conn.start()

    def _forget(self, conn: _Conn) -> None:
        with self._lock:
            self._conns.discard(conn)

    def cut(self) -> None:
        """Reset every open connection and every new one until `restore()`."""
        with self._lock:
            self._cut = True
            conns = list(self._conns)
        for c in conns:
            c.close(reset=True)

    def blackhole(self) -> int:
        """Make the connections open now drop everything from here on (sockets kept); how many."""
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.dropping = True
        return len(conns)

    def restore(self) -> None:
        with self._lock:
            self._cut = False

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._conns)

    def close(self) -> None:
        """Stop accepting and close every connection. Idempotent."""
        self._stop.set()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            c.close(reset=True)
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
