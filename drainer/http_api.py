"""The drainer's HTTP API on `status-addr` (docs/architecture.md#http-api).

    GET /status      {"PumpPos": {nodeID: last commit_ts received}, "Synced": bool, "LastTS": checkpoint ts,
                      "TsMap": "", "stalled_pumps": [{"node_id", "addr", "since": unix time, "seconds",
                      "last_ts"}, ...]}
                     stalled_pumps (ours): the pumps the merge waits for that sent nothing for longer than
                     `pump-stall-report-after` (drainer/stall.py); empty when none.
                     Synced: everything received has been applied and nothing new arrived for
                     `synced-check-time` minutes.
                     "sink" (ours, only for a sink with numbers of its own): db-type kafka gives
                     {"type": "kafka", "topic", "messages", "bytes" (acknowledged since start),
                     "pending_messages", "pending_bytes" (not yet acknowledged), "acked_commit_ts"
                     (the last commit_ts acknowledged with everything before it)}.
    GET /commit_ts   {"message": "get drainer's latest ts success!", "code": 200, "data": {"ts": N}}
    PUT /state/{nodeID}/{pause|close}
                     200 {"message": "apply action pause success!", "code": 200, "data": null}; refused:
                     {"message": why, "code": 3, "data": null} with 404 (other node id) or 400 (bad action)
    GET /metrics     Prometheus text

Errors follow common/httpserver.py.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Protocol

from common.httpserver import METRICS_CONTENT_TYPE, JsonHandler
from common.httpserver import StatusServer as BaseStatusServer
from common.tls import TLS


class DrainerHTTPBackend(Protocol):
    def pump_positions(self) -> dict[str, int]: ...

    def synced(self) -> bool: ...

    def stalled_pumps(self) -> list[dict[str, object]]:
        """The stalled pumps as JSON objects (drainer/stall.py)."""
        ...

    def last_ts(self) -> int: ...

    def sink_status(self) -> dict[str, object] | None:
        """The sink's own numbers (`Sink.status`), or None."""
        ...

    def apply_action(self, node_id: str, action: str) -> None:
        """Start pause/close; raises HTTPActionError when refused."""
        ...

    def metrics_text(self) -> bytes: ...


class _Handler(JsonHandler):
    backend: DrainerHTTPBackend

    def route(self, method: str, parts: list[str]) -> None:
        b = self.backend
        match parts:
            case ["status"]:
                if self.allow(method, "GET"):
                    doc = {
                        "PumpPos": b.pump_positions(),
                        "Synced": b.synced(),
                        "LastTS": b.last_ts(),
                        "TsMap": "",
                        "stalled_pumps": b.stalled_pumps(),
                    }
                    sink = b.sink_status()
                    if sink is not None:
                        doc["sink"] = sink
                    self.json(HTTPStatus.OK, doc)
            case ["commit_ts"]:
                if self.allow(method, "GET"):
                    doc = {"message": "get drainer's latest ts success!", "code": 200, "data": {"ts": b.last_ts()}}
                    self.json(HTTPStatus.OK, doc)
            case ["state", node_id, action]:
                if self.allow(method, "PUT"):
                    b.apply_action(node_id, action)
                    self.json(HTTPStatus.OK, {"message": f"apply action {action} success!", "code": 200, "data": None})
            case ["metrics"]:
                if self.allow(method, "GET"):
                    self.send(HTTPStatus.OK, b.metrics_text(), METRICS_CONTENT_TYPE)
            case _:
                self.not_found(method)


class StatusServer(BaseStatusServer):
    def __init__(self, backend: DrainerHTTPBackend, addr: str, *, tls: TLS | None = None) -> None:
        super().__init__(backend, addr, _Handler, name="drainer-http", tls=tls)
