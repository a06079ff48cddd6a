"""Positions beyond the present: a checkpoint or start ts that no TSO handed out so far can have reached.

pd-server hands out strictly increasing timestamps, so every commit_ts that exists is below a TSO
taken after it was read. A position above such a *present* is wrong (typed by hand, copied from
another cluster, a datetime in the wrong year): starting there skips everything up to it. The
callers (drainer start-up, reparo, binlogctl) take their present, then refuse with `ahead_message`.

A present is the best upper bound at hand, named in the message:

    the current TSO                   a fresh TSO from pd-server (exact)
    pd-server's saved TSO window      `/pd/timestamp` in etcd: every TSO handed out so far is below it
    the local clock (+ allowance)     nothing upstream can be asked (wall-clock ms << 18)
"""

from __future__ import annotations

from dataclasses import dataclass

from common import tso
from common.errors import BinlogError

__all__ = ["AheadError", "Present", "ahead_message", "check_not_ahead", "clock_present", "ts_text", "window_present"]


class AheadError(BinlogError):
    """A position lies beyond the present; the message is the one line to show, with the fix."""


@dataclass(frozen=True, slots=True)
class Present:
    """An upper bound on every commit_ts that can exist now, and what it is (for the message)."""

    ts: int
    what: str


def ts_text(ts: int) -> str:
    """`ts (YYYY-MM-DD hh:mm:ss UTC)`: the TSO and its wall-clock time."""
    if ts < 0:
        return f"{ts} (not a time)"
    try:
        when = f"{tso.to_datetime(ts):%Y-%m-%d %H:%M:%S} UTC"
    except (ValueError, OverflowError, OSError):
        when = "beyond the year 9999"
    return f"{ts} ({when})"


def ahead_message(subject: str, value: int, present: Present, fix: str) -> str:
    """`<subject> <value> (<time>) is ahead of <present> <ts> (<time>): <fix>`, one line."""
    return f"{subject} {ts_text(value)} is ahead of {present.what} {ts_text(present.ts)}: {fix}"


def check_not_ahead(subject: str, value: int, present: Present, fix: str) -> None:
    """Raise AheadError when `value` > `present.ts`; a value equal to it is the present itself."""
    if value > present.ts:
        raise AheadError(ahead_message(subject, value, present, fix))


def clock_present(allowance_s: float = 0.0, *, now_ms: int | None = None, why: str = "") -> Present:
    """The local clock as a TSO (logical part at its maximum), `allowance_s` seconds later."""
    ms = (tso.now_ms() if now_ms is None else now_ms) + int(allowance_s * 1000)
    what = "the local clock" + (f" + {allowance_s:g} s" if allowance_s else "")
    return Present(tso.compose(ms, tso.MAX_LOGICAL - 1), what + (f" ({why})" if why else ""))


def window_present(upper_ms: int, why: str = "") -> Present:
    """pd-server's saved window `/pd/timestamp` (ms): every TSO handed out has a physical part below it."""
    return Present(tso.compose(upper_ms, 0), "pd-server's saved TSO window" + (f" ({why})" if why else ""))
