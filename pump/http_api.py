"""The pump's HTTP API on `status-addr` (reference §1.9; DESIGN §4).

    GET  /status                 {"status": {nodeID: NodeStatus JSON as in etcd, ...}, "CommitTS": <fresh TSO>,
                                  "Checkpoint": {storage status}, "ErrMsg": ""}   (ErrMsg set if part failed)
    GET  /drainers               [drainer NodeStatus JSON, ...]
    PUT  /state/{nodeID}/{pause|close}
                                 200 {"message":"apply action pause success!","code":200,"data":null}
                                 refused: {"message": why, "code": 3, "data": null} with HTTP 404 (other
                                 node id), 400 (unknown action) or 409 (the pump is not online)
    POST /debug/gc/trigger       text "trigger gc success" or "gc is working"
    GET  /debug/binlog/{ts}      text dump of the binlog indexed at ts and its PrewriteValue
    GET  /metrics                Prometheus text

Anything else is a JSON error with code 3 (404 unknown path, 405 wrong method).  A failing backend call
gives a 500 JSON error with one line; the traceback stays in this process's log.  One thread serves each
request (HTTP/1.0, one request per connection) and `stop()` joins them all.
"""

from __future__ import annotations

import json
import logging
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Protocol
from urllib.parse import unquote, urlsplit

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from common.errors import BinlogError
from common.pb import binlog_pb2
from common.registry import NodeStatus
from pump.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from pump.node import ActionError
from pump.storage.api import StorageStatus

log = logging.getLogger(__name__)

ERROR_CODE: Final = 3
"""The `code` of an error response (the original's util.ErrResponsef)."""
REQUEST_TIMEOUT: Final = 30.0
SHUTDOWN_POLL: Final = 0.1
"""How often the serving loop checks for shutdown (seconds)."""


class PumpHTTPBackend(Protocol):
    """What the HTTP API asks of the pump (implemented by PumpApp)."""

    def pump_statuses(self) -> list[NodeStatus]: ...

    def drainer_statuses(self) -> list[NodeStatus]: ...

    def fresh_ts(self) -> int: ...

    def storage_status(self) -> StorageStatus: ...

    def apply_action(self, node_id: str, action: str) -> None:
        """Start pause/close; raises ActionError when refused."""
        ...

    def trigger_gc(self) -> bool: ...

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None: ...

    def metrics_text(self) -> bytes: ...


def status_json(status: NodeStatus) -> Any:
    """A node status as the same JSON object that etcd holds."""
    return json.loads(status.to_json())


def checkpoint_json(st: StorageStatus) -> dict[str, Any]:
    return {
        "suffix": st.head_fid,
        "offset": st.head_offset,
        "maxCommitTS": st.max_commit_ts,
        "gcTS": st.gc_ts,
        "capacity": st.capacity_bytes,
        "available": st.available_bytes,
        "pendingPrewrites": st.pending_prewrites,
        "chaserOn": st.chaser_on,
        "writeCount": st.write_count,
    }


def dump_binlog(ts: int, binlog: binlog_pb2.Binlog, prewrite: binlog_pb2.Binlog | None) -> str:
    """The text of GET /debug/binlog/{ts}: the binlog, then the PrewriteValue it carries or its prewrite's."""
    lines = [f"binlog at ts {ts}:", text_format.MessageToString(binlog).rstrip()]
    source = binlog if binlog.HasField("prewrite_value") else prewrite
    if source is not None and source.HasField("prewrite_value"):
        pv = binlog_pb2.PrewriteValue()
        try:
            pv.ParseFromString(source.prewrite_value)
            text = text_format.MessageToString(pv).rstrip()
        except DecodeError as exc:
            text = f"(undecodable: {exc})"
        lines += [f"prewrite value (of start_ts {source.start_ts}):", text]
    else:
        lines.append("prewrite value: none")
    return "\n".join(lines) + "\n"


