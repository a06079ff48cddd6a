"""A port picked for a process and taken by another program before the process binds it.

The picker hands out a port that is free when picked; another program can take it before the
process listens.  Here the picker itself hands out a port this test holds (listening), so the
clash happens every time, not 1 start in 15: the process must come up on other ports anyway.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from common.etcd import EtcdClient
from common.registry import NodeKind, Registry
from tools import localcluster, procs
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.playground.cluster import Cluster
from tools.playground.state import State

pytestmark = pytest.mark.functional

PUMP_ARGS = ("--heartbeat-interval", "1", "--gen-binlog-interval", "1")


@pytest.fixture
def taken() -> Iterator[Callable[[], int]]:
    """Makes ports that another program (this test) listens on until the test ends."""
    socks: list[socket.socket] = []

    def take() -> int:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)
        return int(s.getsockname()[1])

    yield take
    for s in socks:
        s.close()


def hand_out_taken(monkeypatch: pytest.MonkeyPatch, clashes: dict[tuple[int, int], int]) -> None:
    """`free_ports` of localcluster returns, at its call #c (from 1), port `clashes[(c, i)]` at index i."""
    real = procs.free_ports
    calls = [0]

    def picker(n: int, host: str = "127.0.0.1") -> list[int]:
        calls[0] += 1
        ports = real(n, host)
        return [clashes.get((calls[0], i), p) for i, p in enumerate(ports)]

    monkeypatch.setattr(localcluster, "free_ports", picker)


def clash_logged(log: Path) -> bool:
    text = log.read_text(errors="replace").lower()
    return "address already in use" in text or "cannot listen on" in text


@pytest.mark.parametrize("which", ["client", "peer"])
def test_etcd_starts_on_other_ports_when_a_picked_one_is_taken(
    tmp_path: Path, taken: Callable[[], int], monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    port = taken()
    hand_out_taken(monkeypatch, {(1, 0 if which == "client" else 1): port})
    etcd = EtcdProcess(tmp_path)
    assert port in (etcd.client_port, etcd.peer_port)
    try:
        etcd.start()
        assert port not in (etcd.client_port, etcd.peer_port)
        client = EtcdClient(etcd.url, timeout=2.0)
        try:
            client.put("/probe", "1")
        finally:
            client.close()
        assert clash_logged(etcd.process.log_path)  # the first start did hit the taken port
        etcd.restart()  # a restart keeps the ports it came up on
        assert port not in (etcd.client_port, etcd.peer_port)
    finally:
        etcd.stop()


def test_pd_server_and_pump_start_on_other_ports_when_a_picked_one_is_taken(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    etcd: EtcdClient,
    taken: Callable[[], int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pd_port, status_port = taken(), taken()
    monkeypatch.setattr(localcluster, "free_port", lambda host="127.0.0.1": pd_port)
    pd = PDProcess(tmp_path, etcd_server.url)
    monkeypatch.undo()
    hand_out_taken(monkeypatch, {(1, 1): status_port})  # the pump's status-addr, as in the report
    pump = PumpProcess(tmp_path, etcd_server.url, extra_args=PUMP_ARGS)
    assert (pd.port, pump.status_port) == (pd_port, status_port)
    try:
        pd.start()
        assert pd.port != pd_port
        assert clash_logged(pd.process.log_path)
        pump.start()
        assert pump.status_port != status_port
        assert clash_logged(pump.process.log_path)
        registered = Registry(etcd).get(NodeKind.PUMP, pump.node_id)
        assert registered is not None
        assert registered.host == pump.addr
        assert pump.http_json("GET", "/status") is not None  # the status API is on the new port
    finally:
        pump.stop()
        pd.stop()


def test_playground_cluster_starts_when_picked_ports_are_taken(
    tmp_path: Path, taken: Callable[[], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """etcd's client port (the URL every other process was built with) and pump0's status port."""
    etcd_port, status_port = taken(), taken()
    hand_out_taken(monkeypatch, {(1, 0): etcd_port, (2, 1): status_port})  # calls: etcd, pump0, pump1, drainer
    base = tmp_path / "playground-data"
    state = State(pumps=2)
    cluster = Cluster(base, state, downstream=None, keep=False)
    assert (state.ports["etcd"], state.ports["pump0-status"]) == (etcd_port, status_port)
    said: list[str] = []
    try:
        cluster.start(said.append)
        assert cluster.dead() is None
        assert cluster.etcd.client_port != etcd_port
        assert cluster.pumps[0].status_port != status_port
        assert state.ports["etcd"] == cluster.etcd.client_port  # the state file records where they run
        assert state.ports["pump0-status"] == cluster.pumps[0].status_port
        assert all(f"--pd-urls={cluster.etcd.url}" in " ".join(p.argv).replace("--pd-urls ", "--pd-urls=")
                   for p in cluster.processes()[1:])  # fmt: skip
    finally:
        cluster.stop(said.append)
