"""Helpers shared by console-script entry points."""

from __future__ import annotations

import argparse
import sys


def not_implemented(command: str, issue: str) -> int:
    """Entry point body of a command that a later issue delivers."""
    print(f"{command}: not implemented yet ({issue})", file=sys.stderr)
    return 2


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
