"""tools/procs.py and tools/localcluster.py: a first start that lost its picked port starts again on new ones."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from tools import procs
from tools.localcluster import START_ATTEMPTS, start_with_new_ports_on_clash
from tools.procs import ManagedProcess, ProcessError, free_port, free_ports, port_clash, swap_port

ETCD_CLASH = (
    '{"level":"fatal","msg":"discovery failed","error":"listen tcp 127.0.0.1:40381: bind: address already in use"}'
)


@pytest.mark.parametrize(
    ("log", "clash"),
    [
        (ETCD_CLASH, True),
        ("pump: cannot listen on status-addr 127.0.0.1:8250: Address already in use", True),
        ("pd-server: addr: cannot listen on 127.0.0.1:2390: Address already in use", True),
        ("drainer: cannot listen on 127.0.0.1:8249 for binlog.Cistern: Failed to bind to address", True),
        ("pump: etcd at 127.0.0.1:2379 unreachable: get /pd/cluster_id failed", False),
        ("", False),
    ],
)
def test_port_clash_is_read_from_the_log(log: str, clash: bool) -> None:
    assert port_clash(log) is clash


def test_swap_port_changes_only_that_port() -> None:
    argv = ["--addr", "127.0.0.1:4000", "--x=http://127.0.0.1:4000", "127.0.0.1:40001", "10.0.0.1:4000"]
    assert swap_port(argv, "127.0.0.1", 4000, 5000) == [
        "--addr", "127.0.0.1:5000", "--x=http://127.0.0.1:5000", "127.0.0.1:40001", "10.0.0.1:4000",
    ]  # fmt: skip


def _exits_with(tmp_path: Path, text: str) -> ManagedProcess:
    """A process that prints `text` and exits 1, as a daemon that could not bind."""
    code = f"import sys; print({text!r}); sys.exit(1)"
    return ManagedProcess("fake", [sys.executable, "-c", code], tmp_path / "fake.log", die_with_parent=False)


def _start_once(p: ManagedProcess) -> None:
    p.start()
    p.wait_ready(lambda: False, 30)  # never ready: only the exit ends the wait


def test_a_clash_is_retried_on_new_ports_until_a_start_succeeds(tmp_path: Path) -> None:
    p = _exits_with(tmp_path, ETCD_CLASH)
    picks: list[int] = []
    starts = [0]

    def start_once() -> None:
        starts[0] += 1
        if starts[0] < 3:
            _start_once(p)  # exits with the clash line

    start_with_new_ports_on_clash(p, start_once, lambda: picks.append(len(picks)))
    assert (starts[0], picks) == (3, [0, 1])


def test_no_retry_for_fixed_ports_or_another_failure(tmp_path: Path) -> None:
    picks: list[int] = []
    clash = _exits_with(tmp_path, ETCD_CLASH)
    with pytest.raises(ProcessError, match="address already in use"):
        start_with_new_ports_on_clash(clash, lambda: _start_once(clash), None)  # the caller's ports
    other = _exits_with(tmp_path, "pump: etcd at 127.0.0.1:2379 unreachable")
    with pytest.raises(ProcessError, match="unreachable"):
        start_with_new_ports_on_clash(other, lambda: _start_once(other), lambda: picks.append(1))
    assert picks == []


def test_the_attempts_are_bounded(tmp_path: Path) -> None:
    p = _exits_with(tmp_path, ETCD_CLASH)
    picks: list[int] = []
    with pytest.raises(ProcessError, match="address already in use"):
        start_with_new_ports_on_clash(p, lambda: _start_once(p), lambda: picks.append(1))
    assert len(picks) == START_ATTEMPTS - 1
    assert p.log_since_start().count("address already in use") == 1  # only the last start's lines


def test_picked_ports_are_free_distinct_and_below_the_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = free_ports(20)
    assert len(set(ports)) == 20
    assert all(10000 <= p < low for p in [*ports, free_port()])  # no outgoing connection takes these
    for p in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", p))


def test_without_a_known_ephemeral_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(procs, "_EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    assert len(set(free_ports(3))) == 3
