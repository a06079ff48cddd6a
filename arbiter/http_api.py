"""The arbiter's HTTP API on `addr` (common/httpserver.py: HTTP/1.0, JSON errors).

GET /status    {"topic", "partition": 0,
                "checkpoint_ts": ts last saved, "checkpoint_status": 1 running / 0 after a clean stop,
                "applied_ts": last commit_ts applied downstream (with everything before it),
                "received_ts": last commit_ts read from Kafka (duplicates not counted),
                "offset": next offset to read (-1 while the start offset is searched for),
                "high_watermark": end of the partition as last seen (-1 unknown),
                "lag_messages": high_watermark - offset (null when unknown),
                "lag_seconds": now - the physical time of applied_ts (null before the first),
                "safe_mode": bool, "queue_bytes": bytes read and not yet handed to the loader,
                "loader_bytes": bytes the loader's budget holds, "duplicates": messages dropped,
                "kafka_error": the last Kafka error since the last message read ("" when none)}
GET /metrics   Prometheus text (arbiter/metrics.py)
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Protocol

from common.errors import BinlogError
from common.httpserver import METRICS_CONTENT_TYPE, JsonHandler, StatusServer

__all__ = ["ArbiterHTTPBackend", "start_http"]


class ArbiterHTTPBackend(Protocol):
    def status(self) -> dict[str, object]: ...

    def metrics_text(self) -> bytes: ...


class _Handler(JsonHandler):
    backend: ArbiterHTTPBackend

    def route(self, method: str, parts: list[str]) -> None:
        match parts:
            case ["status"]:
                if self.allow(method, "GET"):
                    self.json(HTTPStatus.OK, self.backend.status())
            case ["metrics"]:
                if self.allow(method, "GET"):
                    self.send(HTTPStatus.OK, self.backend.metrics_text(), METRICS_CONTENT_TYPE)
            case _:
                self.not_found(method)


def start_http(backend: ArbiterHTTPBackend, addr: str) -> StatusServer:
    """Serve the API on `addr` (BinlogError naming it when it cannot listen)."""
    try:
        server = StatusServer(backend, addr, _Handler, name="arbiter-http")
    except BinlogError as exc:  # its text names the daemons' status-addr; the arbiter's key is addr
        raise BinlogError(str(exc).replace("status-addr", "addr", 1)) from None
    server.start()
    return server
