"""`DrainerApp`: builds and wires one drainer (checkpoint, schema, merger, collector, syncer, sink, servers).

Start-up (`start()`), reference §3.1:
    etcd + TSO client, cluster id -> node id -> checkpoint loaded (none: `initial-commit-ts`, -1 = a
    fresh TSO) -> schema from the DDL history up to the checkpoint's schema version -> merger at
    the checkpoint ts -> sink and syncer started (a wrong downstream password fails here) -> gRPC
    `binlog.Cistern` serving -> HTTP serving -> register `online` (maxCommitTS = checkpoint ts) ->
    heartbeat every `heartbeat-interval` -> collector (pullers for every non-offline pump).

Shut-down (`close()`, idempotent, each step logged):
    1. stop intake: close the collector (pullers) and the merger
    2. stop the syncer: the sink applies what it holds, the final checkpoint is saved
       (`consistent=true` unless the drainer failed)
    3. close the sink and the checkpoint
    4. stop gRPC
    5. update the registry: `paused` (signal, pause) or `offline` (close)
    6. stop HTTP, close TSO client and etcd

A binlog the drainer cannot apply stops it: `run()` then returns 1 after the same shutdown
(the checkpoint stays before that binlog).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from common.daemon import need, shutdown_step
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.httpserver import HTTPActionError
from common.pd_client import TSOClient
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from drainer.checkpoint import Checkpoint, make_checkpoint
from drainer.cistern import start_cistern_server
from drainer.collector import Collector
from drainer.config import DrainerConfig
from drainer.filters import Filter
from drainer.http_api import StatusServer
from drainer.merger import Merger
from drainer.metrics import DrainerMetrics
from drainer.schema import DrainerSchema, EtcdJobSource
from drainer.sinks.base import Sink
from drainer.syncer import Syncer

if TYPE_CHECKING:
    import grpc

log = logging.getLogger(__name__)

GRPC_STOP_GRACE: Final = 5.0
FLUSH_TIMEOUT: Final = 60.0
"""Seconds the sink gets at shutdown to apply what it holds."""
SYNCED_CHECK_UNIT: Final = 60.0
"""`synced-check-time` is in minutes."""

SinkFactory = Callable[[DrainerConfig], Sink]
_TRANSIENT: Final = {NodeState.PAUSED: NodeState.PAUSING, NodeState.OFFLINE: NodeState.CLOSING}


def default_sink_factory(cfg: DrainerConfig) -> Sink:
    """The sink for `[syncer] db-type` (imported only when used)."""
    s = cfg.syncer
    to = s.to
    db_type = s.db_type
    if db_type in ("mysql", "tidb"):
        from drainer.sinks.mysql import MySQLSink

        return MySQLSink(
            host=to.host,
            port=to.port,
            user=to.user,
            password=to.password,
            params=dict(to.params),
            worker_count=s.worker_count,
            txn_batch=s.txn_batch,
            safe_mode=s.safe_mode,
            max_inflight_bytes=s.max_inflight_bytes,
            sql_mode=s.sql_mode or None,
            read_timeout=to.read_timeout,
            enable_detect=s.detect,
            enable_dispatch=s.dispatch,
        )
    if db_type == "sqlite":
        from drainer.sinks.sqlite import SqliteSink

        return SqliteSink(
            cfg.sqlite_path, txn_batch=s.txn_batch, safe_mode=s.safe_mode, max_inflight_bytes=s.max_inflight_bytes
        )
    if db_type in ("file", "pb"):
        from drainer.sinks.file import FileSink

        return FileSink(cfg.file_dir, retention_days=to.retention_time, max_inflight_bytes=s.max_inflight_bytes)
    raise BinlogError(f"db-type {db_type!r} is not supported")


class DrainerApp:
    """One drainer process's components and lifecycle; also the HTTP API's backend."""

    def __init__(self, cfg: DrainerConfig, *, sink_factory: SinkFactory | None = None) -> None:
        cfg.check_supported()
        self.cfg = cfg
        self._sink_factory = sink_factory or default_sink_factory
        self._shutdown = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self._final = NodeState.PAUSED
        self.fatal: BaseException | None = None
        self.node_id = ""
        self.etcd: EtcdClient | None = None
        self.tso: TSOClient | None = None
        self.registry: Registry | None = None
        self.cluster_id = 0
        self.checkpoint: Checkpoint | None = None
        self.schema: DrainerSchema | None = None
        self.merger: Merger | None = None
        self.collector: Collector | None = None
        self.sink: Sink | None = None
        self.syncer: Syncer | None = None
        self.metrics: DrainerMetrics | None = None
        self.grpc: grpc.Server | None = None
        self.grpc_port = 0
        self.http: StatusServer | None = None
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._state = NodeState.ONLINE
        self._registered = False
        self._reg_lock = threading.Lock()

    # ------------------------------------------------------------------------------------ start
    def start(self) -> None:
        """Build, register and serve; on failure everything built so far is closed and the error raised."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        cfg = self.cfg
        self.etcd = EtcdClient(cfg.pd_urls)
        self.tso = TSOClient(self.etcd)
        self.registry = Registry(self.etcd)
        self.cluster_id = self.tso.cluster_id
        cfg.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.node_id = cfg.node_id or f"{socket.gethostname()}:{cfg.listen_port}"
        log.info("drainer node_id=%s cluster_id=%d data_dir=%s", self.node_id, self.cluster_id, cfg.data_dir)

        self.checkpoint = make_checkpoint(cfg, self.cluster_id)
        state = self.checkpoint.load()
        if state is not None:
            start_ts, version = state.commit_ts, state.schema_version
            log.info("checkpoint commit_ts=%d schema_version=%d consistent=%s", start_ts, version, state.consistent)
        else:
            start_ts = cfg.initial_commit_ts if cfg.initial_commit_ts >= 0 else self.tso.get_ts()
            version = 0
            log.info("no checkpoint: starting at initial-commit-ts %d", start_ts)

        source = EtcdJobSource(self.etcd)
        if state is None and start_ts != 0:
            # no checkpoint, starting at a ts after the history began: every DDL so far is in effect
            jobs = source.all_jobs()
            version = max((j.schema_version for j in jobs), default=0)
        self.schema = DrainerSchema(source)
        self.schema.load(version)
        self.merger = merger = Merger(start_ts, hold_until_released=True)  # released by the syncer
        self.sink = self._sink_factory(cfg)
        self.metrics = DrainerMetrics(
            self.pump_positions,
            lambda: sum(merger.buffered_bytes(n) for n in merger.source_ids()),
            lambda: merger.disorders,
        )
        self.syncer = Syncer(
            merger,
            self.schema,
            self.sink,
            self.checkpoint,
            Filter.from_config(cfg),
            start_ts=start_ts,
            schema_version=version,
            sync_ddl=cfg.syncer.sync_ddl,
            safe_mode=cfg.syncer.safe_mode,
            safe_mode_duration=cfg.syncer.safe_mode_duration,
            on_fatal=self._on_fatal,
            metrics=self.metrics,
        )
        self.syncer.start()
        self.collector = Collector(
            self.registry,
            merger,
            self.cluster_id,
            detect_interval=cfg.detect_interval,
            compressor=cfg.compressor,
            on_error=self._on_fatal,
        )
        self.grpc, self.grpc_port = start_cistern_server(self.collector, cfg.addr)
        self.http = StatusServer(self, cfg.status_addr)
        self.http.start()
        self._publish(NodeState.ONLINE)
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="drainer-heartbeat", daemon=True)
        self._heartbeat.start()
        self.collector.start()
        log.info(
            "drainer %s is online: gRPC %s, HTTP %s, from commit_ts=%d",
            self.node_id,
            cfg.addr,
            self.http.addr,
            start_ts,
        )

    # -------------------------------------------------------------------------------------- run
    def run(self) -> int:
        """Serve until a pause, a close or a fatal error, then close; returns the exit status."""
        self._shutdown.wait()
        self.close()
        return 1 if self.fatal is not None else 0

    def request_pause(self) -> None:
        """SIGTERM / SIGINT."""
        self._shutdown.set()

    def _on_fatal(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            log.error("drainer stops: %s", exc)
            if self.metrics is not None:
                self.metrics.error.labels(type(exc).__name__).inc()
        self._shutdown.set()

    # ------------------------------------------------------------------------------------ close
    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown.set()
        final = self._final
        log.info("close 1/6: stop intake (publish %s, stop pullers and merger)", _TRANSIENT[final].value)
        self._heartbeat_stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
        if self._registered and self._state is NodeState.ONLINE:  # new pumps stop notifying this drainer
            shutdown_step("publish", lambda: self._publish(_TRANSIENT[final]))
        if self.collector is not None:
            shutdown_step("close collector", self.collector.close)
        if self.merger is not None:
            shutdown_step("close merger", self.merger.close)
        log.info("close 2/6: stop the syncer, apply what the sink holds, save the checkpoint")
        if self.syncer is not None:
            syncer = self.syncer
            shutdown_step("stop syncer", lambda: syncer.stop(FLUSH_TIMEOUT))
        log.info("close 3/6: close the sink and the checkpoint")
        if self.sink is not None:
            shutdown_step("close sink", self.sink.close)
        if self.checkpoint is not None:
            shutdown_step("close checkpoint", self.checkpoint.close)
        log.info("close 4/6: stop gRPC")
        if self.grpc is not None:
            server = self.grpc
            shutdown_step("stop gRPC", lambda: server.stop(GRPC_STOP_GRACE).wait(GRPC_STOP_GRACE))
        log.info("close 5/6: update registry")
        if self._registered:
            shutdown_step(f"publish {final.value}", lambda: self._publish(final))
        log.info("close 6/6: stop HTTP, close TSO client and etcd")
        if self.http is not None:
            shutdown_step("stop HTTP", self.http.stop)
        if self.tso is not None:
            shutdown_step("close TSO client", self.tso.close)
        if self.etcd is not None:
            shutdown_step("close etcd", self.etcd.close)
        log.info("drainer closed (%s)", final.value)

    # ------------------------------------------------------------------------------- registry
    def _status(self, state: NodeState) -> NodeStatus:
        host = self.cfg.advertise
        ts = self.last_ts()
        return NodeStatus(node_id=self.node_id, host=host, state=state, max_commit_ts=ts, update_ts=ts)

    def _publish(self, state: NodeState) -> None:
        with self._reg_lock:
            need(self.registry, "the drainer").upsert(NodeKind.DRAINER, self._status(state))
            self._state = state
            self._registered = True
        log.info("node_id=%s published state %s", self.node_id, state.value)

    def _heartbeat_loop(self) -> None:
        misses = 0
        while not self._heartbeat_stop.wait(self.cfg.heartbeat_interval):
            try:
                with self._reg_lock:  # never overwrites a state published meanwhile
                    need(self.registry, "the drainer").upsert(NodeKind.DRAINER, self._status(self._state))
                misses = 0
            except BinlogError as exc:
                misses += 1
                log.warning("heartbeat failed (%d in a row): %s", misses, exc)
                if misses >= 20:
                    self._on_fatal(exc)
                    return

    # ---------------------------------------------------------------- HTTP backend (DrainerHTTPBackend)
    def pump_positions(self) -> dict[str, int]:
        return {} if self.collector is None else self.collector.pump_positions()

    def last_ts(self) -> int:
        return 0 if self.syncer is None else self.syncer.status().saved_ts

    def synced(self) -> bool:
        if self.syncer is None:
            return False
        return self.syncer.idle_for() >= self.cfg.synced_check_time * SYNCED_CHECK_UNIT

    def apply_action(self, node_id: str, action: str) -> None:
        if node_id != self.node_id:
            raise HTTPActionError(
                HTTPStatus.NOT_FOUND, f"invalid nodeID {node_id}, this drainer's nodeID is {self.node_id}"
            )
        if action == "pause":
            self._final = NodeState.PAUSED
            shutdown_step("publish pausing", lambda: self._publish(NodeState.PAUSING))
        elif action == "close":
            self._final = NodeState.OFFLINE
            shutdown_step("publish closing", lambda: self._publish(NodeState.CLOSING))
        else:
            raise HTTPActionError(HTTPStatus.BAD_REQUEST, f"invalid action {action}")
        self._shutdown.set()

    def metrics_text(self) -> bytes:
        return need(self.metrics, "the drainer").render()
