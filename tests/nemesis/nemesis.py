"""Faults with `start()` / `heal()`: partitions, loss, bandwidth, delay, freeze, crash, disk full, clock skew.

Every fault is a small object: `start()` injects it, `heal()` undoes it and may be called any number
of times (also without a start, and after a failed start), `describe()` names it for the logs.
`Compose` starts several and heals them all in reverse.

Packet faults are nftables tables of the `netdev` family bound to the namespace's `eth0` (ingress
and egress hooks): a drop there is silent, as on a real wire, where a drop in the `inet` output
hook would fail the sender's `send()` with EPERM.  Each fault owns its own table, so faults
stack and healing one leaves the others in place.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

from tests.harness.tcpproxy import TcpProxy
from tests.nemesis.hosts import NS_IFACE, Host, NemesisError
from tools.procs import ManagedProcess

_ids = itertools.count(1)


class Fault(Protocol):
    def start(self) -> None: ...
    def heal(self) -> None: ...
    def describe(self) -> str: ...


class _NftTable:
    """One netdev table in one namespace with an ingress and an egress chain on `eth0`."""

    def __init__(self, host: Host, kind: str) -> None:
        self.host = host
        self.name = f"nemesis_{kind}_{next(_ids)}"
        self.installed = False

    def install(self, ingress: Sequence[str], egress: Sequence[str]) -> None:
        lines = [f"table netdev {self.name} {{"]
        for chain, hook, rules in (("in", "ingress", ingress), ("out", "egress", egress)):
            lines.append(f"  chain {chain} {{")
            lines.append(f'    type filter hook {hook} device "{NS_IFACE}" priority 0; policy accept;')
            lines.extend(f"    {r}" for r in rules)
            lines.append("  }")
        lines.append("}")
        self.installed = True  # set first: a half-applied script is still removed by heal
        self.host.exec(["nft", "-f", "-"], input_text="\n".join(lines) + "\n")

    def remove(self) -> None:
        if not self.installed:
            return
        listing = self.host.exec(["nft", "list", "tables"])
        if f"table netdev {self.name}" in listing:
            self.host.exec(["nft", "delete", "table", "netdev", self.name])
        self.installed = False


def _peer_ip(peer: Host | Literal["host"], of: Host) -> str:
    return of.network.gateway if peer == "host" else peer.ip


def _peer_name(peer: Host | Literal["host"]) -> str:
    return "host" if peer == "host" else peer.name


class Partition:
    """`a` and `peer` cannot talk.  `peer="host"` means the bridge's `.1` (MySQL and other forwarders).

    Symmetric: drops both ways in `a` (and in `peer`'s namespace too when it is a Host).
    `one_way=True`: only packets from `a` to the peer are dropped (at `a`'s egress); the peer's packets
    still reach `a`.  Note that TCP needs both ways, so one-way still breaks TCP connections; UDP shows
    the direction."""

    def __init__(self, a: Host, b: Host | Literal["host"], one_way: bool = False) -> None:
        self.a = a
        self.b = b
        self.one_way = one_way
        self._tables: list[_NftTable] = []

    def describe(self) -> str:
        arrow = "->" if self.one_way else "<->"
        return f"partition {self.a.name} {arrow} {_peer_name(self.b)} dropped"

    def start(self) -> None:
        peer_ip = _peer_ip(self.b, self.a)
        t = _NftTable(self.a, "partition")
        self._tables.append(t)
        if self.one_way:
            t.install([], [f"ip daddr {peer_ip} drop"])
            return
        t.install([f"ip saddr {peer_ip} drop"], [f"ip daddr {peer_ip} drop"])
        if self.b != "host":
            tb = _NftTable(self.b, "partition")
            self._tables.append(tb)
            tb.install([f"ip saddr {self.a.ip} drop"], [f"ip daddr {self.a.ip} drop"])

    def heal(self) -> None:
        while self._tables:
            self._tables[-1].remove()
            self._tables.pop()


class Isolate:
    """`a` cut off from every one of `peers` (each a Host or "host"), both ways."""

    def __init__(self, a: Host, peers: Sequence[Host | Literal["host"]]) -> None:
        self.a = a
        self.parts = [Partition(a, p) for p in peers]

    def describe(self) -> str:
        return f"isolate {self.a.name} from {', '.join(_peer_name(p.b) for p in self.parts)}"

    def start(self) -> None:
        for p in self.parts:
            p.start()

    def heal(self) -> None:
        for p in reversed(self.parts):
            p.heal()


class Loss:
    """Drop `percent` % of the IP packets in and out of the host's `eth0` at random (loopback untouched).

    ARP is spared: a lost ARP exchange stalls all traffic to the peer for a second or more, which
    would make the fault a sporadic partition rather than packet loss."""

    def __init__(self, host: Host, percent: int) -> None:
        if not 0 <= percent <= 100:
            raise ValueError(f"loss percent {percent} not in 0..100")
        self.host = host
        self.percent = percent
        self._table = _NftTable(host, "loss")

    def describe(self) -> str:
        return f"loss {self.percent}% on {self.host.name}"

    def start(self) -> None:
        rule = f"meta protocol {{ ip, ip6 }} numgen random mod 100 < {self.percent} drop"
        self._table.install([rule], [rule])

    def heal(self) -> None:
        self._table.remove()


class Bandwidth:
    """Cap what the host sends out of its `eth0` to `rate` (tc syntax, e.g. "1mbit") with a tbf qdisc.

    Only the host's egress is shaped; to cap both ways, apply it to both ends."""

    def __init__(self, host: Host, rate: str, burst: str = "16kb", latency: str = "400ms") -> None:
        self.host = host
        self.rate = rate
        self.burst = burst
        self.latency = latency
        self._installed = False

    def describe(self) -> str:
        return f"bandwidth {self.rate} out of {self.host.name}"

    def start(self) -> None:
        self._installed = True
        self.host.exec(
            ["tc", "qdisc", "replace", "dev", NS_IFACE, "root", "tbf", "rate", self.rate,
             "burst", self.burst, "latency", self.latency]
        )  # fmt: skip

    def heal(self) -> None:
        if not self._installed:
            return
        if "tbf" in self.host.exec(["tc", "qdisc", "show", "dev", NS_IFACE]):
            self.host.exec(["tc", "qdisc", "del", "dev", NS_IFACE, "root"])
        self._installed = False


class Delay:
    """Delay each chunk through `proxy` by uniform `lo_ms..hi_ms` in `direction` ("up", "down", "both")."""

    def __init__(self, proxy: TcpProxy, lo_ms: float, hi_ms: float, direction: str = "both") -> None:
        self.proxy = proxy
        self.lo_ms = lo_ms
        self.hi_ms = hi_ms
        self.direction = direction

    def describe(self) -> str:
        return f"delay {self.lo_ms}-{self.hi_ms} ms ({self.direction}) on {self.proxy.describe()}"

    def start(self) -> None:
        self.proxy.set_delay(self.lo_ms, self.hi_ms, self.direction)

    def heal(self) -> None:
        self.proxy.set_delay(0, 0, self.direction)


class Cut:
    """Reset every connection through `proxy` until heal."""

    def __init__(self, proxy: TcpProxy) -> None:
        self.proxy = proxy

    def describe(self) -> str:
        return f"cut {self.proxy.describe()}"

    def start(self) -> None:
        self.proxy.cut()

    def heal(self) -> None:
        self.proxy.restore()


class Freeze:
    """SIGSTOP the process; heal sends SIGCONT (always, so a heal never leaves it stopped).

    `seconds` is how long the scenario means to keep it frozen; the caller sleeps, this does not."""

    def __init__(self, process: ManagedProcess, seconds: float = 0.0) -> None:
        self.process = process
        self.seconds = seconds

    def describe(self) -> str:
        return f"freeze {self.process.name} for {self.seconds:.1f}s"

    def _signal(self, sig: signal.Signals) -> None:
        pid = self.process.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)

    def start(self) -> None:
        if not self.process.alive:
            raise NemesisError(f"freeze: {self.process.name} is not running")
        self._signal(signal.SIGSTOP)

    def heal(self) -> None:
        self._signal(signal.SIGCONT)


class Crash:
    """kill -9 the process (its whole group) at start; heal calls `restart` once if the process is down."""

    def __init__(self, restart: Callable[[], None], process: ManagedProcess) -> None:
        self.restart = restart
        self.process = process
        self._crashed = False

    def describe(self) -> str:
        return f"crash {self.process.name} (kill -9)"

    def start(self) -> None:
        self._crashed = True
        self.process.kill9()

    def heal(self) -> None:
        if self._crashed and not self.process.alive:
            self.restart()
        self._crashed = False


class DiskFull:
    """Fill the filesystem of `path` (a tmpfs from `Network.mount_tmpfs`) with one file until ENOSPC."""

    FILL_NAME = ".nemesis-fill"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fill = path / self.FILL_NAME

    def describe(self) -> str:
        return f"disk full at {self.path}"

    def start(self) -> None:
        if not os.path.ismount(self.path) and not _on_tmpfs(self.path):
            raise NemesisError(f"disk full: {self.path} is not on a tmpfs we mounted; refusing to fill it")
        block = b"\0" * (1 << 20)
        fd = os.open(self.fill, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(block) == 1:
                        break
                    block = block[: len(block) // 2]  # fill the tail down to the last byte
        finally:
            os.close(fd)

    def heal(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fill.unlink()


def _on_tmpfs(path: Path) -> bool:
    best, fstype = "", ""
    target = os.path.realpath(path)
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        mnt = fields[1]
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
            best, fstype = mnt, fields[2]
    return fstype == "tmpfs"


SKEW_DIR = Path(__file__).resolve().parent / "skew"
"""Holds the `sitecustomize` that keeps `time.sleep` working in a skewed process."""
_LIBFAKETIME_DIRS = ("/usr/lib/x86_64-linux-gnu/faketime", "/usr/lib/aarch64-linux-gnu/faketime", "/usr/lib/faketime")


def faketime_prefix(offset_s: float) -> list[str]:
    """argv prefix that runs one of our Python daemons with its wall clock `offset_s` seconds off.

    libfaketime (preloaded by `env`, which execs: the pid stays the node's own) shifts CLOCK_REALTIME
    for the whole process, Python and grpc's C core alike, as on a host whose clock is wrong; a shift
    of Python's `time.time` alone would not do: grpc turns timeouts into realtime deadlines in Python
    and checks them in C, so every RPC of a process 5 minutes behind timed out at once.  The monotonic
    clock stays true (`FAKETIME_DONT_FAKE_MONOTONIC=1`): faked too, CPython hands faked deadlines to
    the real `sem_clockwait` and every timed wait of a process an hour ahead lasts an hour more.  With
    it true, libfaketime 0.9.10's `clock_nanosleep` fails, so `tests/nemesis/skew/sitecustomize.py`
    makes `time.sleep` wait on a lock instead.  (libfaketime does not reach etcd, a Go binary.)

    Only clocks *behind* are scheduled: with libfaketime 0.9.10 a process whose clock is ahead can
    stop dead in grpc's C core (py-spy: the asyncio gRPC loop thread in libfaketime's
    pthread_cond_timedwait wrapper, holding the GIL, so not even SIGTERM is handled) for about the
    offset, an artefact of the faked clock disagreeing with what grpc's waits use, not of the host."""
    lib = next(
        (Path(d) / "libfaketimeMT.so.1" for d in _LIBFAKETIME_DIRS if (Path(d) / "libfaketimeMT.so.1").exists()), None
    )
    if lib is None:
        raise NemesisError("clock skew needs libfaketime (Debian package faketime)")
    path = os.pathsep.join(p for p in (str(SKEW_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return [
        "env",
        f"LD_PRELOAD={lib}",
        f"FAKETIME={offset_s:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC=1",
        "NEMESIS_SKEWED=1",
        f"PYTHONPATH={path}",
    ]


class ClockSkew:
    """Restart a node with its clock `offset_s` off; heal restarts it with the true clock.

    `restart_with_prefix(prefix)` stops the node and starts it again with `prefix` before its argv
    (`[]` at heal)."""

    def __init__(self, restart_with_prefix: Callable[[list[str]], None], offset_s: float, name: str = "node") -> None:
        self.restart_with_prefix = restart_with_prefix
        self.offset_s = offset_s
        self.name = name
        self._skewed = False

    def describe(self) -> str:
        return f"clock skew {self.offset_s:+g}s on {self.name}"

    def start(self) -> None:
        self._skewed = True
        self.restart_with_prefix(faketime_prefix(self.offset_s))

    def heal(self) -> None:
        if self._skewed:
            self.restart_with_prefix([])
        self._skewed = False


class Compose:
    """Several faults at once; heal undoes them in reverse order and heals every one even if some fail."""

    def __init__(self, *faults: Fault) -> None:
        self.faults = list(faults)
        self._started: list[Fault] = []

    def describe(self) -> str:
        return " + ".join(f.describe() for f in self.faults)

    def start(self) -> None:
        for f in self.faults:
            self._started.append(f)
            f.start()

    def heal(self) -> None:
        errors: list[str] = []
        for f in reversed(self.faults):
            try:
                f.heal()
            except Exception as exc:
                errors.append(f"{f.describe()}: {exc}")
        self._started.clear()
        if errors:
            raise NemesisError("heal failed: " + "; ".join(errors))
