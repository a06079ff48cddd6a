"""One nemesis run's hosts: a Linux bridge with one network namespace per host.

Every name this module creates starts with a short random run prefix, so runs never collide and
`sweep` can find what a crashed run left behind: the bridge and host-side veths are `nb<prefix>...`,
the namespaces `nm<prefix>-<name>`, tmpfs mounts have the source `nm<prefix>-tmpfs`.  While a run is
alive it holds an flock on `/run/binlog-nemesis/<prefix>.lock` (created before anything else, removed
after everything else); `sweep` only removes names whose prefix has a lock file that nobody holds, so
a concurrent run is never touched, nor a link of someone else that happens to match the pattern.

Inside each namespace the veth is called `eth0` and has `.N/24`; the bridge has `.1`, which is the
default route.  Services of the host that listen on 127.0.0.1 only (MariaDB) are reached through
`Network.forward`, a `TcpProxy` on `.1`.

Note for mounts: `ip netns exec` gives its process a private copy of the mount table (the root mount
here is `private`, so later mounts do not propagate); mount a tmpfs before starting the process
that must see it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import random
import re
import secrets
import signal
import subprocess
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.harness.tcpproxy import TcpProxy
from tools.procs import ManagedProcess, free_port

log = logging.getLogger(__name__)

CMD_TIMEOUT = 15.0
"""Bound on every `ip`/`nft`/`tc`/`mount` command."""

LOCK_DIR = Path("/run/binlog-nemesis")
PREFIX_PATTERN = "[0-9a-f]{4}"
"""What a run prefix looks like; `sweep` takes a pattern of this form."""

NS_IFACE = "eth0"
"""Name of the veth end inside every namespace."""


class NemesisError(RuntimeError):
    """A command that builds or tears down the hosts or a fault failed."""


def run(argv: Sequence[str], *, input_text: str | None = None, timeout: float = CMD_TIMEOUT, check: bool = True) -> str:
    """Run one command with a deadline; raise `NemesisError` naming it when it fails. Returns stdout."""
    try:
        res = subprocess.run(list(argv), input=input_text, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise NemesisError(f"`{' '.join(argv)}` timed out after {timeout:.0f}s") from exc
    except OSError as exc:
        raise NemesisError(f"`{' '.join(argv)}` could not run: {exc}") from exc
    if check and res.returncode != 0:
        raise NemesisError(f"`{' '.join(argv)}` failed with status {res.returncode}: {res.stderr.strip()}")
    return res.stdout


def require_netns() -> str | None:
    """None when this process can build namespaces, else a one-line reason to skip."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"nmprobe{os.getpid()}"
    try:
        run(["ip", "netns", "add", name])
    except NemesisError as exc:
        return f"cannot create a network namespace: {exc}"
    with contextlib.suppress(NemesisError):
        run(["ip", "netns", "del", name], check=False)
    return None


