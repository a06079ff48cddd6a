"""gRPC `binlog.Cistern`, the drainer's service (docs/formats.md#cistern-notify).

Only `Notify` works: a new pump calls it on every online drainer before it serves, and it returns only
after the collector re-read the pump list, so the pump is part of the merge by then.  If the refresh
fails the pump gets an error status and registers itself offline and exits (the original's contract):

    collector closed / drainer shutting down     UNAVAILABLE  "drainer is shutting down: ..."
    registry (etcd) unreachable                  UNAVAILABLE  "drainer cannot read the pumps: ..."
    anything else                                INTERNAL     "drainer failed to add the pump: ..."

`DumpBinlog` and `DumpDDLJobs` are v1 leftovers: UNIMPLEMENTED.
"""

from __future__ import annotations

import logging
from concurrent import futures
from typing import Any, Final, Protocol

import grpc

from common.errors import UnavailableError
from common.pb import cistern_pb2
from common.tls import TLS
from drainer.collector import CollectorClosedError

log = logging.getLogger(__name__)

SERVICE_NAME: Final = "binlog.Cistern"


class Notifiable(Protocol):
    def notify(self) -> None: ...


class CisternService:
    """The `binlog.Cistern` handlers over a collector."""

    def __init__(self, collector: Notifiable) -> None:
        self._collector = collector

    def notify(self, request: cistern_pb2.NotifyReq, context: grpc.ServicerContext) -> cistern_pb2.NotifyResp:
        peer = context.peer()
        try:
            self._collector.notify()
        except CollectorClosedError as exc:
            log.warning("notify from %s refused: %s", peer, exc)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"drainer is shutting down: {exc}")
        except UnavailableError as exc:
            log.warning("notify from %s failed: %s", peer, exc)
            context.abort(grpc.StatusCode.UNAVAILABLE, f"drainer cannot read the pumps: {exc}")
        except Exception as exc:
            log.exception("notify from %s failed", peer)
            context.abort(grpc.StatusCode.INTERNAL, f"drainer failed to add the pump: {type(exc).__name__}: {exc}")
        log.info("notify from %s: pumps refreshed", peer)
        return cistern_pb2.NotifyResp()

    def dump_binlog(self, request: cistern_pb2.DumpBinlogReq, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "DumpBinlog is not supported by this drainer")

    def dump_ddl_jobs(
        self, request: cistern_pb2.DumpDDLJobsReq, context: grpc.ServicerContext
    ) -> cistern_pb2.DumpDDLJobsResp:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "DumpDDLJobs is not supported by this drainer")

    def handler(self) -> grpc.GenericRpcHandler[Any, Any]:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Notify": grpc.unary_unary_rpc_method_handler(
                    self.notify,
                    request_deserializer=cistern_pb2.NotifyReq.FromString,
                    response_serializer=cistern_pb2.NotifyResp.SerializeToString,
                ),
                "DumpBinlog": grpc.unary_stream_rpc_method_handler(
                    self.dump_binlog,
                    request_deserializer=cistern_pb2.DumpBinlogReq.FromString,
                    response_serializer=cistern_pb2.DumpBinlogResp.SerializeToString,
                ),
                "DumpDDLJobs": grpc.unary_unary_rpc_method_handler(
                    self.dump_ddl_jobs,
                    request_deserializer=cistern_pb2.DumpDDLJobsReq.FromString,
                    response_serializer=cistern_pb2.DumpDDLJobsResp.SerializeToString,
                ),
            },
        )


def start_cistern_server(
    collector: Notifiable, addr: str, *, max_workers: int = 4, tls: TLS | None = None
) -> tuple[grpc.Server, int]:
    """Serve `binlog.Cistern` on `addr` ("host:port"; port 0 picks a free one) and start it.

    With `tls` the port is a TLS port requiring a client certificate signed by the CA, and the
    cert-allowed-cn list is checked before Notify runs.  Returns the server (stop it with
    `server.stop(grace)`) and the bound port."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="drainer-grpc"),
        options=[("grpc.so_reuseport", 0)],
        interceptors=None if tls is None else tls.server_interceptors(),
    )
    server.add_generic_rpc_handlers((CisternService(collector).handler(),))
    creds = None if tls is None else tls.server_credentials()
    try:
        port = server.add_insecure_port(addr) if creds is None else server.add_secure_port(addr, creds)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {addr} for binlog.Cistern: {exc}") from exc
    if port == 0:
        raise OSError(f"cannot listen on {addr} for binlog.Cistern")
    server.start()
    log.info("binlog.Cistern serving on %s (port %d%s)", addr, port, "" if tls is None else ", TLS")
    return server, port
