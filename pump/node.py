"""The pump as a registry node: node id, registration, heartbeat, Notify, state changes, offline wait.

States (docs/architecture.md#pump-node-states) and the transitions this pump makes locally:

    OFFLINE --start--> ONLINE            (local state before registering is OFFLINE: nothing served)
    ONLINE  --pause--> PAUSING --closed--> PAUSED        PUT /state/<id>/pause, SIGTERM, SIGINT
    ONLINE  --close--> CLOSING --safe----> OFFLINE       PUT /state/<id>/close (binlogctl offline-pump)
    CLOSING --interrupted-----> PAUSED                   a signal cut the offline wait short
    ONLINE  --notify failed---> OFFLINE                  a drainer missed the news of a new pump

Only ONLINE accepts prewrites and only ONLINE accepts an action.  `closing` is never published: during
the offline wait etcd keeps the last heartbeat (`online`) so drainers keep pulling, while this pump
already refuses prewrites with "no online: closing" (as the original).

Node id: `<data-dir>/.node`, else the `node-id` key, else `<hostname>:<port of addr>`; the id in use is
written back to `.node`, and appended to `<data-dir>/.node-history` (every id this data dir has served
under: the commit resolver treats them all as this pump's own, see pump/resolver.py).  At most 255
characters (the txn-status table's `pump_node_id`).

Heartbeat: every `heartbeat-interval` the status is re-published with
`maxCommitTS` from the storage and `updateTS` = the last TSO seen + the milliseconds since, << 18.
`score` (0..100, pump/score.py) is published while online, 0 in every other state or when it cannot be
computed; the pump client's `score` strategy weighs pumps by it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import grpc

from common import tso as tsolib
from common.backoff import Backoff
from common.dirs import ensure_dir
from common.errors import BinlogError, ConfigError
from common.httpserver import HTTPActionError
from common.pb import cistern_pb2, cistern_pb2_grpc
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from common.tls import TLS, connect_hint
from common.txnstatus import MAX_NODE_ID

log = logging.getLogger(__name__)

NODE_ID_FILE: Final = ".node"
NODE_ID_HISTORY_FILE: Final = ".node-history"
OFFLINE_CHECK_INTERVAL: Final = 1.0
"""The offline wait re-checks the drainers (and writes a fake binlog) this often (original: 1 s)."""
_LOCAL_CHECK_INTERVAL: Final = 0.1

TRANSITIONS: Final[dict[NodeState, frozenset[NodeState]]] = {
    NodeState.OFFLINE: frozenset({NodeState.ONLINE}),
    NodeState.ONLINE: frozenset({NodeState.PAUSING, NodeState.CLOSING, NodeState.OFFLINE}),
    NodeState.PAUSING: frozenset({NodeState.PAUSED}),
    NodeState.CLOSING: frozenset({NodeState.OFFLINE, NodeState.PAUSED}),
    NodeState.PAUSED: frozenset(),
}
ACTIONS: Final[dict[str, NodeState]] = {"pause": NodeState.PAUSING, "close": NodeState.CLOSING}


class TimestampSource(Protocol):
    def get_ts(self, timeout: float | None = None) -> int: ...


class NotifyError(BinlogError):
    """A drainer could not be told about this (new) pump."""


class StateError(BinlogError):
    """A state change that the state machine does not allow."""


class ActionError(HTTPActionError):
    """A refused `PUT /state/<id>/<action>`; `http_status` says why (404, 400, 409)."""


# ------------------------------------------------------------------------------------------------ node id


def resolve_node_id(data_dir: Path, configured: str, listen_port: int) -> str:
    """The node id from `<data_dir>/.node`, else `configured`, else `<hostname>:<port>`; saved to `.node`.

    `data_dir` is created first: one that cannot be is an error naming `data-dir` (common/dirs.py)."""
    ensure_dir("data-dir", data_dir)
    path = data_dir / NODE_ID_FILE
    try:
        saved = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        saved = ""
    if saved:
        if configured and configured != saved:
            log.warning(
                "node-id %r is ignored: %s says %r (delete that file to change the node id)", configured, path, saved
            )
        node_id = saved
    else:
        node_id = configured or f"{socket.gethostname()}:{listen_port}"
    if len(node_id) > MAX_NODE_ID:
        raise ConfigError(
            f"node id {node_id[:40]!r}... is {len(node_id)} characters, more than {MAX_NODE_ID}: set node-id"
        )
    if not saved:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(node_id + "\n", encoding="utf-8")
        os.replace(tmp, path)
        log.info("node_id=%s saved to %s", node_id, path)
    history = node_id_history(data_dir)
    if not history or history[-1] != node_id:
        with open(data_dir / NODE_ID_HISTORY_FILE, "a", encoding="utf-8") as f:
            f.write(node_id + "\n")
            f.flush()
            os.fsync(f.fileno())
        if history:
            log.warning("node_id=%s: this data dir served as %s before", node_id, ", ".join(history))
    return node_id


def node_id_history(data_dir: Path) -> list[str]:
    """Every node id `data_dir` has served under, oldest first (empty before the first start)."""
    try:
        lines = (data_dir / NODE_ID_HISTORY_FILE).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [line.strip() for line in lines if line.strip()]


# ------------------------------------------------------------------------------------------- approx clock


class ApproxClock:
    """A TSO-like "now" without asking PD: the last TSO seen plus the elapsed milliseconds << 18."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ts = 0
        self._at = time.monotonic()

    def observe(self, ts: int) -> None:
        with self._lock:
            if ts >= self.now_locked():
                self._ts = ts
                self._at = time.monotonic()

    def now(self) -> int:
        with self._lock:
            return self.now_locked()

    def now_locked(self) -> int:
        if self._ts == 0:
            return 0
        elapsed_ms = int((time.monotonic() - self._at) * 1000)
        return self._ts + (elapsed_ms << tsolib.LOGICAL_BITS)


