"""The pump's HTTP API on `status-addr` (docs/architecture.md#http-api).

    GET  /status                 {"status": {nodeID: NodeStatus JSON as in etcd, ...}, "CommitTS": <fresh TSO>,
                                  "Checkpoint": {storage status}, "ErrMsg": ""}   (ErrMsg set if part failed)
    GET  /drainers               [drainer NodeStatus JSON, ...]
    PUT  /state/{nodeID}/{pause|close}
                                 200 {"message":"apply action pause success!","code":200,"data":null}
                                 refused: {"message": why, "code": 3, "data": null} with HTTP 404 (other
                                 node id), 400 (unknown action) or 409 (the pump is not online)
    POST /debug/gc/trigger       text "trigger gc success" or "gc is working"
    GET  /debug/binlog/{ts}      text dump of the binlog indexed at ts and its PrewriteValue; 404 when there
                                 is none, 400 for a ts that is not an integer from 0 to 2^64-1
    GET  /metrics                Prometheus text

Anything else is a JSON error with code 3 (404 unknown path, 405 wrong method).  A failing backend call
gives a 500 JSON error with one line; the traceback stays in this process's log.  One thread serves each
request (HTTP/1.0, one request per connection) and `stop()` joins them all.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any, Protocol

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from common.httpserver import METRICS_CONTENT_TYPE, JsonHandler
from common.httpserver import StatusServer as BaseStatusServer
from common.pb import binlog_pb2
from common.registry import NodeStatus
from common.tls import TLS
from pump.storage.api import StorageStatus

log = logging.getLogger(__name__)


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


MAX_TS = 2**64 - 1
"""A ts is a uint64 (TSO: physical ms << 18 | logical)."""


def parse_ts(raw: str) -> int:
    """The ts of `/debug/binlog/{ts}`: ASCII digits up to MAX_TS, else ValueError with the message for a 400."""
    if not (raw.isascii() and raw.isdigit()):  # str.isdigit alone takes '²' and other digits int() refuses
        raise ValueError(f"bad ts {raw!r}: expected a non-negative integer")
    ts = int(raw)
    if ts > MAX_TS:
        raise ValueError(f"bad ts {raw!r}: above the largest ts, {MAX_TS} (uint64)")
    return ts


class _Handler(JsonHandler):
    backend: PumpHTTPBackend

    def route(self, method: str, parts: list[str]) -> None:
        backend = self.backend
        match parts:
            case ["status"]:
                if self.allow(method, "GET"):
                    self._status(backend)
            case ["drainers"]:
                if self.allow(method, "GET"):
                    self.json(HTTPStatus.OK, [status_json(d) for d in backend.drainer_statuses()])
            case ["state", node_id, action]:
                if self.allow(method, "PUT"):
                    backend.apply_action(node_id, action)
                    self.json(HTTPStatus.OK, {"message": f"apply action {action} success!", "code": 200, "data": None})
            case ["debug", "gc", "trigger"]:
                if self.allow(method, "POST"):
                    self.text(HTTPStatus.OK, "trigger gc success\n" if backend.trigger_gc() else "gc is working\n")
            case ["debug", "binlog", raw_ts]:
                if self.allow(method, "GET"):
                    self._binlog(backend, raw_ts)
            case ["metrics"]:
                if self.allow(method, "GET"):
                    self.send(HTTPStatus.OK, backend.metrics_text(), METRICS_CONTENT_TYPE)
            case _:
                self.not_found(method)

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
        self.json(HTTPStatus.OK, doc)

    def _binlog(self, backend: PumpHTTPBackend, raw_ts: str) -> None:
        try:
            ts = parse_ts(raw_ts)
        except ValueError as exc:
            self.error(HTTPStatus.BAD_REQUEST, str(exc))
            return
        binlog = backend.get_binlog(ts)
        if binlog is None:
            self.text(HTTPStatus.NOT_FOUND, f"no binlog at ts {ts}\n")
            return
        prewrite = None
        if binlog.tp != binlog_pb2.Prewrite and binlog.start_ts and binlog.start_ts != ts:
            candidate = backend.get_binlog(binlog.start_ts)
            if candidate is not None and candidate.tp == binlog_pb2.Prewrite:
                prewrite = candidate
        self.text(HTTPStatus.OK, dump_binlog(ts, binlog, prewrite))


class StatusServer(BaseStatusServer):
    """The pump's HTTP API on its own thread; `stop()` shuts it down and joins every thread."""

    def __init__(self, backend: PumpHTTPBackend, addr: str, *, tls: TLS | None = None) -> None:
        super().__init__(backend, addr, _Handler, name="pump-http", tls=tls)
