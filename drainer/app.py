"""`DrainerApp`: builds and wires one drainer (checkpoint, schema, merger, collector, syncer, sink, servers).

Start-up (`start()`, docs/architecture.md#drainer):
    etcd + TSO client, cluster id -> node id -> checkpoint loaded (none: `initial-commit-ts`, -1 = a
    fresh TSO); a checkpoint or initial-commit-ts beyond the present is refused (drainer/start_check.py)
    -> schema from the DDL history up to the checkpoint's schema version -> merger at
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

Table routing (`[[syncer.table-migrate-rule]] target`): the SQL sink is wrapped in a `RoutingSink`
(drainer/sinks/routing.py), inside the relay log's `RelaySink`: the relay log keeps upstream names and its
replay is routed as live replication is.

Relay log (`[syncer.relay] log-dir`, `drainer.relay`): the sink is wrapped in a `RelaySink`.  At
start, when the checkpoint says ``consistent=false``:

* upstream unreachable (no etcd / cluster id): every whole relay transaction after the checkpoint
  is applied in safe mode, ``consistent=true`` is saved at the last one, and the drainer exits 0
  (`recovered_only`), as the original;
* upstream reachable (ours): the same replay first, so the half-applied window closes at once;
  the checkpoint moves to the last transaction replayed (with the schema version `relay.meta`
  recorded for it) and replication resumes after it.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Final

from common.daemon import need, shutdown_step
from common.dirs import ensure_dir
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.httpserver import HTTPActionError
from common.pd_client import TSOClient, read_window_upper
from common.registry import NodeKind, NodeState, NodeStatus, Registry, status_labels
from drainer.checkpoint import Checkpoint, make_checkpoint
from drainer.cistern import start_cistern_server
from drainer.collector import Collector
from drainer.config import DrainerConfig
from drainer.config_syncer import ROUTED_DB_TYPES, syncer_filter, syncer_router
from drainer.http_api import StatusServer
from drainer.merger import Merger
from drainer.metrics import DrainerMetrics
from drainer.puller import Puller
from drainer.relay import RecoveryResult, RelayMeta, RelaySink, recover, relay_dir_ok
from drainer.schema import DrainerSchema, EtcdJobSource
from drainer.sinks.base import Sink
from drainer.stall import StallMonitor
from drainer.start_check import check_checkpoint, check_initial, offline_present, online_present
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


def default_sink_factory(cfg: DrainerConfig, cluster_id: int = 0) -> Sink:
    """The sink for `[syncer] db-type` (imported only when used); `cluster_id` names kafka's default topic."""
    s = cfg.syncer
    to = s.to
    db_type = s.db_type
    if db_type in ("mysql", "tidb"):
        from drainer.sinks.mysql import MySQLSink

        return MySQLSink(
            host=to.host,
            port=to.port,
            user=to.user,
            password=cfg.to_password,
            params=dict(to.params),
            worker_count=s.worker_count,
            txn_batch=s.txn_batch,
            safe_mode=s.safe_mode,
            max_inflight_bytes=s.max_inflight_bytes,
            sql_mode=s.sql_mode or None,
            read_timeout=to.read_timeout,
            enable_detect=s.detect,
            enable_dispatch=s.dispatch,
            tls=cfg.to_tls(),
            sync_mode=to.sync_mode,
            merge=to.merge,
        )
    if db_type == "sqlite":
        from drainer.sinks.sqlite import SqliteSink

        router = syncer_router(s)
        return SqliteSink(
            cfg.sqlite_path,
            txn_batch=s.txn_batch,
            safe_mode=s.safe_mode,
            max_inflight_bytes=s.max_inflight_bytes,
            router=router if router else None,
        )
    if db_type in ("file", "pb"):
        from drainer.sinks.file import FileSink

        return FileSink(cfg.file_dir, retention_days=to.retention_time, max_inflight_bytes=s.max_inflight_bytes)
    if db_type == "kafka":
        from drainer.sinks.kafka import kafka_sink

        return kafka_sink(to, cluster_id=cluster_id, max_inflight_bytes=s.max_inflight_bytes)
    raise BinlogError(f"db-type {db_type!r} is not supported")


def with_routing(cfg: DrainerConfig, sink: Sink) -> Sink:
    """`sink` wrapped in a `RoutingSink` when table-migrate-rules route tables and the db-type is a SQL one
    (drainer/sinks/routing.py); for other sinks the targets are not applied (a warning, as the original
    applied them for oracle only)."""
    router = syncer_router(cfg.syncer)
    if not router:
        return sink
    db_type = cfg.syncer.db_type
    if db_type not in ROUTED_DB_TYPES:
        log.warning(
            "[[syncer.table-migrate-rule]] target is not applied for db-type %s (tables keep their upstream "
            "names); only mysql, tidb and sqlite route tables",
            db_type,
        )
        return sink
    from drainer.sinks.routing import RoutingSink

    return RoutingSink(sink, router, rewrite_ddl=db_type != "sqlite")


