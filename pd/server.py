"""pd-server: TSO and cluster id over etcd, keeping no local data.

etcd keys (see common/pd_client.py):
    /pd/cluster_id   decimal text, created once (create-if-absent transaction)
    /pd/leader       JSON {addr, cluster_id, token}, bound to a lease of `lease-ttl` s
    /pd/timestamp    decimal ms: upper bound of the TSO window, written only
                     while /pd/leader still holds this term's token

TLS (`tls`, from `[security]`): the gRPC port is a TLS port that requires a client certificate signed by
the CA, and checks cert-allowed-cn (common/tls.py).

Lifecycle: connect etcd -> ensure cluster id -> bind the gRPC port -> campaign
for /pd/leader -> load window -> serve -> keep the lease alive.

A leadership *term* owns one token, one lease and one allocator.  Timestamps
are handed out only while the term is valid and its lease is known to be
alive (a local deadline measured from when the last keep-alive was *sent*).
When the lease is lost the term's allocator is invalidated for good, and a new
campaign starts a new term with a fresh allocator loaded from etcd; it starts
above the last saved window, so timestamps keep rising across terms.

Locks and etcd: no lock is held across an etcd call (the allocator persists its
window outside its own lock, see pd/allocator.py), so an etcd that stops
answering delays the tick and lease threads, never a TSO request or `close()`.
`close()` is bounded: it waits at most `_CLOSE_THREADS_BOUND` s for the threads
and `_REVOKE_BOUND` s for giving up the leader key (the lease expires by itself
otherwise); the caller then closes the etcd client, which cancels calls still
in flight.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc

from common.cli import check_listen_addr
from common.errors import BinlogError, ConfigError, EtcdUnavailableError, ListenError, UnavailableError
from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc
from common.pd_client import CLUSTER_ID_KEY, LEADER_KEY, TIMESTAMP_KEY, LeaderInfo
from common.tls import TLS
from common.tso import now_ms
from pd.allocator import TsoAllocator

log = logging.getLogger(__name__)

DEFAULT_LEASE_TTL = 3
DEFAULT_CAMPAIGN_TIMEOUT = 30.0
_TICK_INTERVAL = 0.05
_CLOSE_THREADS_BOUND = 2.0
"""Seconds close() waits for the tick and lease threads (they may sit in an etcd call; they are daemons)."""
_REVOKE_BOUND = 2.0
"""Seconds close() waits for the leader lease to be revoked before leaving it to expire."""


def ensure_cluster_id(etcd: EtcdClient) -> int:
    """Return the cluster id, creating it once if this is a new cluster."""
    candidate = (int(time.time()) << 32) | random.getrandbits(32)
    if etcd.create(CLUSTER_ID_KEY, str(candidate)):
        log.info("created cluster id %d", candidate)
    kv = etcd.get(CLUSTER_ID_KEY)
    if kv is None:
        raise UnavailableError(f"{CLUSTER_ID_KEY} vanished right after it was created")
    return int(kv.value.decode())


@dataclass
class _Term:
    """One leadership term: lease, token and the allocator that may serve in it."""

    lease_id: int
    value: str
    allocator: TsoAllocator | None = None
    lease_deadline: float = 0.0  # monotonic time until which the lease is known to be alive

    def serving(self) -> TsoAllocator | None:
        alloc = self.allocator
        if alloc is None or not alloc.valid or time.monotonic() >= self.lease_deadline:
            return None
        return alloc

    def end(self) -> None:
        if self.allocator is not None:
            self.allocator.invalidate()


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
        allocator = self._server.serving_allocator()
        if allocator is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "pd-server is not the leader right now")
        try:
            first = allocator.allocate(count)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except BinlogError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot hand out timestamps: {exc}")
        return pd_pb2.TsoResponse(
            cluster_id=cid,
            first=pd_pb2.Timestamp(physical=first >> 18, logical=first & ((1 << 18) - 1)),
            count=count,
        )

    def GetClusterInfo(  # noqa: N802
        self, request: pd_pb2.ClusterInfoRequest, context: grpc.ServicerContext
    ) -> pd_pb2.ClusterInfoResponse:
        return pd_pb2.ClusterInfoResponse(cluster_id=self._server.cluster_id)


def split_host_port(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"addr: {addr!r} is not host:port with a port in 0..65535")
    return host, int(port)


class PDServer:
    """One pd-server process: bind, campaign, allocate, serve."""

    def __init__(
        self,
        etcd: EtcdClient,
        addr: str,
        *,
        advertise_addr: str | None = None,
        lease_ttl: int = DEFAULT_LEASE_TTL,
        campaign_timeout: float = DEFAULT_CAMPAIGN_TIMEOUT,
        clock_skew_ms: int = 0,
        tls: TLS | None = None,
    ) -> None:
        self._etcd = etcd
        self._tls = tls
        self._addr = addr
        self._advertise_cfg = advertise_addr
        self._lease_ttl = lease_ttl
        self._campaign_timeout = campaign_timeout
        self._clock_skew_ms = clock_skew_ms
        self._stop = threading.Event()
        self._closed = False
        self._grpc: grpc.Server | None = None
        self._threads: list[threading.Thread] = []
        self._term: _Term | None = None
        self.cluster_id = 0
        self.port = 0
        self.advertise = ""
        self._started = False

    def start(self) -> None:
        host, port = split_host_port(self._addr)
        check_listen_addr("addr", host, port)
        self.cluster_id = ensure_cluster_id(self._etcd)
        tls = self._tls
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="pd-grpc"),
            options=[("grpc.so_reuseport", 0)],  # grpc's default would let a second server share the port
            interceptors=None if tls is None else tls.server_interceptors(),
        )
        pd_pb2_grpc.add_PDServicer_to_server(_Servicer(self), self._grpc)
        try:
            if tls is None:
                self.port = self._grpc.add_insecure_port(self._addr)
            else:
                self.port = self._grpc.add_secure_port(self._addr, tls.server_credentials())
        except RuntimeError as exc:  # the check above passed: another program took the port since
            raise ListenError(f"addr: cannot listen on {self._addr}: {exc}") from exc
        if self.port == 0:
            raise ListenError(f"addr: cannot listen on {self._addr}")
        self.advertise = self._advertise_cfg or f"{host}:{self.port}"
        self._grpc.start()  # serves UNAVAILABLE until the campaign is won
        if not self._campaign(deadline=time.monotonic() + self._campaign_timeout):
            log.info("pd-server asked to stop before it became the leader")
            return
        log.info(
            "pd-server serving cluster %d at %s%s (pid %d)",
            self.cluster_id,
            self.advertise,
            "" if tls is None else " with TLS",
            os.getpid(),
        )
        for target, name in ((self._tick_loop, "pd-tick"), (self._lease_loop, "pd-lease")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self._started = True

    def request_stop(self) -> None:
        """Ask start() and the background threads to stop soon (from any thread; close() does the rest)."""
        self._stop.set()

    def serving_allocator(self) -> TsoAllocator | None:
        term = self._term
        return None if term is None else term.serving()

    # -- leadership -------------------------------------------------------
    def _campaign(self, deadline: float) -> bool:
        """Win /pd/leader (waiting for a dead leader's lease to expire), then load the window.

        True once this server leads; False when asked to stop first."""
        waited_for = ""
        while not self._stop.is_set():
            info = LeaderInfo(self.advertise, self.cluster_id, uuid.uuid4().hex)
            sent = time.monotonic()
            lease_id = self._etcd.grant_lease(self._lease_ttl)
            if self._etcd.create(LEADER_KEY, info.to_json(), lease=lease_id):
                term = _Term(lease_id, info.to_json(), lease_deadline=sent + self._lease_ttl)
                try:
                    saved = self._etcd.get(TIMESTAMP_KEY)
                    last = int(saved.value.decode()) if saved else 0
                    term.allocator = TsoAllocator(last, self._window_saver(term), clock=self._clock)
                except (BinlogError, ValueError) as exc:
                    log.warning("won the election but cannot load the TSO window (%s); stepping down", exc)
                    self._etcd.revoke_lease(lease_id)  # deletes /pd/leader with it
                    if time.monotonic() > deadline:
                        raise UnavailableError(f"cannot load the TSO window: {exc}") from exc
                    self._stop.wait(0.5)
                    continue
                if self._stop.is_set():  # close() began meanwhile: do not leave a leader key behind
                    term.end()
                    self._etcd.revoke_lease(lease_id)
                    return False
                self._term = term
                log.info(
                    "became pd leader (lease %x); timestamps start above the saved window %d",
                    lease_id,
                    last,
                )
                return True
            self._etcd.revoke_lease(lease_id)
            kv = self._etcd.get(LEADER_KEY)
            holder = kv.value.decode() if kv else "?"
            if holder != waited_for:
                log.info("waiting for the current pd leader %s to go away", holder)
                waited_for = holder
            if time.monotonic() > deadline:
                raise UnavailableError(f"another pd-server holds {LEADER_KEY}: {holder}")
            self._stop.wait(0.5)
        return False

    def _clock(self) -> int:
        return now_ms() + self._clock_skew_ms

    def _window_saver(self, term: _Term) -> Callable[[int], None]:
        def save(upper_ms: int) -> None:
            ok = self._etcd.put_if_value(TIMESTAMP_KEY, str(upper_ms), guard_key=LEADER_KEY, guard_value=term.value)
            if not ok:
                term.end()
                raise UnavailableError("lost pd leadership while saving the TSO window")

        return save

    def _tick_loop(self) -> None:
        while not self._stop.wait(_TICK_INTERVAL):
            allocator = self.serving_allocator()
            if allocator is None:
                continue
            try:
                allocator.tick()
            except BinlogError as exc:
                log.warning("cannot advance the TSO window: %s", exc)

    def _lease_loop(self) -> None:
        interval = self._lease_ttl / 3
        while not self._stop.wait(interval):
            term = self._term
            if term is None:
                try:
                    self._campaign(deadline=float("inf"))
                except BinlogError as exc:
                    log.warning("campaign failed, retrying: %s", exc)
                continue
            sent = time.monotonic()
            try:
                ttl = self._etcd.refresh_lease(term.lease_id)
            except EtcdUnavailableError as exc:
                log.warning("cannot refresh the pd leader lease: %s", exc)
                ttl = -1
            if ttl > 0 and term.allocator is not None and term.allocator.valid:
                term.lease_deadline = sent + ttl
                continue
            if ttl == 0 or time.monotonic() >= term.lease_deadline or not (term.allocator and term.allocator.valid):
                log.warning("pd leader term over (lease gone or window lost); campaigning again")
                term.end()
                self._term = None
                self._etcd.revoke_lease(term.lease_id)

    def close(self, grace: float = 2.0) -> None:
        """Stop serving, stop threads, give up the leader key. Idempotent.

        Bounded even while etcd does not answer: `grace` + 1 + `_CLOSE_THREADS_BOUND` + `_REVOKE_BOUND`
        seconds at most (a second `_REVOKE_BOUND` only for a term a campaign won while close() began)."""
        if self._closed:
            return
        self._closed = True
        started = self._started  # a start that failed says so itself; no shutdown chatter then
        if started:
            log.info("pd-server stopping")
        self._stop.set()
        term, self._term = self._term, None
        if term is not None:
            term.end()  # no TSO leaves from here on
        if self._grpc is not None:
            self._grpc.stop(grace).wait(grace + 1)
        deadline = time.monotonic() + _CLOSE_THREADS_BOUND
        for t in self._threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("close: thread %s is still in an etcd call; leaving it (daemon)", t.name)
        late, self._term = self._term, None  # a campaign that won while close() began
        for ended in (term, late):
            if ended is not None:
                ended.end()
                self._give_up_leadership(ended.lease_id)
        if started:
            log.info("pd-server stopped")

    def _give_up_leadership(self, lease_id: int) -> None:
        """Revoke the leader lease (deleting /pd/leader), waiting at most `_REVOKE_BOUND` s for etcd."""
        revoker = threading.Thread(target=self._etcd.revoke_lease, args=(lease_id,), name="pd-revoke", daemon=True)
        revoker.start()
        revoker.join(_REVOKE_BOUND)
        if revoker.is_alive():
            log.warning(
                "close: etcd did not answer within %.0fs; %s goes away when lease %x expires (ttl %d s)",
                _REVOKE_BOUND,
                LEADER_KEY,
                lease_id,
                self._lease_ttl,
            )
