"""Node registry in etcd: pump and drainer status (docs/formats.md#registry-status).

Keys:   /tidb-binlog/v1/pumps/<nodeID>   /tidb-binlog/v1/drainers/<nodeID>
        (no lease: liveness is `state` + `updateTS`, as in the original)
Value:  JSON with exactly these keys in this order
        {"nodeId":str,"host":str,"state":str,"isAlive":bool,"score":int,
         "label":{"labels":{k:v}}|null,"maxCommitTS":int,"updateTS":int}
Create: transaction If(ModRevision(key) == 0) Then Put
Update: transaction If(ModRevision(key) > 0) Then Put
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from typing import Any

from common.errors import NodeExistsError, NodeNotFoundError, RegistryError
from common.etcd import EtcdClient, EventType, PrefixWatcher, WatchEvent

log = logging.getLogger(__name__)

ROOT_PATH = "/tidb-binlog/v1"


class NodeKind(Enum):
    PUMP = "pumps"
    DRAINER = "drainers"


class NodeState(StrEnum):
    ONLINE = "online"
    PAUSING = "pausing"
    PAUSED = "paused"
    CLOSING = "closing"
    OFFLINE = "offline"


STATUS_ADDR_LABEL = "status-addr"
"""Label a node publishes with its HTTP API address (ours: `host` is the gRPC address; binlogctl reads it)."""


def status_labels(http_addr: str, advertise: str) -> dict[str, str]:
    """The labels of a node serving HTTP on `http_addr`: a wildcard host is replaced by the advertised one."""
    host, _, port = http_addr.rpartition(":")
    if host in ("", "0.0.0.0", "::", "[::]"):
        host = advertise.rpartition(":")[0]
    return {STATUS_ADDR_LABEL: f"{host}:{port}"}


@dataclass(frozen=True)
class NodeStatus:
    node_id: str
    host: str
    state: NodeState
    is_alive: bool = True
    score: int = 0
    labels: dict[str, str] | None = field(default=None, compare=True)
    max_commit_ts: int = 0
    update_ts: int = 0

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "nodeId": self.node_id,
            "host": self.host,
            "state": self.state.value,
            "isAlive": self.is_alive,
            "score": self.score,
            "label": None if self.labels is None else {"labels": dict(self.labels)},
            "maxCommitTS": self.max_commit_ts,
            "updateTS": self.update_ts,
        }
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: bytes | str) -> NodeStatus:
        try:
            doc = json.loads(raw)
            label = doc.get("label")
            labels = None if label is None else {str(k): str(v) for k, v in (label.get("labels") or {}).items()}
            return cls(
                node_id=str(doc["nodeId"]),
                host=str(doc["host"]),
                state=NodeState(doc["state"]),
                is_alive=bool(doc.get("isAlive", False)),
                score=int(doc.get("score", 0)),
                labels=labels,
                max_commit_ts=int(doc.get("maxCommitTS", 0)),
                update_ts=int(doc.get("updateTS", 0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(f"malformed node status {raw!r}: {exc}") from exc

    def with_state(self, state: NodeState) -> NodeStatus:
        return replace(self, state=state)


@dataclass(frozen=True)
class NodeChange:
    """A change seen by a registry watch: `status` is None when the key was deleted."""

    kind: NodeKind
    node_id: str
    status: NodeStatus | None
    revision: int


class Registry:
    """Reads and writes node statuses under the registry root."""

    def __init__(self, etcd: EtcdClient, root: str = ROOT_PATH) -> None:
        self._etcd = etcd
        self._root = root.rstrip("/")

    def prefix(self, kind: NodeKind) -> str:
        return f"{self._root}/{kind.value}/"

    def key(self, kind: NodeKind, node_id: str) -> str:
        if not node_id or "/" in node_id:
            raise RegistryError(f"bad node id {node_id!r}: must be non-empty and contain no '/'")
        return self.prefix(kind) + node_id

    def node_id_of(self, kind: NodeKind, key: str) -> str | None:
        """The node id of a registry key, or None for keys that are not node statuses."""
        prefix = self.prefix(kind)
        if not key.startswith(prefix):
            return None
        rest = key[len(prefix) :]
        return rest.split("/", 1)[0] or None

    def create(self, kind: NodeKind, status: NodeStatus) -> None:
        key = self.key(kind, status.node_id)
        if not self._etcd.create(key, status.to_json()):
            raise NodeExistsError(f"{kind.value[:-1]} {status.node_id!r} is already registered at {key}")
        log.info("registered %s node_id=%s state=%s", kind.value[:-1], status.node_id, status.state.value)

    def update(self, kind: NodeKind, status: NodeStatus) -> None:
        key = self.key(kind, status.node_id)
        if not self._etcd.update(key, status.to_json()):
            raise NodeNotFoundError(f"{kind.value[:-1]} {status.node_id!r} is not registered (no key {key})")

    def upsert(self, kind: NodeKind, status: NodeStatus) -> None:
        """Create the status, or update it if it exists."""
        try:
            self.create(kind, status)
        except NodeExistsError:
            self.update(kind, status)

    def get(self, kind: NodeKind, node_id: str) -> NodeStatus | None:
        kv = self._etcd.get(self.key(kind, node_id))
        return None if kv is None else NodeStatus.from_json(kv.value)

    def list(self, kind: NodeKind) -> list[NodeStatus]:
        """Every registered node of a kind, sorted by node id; malformed entries are logged and skipped."""
        kvs, _ = self._etcd.get_prefix(self.prefix(kind))
        nodes: list[NodeStatus] = []
        for kv in kvs:
            if self.node_id_of(kind, kv.key) is None:
                continue
            try:
                nodes.append(NodeStatus.from_json(kv.value))
            except RegistryError as exc:
                log.warning("skipping %s: %s", kv.key, exc)
        return sorted(nodes, key=lambda n: n.node_id)

    def delete(self, kind: NodeKind, node_id: str) -> bool:
        return self._etcd.delete(self.key(kind, node_id))

    def watch(self, kind: NodeKind, on_change: Callable[[NodeChange], None]) -> PrefixWatcher:
        """Call `on_change` for the current nodes and every later change; survives etcd restarts."""

        def handle(event: WatchEvent) -> None:
            node_id = self.node_id_of(kind, event.key)
            if node_id is None:
                return
            if event.type is EventType.DELETE:
                on_change(NodeChange(kind, node_id, None, event.revision))
                return
            try:
                status = NodeStatus.from_json(event.value)
            except RegistryError as exc:
                log.warning("ignoring malformed status at %s: %s", event.key, exc)
                return
            on_change(NodeChange(kind, node_id, status, event.revision))

        return self._etcd.watch_prefix(self.prefix(kind), handle)