# ------------------------------------------------------------------------------------------------ notify


@dataclass(frozen=True)
class NotifyPolicy:
    """How hard to try `binlog.Cistern/Notify` on each drainer (original: 3 tries, 1 s back-off x2, 10 s).

    Each try is bounded (`attempt_timeout`), so an unreachable drainer still gets every try within
    `timeout`.  By default a try gets an equal share of what the back-offs leave of `timeout`
    (10 s - 1 s - 2 s over 3 tries: 2.33 s); the last try gets whatever remains.
    """

    attempts: int = 3
    backoff: float = 1.0
    factor: float = 2.0
    timeout: float = 10.0
    attempt_timeout: float | None = None

    def per_attempt(self) -> float:
        if self.attempt_timeout is not None:
            return self.attempt_timeout
        attempts = max(1, self.attempts)
        backoffs = sum(self.backoff * self.factor**i for i in range(attempts - 1))
        share = (self.timeout - backoffs) / attempts
        return share if share > 0 else self.timeout / attempts


def notify_drainer(host: str, policy: NotifyPolicy, tls: TLS | None = None) -> None:
    """Call Notify on the drainer at `host` (over TLS with `tls`); raises NotifyError when every try failed."""
    backoff = Backoff(policy.backoff, policy.factor, timeout=policy.timeout)
    per_attempt = policy.per_attempt()
    last = "no attempt"
    channel = grpc.insecure_channel(host) if tls is None else grpc.secure_channel(host, tls.channel_credentials())
    with channel:
        stub = cistern_pb2_grpc.CisternStub(channel)
        for attempt in range(1, policy.attempts + 1):
            remaining = backoff.remaining()
            if remaining <= 0:
                break
            timeout = remaining if attempt == policy.attempts else min(per_attempt, remaining)
            try:
                stub.Notify(cistern_pb2.NotifyReq(), timeout=timeout, wait_for_ready=True)
                return
            except grpc.RpcError as exc:
                last = _rpc_error(exc, tls is not None)
                log.warning("notify drainer at %s failed (try %d/%d): %s", host, attempt, policy.attempts, last)
            if attempt < policy.attempts:
                backoff.wait(limit=backoff.remaining())  # never past the deadline
    raise NotifyError(f"notify drainer at {host} failed: {last}")


