"""The drainer refuses to start at a position beyond the present (common/tso_guard.py).

At start-up, right after the checkpoint is loaded (so any TSO taken now is above a checkpoint a
drainer saved):

    a checkpoint          its commitTS must not be above the present
    no checkpoint         `initial-commit-ts` (when >= 0) must not be above it; -1 is a fresh TSO itself

A position above it is refused with one line (AheadError, exit status 1) naming the position, its
value, the present and the fix; nothing is saved, so the checkpoint stays as it was. The original
started there and skipped everything up to it.

The present (`online_present`): a fresh TSO; when pd-server gives none within the TSO client's
timeout but etcd answers, pd-server's saved TSO window `/pd/timestamp` (every TSO handed out is below
it), so a drainer still starts while pd-server is down, as before. Relay log recovery with etcd
unreachable (`offline_present`): the local clock + OFFLINE_CLOCK_ALLOWANCE, which still catches a
checkpoint such as 9223372036854775807 before recovery would mark it consistent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from common.errors import TSOError, UnavailableError
from common.pd_client import TIMESTAMP_KEY
from common.tso_guard import Present, check_not_ahead, clock_present, window_present
from drainer.checkpoint import Checkpoint, CheckpointState

__all__ = ["OFFLINE_CLOCK_ALLOWANCE", "check_checkpoint", "check_initial", "offline_present", "online_present"]

log = logging.getLogger(__name__)

OFFLINE_CLOCK_ALLOWANCE: Final = 600.0
"""Seconds pd-server's clock may be ahead of this machine's when only the local clock can be asked."""


def online_present(get_ts: Callable[[], int], read_window: Callable[[], int | None]) -> Present:
    """A fresh TSO; pd-server's saved window when pd-server cannot be reached (UnavailableError if neither)."""
    try:
        return Present(get_ts(), "the current TSO")
    except (UnavailableError, TSOError) as exc:
        cause = exc
    upper = read_window()
    if upper is None:
        raise UnavailableError(
            f"cannot check the start position: no TSO from pd-server ({cause}) and no saved TSO window at "
            f"{TIMESTAMP_KEY}"
        )
    log.warning("no TSO from pd-server (%s): the start position is checked against its saved window", cause)
    return window_present(upper, f"{TIMESTAMP_KEY}; pd-server unreachable")


def offline_present(why: str = "etcd unreachable") -> Present:
    """The local clock + OFFLINE_CLOCK_ALLOWANCE: the bound when nothing upstream answers."""
    return clock_present(OFFLINE_CLOCK_ALLOWANCE, why=why)


def check_checkpoint(checkpoint: Checkpoint, state: CheckpointState, present: Present) -> None:
    """AheadError when the loaded checkpoint's commitTS is beyond `present`."""
    check_not_ahead(f"checkpoint ({checkpoint.where}) commitTS", state.commit_ts, present, checkpoint.fix_hint(state))


def check_initial(initial_commit_ts: int, present: Present) -> None:
    """AheadError when `initial-commit-ts` (used without a checkpoint) is beyond `present`."""
    check_not_ahead(
        "initial-commit-ts",
        initial_commit_ts,
        present,
        "set initial-commit-ts to a commit_ts at or below it, or to -1 to start at the current TSO "
        "(drainer.toml, --initial-commit-ts or DRAINER_INITIAL_COMMIT_TS)",
    )
