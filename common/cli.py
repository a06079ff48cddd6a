"""Helpers shared by console-script entry points."""

from __future__ import annotations

import sys


def not_implemented(command: str, issue: str) -> int:
    """Entry point body of a command that a later issue delivers."""
    print(f"{command}: not implemented yet ({issue})", file=sys.stderr)
    return 2


def fail(command: str, message: str, status: int = 2) -> int:
    """Print one error line for `command` on stderr and return the exit status."""
    print(f"{command}: {message}", file=sys.stderr)
    return status