def _rpc_error(exc: grpc.RpcError, tls_enabled: bool) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        hint = connect_hint(tls_enabled) if code() is grpc.StatusCode.UNAVAILABLE else ""
        return f"{code().name}: {details()}{hint}"
    return str(exc)


# -------------------------------------------------------------------------------------------------- node


class PumpNode:
    """This pump's registry record and local state.  Thread-safe."""

    def __init__(
        self,
        registry: Registry,
        tso: TimestampSource,
        clock: ApproxClock,
        *,
        node_id: str,
        host: str,
        max_commit_ts: Callable[[], int],
        heartbeat_interval: float,
        notify_policy: NotifyPolicy | None = None,
        score: Callable[[], int] | None = None,
        tls: TLS | None = None,
    ) -> None:
        self._registry = registry
        self._tso = tso
        self._clock = clock
        self.labels: dict[str, str] | None = None
        """Published with every status (the app sets its HTTP address here before registering)."""
        self.node_id = node_id
        self.host = host
        self._max_commit_ts = max_commit_ts
        self._heartbeat_interval = heartbeat_interval
        self._notify_policy = notify_policy or NotifyPolicy()
        self._tls = tls
        self._score = score
        self._lock = threading.Lock()
        self._state = NodeState.OFFLINE
        self._published = NodeState.OFFLINE
        self._heartbeat_stop = threading.Event()
        self._heartbeat: threading.Thread | None = None
        self._frozen_max_commit_ts: int | None = None

    # ----------------------------------------------------------------------------------- state
    @property
    def state(self) -> NodeState:
        with self._lock:
            return self._state

    def transition(self, to: NodeState) -> NodeState:
        """Move the local state to `to`; returns the previous state. StateError if not allowed."""
        with self._lock:
            before = self._state
            if to not in TRANSITIONS.get(before, frozenset()):
                raise StateError(f"pump {self.node_id} cannot go from {before.value} to {to.value}")
            self._state = to
        log.info("node_id=%s state %s -> %s", self.node_id, before.value, to.value)
        return before

    def apply_action(self, node_id: str, action: str) -> NodeState:
        """Validate a `PUT /state/<node_id>/<action>` and make the local state change; ActionError if refused."""
        if node_id != self.node_id:
            raise ActionError(404, f"invalid nodeID {node_id}, this pump's nodeID is {self.node_id}")
        target = ACTIONS.get(action)
        if target is None:
            raise ActionError(400, f"invalid action {action}")
        with self._lock:
            current = self._state
            if current is not NodeState.ONLINE:
                raise ActionError(409, f"this pump's state is {current.value}, apply {action} failed!")
            self._state = target
        log.info("node_id=%s state online -> %s (action %s)", self.node_id, target.value, action)
        return target

    # ------------------------------------------------------------------------------- registry
    def status(self, state: NodeState) -> NodeStatus:
        frozen = self._frozen_max_commit_ts
        return NodeStatus(
            node_id=self.node_id,
            host=self.host,
            state=state,
            is_alive=True,
            score=self.score(state),
            labels=self.labels,
            max_commit_ts=self._max_commit_ts() if frozen is None else frozen,
            update_ts=self._clock.now(),
        )

    def score(self, state: NodeState) -> int:
        """The routing score to publish with `state`: 0 unless online; a failing computation gives 0."""
        if self._score is None or state is not NodeState.ONLINE:
            return 0
        try:
            return max(0, min(100, int(self._score())))
        except Exception as exc:  # the storage may be closing: never fail a heartbeat for a score
            log.debug("node_id=%s score unavailable: %s", self.node_id, exc)
            return 0

    def freeze_max_commit_ts(self) -> None:
        """Keep publishing the current maxCommitTS from now on (call before the storage closes)."""
        self._frozen_max_commit_ts = self._max_commit_ts()

    def register(self) -> NodeState | None:
        """Publish `online` (updateTS from a fresh TSO); returns the state registered before, if any."""
        previous = self._registry.get(NodeKind.PUMP, self.node_id)
        self._clock.observe(self._tso.get_ts())
        self.transition(NodeState.ONLINE)
        self.publish(NodeState.ONLINE)
        before = None if previous is None else previous.state
        log.info("node_id=%s registered online at %s (was %s)", self.node_id, self.host, before or "new")
        return before

    def publish(self, state: NodeState) -> None:
        """Write the status with `state` to etcd (create or update)."""
        self._registry.upsert(NodeKind.PUMP, self.status(state))
        with self._lock:
            self._published = state
        log.info("node_id=%s published state %s", self.node_id, state.value)

    def notify_drainers(self) -> None:
        """Call Notify on every online drainer; NotifyError naming the first one that failed."""
        drainers = [d for d in self._registry.list(NodeKind.DRAINER) if d.state is NodeState.ONLINE]
        for drainer in drainers:
            try:
                notify_drainer(drainer.host, self._notify_policy, self._tls)
            except NotifyError as exc:
                raise NotifyError(f"drainer {drainer.node_id}: {exc}") from exc
            log.info("notified drainer %s at %s", drainer.node_id, drainer.host)

    # ------------------------------------------------------------------------------ heartbeat
    def start_heartbeat(self) -> None:
        if self._heartbeat is not None:
            return
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name="pump-heartbeat", daemon=True)
        self._heartbeat.start()

    def stop_heartbeat(self) -> None:
        self._heartbeat_stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            log.info("node_id=%s heartbeat stopped", self.node_id)

    def heartbeat_once(self) -> None:
        with self._lock:
            state = self._published
        try:
            self._registry.update(NodeKind.PUMP, self.status(state))
        except BinlogError as exc:
            log.warning("node_id=%s heartbeat failed: %s", self.node_id, exc)

    def _heartbeat_loop(self) -> None:
        while not self._heartbeat_stop.wait(self._heartbeat_interval):
            self.heartbeat_once()


