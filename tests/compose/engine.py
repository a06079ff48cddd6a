"""The container engine of the compose tier: podman with the project's containers.conf, podman-compose,
and waiting for conditions with deadlines.

Every podman call gets CONTAINERS_CONF=deploy/container/containers.conf (runc, cgroupfs, no default
ulimits: what Debian 12's podman 4.3 needs on hosts with hybrid cgroups and no systemd) unless the
environment already names one.  `engine_problem()` installs podman, runc, netavark and aardvark-dns with
apt-get where they are missing and this is root on Debian (as `make compose-sysdeps` does), and says why
the engine cannot be used otherwise; the tests skip with that reason, or fail under CI=true.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TypeVar

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "deploy" / "container" / "containers.conf"
CI = os.environ.get("CI", "").lower() == "true"
NETAVARK = Path("/usr/lib/podman/netavark")
"""The network backend containers.conf names: DNS by container name on the compose network."""
T = TypeVar("T")


class EngineError(Exception):
    """A podman or podman-compose command failed; the message has its output's tail."""


def engine_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    env.update(extra)
    return env


def tail(text: str, limit: int = 3000) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def podman(*args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["podman", *args], env=engine_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise EngineError(f"podman {' '.join(args)}: exit {done.returncode}: {tail(done.stderr + done.stdout)}")
    return done


def _apt_install(*packages: str) -> str:
    """'' when apt-get installed `packages`, else why not."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=300", *packages]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, timeout=600, check=False)
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return f"apt-get install {' '.join(packages)} failed: {tail(done.stderr, 300).strip()}"
    return ""


@cache
def engine_problem() -> str:
    """Why podman cannot run containers here ('' when it can), installing it first where possible."""
    packages = ("podman", "runc", "netavark", "aardvark-dns")
    if shutil.which("podman") is None or shutil.which("runc") is None or not NETAVARK.exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            return f"{', '.join(packages)} are not installed (and this is not root on Debian to apt-get them)"
        why = _apt_install(*packages)
        if why:
            return why
    try:
        done = podman("info", "--format", "{{.Host.OCIRuntime.Name}}", check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"podman info failed: {exc}"
    if done.returncode != 0:
        return f"podman info failed: {tail(done.stderr, 300).strip()}"
    return ""


def compose_command() -> list[str] | None:
    """How to run podman-compose: the module in this interpreter (the `compose` extra), else on PATH."""
    if importlib.util.find_spec("podman_compose") is not None:
        return [sys.executable, "-m", "podman_compose"]
    found = shutil.which("podman-compose")
    return [found] if found else None


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, interval: float = 1.0) -> T:
    """Call `probe` until it returns something other than None/False; TimeoutError naming `what` and
    the probe's last exception after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            result = probe()
        except (EngineError, OSError, ValueError, KeyError) as exc:
            last, result = exc, None
        if result is not None and result is not False:
            return result
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s" + (f" (last error: {last})" if last else ""))
        time.sleep(interval)
