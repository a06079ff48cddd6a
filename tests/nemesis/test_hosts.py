"""Self-tests of the nemesis hosts and faults: each fault has a measurable effect and heals.

Small probe programs run inside the namespaces with `python -c`; every test tears its network down
and checks that nothing of the run is left (namespaces, links, mounts).
"""

from __future__ import annotations

import errno
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.mysql import MySQLDSN
from tests.nemesis.hosts import Host, Network, run, sweep
from tests.nemesis.nemesis import (
    Bandwidth,
    ClockSkew,
    Compose,
    Crash,
    Cut,
    Delay,
    DiskFull,
    Freeze,
    Isolate,
    Loss,
    Partition,
)
from tools.procs import ManagedProcess, port_open, wait_for

pytestmark = pytest.mark.functional

PY = sys.executable

ECHO_SERVER = """
import socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
def serve(c):
    with c:
        while data := c.recv(65536):
            c.sendall(data)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

TCP_CLIENT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])) as c:
        c.sendall(b"ping"); print("ok" if c.recv(4) == b"ping" else "bad reply")
except OSError as exc:
    print("fail", exc)
"""

UDP_RECEIVER = """
import select, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(sys.argv[1])))
print("ready", flush=True)
n, end = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:  # until a line on stdin (the sender is done), then 0.3 s more
    ready, _, _ = select.select([s, sys.stdin], [], [], 0.1)
    if sys.stdin in ready:
        end = min(end, time.monotonic() + 0.3)
        sys.stdin.readline()
    if s in ready:
        s.recv(2048); n += 1
print(n, flush=True)
"""

UDP_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    s.sendto(b"x" * 64, (sys.argv[1], int(sys.argv[2]))); time.sleep(0.0005)
"""

SINK_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8)
while True:
    c, _ = s.accept()
    while c.recv(65536):
        pass
    c.sendall(b"done"); c.close()
"""

BULK_SENDER = """
import socket, sys, time
t0 = time.monotonic()
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20) as c:
    c.sendall(b"x" * int(sys.argv[3])); c.shutdown(socket.SHUT_WR); assert c.recv(4) == b"done"
print(time.monotonic() - t0)
"""

COUNTER = """
import sys, time
i = 0
while True:
    i += 1
    with open(sys.argv[1], "w") as f:
        f.write(str(i))
    time.sleep(0.01)
"""

CLOCK = """
import time
print("clock", time.time(), flush=True)
time.sleep(600)
"""

MYSQL_CLIENT = """
import sys, pymysql
try:
    c = pymysql.connect(host=sys.argv[1], port=int(sys.argv[2]), user=sys.argv[3], password=sys.argv[4],
                        connect_timeout=float(sys.argv[5]))
    cur = c.cursor(); cur.execute("SELECT 1"); print("ok", cur.fetchone()[0])
except Exception as exc:
    print("fail", exc)
"""


@pytest.fixture
def net(netns: None) -> Iterator[Network]:
    network = Network()
    try:
        network.open()
        yield network
    finally:
        network.close()
        prefix = network.prefix
        assert network.leftovers() == []
        assert f"nm{prefix}-" not in run(["ip", "netns", "list"])
        assert f"nb{prefix}" not in run(["ip", "link", "show"])
        assert network.tmpfs_source not in run(["findmnt", "-rn", "-o", "SOURCE"])


def start(host: Host, name: str, script: str, *args: object, tmp: Path) -> ManagedProcess:
    proc = host.process(name, [PY, "-c", script, *map(str, args)], tmp / f"{name}.log")
    proc.start()
    return proc


def serve(host: Host, name: str, script: str, port: int, tmp: Path) -> ManagedProcess:
    """Start a TCP server in `host` and wait until it listens (the host namespace reaches `.N` directly)."""
    proc = start(host, name, script, port, tmp=tmp)
    proc.wait_ready(lambda: port_open(host.ip, port), 10)
    return proc


def tcp_probe(client: Host, ip: str, port: int, timeout: float = 1.0) -> str:
    return client.exec([PY, "-c", TCP_CLIENT, ip, str(port), str(timeout)], timeout=timeout + 10).strip()


