"""binlogctl as a process against real etcd, pd-server, pumps and drainers (issue 7, part 3).

Lists match etcd; pause/offline drive the pump and drainer states through their HTTP APIs; update-pump on a
dead pump's record lets the drainer drop it from its merge; generate_meta's savepoint starts a drainer with a
file checkpoint; an unknown node id, a bad state or an unreachable etcd fail with one line and change nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.etcd import EtcdClient, KeyValue
from common.pd_client import TSOClient
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from drainer.checkpoint import FileCheckpoint
from tests.functional.drainerutil import Cluster, SinglePumpClient
from tools.localcluster import DrainerProcess, EtcdProcess, NodeProcess, PDProcess
from tools.procs import free_port, wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 60.0
ROOT = "/tidb-binlog/v1/"


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str
    seconds: float


def binlogctl(*args: str, timeout: float = 60) -> Result:
    started = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "tools.binlogctl", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    return Result(p.returncode, p.stdout, p.stderr, time.monotonic() - started)


def ok(*args: str) -> str:
    r = binlogctl(*args)
    assert r.code == 0, r
    assert r.err == "", r
    return r.out


def failed(code: int, *args: str) -> str:
    """The one stderr line of a failing run (nothing on stdout)."""
    r = binlogctl(*args)
    assert r.code == code, r
    assert r.out == "", r
    assert r.err.count("\n") == 1, r
    assert r.err.startswith("binlogctl: "), r
    return r.err.strip()


def snapshot(etcd: EtcdClient) -> tuple[list[KeyValue], int]:
    """Every registry key with value and revisions, and the store revision (moves on any write at all)."""
    return etcd.get_prefix(ROOT)


def state_of(registry: Registry, kind: NodeKind, node_id: str) -> NodeState | None:
    status = registry.get(kind, node_id)
    return None if status is None else status.state


def table_rows(text: str) -> dict[str, list[str]]:
    """node id -> cells of a `pumps` / `drainers` table (times are three words each)."""
    lines = text.splitlines()
    assert lines[0].split() == ["NodeID", "Addr", "State", "MaxCommitTS", "MaxCommitTime", "UpdateTime"]
    return {cells[0]: cells for cells in (line.split() for line in lines[1:] if not line.startswith("("))}


def node_args(cluster: Cluster, node: NodeProcess) -> list[str]:
    return ["--pd-urls", cluster.etcd_server.url, "--node-id", node.node_id, "--status-addr", node.status_addr]


def make_table(cluster: Cluster, db: Database) -> str:
    name = cluster.dbname("ctl")
    db.create_database(name)
    db.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "INT")], primary_key=["id"])
    return name


def insert(db: Database, name: str, ids: range) -> None:
    for i in ids:

        def body(txn: Transaction, i: int = i) -> None:
            txn.insert(f"{name}.t", {"id": i, "v": i})

        db.run(body)


def downstream_ids(cluster: Cluster, name: str) -> list[int]:
    conn = cluster.mysql_conn(name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM t ORDER BY id")
            return [int(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()


def pump_positions(drainer: DrainerProcess) -> dict[str, Any]:
    return dict(drainer.http_json("GET", "/status")["PumpPos"])


def checkpoint_ts(drainer: DrainerProcess) -> int:
    return int(drainer.http_json("GET", "/commit_ts")["data"]["ts"])


# ----------------------------------------------------------------------------------------------- listing


def test_lists_match_etcd_with_json_and_offline_nodes(cluster: Cluster) -> None:
    url = cluster.etcd_server.url
    drainer = cluster.drainer()
    registry = Registry(cluster.etcd)
    gone = NodeStatus("pump-gone", "127.0.0.1:1", NodeState.OFFLINE, max_commit_ts=7, update_ts=7)
    registry.create(NodeKind.PUMP, gone)
    wait_for(
        lambda: all(s.max_commit_ts > 0 for s in registry.list(NodeKind.PUMP)),
        DEADLINE,
        "both pumps publish a maxCommitTS",
    )

    before = {s.node_id: s for s in registry.list(NodeKind.PUMP)}
    text = ok("-cmd", "pumps", "-pd-urls", url)  # the original's flag style
    after = {s.node_id: s for s in registry.list(NodeKind.PUMP)}
    rows = table_rows(text)
    assert sorted(rows) == ["pump0", "pump1"]
    assert text.splitlines()[-1] == "(1 offline node hidden; --show-offline-nodes)"
    for node_id, cells in rows.items():
        assert cells[1:3] == [after[node_id].host, after[node_id].state.value]
        # heartbeats move maxCommitTS on between the reads: the listed value lies between them
        assert before[node_id].max_commit_ts <= int(cells[3]) <= after[node_id].max_commit_ts

    rows = table_rows(ok("pumps", "--pd-urls", url, "--show-offline-nodes"))
    assert sorted(rows) == ["pump-gone", "pump0", "pump1"]
    assert rows["pump-gone"][1:4] == ["127.0.0.1:1", "offline", "7"]

    kvs, _ = cluster.etcd.get_prefix(registry.prefix(NodeKind.PUMP))
    stored = {kv.key.rsplit("/", 1)[1]: kv.value for kv in kvs}
    listed = ok("pumps", "--pd-urls", url, "--json", "--show-offline-nodes")
    docs = json.loads(listed)
    assert [d["nodeId"] for d in docs] == ["pump-gone", "pump0", "pump1"]
    assert stored["pump-gone"].decode() + "," in listed.splitlines()  # byte for byte as stored
    for doc in docs:
        assert list(doc) == list(json.loads(stored[doc["nodeId"]]))  # same keys in the same order
        assert doc["host"] == json.loads(stored[doc["nodeId"]])["host"]
    assert [d["nodeId"] for d in json.loads(ok("pumps", "--pd-urls", url, "--json"))] == ["pump0", "pump1"]

    drainers = table_rows(ok("drainers", "--pd-urls", url))
    assert list(drainers) == [drainer.node_id]
    assert drainers[drainer.node_id][1:3] == [drainer.addr, "online"]
    (doc,) = json.loads(ok("-cmd", "drainers", "-pd-urls", url, "-json"))
    assert doc["nodeId"] == drainer.node_id
    assert doc["state"] == "online"


# ----------------------------------------------------------------------------------------------- states


def offline_target(pump_log: str) -> int:
    """The commit_ts an offline pump waited for the drainers to reach, from its log."""
    marker = "offline: storage reached commit_ts="
    (line,) = [ln for ln in pump_log.splitlines() if marker in ln]
    return int(line.split(marker)[1].split(";")[0])


def test_offline_and_pause_drive_the_pump_states(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    registry = Registry(cluster.etcd)
    pump0, pump1 = cluster.pumps

    # the node answers for itself: pump1's API refuses pump0's id, and nothing changes
    err = failed(1, "pause-pump", *node_args(cluster, pump0)[:4], "--status-addr", pump1.status_addr)
    assert f"pump 'pump0' at {pump1.status_addr} refused pause: invalid nodeID pump0" in err
    assert "(HTTP 404)" in err
    assert state_of(registry, NodeKind.PUMP, "pump0") is NodeState.ONLINE
    assert state_of(registry, NodeKind.PUMP, "pump1") is NodeState.ONLINE

    # no --status-addr: the pump publishes its HTTP address as the label `status-addr`
    published = registry.get(NodeKind.PUMP, "pump0")
    assert published is not None
    assert published.labels == {"status-addr": pump0.status_addr}
    out = ok("offline-pump", *node_args(cluster, pump0)[:4])
    assert out == f"pump pump0 at {pump0.status_addr}: apply action close success!\n"
    # offline only once the drainer has consumed everything pump0 has; then the drainer drops it
    wait_for(lambda: state_of(registry, NodeKind.PUMP, "pump0") is NodeState.OFFLINE, DEADLINE, "pump0 offline")
    wait_for(lambda: not pump0.process.alive, DEADLINE, "pump0 exits")
    drainer_status = registry.get(NodeKind.DRAINER, drainer.node_id)
    assert drainer_status is not None
    # pump0 waited for the drainer to reach its maxCommitTS as read once; the fake binlogs it kept
    # writing meanwhile (and its final registry record) may be above it: nothing a drainer needs
    target = offline_target(pump0.process.log_path.read_text())
    final_pump0 = registry.get(NodeKind.PUMP, "pump0")
    assert final_pump0 is not None
    assert target <= final_pump0.max_commit_ts
    assert drainer_status.max_commit_ts >= target
    wait_for(lambda: "pump0" not in pump_positions(drainer), DEADLINE, "the drainer drops pump0")

    out = ok("-cmd", "pause-pump", *node_args(cluster, pump1))
    assert out == f"pump pump1 at {pump1.status_addr}: apply action pause success!\n"
    wait_for(lambda: state_of(registry, NodeKind.PUMP, "pump1") is NodeState.PAUSED, DEADLINE, "pump1 paused")
    wait_for(lambda: not pump1.process.alive, DEADLINE, "pump1 exits")
    assert "pump1" in pump_positions(drainer)  # paused: the merge keeps waiting for it

    # a paused pump is not running: its API cannot be reached, said in one line
    err = failed(1, "offline-pump", *node_args(cluster, pump1))
    assert f"cannot reach pump 'pump1' HTTP API at {pump1.status_addr}" in err
    assert state_of(registry, NodeKind.PUMP, "pump1") is NodeState.PAUSED


def test_pause_and_offline_drive_the_drainer_states(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    registry = Registry(cluster.etcd)

    out = ok("pause-drainer", *node_args(cluster, drainer)[:4])  # its published status-addr label
    assert out == f"drainer {drainer.node_id} at {drainer.status_addr}: apply action pause success!\n"
    wait_for(lambda: not drainer.process.alive, DEADLINE, "the drainer exits")
    assert state_of(registry, NodeKind.DRAINER, drainer.node_id) is NodeState.PAUSED

    drainer.start()
    assert state_of(registry, NodeKind.DRAINER, drainer.node_id) is NodeState.ONLINE
    out = ok("-cmd", "offline-drainer", *node_args(cluster, drainer))
    assert out == f"drainer {drainer.node_id} at {drainer.status_addr}: apply action close success!\n"
    wait_for(lambda: not drainer.process.alive, DEADLINE, "the drainer exits")
    assert state_of(registry, NodeKind.DRAINER, drainer.node_id) is NodeState.OFFLINE
    assert drainer.node_id not in table_rows(ok("drainers", "--pd-urls", cluster.etcd_server.url))


def test_update_pump_on_a_dead_pump_lets_the_drainer_drop_it(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    pump0, pump1 = cluster.pumps
    db = cluster.writer(SinglePumpClient(pump0, cluster.cluster_id))
    name = make_table(cluster, db)
    insert(db, name, range(10))
    cluster.wait_applied(drainer, cluster.now())

    pump1.kill9()
    insert(db, name, range(10, 20))
    written = cluster.now()
    # the drainer has pump0's new binlogs but cannot apply them: the dead pump1 is still in its merge
    wait_for(lambda: pump_positions(drainer).get("pump0", 0) > written, DEADLINE, "pump0's binlogs reach the drainer")
    assert "pump1" in pump_positions(drainer)
    assert checkpoint_ts(drainer) < written
    assert downstream_ids(cluster, name) == list(range(10))

    out = ok("update-pump", "--pd-urls", cluster.etcd_server.url, "--node-id", "pump1", "--state", "offline")
    assert out == "pump pump1: state online -> offline\n"
    status = Registry(cluster.etcd).get(NodeKind.PUMP, "pump1")
    assert status is not None
    assert status.state is NodeState.OFFLINE
    assert status.host == pump1.addr  # only the state was rewritten

    wait_for(lambda: "pump1" not in pump_positions(drainer), DEADLINE, "the drainer drops pump1")
    insert(db, name, range(20, 30))
    cluster.wait_applied(drainer, cluster.now())
    assert downstream_ids(cluster, name) == list(range(30))
    assert list(pump_positions(drainer)) == ["pump0"]


# ----------------------------------------------------------------------------------------------- generate_meta


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_generate_meta_savepoint_starts_a_file_checkpoint_drainer(cluster: Cluster) -> None:
    db = cluster.writer(SinglePumpClient(cluster.pumps[0], cluster.cluster_id))
    name = make_table(cluster, db)
    insert(db, name, range(5))  # before the savepoint: never replicated
    drainer = cluster.drainer("--syncer.to.checkpoint.type", "file", start=False)

    lo = cluster.now()
    out = ok("generate_meta", "--pd-urls", cluster.etcd_server.url, "--data-dir", str(drainer.data_dir))
    hi = cluster.now()
    savepoint = drainer.data_dir / "savepoint"
    cp = FileCheckpoint(drainer.data_dir)
    try:
        state = cp.load()
    finally:
        cp.close()
    assert state is not None
    assert lo < state.commit_ts < hi  # a fresh TSO
    assert out == f"commitTS = {state.commit_ts} written to {savepoint}\n"

    insert(db, name, range(5, 10))
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:  # the table exists downstream as it was at the savepoint
            cur.execute(f"CREATE DATABASE `{name}`")
            cur.execute(f"CREATE TABLE `{name}`.t (id INT NOT NULL PRIMARY KEY, v INT)")
    finally:
        conn.close()
    drainer.start()
    assert checkpoint_ts(drainer) >= state.commit_ts
    cluster.wait_applied(drainer, cluster.now())
    assert downstream_ids(cluster, name) == list(range(5, 10))
    assert cluster.checkpoint_row() is None  # the file checkpoint, not the MySQL table, was used


def test_generate_meta_commit_ts_is_checked_against_the_current_tso(
    etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tmp_path: Path
) -> None:
    data_dir = tmp_path / "meta"
    data_dir.mkdir()
    savepoint = data_dir / "savepoint"
    savepoint.write_text("commitTS = 5\n")  # a drainer's position: a refused command leaves it alone
    base = ["generate_meta", "--pd-urls", etcd_server.url, "--data-dir", str(data_dir)]
    tso_client = TSOClient(etcd)
    try:
        beyond = 9223372036854775807
        err = failed(1, *base, "--commit-ts", str(beyond))
        before = tso_client.get_ts()
        assert err.startswith(
            f"binlogctl: --commit-ts {beyond} (3084-12-12 12:41:28 UTC) is ahead of the current TSO "
        ), err
        assert err.endswith(
            ": give the last commit_ts applied downstream, or leave --commit-ts out to write the current TSO; "
            "nothing was written"
        ), err
        current = int(err.split("is ahead of the current TSO ")[1].split()[0])
        assert current < before
        assert savepoint.read_text() == "commitTS = 5\n"

        fresh = tso_client.get_ts()  # taken before generate_meta's own TSO: never ahead of it
        out = ok(*base, "--commit-ts", str(fresh))
    finally:
        tso_client.close()
    assert out == f"commitTS = {fresh} written to {savepoint}\n"
    cp = FileCheckpoint(data_dir)
    try:
        state = cp.load()
    finally:
        cp.close()
    assert state is not None
    assert state.commit_ts == fresh


# ----------------------------------------------------------------------------------------------- bad input


@pytest.fixture
def static_registry(etcd: EtcdClient) -> Registry:
    """A pump and a drainer record that no live node rewrites: any change would be binlogctl's."""
    registry = Registry(etcd)
    registry.create(NodeKind.PUMP, NodeStatus("p1", "127.0.0.1:1", NodeState.ONLINE, max_commit_ts=5, update_ts=5))
    registry.create(NodeKind.DRAINER, NodeStatus("d1", "127.0.0.1:2", NodeState.ONLINE, max_commit_ts=6))
    return registry


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["update-pump", "--node-id", "ghost", "--state", "offline"], 1, "no pump with node id 'ghost' in etcd at"),
        (["-cmd", "update-drainer", "-node-id", "ghost", "-state", "paused"], 1, "no drainer with node id 'ghost'"),
        (["update-drainer", "--node-id", "p1", "--state", "paused"], 1, "no drainer with node id 'p1'"),
        (["pause-pump", "--node-id", "ghost"], 1, "no pump with node id 'ghost'"),
        (["offline-pump", "--node-id", "ghost", "--status-addr", "127.0.0.1:9"], 1, "no pump with node id 'ghost'"),
        (["pause-drainer", "--node-id", "ghost"], 1, "no drainer with node id 'ghost'"),
        (["offline-drainer", "--node-id", "p1"], 1, "no drainer with node id 'p1' in etcd at"),
        (["update-pump", "--node-id", "p1", "--state", "dead"], 2, "--state 'dead' is not a node state"),
        (["update-pump", "--node-id", "p1"], 2, "update-pump needs --state"),
        (["pause-pump", "--node-id", "p1"], 1, "pump 'p1' (gRPC 127.0.0.1:1) does not publish its HTTP status"),
        (["pause-pump", "--node-id", "p1", "--status-addr", "127.0.0.1:{closed}"], 1, "cannot reach pump 'p1'"),
        (["update-pump", "--node-id", "p1", "--state", "paused", "--ssl-ca", "/no/ca.pem"], 2, "--ssl-ca: cannot read"),
    ],
)
def test_bad_input_fails_in_one_line_and_changes_nothing(
    etcd_server: EtcdProcess, etcd: EtcdClient, static_registry: Registry, args: list[str], code: int, message: str
) -> None:
    before = snapshot(etcd)
    argv = [a.replace("{closed}", str(free_port())) for a in args]
    err = failed(code, *argv, "--pd-urls", etcd_server.url)
    assert message in err
    assert snapshot(etcd) == before