def _used_networks() -> list[ipaddress.IPv4Network]:
    nets: list[ipaddress.IPv4Network] = []
    for entry in json.loads(run(["ip", "-j", "-4", "addr", "show"]) or "[]"):
        for a in entry.get("addr_info", []):
            with contextlib.suppress(ValueError, KeyError):
                nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for r in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]"):
        dst = r.get("dst", "")
        if dst and dst != "default":
            with contextlib.suppress(ValueError):
                nets.append(ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def pick_subnet() -> ipaddress.IPv4Network:
    """A random /24 in 10.0.0.0/8 that overlaps no address or route of this host."""
    used = _used_networks()
    for _ in range(200):
        net = ipaddress.IPv4Network(f"10.{random.randint(0, 255)}.{random.randint(0, 255)}.0/24")
        if not any(net.overlaps(u) for u in used):
            return net
    raise NemesisError("no free /24 in 10.0.0.0/8")


def _lock_is_free(path: Path) -> bool:
    """Whether nobody holds the run lock at `path` (a missing file counts as free)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def _kill_netns_pids(ns: str) -> None:
    for pid in run(["ip", "netns", "pids", ns], check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def sweep(prefix_pattern: str = PREFIX_PATTERN) -> list[str]:
    """Remove what crashed runs left: namespaces `nm<p>-*`, links `nb<p>*`, tmpfs mounts `nm<p>-tmpfs`.

    Only prefixes matching `prefix_pattern` whose run lock file exists and nobody holds are touched.  Returns what was
    removed, for the log."""
    removed: list[str] = []
    ns_re = re.compile(rf"^nm({prefix_pattern})-\S+$")
    link_re = re.compile(rf"^nb({prefix_pattern})\w*$")
    tmpfs_re = re.compile(rf"^nm({prefix_pattern})-tmpfs$")

    def stale(prefix: str) -> bool:  # a lock file left unlocked: a run of ours that died before close()
        lock = LOCK_DIR / f"{prefix}.lock"
        return lock.exists() and _lock_is_free(lock)

    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        m = tmpfs_re.match(fields[0]) if len(fields) > 1 else None
        if m and stale(m.group(1)):
            run(["umount", "-l", fields[1]], check=False)
            removed.append(f"mount {fields[1]}")
    for line in run(["ip", "netns", "list"]).splitlines():
        name = line.split()[0] if line.split() else ""
        m = ns_re.match(name)
        if m and stale(m.group(1)):
            _kill_netns_pids(name)
            run(["ip", "netns", "del", name], check=False)
            removed.append(f"netns {name}")
    for entry in json.loads(run(["ip", "-j", "link", "show"]) or "[]"):
        name = entry.get("ifname", "")
        m = link_re.match(name)
        if m and stale(m.group(1)):
            run(["ip", "link", "del", name], check=False)
            removed.append(f"link {name}")
    if LOCK_DIR.is_dir():
        for lock in LOCK_DIR.glob("*.lock"):
            if re.fullmatch(prefix_pattern, lock.stem) and _lock_is_free(lock):
                with contextlib.suppress(OSError):
                    lock.unlink()
    if removed:
        log.warning("swept leftovers of earlier nemesis runs: %s", ", ".join(removed))
    return removed


class Host:
    """One namespace on the run's bridge."""

    def __init__(self, network: Network, name: str, ns: str, ip: str, veth: str) -> None:
        self.network = network
        self.name = name
        self.ns = ns
        self.ip = ip
        self.veth = veth
        """Host-side end of the veth (in the bridge); the namespace end is `NS_IFACE`."""

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.ip}, ns={self.ns})"

    def prefix_argv(self) -> list[str]:
        """argv prefix that runs a command in this host's namespace (`ip netns exec` execs, it does not fork)."""
        return ["ip", "netns", "exec", self.ns]

    def exec(self, argv: Sequence[str], *, input_text: str | None = None, timeout: float = CMD_TIMEOUT) -> str:
        """Run a short command in the namespace; raise naming it on failure."""
        return run([*self.prefix_argv(), *argv], input_text=input_text, timeout=timeout)

    def process(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> ManagedProcess:
        """A (not yet started) process running `argv` in the namespace; the network stops it at close.

        Its `pid` is the real process: `ip netns exec` and `setpriv` both exec."""
        proc = ManagedProcess(name, [*self.prefix_argv(), *argv], log_path, env=env)
        self.network.processes.append(proc)
        return proc


class Network:
    """A bridge and its hosts for one run; a context manager whose exit tears everything down."""

    def __init__(self) -> None:
        self.prefix = secrets.token_hex(2)
        self.bridge = f"nb{self.prefix}"
        self.subnet: ipaddress.IPv4Network | None = None
        self.gateway = ""
        self.hosts: dict[str, Host] = {}
        self.processes: list[ManagedProcess] = []
        self.proxies: list[TcpProxy] = []
        self.mounts: list[Path] = []
        self._lock_fd: int | None = None
        self._closed = False
        self._opened = False

    def __enter__(self) -> Network:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None
    ) -> None:
        self.close()

    @property
    def tmpfs_source(self) -> str:
        return f"nm{self.prefix}-tmpfs"

    def open(self) -> None:
        """Take the run lock, then create the bridge with `.1`; undoes itself if any step fails."""
        if self._opened:
            return
        self._opened = True
        LOCK_DIR.mkdir(parents=True, exist_ok=True)
        for _ in range(100):  # a prefix nobody else has, not even a crashed run awaiting its sweep
            try:
                fd = os.open(LOCK_DIR / f"{self.prefix}.lock", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileExistsError:
                self.prefix = secrets.token_hex(2)
                self.bridge = f"nb{self.prefix}"
        else:
            raise NemesisError(f"no free run prefix in {LOCK_DIR}; run sweep()")
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._lock_fd = fd
        try:
            self.subnet = pick_subnet()
            self.gateway = str(self.subnet.network_address + 1)
            run(["ip", "link", "add", self.bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"])
            run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
            run(["ip", "link", "set", self.bridge, "up"])
        except BaseException:
            self.close()
            raise
        log.info("nemesis network %s on %s", self.bridge, self.subnet)

    def add_host(self, name: str) -> Host:
        """A new namespace `nm<prefix>-<name>` with `.N/24` on the bridge and a default route via `.1`."""
        if self.subnet is None:
            raise NemesisError("Network.open() was not called")
        if name in self.hosts or not re.fullmatch(r"[a-z0-9][a-z0-9_]{0,30}", name):
            raise NemesisError(f"bad or duplicate host name {name!r}")
        n = len(self.hosts) + 2
        ns = f"nm{self.prefix}-{name}"
        veth = f"nb{self.prefix}v{n}"
        ip = str(self.subnet.network_address + n)
        run(["ip", "netns", "add", ns])
        host = Host(self, name, ns, ip, veth)
        self.hosts[name] = host
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", NS_IFACE, "netns", ns])
        run(["ip", "link", "set", veth, "master", self.bridge])
        run(["ip", "link", "set", veth, "up"])
        host.exec(["ip", "link", "set", "lo", "up"])
        host.exec(["ip", "addr", "add", f"{ip}/24", "dev", NS_IFACE])
        host.exec(["ip", "link", "set", NS_IFACE, "up"])
        host.exec(["ip", "route", "add", "default", "via", self.gateway])
        return host

    def forward(self, target_port: int, target_host: str = "127.0.0.1", listen_port: int | None = None) -> TcpProxy:
        """A started `TcpProxy` on the bridge's `.1` to `target_host:target_port` (e.g. MariaDB on loopback)."""
        port = listen_port if listen_port is not None else free_port(self.gateway)
        proxy = TcpProxy(self.gateway, port, target_host, target_port)
        proxy.start()
        self.proxies.append(proxy)
        return proxy

    def mount_tmpfs(self, path: Path, size: str) -> Path:
        """Mount a tmpfs of `size` (e.g. "4m") at `path`; unmounted at close.  Mount it before starting a
        namespaced process that writes there (see the module note)."""
        path.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", self.tmpfs_source, str(path)])
        self.mounts.append(path)
        return path

    def close(self) -> None:
        """Stop our processes and proxies, remove the namespaces, veths, bridge and mounts. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        for proc in reversed(self.processes):
            try:
                if proc.proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.proc.pid, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
                    proc.stop(timeout=5)
            except Exception as exc:
                errors.append(f"stop {proc.name}: {exc}")
        for proxy in self.proxies:
            try:
                proxy.close()
            except Exception as exc:
                errors.append(f"proxy {proxy.describe()}: {exc}")
        for host in self.hosts.values():
            try:
                _kill_netns_pids(host.ns)
                run(["ip", "netns", "del", host.ns], check=False)
                run(["ip", "link", "del", host.veth], check=False)
            except NemesisError as exc:
                errors.append(str(exc))
        for path in reversed(self.mounts):
            try:
                run(["umount", str(path)], check=False)
                if os.path.ismount(path):
                    run(["umount", "-l", str(path)])
            except NemesisError as exc:
                errors.append(str(exc))
        try:
            run(["ip", "link", "del", self.bridge], check=False)
        except NemesisError as exc:
            errors.append(str(exc))
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                (LOCK_DIR / f"{self.prefix}.lock").unlink()
            os.close(self._lock_fd)
            self._lock_fd = None
        if errors:
            raise NemesisError("nemesis teardown: " + "; ".join(errors))

    def leftovers(self) -> list[str]:
        """What of this run still exists (namespaces, links, mounts); empty after a clean `close()`."""
        found: list[str] = []
        for line in run(["ip", "netns", "list"]).splitlines():
            if line.startswith(f"nm{self.prefix}-"):
                found.append(f"netns {line.split()[0]}")
        for entry in json.loads(run(["ip", "-j", "link", "show"]) or "[]"):
            if entry.get("ifname", "").startswith(self.bridge):
                found.append(f"link {entry['ifname']}")
        for line in Path("/proc/self/mounts").read_text().splitlines():
            if line.split()[0] == self.tmpfs_source:
                found.append(f"mount {line.split()[1]}")
        return found
