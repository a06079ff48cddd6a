"""Node registry against a real etcd: create/update semantics, JSON shape, watch across an etcd restart."""

from __future__ import annotations

import json
import queue

import pytest

from common.errors import NodeExistsError, NodeNotFoundError, RegistryError
from common.etcd import EtcdClient
from common.registry import NodeChange, NodeKind, NodeState, NodeStatus, Registry
from tools.localcluster import EtcdProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional


def status(node_id: str = "host1:8250", state: NodeState = NodeState.ONLINE, max_ts: int = 0) -> NodeStatus:
    return NodeStatus(node_id=node_id, host="127.0.0.1:8250", state=state, max_commit_ts=max_ts, update_ts=7)


def test_json_shape_is_the_original_one(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    reg.create(NodeKind.PUMP, status(max_ts=417455000000000000))
    kv = etcd.get("/tidb-binlog/v1/pumps/host1:8250")
    assert kv is not None
    assert kv.value.decode() == (
        '{"nodeId":"host1:8250","host":"127.0.0.1:8250","state":"online","isAlive":true,"score":0,'
        '"label":null,"maxCommitTS":417455000000000000,"updateTS":7}'
    )
    assert list(json.loads(kv.value)) == [
        "nodeId", "host", "state", "isAlive", "score", "label", "maxCommitTS", "updateTS"
    ]  # fmt: skip


def test_create_twice_fails_with_clear_error(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    reg.create(NodeKind.PUMP, status())
    with pytest.raises(NodeExistsError, match=r"pump 'host1:8250' is already registered"):
        reg.create(NodeKind.PUMP, status(state=NodeState.PAUSED))
    got = reg.get(NodeKind.PUMP, "host1:8250")
    assert got is not None
    assert got.state is NodeState.ONLINE


def test_update_of_missing_key_fails(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    with pytest.raises(NodeNotFoundError, match="is not registered"):
        reg.update(NodeKind.DRAINER, status("d1:8249"))
    assert reg.get(NodeKind.DRAINER, "d1:8249") is None


def test_update_list_and_labels(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    reg.create(NodeKind.PUMP, status("b:1"))
    reg.create(NodeKind.PUMP, status("a:1"))
    labelled = NodeStatus("c:1", "h:1", NodeState.PAUSED, labels={"zone": "z1"})
    reg.upsert(NodeKind.PUMP, labelled)
    reg.update(NodeKind.PUMP, status("b:1", NodeState.CLOSING, max_ts=99))
    nodes = reg.list(NodeKind.PUMP)
    assert [n.node_id for n in nodes] == ["a:1", "b:1", "c:1"]
    assert nodes[1].state is NodeState.CLOSING
    assert nodes[1].max_commit_ts == 99
    assert nodes[2].labels == {"zone": "z1"}
    assert reg.list(NodeKind.DRAINER) == []


def test_malformed_entries_are_skipped_and_reported(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    etcd.put("/tidb-binlog/v1/pumps/bad:1", b"{not json")
    reg.create(NodeKind.PUMP, status("good:1"))
    assert [n.node_id for n in reg.list(NodeKind.PUMP)] == ["good:1"]
    with pytest.raises(RegistryError, match="malformed node status"):
        reg.get(NodeKind.PUMP, "bad:1")
    with pytest.raises(RegistryError, match="bad node id"):
        reg.key(NodeKind.PUMP, "a/b")


def _next(q: queue.Queue[NodeChange], timeout: float = 20) -> NodeChange:
    return q.get(timeout=timeout)


def test_watch_keeps_delivering_after_etcd_restart(etcd_server: EtcdProcess, etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    reg.create(NodeKind.PUMP, status("p1:1"))
    changes: queue.Queue[NodeChange] = queue.Queue()
    watcher = reg.watch(NodeKind.PUMP, changes.put)
    try:
        first = _next(changes)
        assert first.node_id == "p1:1"
        assert first.status is not None

        reg.update(NodeKind.PUMP, status("p1:1", NodeState.PAUSED))
        change = _next(changes)
        assert change.status is not None
        assert change.status.state is NodeState.PAUSED

        etcd_server.restart()

        # a change made right after the restart, while the watcher may still be reconnecting
        writer = EtcdClient(etcd_server.url, retry_for=20)
        try:
            Registry(writer).create(NodeKind.PUMP, status("p2:1"))
            Registry(writer).update(NodeKind.PUMP, status("p1:1", NodeState.OFFLINE))
            writer.delete("/tidb-binlog/v1/pumps/p2:1")
        finally:
            writer.close()

        seen: dict[str, NodeState] = {}
        while seen.get("p1:1") is not NodeState.OFFLINE or "p2:1" in seen:
            c = _next(changes)
            if c.status is None:
                seen.pop(c.node_id, None)
            else:
                seen[c.node_id] = c.status.state
        assert watcher.restarts >= 1
    finally:
        watcher.stop()


def test_unreachable_etcd_gives_clear_error_after_bounded_retry() -> None:
    from common.errors import EtcdUnavailableError
    from tools.procs import free_port

    client = EtcdClient(f"http://127.0.0.1:{free_port()}", timeout=0.5, retry_for=1.0)
    try:
        with pytest.raises(EtcdUnavailableError, match=r"etcd at 127\.0\.0\.1:\d+ unreachable"):
            Registry(client).list(NodeKind.PUMP)
    finally:
        client.close()


def test_undecodable_key_under_the_prefix_does_not_break_list_or_watch(etcd: EtcdClient) -> None:
    reg = Registry(etcd)
    etcd.put("/tidb-binlog/v1/pumps/ok:1", status("ok:1").to_json())
    etcd._client.put(b"/tidb-binlog/v1/pumps/\xff\xfe", b"{}")  # raw bytes, not UTF-8
    assert [n.node_id for n in reg.list(NodeKind.PUMP)] == ["ok:1"]
    changes: queue.Queue[NodeChange] = queue.Queue()
    watcher = reg.watch(NodeKind.PUMP, changes.put)
    try:
        assert _next(changes).node_id == "ok:1"
        assert watcher.synced.wait(10)
        assert watcher.restarts == 0
    finally:
        watcher.stop()


def test_watch_delivers_each_change_once_and_deletes_seen_while_away(
    etcd_server: EtcdProcess, etcd: EtcdClient
) -> None:
    reg = Registry(etcd)
    for i in range(3):
        reg.create(NodeKind.DRAINER, status(f"d{i}:1"))
    changes: queue.Queue[NodeChange] = queue.Queue()
    watcher = reg.watch(NodeKind.DRAINER, changes.put)
    try:
        initial = sorted(_next(changes).node_id for _ in range(3))
        assert initial == ["d0:1", "d1:1", "d2:1"]
        assert watcher.synced.wait(10)  # watching, not only listed
        etcd_server.process.stop()
        wait_for(lambda: watcher.restarts >= 1, 20, "the watcher to notice etcd is gone")
        # etcd comes back with d1 deleted and d2 updated by someone else
        etcd_server.start()
        other = EtcdClient(etcd_server.url, retry_for=20)
        try:
            other.delete("/tidb-binlog/v1/drainers/d1:1")
            Registry(other).update(NodeKind.DRAINER, status("d2:1", NodeState.PAUSED))
        finally:
            other.close()
        got: list[tuple[str, NodeState | None]] = []
        while ("d1:1", None) not in got or ("d2:1", NodeState.PAUSED) not in got:
            c = _next(changes)
            got.append((c.node_id, None if c.status is None else c.status.state))
        with pytest.raises(queue.Empty):
            changes.get(timeout=1.0)  # nothing delivered twice
        assert len(got) == len(set(got))
        assert all(node != "d0:1" for node, _ in got)  # unchanged node not re-reported
    finally:
        watcher.stop()


def test_watcher_stop_is_prompt_while_etcd_is_down(etcd_server: EtcdProcess, etcd: EtcdClient) -> None:
    import time

    reg = Registry(etcd)
    watcher = reg.watch(NodeKind.PUMP, lambda change: None)
    assert watcher.synced.wait(10)
    etcd_server.process.stop()
    wait_for(lambda: watcher.restarts >= 1, 20, "the watcher to notice etcd is gone")
    t0 = time.monotonic()
    watcher.stop()
    assert time.monotonic() - t0 < 3.0


def test_a_stream_broken_after_synced_is_a_restart_at_once(etcd_server: EtcdProcess) -> None:
    """`synced` means listed *and* watching: etcd going away right after it breaks the stream, which
    counts as a restart at once, not after the client's retry window (here 15 s) for a watch that was
    still being created."""
    client = EtcdClient(etcd_server.url, retry_for=15.0)
    watcher = Registry(client).watch(NodeKind.PUMP, lambda change: None)
    try:
        assert watcher.synced.wait(10)
        etcd_server.process.stop()
        wait_for(lambda: watcher.restarts >= 1, 5, "the broken stream counted as a restart")
    finally:
        watcher.stop()
        client.close()