def test_unknown_node_error_lists_the_registered_ones(
    etcd_server: EtcdProcess, etcd: EtcdClient, static_registry: Registry
) -> None:
    err = failed(1, "update-pump", "--pd-urls", etcd_server.url, "--node-id", "ghost", "--state", "paused")
    assert err == (
        f"binlogctl: no pump with node id 'ghost' in etcd at 127.0.0.1:{etcd_server.client_port} (registered pumps: p1)"
    )
    # and a real update of the static record changes exactly its state
    kvs_before, _ = snapshot(etcd)
    assert ok("update-pump", "--pd-urls", etcd_server.url, "--node-id", "p1", "--state", "paused") == (
        "pump p1: state online -> paused\n"
    )
    kvs_after, _ = snapshot(etcd)
    changed = [(a.key, a.value) for a, b in zip(kvs_after, kvs_before, strict=True) if a.value != b.value]
    paused = NodeStatus("p1", "127.0.0.1:1", NodeState.PAUSED, max_commit_ts=5, update_ts=5)
    assert changed == [(f"{ROOT}pumps/p1", paused.to_json().encode())]


def test_generate_meta_without_pd_server_fails_and_writes_nothing(etcd_server: EtcdProcess, tmp_path: Path) -> None:
    data_dir = tmp_path / "meta"
    r = binlogctl("generate_meta", "--pd-urls", etcd_server.url, "--data-dir", str(data_dir), "--timeout", "2")
    assert r.code == 1, r
    assert r.err == f"binlogctl: no pd-server registered in etcd at {etcd_server.url} (/pd/leader): is it running?\n"
    assert r.err.count("\n") == 1
    assert not data_dir.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["pumps"],  # the default --timeout (5 s)
        ["drainers", "--json", "--timeout", "1"],
        ["update-pump", "--node-id", "p1", "--state", "offline", "--timeout", "1"],
        ["pause-drainer", "--node-id", "d1", "--timeout", "1"],
        ["generate_meta", "--data-dir", "{dir}", "--timeout", "1"],
    ],
)
def test_unreachable_etcd_is_one_line_within_seconds(tmp_path: Path, args: list[str]) -> None:
    closed = free_port()
    argv = [a.replace("{dir}", str(tmp_path / "meta")) for a in args]
    r = binlogctl(*argv, "--pd-urls", f"http://127.0.0.1:{closed}")
    assert r.code == 1, r
    assert r.out == ""
    assert r.err.count("\n") == 1, r
    assert r.err.startswith(f"binlogctl: etcd at 127.0.0.1:{closed} unreachable: "), r
    assert r.seconds < 15, r  # the rest is interpreter start-up on a busy machine
    assert not (tmp_path / "meta").exists()
