"""`PumpApp`: builds and wires one pump (storage, resolver, registry node, gRPC, HTTP, background).

Start-up (`start()`, docs/architecture.md#pump-node-states):
    `[security]` loaded (TLS for etcd, pd-server, drainers' Notify, gRPC and HTTP, or none)
    -> etcd + TSO client, cluster id -> node id -> resolver (None without `[upstream] txn-status-dsn`: the
    storage then skips resolve passes; warned once) -> metrics -> storage (reporting to the metrics'
    StorageMetrics observer) -> servicer, gRPC bound
    -> HTTP serving -> register `online` -> Notify every online drainer if this pump is new or was
    offline (any failure: publish `offline`, close, raise NotifyError) -> gRPC serving -> heartbeat
    -> background (fake binlogs, GC, drainer checkpoint warning).

Shut-down (`close()`, idempotent, each step logged):
    1. stop intake: refuse prewrites (local state pausing/closing), stop the heartbeat, publish
       `pausing` when pausing
    2. stop background loops
    3. when closing: wait until it is safe to go offline (fake binlogs until drainers caught up)
    4. close pull streams
    5. stop gRPC (bounded by GRPC_STOP_GRACE)
    6. close storage, then the resolver
    7. update registry: publish `paused` or `offline`
    8. stop HTTP, close TSO client and etcd

Pause (`PUT /state/<id>/pause`, SIGTERM, SIGINT) ends as `paused`; close (`PUT /state/<id>/close`) ends
as `offline`, or as `paused` when a signal interrupts the offline wait.  `run()` blocks until one of
them is asked for, then closes and returns the exit status.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from common.daemon import need, shutdown_step
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pb import binlog_pb2
from common.pd_client import TSOClient
from common.registry import NodeKind, NodeState, NodeStatus, Registry, status_labels
from common.tls import TLS
from pump.background import Background, write_fake_binlog
from pump.config import PumpConfig
from pump.http_api import StatusServer
from pump.metrics import PumpMetrics
from pump.node import (
    OFFLINE_CHECK_INTERVAL,
    ApproxClock,
    NotifyError,
    NotifyPolicy,
    PumpNode,
    node_id_history,
    resolve_node_id,
    wait_safe_to_offline,
)
from pump.score import PumpScore
from pump.server import GrpcServer, PumpService
from pump.storage.api import CommitResolver, PumpStorage, StorageObserver, StorageOptions, StorageStatus

log = logging.getLogger(__name__)

GRPC_STOP_GRACE: Final = 10.0
"""Seconds gRPC gets to finish running calls at shutdown (original: GracefulStop capped at 10 s)."""

StorageFactory = Callable[[Path, StorageOptions, CommitResolver | None], PumpStorage]
"""Builds the storage from (data dir, options, resolver or None).  Tests pass their own."""
ResolverFactory = Callable[[PumpConfig, str], CommitResolver | None]
"""(config, node id) -> the commit resolver, or None."""


def default_storage_factory(
    data_dir: Path,
    options: StorageOptions,
    resolver: CommitResolver | None,
    *,
    observer: StorageObserver | None = None,
) -> PumpStorage:
    """The real storage, `pump.storage.storage.Storage` (imported only when a pump really starts).

    `observer` (the pump's StorageMetrics) is handed over only if this Storage accepts `observer=`.
    """
    module = importlib.import_module("pump.storage.storage")
    kwargs: dict[str, object] = {}
    if observer is not None:
        if "observer" in inspect.signature(module.Storage).parameters:
            kwargs["observer"] = observer
        else:
            log.warning("this storage does not report metrics: binlog_pump_storage_* series will stay empty")
    storage: PumpStorage = module.Storage(data_dir, options, resolver, **kwargs)
    return storage


def default_resolver_factory(cfg: PumpConfig, node_id: str) -> CommitResolver | None:
    """`TxnStatusResolver` over `[upstream] txn-status-dsn` for the pump `node_id`; None (no resolve
    passes) when it is empty."""
    dsn = cfg.upstream.txn_status_dsn
    if not dsn.strip():
        log.warning(
            "no [upstream] txn-status-dsn configured: a prewrite whose commit binlog never arrives "
            "will wait forever (the commit watermark stops behind it)"
        )
        return None
    from pump.resolver import open_resolver

    return open_resolver(
        dsn,
        max_txn_timeout=cfg.storage.max_txn_timeout,
        status_row_ttl=cfg.upstream.status_row_ttl,
        node_id={node_id, *node_id_history(cfg.data_dir)},
    )


class PumpApp:
    """One pump process's components and lifecycle.  Also the HTTP API's backend."""

    def __init__(
        self,
        cfg: PumpConfig,
        *,
        storage_factory: StorageFactory | None = None,
        resolver_factory: ResolverFactory | None = None,
        notify_policy: NotifyPolicy | None = None,
        offline_check_interval: float = OFFLINE_CHECK_INTERVAL,
    ) -> None:
        cfg.check_supported()
        self.cfg = cfg
        self._storage_factory = storage_factory
        self._resolver_factory = resolver_factory or default_resolver_factory
        self._notify_policy = notify_policy
        self._offline_check_interval = offline_check_interval
        self._shutdown = threading.Event()
        self._abort_offline = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self.clock = ApproxClock()
        self.tls: TLS | None = None
        self.etcd: EtcdClient | None = None
        self.tso: TSOClient | None = None
        self.registry: Registry | None = None
        self.cluster_id = 0
        self.resolver: CommitResolver | None = None
        self.storage: PumpStorage | None = None
        self.metrics: PumpMetrics | None = None
        self.node: PumpNode | None = None
        self.service: PumpService | None = None
        self.grpc: GrpcServer | None = None
        self.http: StatusServer | None = None
        self.background: Background | None = None

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
        self.tls = tls = cfg.security.load_tls()
        if tls is not None:
            log.info("TLS on for gRPC, etcd and HTTP (CA %s, certificate %s)", tls.files.ca, tls.files.cert)
        self.etcd = EtcdClient(cfg.pd_urls, tls=tls)
        self.tso = TSOClient(self.etcd)
        self.registry = Registry(self.etcd)
        self.cluster_id = self.tso.cluster_id
        node_id = resolve_node_id(cfg.data_dir, cfg.node_id, cfg.listen_port)
        log.info("pump node_id=%s cluster_id=%d data_dir=%s", node_id, self.cluster_id, cfg.data_dir)

        self.resolver = self._resolver_factory(cfg, node_id)
        self.metrics = PumpMetrics(self._storage_status_for_metrics, self._inflight_write_bytes)
        if self._storage_factory is not None:
            storage = self._storage_factory(cfg.data_dir, cfg.storage_options(), self.resolver)
        else:
            storage = default_storage_factory(
                cfg.data_dir, cfg.storage_options(), self.resolver, observer=self.metrics.storage
            )
        self.storage = storage
        self.node = node = PumpNode(
            self.registry,
            self.tso,
            self.clock,
            node_id=node_id,
            host=cfg.advertise,
            max_commit_ts=storage.max_commit_ts,
            heartbeat_interval=cfg.heartbeat_interval,
            notify_policy=self._notify_policy,
            tls=tls,
            score=PumpScore(
                self.metrics.storage.write_latency, storage.status, cfg.storage.stop_write_at_available_space
            ),
        )
        self.service = service = PumpService(
            storage,
            self.cluster_id,
            lambda: node.state,
            self.metrics,
            max_inflight_write_bytes=cfg.storage.max_inflight_write_bytes,
        )
        self.grpc = GrpcServer(
            self.service, cfg.addr, socket=cfg.socket, max_message_size=cfg.max_message_size, tls=tls
        )
        self.http = StatusServer(self, cfg.status_addr, tls=tls)
        self.http.start()
        node.labels = status_labels(self.http.addr, cfg.advertise)

        previous = node.register()
        if previous is None or previous is NodeState.OFFLINE:
            try:
                node.notify_drainers()
            except NotifyError as exc:
                log.error("node_id=%s: %s; registering offline", node_id, exc)
                node.transition(NodeState.OFFLINE)
                node.publish(NodeState.OFFLINE)
                raise NotifyError(f"{exc}; pump {node_id} registered offline and stops") from exc

        self.grpc.start()
        node.start_heartbeat()
        self.background = Background(
            storage,
            self.tso,
            self.registry,
            self.metrics,
            last_write=lambda: service.last_write,
            pulling=lambda: service.live_streams > 0,
            fake_interval=cfg.gen_binlog_interval,
            pull_fake_interval=cfg.gen_binlog_pull_interval,
            gc_keep=cfg.gc,
            clock=self.clock,
        )
        self.background.start()
        log.info("pump %s is online: gRPC %s (port %d), HTTP %s", node_id, cfg.addr, self.grpc.port, self.http.addr)

    def _storage_status_for_metrics(self) -> StorageStatus | None:
        storage = self.storage
        return None if storage is None else storage.status()

    def _inflight_write_bytes(self) -> int:
        service = self.service
        return 0 if service is None else service.inflight_write_bytes

    # -------------------------------------------------------------------------------------- run
    def run(self) -> int:
        """Serve until pause or close is asked for, then close; returns the exit status (0)."""
        self._shutdown.wait()
        self.close()
        return 0

    def request_pause(self) -> None:
        """SIGTERM / SIGINT: pause (a second request, or one during the offline wait, cuts that wait short)."""
        node = self.node
        if node is not None and node.state is NodeState.ONLINE:
            with contextlib.suppress(BinlogError):  # an action won the race
                node.transition(NodeState.PAUSING)
        if self._shutdown.is_set():
            self._abort_offline.set()
        self._shutdown.set()

    @property
    def shutdown_requested(self) -> bool:
        return self._shutdown.is_set()

    # ------------------------------------------------------------------------------------ close
    def close(self) -> None:
        """Shut down in the documented order; idempotent, every step logged, no step skipped on errors."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown.set()
        node = self.node
        final: NodeState | None = None

        log.info("close 1/8: stop intake")
        if node is not None:
            if node.state is NodeState.ONLINE:
                shutdown_step("refuse prewrites", lambda: node.transition(NodeState.PAUSING))
            node.stop_heartbeat()
            if node.state is NodeState.PAUSING:
                final = NodeState.PAUSED
                shutdown_step("publish pausing", lambda: node.publish(NodeState.PAUSING))
            elif node.state is NodeState.CLOSING:
                final = NodeState.OFFLINE
                # clients stop routing prewrites here at once (they would fail with "no online: closing");
                # drainers keep pulling a closing pump, so the offline wait below still completes
                shutdown_step("publish closing", lambda: node.publish(NodeState.CLOSING))

        log.info("close 2/8: stop background")
        if self.background is not None:
            shutdown_step("stop background", self.background.stop)

        if final is NodeState.OFFLINE:
            log.info("close 3/8: wait until it is safe to go offline")
            if not shutdown_step("offline wait", self._wait_safe_to_offline, default=False):
                log.warning("offline wait interrupted: the pump ends paused, not offline")
                final = NodeState.PAUSED
        else:
            log.info("close 3/8: no offline wait (not closing)")

        log.info("close 4/8: close pull streams")
        if self.service is not None:
            shutdown_step("close pull streams", self.service.close_streams)

        log.info("close 5/8: stop gRPC (at most %.0fs)", GRPC_STOP_GRACE)
        if self.grpc is not None:
            grpc_server = self.grpc
            shutdown_step("stop gRPC", lambda: grpc_server.stop(GRPC_STOP_GRACE))

        log.info("close 6/8: close storage")
        if node is not None:
            shutdown_step("snapshot maxCommitTS", node.freeze_max_commit_ts)
        if self.storage is not None:
            shutdown_step("close storage", self.storage.close)
        if self.resolver is not None:
            shutdown_step("close resolver", self.resolver.close)

        log.info("close 7/8: update registry")
        if node is not None and final is not None:
            target = final
            shutdown_step(f"state {target.value}", lambda: node.transition(target))
            shutdown_step(f"publish {target.value}", lambda: node.publish(target))

        log.info("close 8/8: stop HTTP, close TSO client and etcd")
        if self.http is not None:
            shutdown_step("stop HTTP", self.http.stop)
        if self.tso is not None:
            shutdown_step("close TSO client", self.tso.close)
        if self.etcd is not None:
            shutdown_step("close etcd", self.etcd.close)
        log.info("pump closed%s", f" ({final.value})" if final else "")

    def _wait_safe_to_offline(self) -> bool:
        storage, tso, registry = self.storage, self.tso, self.registry
        assert storage is not None
        assert tso is not None
        assert registry is not None
        return wait_safe_to_offline(
            write_fake=lambda: write_fake_binlog(storage, tso, self.clock),
            all_matched=storage.all_matched,
            max_commit_ts=storage.max_commit_ts,
            registry=registry,
            abort=self._abort_offline,
            interval=self._offline_check_interval,
        )

    # ------------------------------------------------------------------- HTTP backend (PumpHTTPBackend)
    def pump_statuses(self) -> list[NodeStatus]:
        return need(self.registry, "the pump").list(NodeKind.PUMP)

    def drainer_statuses(self) -> list[NodeStatus]:
        return need(self.registry, "the pump").list(NodeKind.DRAINER)

    def fresh_ts(self) -> int:
        ts = need(self.tso, "the pump").get_ts()
        self.clock.observe(ts)
        return ts

    def storage_status(self) -> StorageStatus:
        return need(self.storage, "the pump").status()

    def apply_action(self, node_id: str, action: str) -> None:
        need(self.node, "the pump").apply_action(node_id, action)
        self._shutdown.set()

    def trigger_gc(self) -> bool:
        return need(self.background, "the pump").trigger_gc()

    def get_binlog(self, ts: int) -> binlog_pb2.Binlog | None:
        return need(self.storage, "the pump").get_binlog(ts)

    def metrics_text(self) -> bytes:
        return need(self.metrics, "the pump").render()
