"""Helpers shared by console-script entry points."""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType
from typing import Final

DISTRIBUTION: Final = "tidb-binlog-py"
"""The project's name on pip: what an install command for one of its extras names."""


class MissingExtraError(OSError):
    """A command needs a package of one of the project's optional extras and it is not installed.

    A missing package is a problem of the environment, not of the command line: exit status 1.  It is
    an OSError so that a command that reports environment failures (OSError) as one line reports this
    one the same way.
    """


def import_extra(module: str, package: str, extra: str) -> ModuleType:
    """Import `module` of the optional `package` (a pip distribution of the extra `extra`).

    MissingExtraError, whose message names the extra to install, when the package is not installed;
    any other import failure (a broken install) propagates as it is.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or (exc.name != module and not module.startswith(exc.name + ".")):
            raise
        raise MissingExtraError(
            f"{package} is not installed; install the {extra} extra: pip install '{DISTRIBUTION}[{extra}]'"
        ) from None


def fail(command: str, message: str, status: int = 2) -> int:
    """Print one error line for `command` on stderr and return the exit status."""
    print(f"{command}: {message}", file=sys.stderr)
    return status


def positive_int(text: str) -> int:
    """An argparse `type`: an integer above 0, or a one-line usage error."""
    n = _int_arg(text)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {n}")
    return n


def positive_float(text: str) -> float:
    """An argparse `type`: a finite number above 0, or a one-line usage error."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < x < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return x


def non_negative_int(text: str) -> int:
    """An argparse `type`: an integer of 0 or more, or a one-line usage error."""
    n = _int_arg(text)
    if n < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {n}")
    return n


def _int_arg(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None


def check_listen_addr(key: str, host: str, port: int) -> None:
    """Raise naming `key` if `host:port` cannot be bound right now (port 0 is always fine): ListenError when
    the port is taken or needs privileges (exit status 1), ConfigError for an address that is not this
    machine's or not an address (exit status 2).

    gRPC's own bind failure prints a C-core log line and a vague message; this
    check gives the operator one clear line instead.
    """
    import errno
    import socket

    from common.errors import ConfigError, ListenError

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host.strip("[]"), port))
        except OSError as exc:
            message = f"{key}: cannot listen on {host}:{port}: {exc.strerror or exc}"
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise ListenError(message) from exc
            raise ConfigError(message) from exc