class _Handler(BaseHTTPRequestHandler):
    server: StatusServer._HTTPServer
    timeout = REQUEST_TIMEOUT
    protocol_version = "HTTP/1.0"

    # ------------------------------------------------------------------------------------ verbs
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

    # ---------------------------------------------------------------------------------- routing
    def _dispatch(self, method: str) -> None:
        parts = [unquote(p) for p in urlsplit(self.path).path.split("/") if p]
        backend = self.server.backend
        try:
            self._route(method, parts, backend)
        except ActionError as exc:
            self._error(exc.http_status, str(exc))
        except Exception as exc:
            log.exception("HTTP %s %s failed", method, self.path)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    def _route(self, method: str, parts: list[str], backend: PumpHTTPBackend) -> None:
        match parts:
            case ["status"]:
                if self._allow(method, "GET"):
                    self._status(backend)
            case ["drainers"]:
                if self._allow(method, "GET"):
                    self._json(HTTPStatus.OK, [status_json(d) for d in backend.drainer_statuses()])
            case ["state", node_id, action]:
                if self._allow(method, "PUT"):
                    backend.apply_action(node_id, action)
                    self._json(HTTPStatus.OK, {"message": f"apply action {action} success!", "code": 200, "data": None})
            case ["debug", "gc", "trigger"]:
                if self._allow(method, "POST"):
                    self._text(HTTPStatus.OK, "trigger gc success\n" if backend.trigger_gc() else "gc is working\n")
            case ["debug", "binlog", raw_ts]:
                if self._allow(method, "GET"):
                    self._binlog(backend, raw_ts)
            case ["metrics"]:
                if self._allow(method, "GET"):
                    self._send(HTTPStatus.OK, backend.metrics_text(), METRICS_CONTENT_TYPE)
            case _:
                self._error(HTTPStatus.NOT_FOUND, f"no such endpoint: {method} {self.path}")

    def _allow(self, method: str, allowed: str) -> bool:
        if method == allowed:
            return True
        self._error(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {self.path} (use {allowed})")
        return False

    # --------------------------------------------------------------------------------- endpoints
    def _status(self, backend: PumpHTTPBackend) -> None:
        errors: list[str] = []
        doc: dict[str, Any] = {"status": {}, "CommitTS": 0, "Checkpoint": {}, "ErrMsg": ""}
        try:
            doc["status"] = {s.node_id: status_json(s) for s in backend.pump_statuses()}
        except Exception as exc:
            errors.append(f"list pumps: {exc}")
        try:
            doc["CommitTS"] = backend.fresh_ts()
        except Exception as exc:
            errors.append(f"get ts: {exc}")
        try:
            doc["Checkpoint"] = checkpoint_json(backend.storage_status())
        except Exception as exc:
            errors.append(f"storage status: {exc}")
        doc["ErrMsg"] = "; ".join(errors)
        self._json(HTTPStatus.OK, doc)

    def _binlog(self, backend: PumpHTTPBackend, raw_ts: str) -> None:
        if not raw_ts.isdigit():
            self._error(HTTPStatus.BAD_REQUEST, f"bad ts {raw_ts!r}: expected a non-negative integer")
            return
        ts = int(raw_ts)
        binlog = backend.get_binlog(ts)
        if binlog is None:
            self._text(HTTPStatus.NOT_FOUND, f"no binlog at ts {ts}\n")
            return
        prewrite = None
        if binlog.tp != binlog_pb2.Prewrite and binlog.start_ts and binlog.start_ts != ts:
            candidate = backend.get_binlog(binlog.start_ts)
            if candidate is not None and candidate.tp == binlog_pb2.Prewrite:
                prewrite = candidate
        self._text(HTTPStatus.OK, dump_binlog(ts, binlog, prewrite))

    # ----------------------------------------------------------------------------------- output
    def _error(self, status: int, message: str) -> None:
        self._json(status, {"message": message, "code": ERROR_CODE, "data": None})

    def _json(self, status: int, doc: Any) -> None:
        self._send(status, (json.dumps(doc) + "\n").encode(), "application/json")

    def _text(self, status: int, text: str) -> None:
        self._send(status, text.encode(), "text/plain; charset=utf-8")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class StatusServer:
    """The HTTP API on its own thread; `stop()` shuts it down and joins every thread."""

    class _HTTPServer(ThreadingHTTPServer):
        daemon_threads = False  # server_close() joins the request threads
        block_on_close = True
        backend: PumpHTTPBackend

    def __init__(self, backend: PumpHTTPBackend, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        try:
            self._httpd = self._HTTPServer((host.strip("[]"), int(port)), _Handler)
        except OSError as exc:
            raise BinlogError(f"cannot listen on status-addr {addr}: {exc.strerror or exc}") from None
        self._httpd.backend = backend
        self.port = int(self._httpd.server_address[1])
        self.addr = f"{host}:{self.port}"
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL}, name="pump-http", daemon=True
        )
        self._thread.start()
        log.info("HTTP status API at http://%s", self.addr)

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