# ---------------------------------------------------------------------------------------- offline wait


def wait_safe_to_offline(
    *,
    write_fake: Callable[[], int],
    all_matched: Callable[[], bool],
    max_commit_ts: Callable[[], int],
    registry: Registry,
    abort: threading.Event,
    interval: float = OFFLINE_CHECK_INTERVAL,
) -> bool:
    """Block until no drainer needs anything more from this pump (the original's waitSafeToOffline).

    1. write a fake binlog (retried every `interval`);
    2. wait until every prewrite is matched and the watermark reached the fake binlog;
    3. read the pump's maxCommitTS once, then wait until the lowest maxCommitTS of the non-offline
       drainers reached that value, writing a fake binlog every `interval` meanwhile so the drainers
       keep moving.  The target is not re-read: drainers publish their checkpoint less often than
       fake binlogs are written, so a moving target could never be reached.
    Returns False when `abort` was set first.
    """
    fake_ts = 0
    while not fake_ts:
        try:
            fake_ts = write_fake()
        except BinlogError as exc:
            log.warning("offline: cannot write a fake binlog yet: %s", exc)
            if abort.wait(interval):
                return False
    log.info("offline: wrote fake binlog commit_ts=%d; waiting for the storage to reach it", fake_ts)
    while not (all_matched() and max_commit_ts() >= fake_ts):
        if abort.wait(min(interval, _LOCAL_CHECK_INTERVAL)):  # local checks: cheap, poll faster
            return False
    target = max_commit_ts()  # read ONCE: later fake binlogs only keep the drainers moving
    log.info("offline: storage reached commit_ts=%d; waiting for the drainers to reach it", target)
    reported = -1
    while True:
        drainers = [d for d in registry.list(NodeKind.DRAINER) if d.state is not NodeState.OFFLINE]
        lowest = min((d.max_commit_ts for d in drainers), default=target)
        if lowest >= target:
            log.info("offline: every drainer reached commit_ts=%d", target)
            return True
        if lowest != reported:
            behind = [d.node_id for d in drainers if d.max_commit_ts < target]
            log.info("offline: waiting for drainers %s to reach commit_ts=%d (lowest %d)", behind, target, lowest)
            reported = lowest
        try:
            write_fake()
        except BinlogError as exc:
            log.warning("offline: cannot write a fake binlog: %s", exc)
        if abort.wait(interval):
            return False