def ensure_sink_dir(cfg: DrainerConfig) -> None:
    """The directory `[syncer.to] dir` (file sink) or `path` (sqlite file) names, or an error naming the key."""
    db_type = cfg.syncer.db_type
    if db_type in ("file", "pb") and cfg.syncer.to.dir:
        ensure_dir("syncer.to.dir", cfg.file_dir)
    elif db_type == "sqlite" and cfg.syncer.to.path:
        ensure_dir("syncer.to.path", cfg.sqlite_path.parent, what="directory of the sqlite file")


class DrainerApp:
    """One drainer process's components and lifecycle; also the HTTP API's backend."""

    def __init__(self, cfg: DrainerConfig, *, sink_factory: SinkFactory | None = None) -> None:
        cfg.check_supported()
        self.cfg = cfg
        self._custom_sink_factory = sink_factory
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
        self.stall: StallMonitor | None = None
        self.grpc: grpc.Server | None = None
        self.grpc_port = 0
        self.http: StatusServer | None = None
        self._heartbeat: threading.Thread | None = None
        self._heartbeat_stop = threading.Event()
        self._state = NodeState.ONLINE
        self._registered = False
        self._reg_lock = threading.Lock()
        self.recovered_only = False
        """The upstream was unreachable and the relay log made the downstream consistent: nothing else runs."""

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
        if cfg.relay_enabled:
            relay_dir_ok(cfg.relay_dir)
        tls = cfg.security.load_tls()  # TLS for etcd, pd-server, pumps, Cistern and HTTP, or None
        try:
            self.etcd = EtcdClient(cfg.pd_urls, tls=tls)
            self.tso = TSOClient(self.etcd)
            self.registry = Registry(self.etcd)
            self.cluster_id = self.tso.cluster_id
        except BinlogError as exc:
            if not cfg.relay_enabled:
                raise
            self._recover_offline(exc)
            return
        ensure_dir("data-dir", cfg.data_dir, mode=0o700)
        ensure_sink_dir(cfg)
        self.node_id = cfg.node_id or f"{socket.gethostname()}:{cfg.listen_port}"
        log.info("drainer node_id=%s cluster_id=%d data_dir=%s", self.node_id, self.cluster_id, cfg.data_dir)

        self.checkpoint = make_checkpoint(cfg, self.cluster_id)
        state = self.checkpoint.load()
        tso, etcd = self.tso, self.etcd
        present = functools.partial(online_present, tso.get_ts, lambda: read_window_upper(etcd))
        if state is not None:
            start_ts, version = state.commit_ts, state.schema_version
            log.info("checkpoint commit_ts=%d schema_version=%d consistent=%s", start_ts, version, state.consistent)
            check_checkpoint(self.checkpoint, state, present())  # a TSO taken after the load
        else:
            if cfg.initial_commit_ts >= 0:
                check_initial(cfg.initial_commit_ts, present())
            start_ts = cfg.initial_commit_ts if cfg.initial_commit_ts >= 0 else tso.get_ts()
            version = 0
            log.info("no checkpoint: starting at initial-commit-ts %d", start_ts)
        if cfg.relay_enabled and state is not None and not state.consistent:
            start_ts, version = self._recover_online(start_ts, version)

        source = EtcdJobSource(self.etcd)
        if state is None and start_ts != 0:
            # no checkpoint, starting at a ts after the history began: every DDL so far is in effect
            jobs = source.all_jobs()
            version = max((j.schema_version for j in jobs), default=0)
        self.schema = DrainerSchema(source)
        self.schema.load(version)
        self.merger = merger = Merger(start_ts, hold_until_released=True)  # released by the syncer
        sink = self._make_sink()
        if cfg.relay_enabled:
            try:
                sink = RelaySink(
                    sink, cfg.relay_dir, cluster_id=self.cluster_id, max_file_size=cfg.syncer.relay.max_file_size
                )
            except BaseException:
                sink.close()
                raise
        self.sink = sink
        self.stall = stall = StallMonitor(merger, cfg.pump_stall_report_after, addrs=self._pump_addrs)
        self.metrics = DrainerMetrics.for_drainer(self.pump_positions, merger, self.sink, stalled=stall.stalled_seconds)
        self.syncer = Syncer(
            merger,
            self.schema,
            self.sink,
            self.checkpoint,
            syncer_filter(cfg.syncer),
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
            puller_factory=functools.partial(Puller, metrics=self.metrics, tls=tls, idle_timeout=cfg.pull_idle_timeout),
        )
        self.grpc, self.grpc_port = start_cistern_server(self.collector, cfg.addr, tls=tls)
        self.http = StatusServer(self, cfg.status_addr, tls=tls)
        self.http.start()
        self._publish(NodeState.ONLINE)
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="drainer-heartbeat", daemon=True)
        self._heartbeat.start()
        self.collector.start()
        stall.start()
        log.info(
            "drainer %s is online: gRPC %s, HTTP %s, from commit_ts=%d",
            self.node_id,
            cfg.addr,
            self.http.addr,
            start_ts,
        )

    def _make_sink(self) -> Sink:
        if self._custom_sink_factory is not None:
            return with_routing(self.cfg, self._custom_sink_factory(self.cfg))
        return with_routing(self.cfg, default_sink_factory(self.cfg, self.cluster_id))

    # ------------------------------------------------------------------------------- relay log
    def _recover_offline(self, cause: BaseException) -> None:
        """The upstream cannot be reached: make the downstream consistent from the relay log alone, or fail."""
        cfg = self.cfg
        log.warning("upstream unreachable (%s): looking at the relay log in %s", cause, cfg.relay_dir)
        try:
            meta = RelayMeta.read(cfg.relay_dir)
        except BinlogError as exc:
            raise BinlogError(f"upstream unreachable ({cause}), and the relay log cannot help: {exc}") from exc
        self.cluster_id = meta.cluster_id
        self.checkpoint = make_checkpoint(cfg, meta.cluster_id)
        state = self.checkpoint.load()
        if state is None or state.consistent:
            why = "there is no checkpoint" if state is None else f"checkpoint {state.commit_ts} is consistent"
            raise BinlogError(f"upstream unreachable ({cause}); {why}: nothing to recover from the relay log")
        check_checkpoint(self.checkpoint, state, offline_present(f"upstream unreachable: {cause}"))
        result = self._apply_relay(state.commit_ts, "")
        version = meta.version_at(result.last_ts, state.schema_version)
        if result.stopped_at_ddl:
            self.checkpoint.save(result.last_ts, version, consistent=False)
            raise BinlogError(
                f"relay log recovery stopped before the DDL at commit_ts={result.stopped_at_ddl}: the sqlite sink "
                f"needs the upstream's DDL history to run it; the downstream is at commit_ts={result.last_ts}"
            )
        self.checkpoint.save(result.last_ts, version, consistent=True)
        self.recovered_only = True
        log.info(
            "relay log recovery done: the downstream is consistent at commit_ts=%d (checkpoint saved with "
            "consistent=true); the upstream is unreachable, so the drainer exits",
            result.last_ts,
        )

    def _recover_online(self, start_ts: int, version: int) -> tuple[int, int]:
        """Replay the relay log's tail, move the checkpoint past it; the new start point."""
        result = self._apply_relay(start_ts, "the upstream is reachable: replication resumes after it")
        if result.last_ts <= start_ts:
            return start_ts, version
        version = RelayMeta.read(self.cfg.relay_dir).version_at(result.last_ts, version)
        need(self.checkpoint, "the drainer").save(result.last_ts, version, consistent=False)
        return result.last_ts, version

    def _apply_relay(self, checkpoint_ts: int, then: str) -> RecoveryResult:
        cfg = self.cfg
        log.info("relay log recovery: applying the transactions after commit_ts=%d in safe mode", checkpoint_ts)

        def progress(r: RecoveryResult) -> None:
            log.info("relay log recovery: %d txns, %d rows applied so far", r.txns, r.rows)

        result = recover(
            cfg.relay_dir,
            checkpoint_ts,
            self._make_sink(),
            ddl_supported=cfg.syncer.db_type != "sqlite",
            progress=progress,
        )
        st = result.stats
        if st.skipped or st.cut:
            log.warning(
                "relay log recovery: %d corrupted record(s) skipped, %d transaction(s) cut by a crash left out",
                st.skipped,
                st.cut,
            )
        log.info(
            "relay log recovery: %d txns (%d rows, %d DDLs) applied, up to commit_ts=%d%s",
            result.txns,
            result.rows,
            result.ddls,
            result.last_ts,
            f"; {then}" if then else "",
        )
        return result

    # -------------------------------------------------------------------------------------- run
    def run(self) -> int:
        """Serve until a pause, a close or a fatal error, then close; returns the exit status."""
        if self.recovered_only:
            self.close()
            return 0
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
                self.metrics.fatal(exc)
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
        if self.stall is not None:
            shutdown_step("close stall monitor", self.stall.close)
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
        labels = None if self.http is None else status_labels(self.http.addr, host)
        return NodeStatus(node_id=self.node_id, host=host, state=state, labels=labels, max_commit_ts=ts, update_ts=ts)

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

    def _pump_addrs(self) -> dict[str, str]:
        return {} if self.collector is None else {n: p.addr for n, p in self.collector.pullers().items()}

    def stalled_pumps(self) -> list[dict[str, object]]:
        return [] if self.stall is None else [p.to_json() for p in self.stall.check()]

    def last_ts(self) -> int:
        return 0 if self.syncer is None else self.syncer.status().saved_ts

    def sink_status(self) -> dict[str, object] | None:
        return None if self.sink is None else self.sink.status()

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
