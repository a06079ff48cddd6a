"""A small threaded HTTP/1.0 JSON server for the status APIs of pump and drainer.

A component's API is a :class:`JsonHandler` subclass that implements ``route(method, parts)``
(``parts`` = the unquoted, non-empty path segments) with the output helpers below, and a
:class:`StatusServer` serving it on ``status-addr``.  Responses:

* JSON errors are ``{"message": why, "code": 3, "data": null}`` (the original's ``ErrResponsef``);
  an unknown path is 404, a wrong method 405;
* an :class:`HTTPActionError` raised by a route becomes its own HTTP status;
* any other exception is a 500 with one line; the traceback stays in this process's log.

One thread serves each request (one request per connection) and ``stop()`` joins them all.

HTTPS (``tls``, the node's ``[security]``): the listening socket accepts plain TCP and each request's
thread runs the TLS handshake (so a slow or silent client never stalls the accept loop).  A client
certificate signed by ssl-ca is required: a client without one, or with another CA's, fails the
handshake (logged here, nothing is served).  With ``cert-allowed-cn`` set, a certificate whose CN is
not on the list gets ``403`` with the usual JSON error naming the CN.  Everything, /metrics too, is
behind the same check, as the original served it on its one TLS port.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from common.errors import BinlogError
from common.tls import TLS

log = logging.getLogger(__name__)

ERROR_CODE: Final = 3
"""The `code` of an error response (the original's util.ErrResponsef)."""
REQUEST_TIMEOUT: Final = 30.0
SHUTDOWN_POLL: Final = 0.1
"""How often the serving loop checks for shutdown (seconds)."""
METRICS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class HTTPActionError(BinlogError):
    """A refused request; `http_status` says why (e.g. 404 other node, 400 bad action, 409 wrong state)."""

    def __init__(self, http_status: int, message: str) -> None:
        super().__init__(message)
        self.http_status = http_status


class JsonHandler(BaseHTTPRequestHandler):
    """Dispatch and output helpers; subclasses implement `route` and reach their backend as `self.backend`."""

    server: _Server
    timeout = REQUEST_TIMEOUT
    protocol_version = "HTTP/1.0"

    @property
    def backend(self) -> Any:
        return self.server.backend

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("http %s: %s", self.client_address[0], format % args)

    def _dispatch(self, method: str) -> None:
        why = self.server.refusal(self.connection)
        if why is not None:
            log.warning("HTTPS: %s %s from %s refused: %s", method, self.path, self.client_address[0], why)
            self.error(HTTPStatus.FORBIDDEN, why)
            return
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
        try:
            self.route(method, parts)
        except HTTPActionError as exc:
            self.error(exc.http_status, str(exc))
        except Exception as exc:
            log.exception("HTTP %s %s failed", method, self.path)
            self.error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def route(self, method: str, parts: list[str]) -> None:
        raise NotImplementedError

    def not_found(self, method: str) -> None:
        self.error(HTTPStatus.NOT_FOUND, f"no such endpoint: {method} {self.path}")

    def allow(self, method: str, allowed: str) -> bool:
        if method == allowed:
            return True
        self.error(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {self.path} (use {allowed})")
        return False

    def error(self, status: int, message: str) -> None:
        self.json(status, {"message": message, "code": ERROR_CODE, "data": None})

    def json(self, status: int, doc: Any) -> None:
        self.send(status, (json.dumps(doc) + "\n").encode(), "application/json")

    def text(self, status: int, text: str) -> None:
        self.send(status, text.encode(), "text/plain; charset=utf-8")

    def send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the request threads
    block_on_close = True
    backend: Any
    tls: TLS | None = None
    ssl_context: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        if self.ssl_context is None:
            return sock, addr
        # no handshake here: it runs on the request's own thread (finish_request)
        return self.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.settimeout(REQUEST_TIMEOUT)
            try:
                request.do_handshake()
            except (ssl.SSLEOFError, ConnectionError, TimeoutError) as exc:
                # a TCP probe (port check) or a client that went away: nothing to warn about
                log.debug("HTTPS: connection from %s closed before the TLS handshake: %s", client_address[0], exc)
                return
            except (ssl.SSLError, OSError) as exc:
                log.warning("HTTPS: TLS handshake with %s failed: %s", client_address[0], exc)
                return
        super().finish_request(request, client_address)

    def refusal(self, connection: Any) -> str | None:
        """Why this connection's client certificate is refused by cert-allowed-cn, or None."""
        tls = self.tls
        if tls is None or not isinstance(connection, ssl.SSLSocket):
            return None
        return tls.refusal(_common_name(connection.getpeercert()))


class StatusServer:
    """An HTTP API on its own thread; `stop()` shuts it down and joins every thread."""

    def __init__(
        self, backend: Any, addr: str, handler: type[JsonHandler], *, name: str = "http", tls: TLS | None = None
    ) -> None:
        host, _, port = addr.rpartition(":")
        context = None if tls is None else tls.server_ssl_context()
        try:
            self._httpd = _Server((host.strip("[]"), int(port)), handler)
        except (OSError, ValueError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise BinlogError(f"cannot listen on status-addr {addr}: {why}") from None
        self._httpd.backend = backend
        self._httpd.tls = tls
        self._httpd.ssl_context = context
        self.scheme = "http" if tls is None else "https"
        self.port = int(self._httpd.server_address[1])
        self.addr = f"{host}:{self.port}"
        self._name = name
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, name=self._name, daemon=True
        )
        self._thread.start()
        log.info("HTTP status API at %s://%s", self.scheme, self.addr)

    def stop(self) -> None:
        """Idempotent."""
        if self._closed:
            return
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is not None:
            self._httpd.shutdown()
            thread.join()
        self._httpd.server_close()
        log.info("HTTP status API stopped")


def _common_name(cert: Any) -> str | None:
    """The CN in `SSLSocket.getpeercert()`'s subject (a tuple of RDNs of (name, value) pairs)."""
    for rdn in (cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None
