"""pd-server: TSO and cluster id over etcd, keeping no local data.

etcd keys (see common/pd_client.py):
    /pd/cluster_id   decimal text, created once (create-if-absent transaction)
    /pd/leader       JSON {addr, cluster_id, token}, bound to a lease of `lease-ttl` s
    /pd/timestamp    decimal ms: upper bound of the TSO window, written only
                     while /pd/leader still holds this server's token

Lifecycle: connect etcd -> ensure cluster id -> campaign for /pd/leader ->
load window -> serve gRPC -> keep the lease alive; on losing the lease the
server stops handing out timestamps and campaigns again.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from concurrent import futures

import grpc

from common.errors import BinlogError, EtcdUnavailableError, UnavailableError
from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc
from common.pd_client import CLUSTER_ID_KEY, LEADER_KEY, TIMESTAMP_KEY, LeaderInfo
from pd.allocator import TsoAllocator

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL = 3
DEFAULT_CAMPAIGN_TIMEOUT = 30.0
_TICK_INTERVAL = 0.05


def ensure_cluster_id(etcd: EtcdClient) -> int:
    """Return the cluster id, creating it once if this is a new cluster."""
    candidate = (int(time.time()) << 32) | random.getrandbits(32)
    if etcd.create(CLUSTER_ID_KEY, str(candidate)):
        log.info("created cluster id %d", candidate)
    kv = etcd.get(CLUSTER_ID_KEY)
    if kv is None:
        raise UnavailableError(f"{CLUSTER_ID_KEY} vanished right after it was created")
    return int(kv.value.decode())


class _Servicer(pd_pb2_grpc.PDServicer):  # type: ignore[misc]
    def __init__(self, server: PDServer) -> None:
        self._server = server

    def Tso(self, request: pd_pb2.TsoRequest, context: grpc.ServicerContext) -> pd_pb2.TsoResponse:  # noqa: N802
        cid = self._server.cluster_id
        if request.cluster_id not in (0, cid):
            context.abort(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"cluster id mismatch: request has {request.cluster_id}, this pd-server serves {cid}",
            )
        count = request.count or 1
        allocator = self._server.allocator
        if allocator is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "pd-server is not the leader right now")
        try:
            first = allocator.allocate(count)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except BinlogError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot persist the TSO window: {exc}")
        return pd_pb2.TsoResponse(
            cluster_id=cid,
            first=pd_pb2.Timestamp(physical=first >> 18, logical=first & ((1 << 18) - 1)),
            count=count,
        )

    def GetClusterInfo(  # noqa: N802
        self, request: pd_pb2.ClusterInfoRequest, context: grpc.ServicerContext
    ) -> pd_pb2.ClusterInfoResponse:
        return pd_pb2.ClusterInfoResponse(cluster_id=self._server.cluster_id)


class PDServer:
    """One pd-server process: campaign, allocate, serve."""

    def __init__(
        self,
        etcd: EtcdClient,
        addr: str,
        *,
        advertise_addr: str | None = None,
        lease_ttl: int = DEFAULT_LEASE_TTL,
        campaign_timeout: float = DEFAULT_CAMPAIGN_TIMEOUT,
    ) -> None:
        self._etcd = etcd
        self._addr = addr
        self._advertise = advertise_addr or addr
        self._lease_ttl = lease_ttl
        self._campaign_timeout = campaign_timeout
        self._stop = threading.Event()
        self._grpc: grpc.Server | None = None
        self._threads: list[threading.Thread] = []
        self._lease_id: int | None = None
        self._leader_value = ""
        self.cluster_id = 0
        self.allocator: TsoAllocator | None = None
        self.port = 0

    def start(self) -> None:
        self.cluster_id = ensure_cluster_id(self._etcd)
        self._campaign(deadline=time.monotonic() + self._campaign_timeout)
        self._grpc = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="pd-grpc"))
        pd_pb2_grpc.add_PDServicer_to_server(_Servicer(self), self._grpc)
        self.port = self._grpc.add_insecure_port(self._addr)
        if self.port == 0:
            raise UnavailableError(f"cannot listen on {self._addr}")
        self._grpc.start()
        log.info("pd-server serving cluster %d at %s (pid %d)", self.cluster_id, self._addr, os.getpid())
        for target, name in ((self._tick_loop, "pd-tick"), (self._lease_loop, "pd-lease")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    # -- leadership -------------------------------------------------------
    def _campaign(self, deadline: float) -> None:
        """Become the leader (waiting for a dead leader's lease to expire) and load the window."""
        token = uuid.uuid4().hex
        info = LeaderInfo(self._advertise, self.cluster_id, token)
        waited_for = ""
        while not self._stop.is_set():
            lease_id = self._etcd.grant_lease(self._lease_ttl)
            if self._etcd.create(LEADER_KEY, info.to_json(), lease=lease_id):
                self._lease_id = lease_id
                self._leader_value = info.to_json()
                break
            self._etcd.revoke_lease(lease_id)
            kv = self._etcd.get(LEADER_KEY)
            holder = kv.value.decode() if kv else "?"
            if holder != waited_for:
                log.info("waiting for the current pd leader %s to go away", holder)
                waited_for = holder
            if time.monotonic() > deadline:
                raise UnavailableError(f"another pd-server holds {LEADER_KEY}: {holder}")
            self._stop.wait(0.5)
        else:
            return
        saved = self._etcd.get(TIMESTAMP_KEY)
        last = int(saved.value.decode()) if saved else 0
        self.allocator = TsoAllocator(last, self._persist_window)
        log.info("became pd leader (lease %x)", self._lease_id)

    def _persist_window(self, upper_ms: int) -> None:
        ok = self._etcd.put_if_value(TIMESTAMP_KEY, str(upper_ms), guard_key=LEADER_KEY, guard_value=self._leader_value)
        if not ok:
            self.allocator = None
            raise UnavailableError("lost pd leadership while saving the TSO window")

    def _tick_loop(self) -> None:
        while not self._stop.wait(_TICK_INTERVAL):
            allocator = self.allocator
            if allocator is None:
                continue
            try:
                allocator.tick()
            except BinlogError as exc:
                log.warning("cannot advance the TSO window: %s", exc)

    def _lease_loop(self) -> None:
        interval = self._lease_ttl / 3
        last_ok = time.monotonic()
        while not self._stop.wait(interval):
            lease_id = self._lease_id
            try:
                ttl = self._etcd.refresh_lease(lease_id) if lease_id is not None else 0
            except EtcdUnavailableError as exc:
                log.warning("cannot refresh the pd leader lease: %s", exc)
                ttl = -1
            if ttl > 0:
                last_ok = time.monotonic()
                continue
            if ttl == 0 or time.monotonic() - last_ok > self._lease_ttl:
                log.warning("pd leader lease lost; stop serving TSO and campaign again")
                self.allocator = None
                self._lease_id = None
                try:
                    self._campaign(deadline=float("inf"))
                    last_ok = time.monotonic()
                except BinlogError as exc:
                    log.warning("campaign failed: %s", exc)

    def close(self, grace: float = 2.0) -> None:
        """Stop serving, stop threads, give up the leader key. Idempotent."""
        if self._stop.is_set():
            return
        log.info("pd-server stopping")
        self._stop.set()
        self.allocator = None
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        for t in self._threads:
            t.join(timeout=5)
        if self._lease_id is not None:
            self._etcd.revoke_lease(self._lease_id)
        log.info("pd-server stopped")
