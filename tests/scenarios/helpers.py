"""Small helpers the scenarios share: pump and drainer state, HTTP PUTs."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from common.registry import NodeKind, NodeStatus, Registry
from pump_client import PumpsClient
from tests.functional.drainerutil import Cluster
from tests.scenarios.load import Load
from tools.localcluster import DrainerProcess, NodeProcess, PumpProcess


def put(node: NodeProcess, path: str) -> tuple[int, Any]:
    """PUT on the node's status address: (HTTP status, JSON body)."""
    req = urllib.request.Request(f"http://{node.status_addr}{path}", method="PUT")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def registered(cluster: Cluster, kind: NodeKind, node_id: str) -> NodeStatus | None:
    return Registry(cluster.etcd).get(kind, node_id)


def pump_positions(drainer: DrainerProcess) -> dict[str, int]:
    """node id -> the last commit_ts the drainer received from that pump."""
    pos = drainer.http_json("GET", "/status")["PumpPos"]
    return {str(k): int(v) for k, v in pos.items()}


def saved_ts(drainer: DrainerProcess) -> int:
    return int(drainer.http_json("GET", "/commit_ts")["data"]["ts"])


DRAINER_ARGS = ("--syncer.worker-count", "16")
STEP_TIMEOUT = 60.0
"""Seconds for one step of a scenario (writes go on, a pump is used again, the merge moves)."""


def merge_moves(cluster: Cluster, drainer: DrainerProcess, timeout: float = STEP_TIMEOUT) -> None:
    """A TSO taken now gets under the drainer's saved checkpoint: every pump takes part in the merge."""
    cluster.wait_applied(drainer, cluster.now(), timeout)


def wait_used(load: Load, client: PumpsClient, pump: PumpProcess, more: int, what: str) -> None:
    """Wait until the writer wrote `more` binlogs to `pump` than it had so far."""
    target = client.metrics.writes(pump.node_id) + more
    load.wait_until(lambda: client.metrics.writes(pump.node_id) >= target, STEP_TIMEOUT, what)