def udp_count(sender: Host, receiver: Host, n: int, port: int = 9999) -> int:
    """How many of `n` datagrams sent from `sender` to `receiver` arrive."""
    rx = subprocess.Popen(
        [*receiver.prefix_argv(), PY, "-c", UDP_RECEIVER, str(port), "15"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert rx.stdout is not None
        assert rx.stdout.readline().strip() == "ready"
        sender.exec([PY, "-c", UDP_SENDER, receiver.ip, str(port), str(n)], timeout=20)
        out, _ = rx.communicate("done\n", timeout=20)
    finally:
        rx.kill()
        rx.wait(5)
    return int(out.strip())


def is_alive(proc: ManagedProcess) -> bool:
    return proc.alive


def echo_once(s: socket.socket) -> bytes:
    """One `ping` through an echo connection; a connection closed by the peer raises ConnectionError."""
    s.sendall(b"ping")
    got = s.recv(4)
    if not got:
        raise ConnectionAbortedError("connection closed by the peer")
    return got


def write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_int(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def test_connect_and_partition(net: Network, tmp_path: Path) -> None:
    a, b, c = net.add_host("a"), net.add_host("b"), net.add_host("c")
    serve(b, "echo", ECHO_SERVER, 7000, tmp_path)
    assert tcp_probe(a, b.ip, 7000) == "ok"

    part = Partition(a, b)
    part.start()
    assert "timed out" in tcp_probe(a, b.ip, 7000)
    assert tcp_probe(c, b.ip, 7000) == "ok"  # only the pair is cut
    part.heal()
    part.heal()  # idempotent
    assert tcp_probe(a, b.ip, 7000) == "ok"

    both = Compose(Isolate(c, [b, "host"]), Loss(a, 0))
    both.start()
    assert "timed out" in tcp_probe(c, b.ip, 7000)
    assert tcp_probe(a, b.ip, 7000) == "ok"
    both.heal()
    assert tcp_probe(c, b.ip, 7000) == "ok"


def test_one_way_partition_drops_one_direction(net: Network) -> None:
    a, b = net.add_host("a"), net.add_host("b")
    part = Partition(a, b, one_way=True)
    part.start()
    try:
        assert udp_count(a, b, 20) == 0
        assert udp_count(b, a, 20) == 20
    finally:
        part.heal()
    assert udp_count(a, b, 20) == 20


def test_loss_drops_a_fraction(net: Network) -> None:
    a, b = net.add_host("a"), net.add_host("b")
    loss = Loss(b, 50)
    loss.start()
    try:
        got = udp_count(a, b, 400)
    finally:
        loss.heal()
    assert 100 <= got <= 300, f"{got} of 400 datagrams arrived with 50% loss"
    assert udp_count(a, b, 100) == 100


def test_bandwidth_caps_a_transfer(net: Network, tmp_path: Path) -> None:
    a, b = net.add_host("a"), net.add_host("b")
    serve(b, "sink", SINK_SERVER, 7001, tmp_path)
    size = 256 * 1024

    def transfer() -> float:
        return float(a.exec([PY, "-c", BULK_SENDER, b.ip, "7001", str(size)], timeout=30))

    uncapped = transfer()
    bw = Bandwidth(a, "2mbit")  # 256 KiB at 250 kB/s: about 1 s
    bw.start()
    try:
        capped = transfer()
    finally:
        bw.heal()
    assert capped > 0.6, f"capped transfer took {capped:.3f}s"
    assert capped > 5 * uncapped, f"capped {capped:.3f}s vs uncapped {uncapped:.3f}s"
    assert transfer() < capped / 3


def _round_trips(addr: tuple[str, int], n: int) -> list[float]:
    times = []
    with socket.create_connection(addr, timeout=5) as s:
        for i in range(n):
            msg = f"{i:04d}".encode()
            t0 = time.monotonic()
            s.sendall(msg)
            assert s.recv(4) == msg
            times.append(time.monotonic() - t0)
    return times


def test_delay_and_cut_via_proxy(net: Network, tmp_path: Path) -> None:
    b = net.add_host("b")
    serve(b, "echo", ECHO_SERVER, 7000, tmp_path)
    proxy = net.forward(7000, b.ip)
    addr = (proxy.listen_host, proxy.listen_port)
    assert statistics.median(_round_trips(addr, 5)) < 0.04

    delay = Delay(proxy, 40, 60)
    delay.start()
    try:
        rtts = _round_trips(addr, 5)
        assert min(rtts) >= 0.08, rtts  # 40 ms at least each way
        # with jitter, many small writes still come back in order
        payload = b"".join(f"{i:05d}".encode() for i in range(200))
        with socket.create_connection(addr, timeout=10) as s:
            for i in range(0, len(payload), 50):
                s.sendall(payload[i : i + 50])
            s.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := s.recv(65536):
                got += chunk
        assert got == payload
    finally:
        delay.heal()
    assert statistics.median(_round_trips(addr, 5)) < 0.04

    with socket.create_connection(addr, timeout=5) as held:
        assert echo_once(held) == b"ping"
        cut = Cut(proxy)
        cut.start()
        with pytest.raises(ConnectionError):
            echo_once(held)
    with pytest.raises(ConnectionError), socket.create_connection(addr, timeout=5) as fresh:
        echo_once(fresh)
    cut.heal()
    assert len(_round_trips(addr, 2)) == 2


def test_freeze_and_crash(net: Network, tmp_path: Path) -> None:
    a = net.add_host("a")
    counter = tmp_path / "count"
    proc = start(a, "counter", COUNTER, counter, tmp=tmp_path)
    wait_for(lambda: read_int(counter) > 5, 10, "the counter to run")
    assert proc.pid is not None
    # the pid is the real process in the namespace: `setpriv` and `ip netns exec` exec
    assert Path(f"/proc/{proc.pid}/exe").resolve() == Path(PY).resolve()
    assert run(["ip", "netns", "identify", str(proc.pid)]).strip() == a.ns

    freeze = Freeze(proc, 0.5)
    freeze.start()
    try:
        time.sleep(0.1)
        frozen_at = read_int(counter)
        time.sleep(0.5)
        assert read_int(counter) == frozen_at
    finally:
        freeze.heal()
    wait_for(lambda: read_int(counter) > frozen_at + 5, 10, "the counter to resume")

    crash = Crash(proc.start, proc)
    crash.start()
    assert not is_alive(proc)
    counter.write_text("0")
    time.sleep(0.2)
    assert read_int(counter) == 0
    crash.heal()
    assert is_alive(proc)
    wait_for(lambda: read_int(counter) > 5, 10, "the restarted counter to run")


def test_disk_full(net: Network, tmp_path: Path) -> None:
    disk = net.mount_tmpfs(tmp_path / "disk", "2m")
    full = DiskFull(disk)
    full.start()
    try:
        with pytest.raises(OSError, match="No space left") as err:
            write_synced(disk / "data", b"y" * 8192)
        assert err.value.errno == errno.ENOSPC
    finally:
        full.heal()
        full.heal()
    (disk / "data").write_bytes(b"y" * 65536)
    assert (disk / "data").stat().st_size == 65536


def test_clock_skew(net: Network, tmp_path: Path) -> None:
    a = net.add_host("a")
    base = [PY, "-c", CLOCK]
    proc = a.process("clock", base, tmp_path / "clock.log")

    def restart_with_prefix(prefix: list[str]) -> None:
        proc.stop(5)
        proc.argv = [*a.prefix_argv(), *prefix, *base]
        proc.start()

    def clock_offset() -> float:
        wait_for(lambda: "clock" in proc.log_since_start(), 10, "the clock process to print")
        printed = float(proc.log_since_start().split("clock", 1)[1].split()[0])
        return printed - time.time()

    proc.start()
    assert abs(clock_offset()) < 5
    skew = ClockSkew(restart_with_prefix, 3600, "clock")
    skew.start()
    try:
        assert 3590 < clock_offset() < 3610
        assert Path(f"/proc/{proc.pid}/exe").resolve() == Path(PY).resolve()  # env execs: pid is the node
    finally:
        skew.heal()
    assert abs(clock_offset()) < 5


def test_mysql_through_forwarder(net: Network, mysql_server: MySQLDSN) -> None:
    a = net.add_host("a")
    proxy = net.forward(mysql_server.port, mysql_server.host)

    def select_one() -> str:
        argv = [PY, "-c", MYSQL_CLIENT, proxy.listen_host, str(proxy.listen_port)]
        return a.exec([*argv, mysql_server.user, mysql_server.password, "1.5"], timeout=20).strip()

    assert select_one() == "ok 1"
    part = Partition(a, "host")
    part.start()
    try:
        assert select_one().startswith("fail")
    finally:
        part.heal()
    assert select_one() == "ok 1"


CRASHING_RUN = """
import sys, time
from pathlib import Path
from tests.nemesis.hosts import Network
n = Network(); n.open(); n.add_host("a"); n.mount_tmpfs(Path(sys.argv[1]), "1m")
print(n.prefix, flush=True)
time.sleep(600)
"""


def test_sweep_removes_a_crashed_run_only(net: Network, tmp_path: Path) -> None:
    live = net.add_host("live")
    root = Path(__file__).resolve().parents[2]
    with subprocess.Popen(
        [PY, "-c", CRASHING_RUN, str(tmp_path / "crashed-disk")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    ) as crashed:
        try:
            assert crashed.stdout is not None
            prefix = crashed.stdout.readline().strip()
            assert prefix, "the crashing run did not start"
        finally:
            crashed.kill()
            crashed.wait(10)
    assert f"nm{prefix}-a" in run(["ip", "netns", "list"])

    removed = sweep()
    assert f"netns nm{prefix}-a" in removed
    assert f"link nb{prefix}" in removed
    assert f"nm{prefix}-" not in run(["ip", "netns", "list"])
    assert f"nb{prefix}" not in run(["ip", "link", "show"])
    assert f"nm{prefix}-tmpfs" not in run(["findmnt", "-rn", "-o", "SOURCE"])
    # the live run (this test's network) was left alone
    assert live.ns in run(["ip", "netns", "list"])
    assert net.leftovers()
