"""Client side of pd-server: cluster id and batched TSO requests.

Clients find pd-server through etcd (`pd-urls` point at etcd, as in TiDB):
`/pd/leader` holds the serving pd-server's address, `/pd/cluster_id` the
cluster id as decimal text, `/pd/timestamp` the upper bound (ms) of the TSOs
handed out.  pd-server is dialled with TLS when the client has TLS settings (given,
or the etcd client's).  Concurrent `get_ts()` calls are gathered by one
dispatcher thread into a single `Tso(count=n)` RPC.  When the call fails the
client re-reads `/pd/leader`, reconnects and retries until the caller's
deadline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import grpc

from common.backoff import Backoff, WaitTimeoutError, poll_until
from common.errors import ClusterIDMismatchError, TSOError, UnavailableError
from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc
from common.tls import TLS, connect_hint

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = "/pd/cluster_id"
LEADER_KEY = "/pd/leader"
TIMESTAMP_KEY = "/pd/timestamp"

DEFAULT_TSO_TIMEOUT = 10.0
"""Seconds a get_ts() call may take, retries included."""
MAX_BATCH = 10_000
_RPC_TIMEOUT = 3.0


@dataclass(frozen=True)
class LeaderInfo:
    addr: str
    cluster_id: int
    token: str

    def to_json(self) -> str:
        return json.dumps({"addr": self.addr, "cluster_id": self.cluster_id, "token": self.token})

    @classmethod
    def from_json(cls, raw: bytes) -> LeaderInfo:
        try:
            data = json.loads(raw)
            return cls(str(data["addr"]), int(data["cluster_id"]), str(data.get("token", "")))
        except (ValueError, KeyError, TypeError) as exc:
            raise TSOError(f"{LEADER_KEY} holds {raw!r}, not a pd leader record: {exc}") from exc


def read_cluster_id(etcd: EtcdClient) -> int | None:
    """The cluster id stored at /pd/cluster_id, or None before pd-server created it."""
    kv = etcd.get(CLUSTER_ID_KEY)
    if kv is None:
        return None
    try:
        return int(kv.value.decode())
    except ValueError as exc:
        raise TSOError(f"{CLUSTER_ID_KEY} holds {kv.value!r}, not a decimal cluster id") from exc


CLUSTER_ID_POLL_INTERVAL = 0.1
"""Seconds between two reads of /pd/cluster_id while waiting for pd-server to publish it."""


def wait_cluster_id(etcd: EtcdClient, timeout: float) -> int:
    """The cluster id at /pd/cluster_id, read every 0.1 s until pd-server has published it.

    WaitTimeoutError (common.backoff) when it is still missing `timeout` seconds after the first read (each
    caller says it in its own words); TSOError for a value that is not a cluster id."""
    return poll_until(
        lambda: read_cluster_id(etcd), timeout, CLUSTER_ID_POLL_INTERVAL, what=f"the cluster id at {CLUSTER_ID_KEY}"
    )


def read_window_upper(etcd: EtcdClient) -> int | None:
    """pd-server's saved TSO window at /pd/timestamp (ms): every TSO handed out so far has a smaller
    physical part. None before pd-server saved one."""
    kv = etcd.get(TIMESTAMP_KEY)
    if kv is None:
        return None
    try:
        return int(kv.value.decode())
    except ValueError as exc:
        raise TSOError(f"{TIMESTAMP_KEY} holds {kv.value!r}, not a decimal number of milliseconds") from exc


def read_leader(etcd: EtcdClient, *, retry_for: float | None = None) -> LeaderInfo | None:
    kv = etcd.get(LEADER_KEY, retry_for=retry_for)
    return None if kv is None else LeaderInfo.from_json(kv.value)


@dataclass
class _Waiter:
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    ts: int = 0
    error: Exception | None = None


class TSOClient:
    """Thread-safe TSO client with request batching and leader re-discovery."""

    def __init__(
        self,
        etcd: EtcdClient,
        *,
        timeout: float = DEFAULT_TSO_TIMEOUT,
        max_batch: int = MAX_BATCH,
        tls: TLS | None = None,
    ) -> None:
        """`tls`: dial pd-server with TLS (default: the etcd client's, as one `[security]` serves both)."""
        self._etcd = etcd
        tls = tls or etcd.tls
        self._credentials = None if tls is None else tls.channel_credentials()
        self._timeout = timeout
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._queue: deque[_Waiter] = deque()
        self._closed = False
        self._channel: grpc.Channel | None = None
        self._stub: pd_pb2_grpc.PDStub | None = None
        self._leader: LeaderInfo | None = None
        self.rpc_count = 0
        self._failing_since: float | None = None
        self._failures = 0
        self._thread = threading.Thread(target=self._dispatch_loop, name="tso-dispatcher", daemon=True)
        self._thread.start()

    @property
    def cluster_id(self) -> int:
        """The cluster id (waits for pd-server to publish it, up to the timeout)."""
        try:
            return wait_cluster_id(self._etcd, self._timeout)
        except WaitTimeoutError:
            raise UnavailableError(f"no cluster id at {CLUSTER_ID_KEY}: is pd-server running?") from None

    def get_ts(self, timeout: float | None = None) -> int:
        """One fresh timestamp, greater than any obtained before it returned."""
        waiter = _Waiter(deadline=time.monotonic() + (self._timeout if timeout is None else timeout))
        with self._cond:
            if self._closed:
                raise TSOError("TSO client is closed")
            self._queue.append(waiter)
            self._cond.notify()
        # the dispatcher answers every waiter by its deadline; the margin only guards against a bug there
        if not waiter.done.wait(max(0.0, waiter.deadline - time.monotonic()) + 5.0):
            raise TSOError("TSO dispatcher did not answer (internal error)")
        if waiter.error is not None:
            raise waiter.error
        return waiter.ts

    # -- dispatcher -------------------------------------------------------
    def _dispatch_loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if self._closed:
                    batch = list(self._queue)
                    self._queue.clear()
                    for w in batch:
                        w.error = TSOError("TSO client is closed")
                        w.done.set()
                    return
                n = min(len(self._queue), self._max_batch)
                batch = [self._queue.popleft() for _ in range(n)]
            try:
                self._serve(batch)
            except Exception as exc:  # never let the dispatcher die with callers waiting
                log.exception("TSO dispatcher failed")
                for w in batch:
                    if not w.done.is_set():
                        w.error = TSOError(f"TSO request failed: {exc}")
                        w.done.set()

    def _fail(self, batch: list[_Waiter], error: Exception) -> None:
        for w in batch:
            w.error = error
            w.done.set()

    def _serve(self, batch: list[_Waiter]) -> None:
        backoff = Backoff(0.05, 2.0, 0.5)
        last_error: Exception | None = None
        while batch:
            now = time.monotonic()
            expired = [w for w in batch if w.deadline <= now]
            for w in expired:
                w.error = UnavailableError(f"no timestamp from pd-server before the deadline: {last_error}")
                w.done.set()
            batch = [w for w in batch if w.deadline > now]
            if not batch:
                return
            remaining = min(w.deadline for w in batch) - now
            try:
                first = self._request(len(batch), remaining)
            except ClusterIDMismatchError as exc:
                self._fail(batch, exc)
                return
            except (grpc.RpcError, UnavailableError, TSOError) as exc:
                last_error = exc
                self._failures += 1
                why = _brief(exc, self._credentials is not None)
                if self._failing_since is None:  # one warning per outage, details at debug level
                    self._failing_since = time.monotonic()
                    log.warning("TSO request failed (%s); rediscovering pd-server", why)
                else:
                    log.debug("TSO request failed again (%s)", why)
                self._reset_channel()
                with self._cond:
                    closed = self._closed
                if closed:
                    self._fail(batch, TSOError("TSO client is closed"))
                    return
                backoff.wait(limit=max(0.0, remaining))
                continue
            if self._failing_since is not None:
                log.info(
                    "TSO requests succeed again after %.1fs and %d failed attempts",
                    time.monotonic() - self._failing_since,
                    self._failures,
                )
                self._failing_since, self._failures = None, 0
            for i, w in enumerate(batch):
                w.ts = first + i
                w.done.set()
            return

    def _request(self, count: int, remaining: float) -> int:
        stub = self._connect(remaining)
        leader = self._leader
        assert leader is not None
        timeout = max(0.05, min(_RPC_TIMEOUT, remaining))
        try:
            resp = stub.Tso(pd_pb2.TsoRequest(cluster_id=leader.cluster_id, count=count), timeout=timeout)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION:
                raise ClusterIDMismatchError(str(exc.details())) from exc
            raise
        self.rpc_count += 1
        if resp.count != count:
            raise TSOError(f"pd-server returned {resp.count} timestamps, asked for {count}")
        return int((resp.first.physical << 18) | resp.first.logical)

    def _connect(self, remaining: float) -> pd_pb2_grpc.PDStub:
        if self._stub is not None:
            return self._stub
        leader = read_leader(self._etcd, retry_for=max(0.0, remaining))
        if leader is None:
            raise UnavailableError(f"no pd-server registered at {LEADER_KEY}")
        log.info("connecting to pd-server at %s (cluster id %d)", leader.addr, leader.cluster_id)
        if self._credentials is None:
            self._channel = grpc.insecure_channel(leader.addr)
        else:
            self._channel = grpc.secure_channel(leader.addr, self._credentials)
        self._stub = pd_pb2_grpc.PDStub(self._channel)
        self._leader = leader
        return self._stub

    def _reset_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=5)
        self._reset_channel()


def _brief(exc: Exception, tls_enabled: bool) -> str:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        hint = connect_hint(tls_enabled) if exc.code() is grpc.StatusCode.UNAVAILABLE else ""
        return f"{exc.code().name}: {exc.details()}{hint}"
    return str(exc)
