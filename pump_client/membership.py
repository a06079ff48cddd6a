"""What the client knows about each pump: registry state, address, score, consecutive errors (pure).

A pump is *available* (prewrites may be sent to it) when its registry state is `online` and it is
usable: at most `max_err_nums` consecutive failed calls (original: 10), and not *suspect*.  A pump is
suspect from a call that timed out or found no server (`record_error(..., suspect=True)`, see
retry.makes_suspect) until a call or a probe succeeds: a frozen pump is left at its first timeout,
not after 10 of them.  Every other pump is *unavailable*.  The transitions:

    registry PUT, unknown node id      -> added; available if online
    registry PUT, state changed        -> to online: error count reset (available again);
                                          to anything else: unavailable
    registry PUT, host changed         -> the channel to the old address must be dropped (`reconnect`)
    registry PUT, score changed        -> new score (the `score` strategy reads it)
    registry DELETE                    -> removed (compatibility only: pumps are never deleted)
    failed call                        -> error count + 1; > max_err_nums -> unavailable
    timed-out / unreachable call       -> error count + 1 and suspect -> unavailable at once
    successful call / probe            -> error count 0, not suspect -> available again (if online)

Not thread-safe: the client serializes every call under its lock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from common.registry import NodeChange, NodeState, NodeStatus
from pump_client.selector import Candidate

log = logging.getLogger(__name__)

DEFAULT_MAX_ERR_NUMS = 10
"""Consecutive errors a pump may have and still be usable (original: defaultMaxErrNums = 10)."""


@dataclass(frozen=True)
class PumpInfo:
    """A snapshot of one pump as the client sees it."""

    node_id: str
    addr: str
    state: NodeState
    available: bool
    err_num: int
    score: int
    suspect: bool = False
    """A call timed out or found no server and nothing has succeeded since (the prober checks it)."""


@dataclass
class PumpEndpoint:
    node_id: str
    addr: str
    state: NodeState
    score: int = 0
    err_num: int = 0
    suspect: bool = False

    def available(self, max_err_nums: int) -> bool:
        return self.state is NodeState.ONLINE and self.err_num <= max_err_nums and not self.suspect

    def info(self, max_err_nums: int) -> PumpInfo:
        available = self.available(max_err_nums)
        return PumpInfo(self.node_id, self.addr, self.state, available, self.err_num, self.score, self.suspect)


class Change(Enum):
    """What a registry event did to a pump (the client reacts to some of them)."""

    NONE = "none"
    ADDED = "added"
    REMOVED = "removed"
    UPDATED = "updated"  # score or updateTS only


@dataclass(frozen=True)
class Applied:
    """The result of applying a registry change."""

    change: Change
    reconnect: bool = False  # drop the channel to the pump's (old) address
    availability_changed: bool = False


class Membership:
    """The pumps known to the client, keyed by node id."""

    def __init__(self, max_err_nums: int = DEFAULT_MAX_ERR_NUMS) -> None:
        if max_err_nums < 0:
            raise ValueError(f"max_err_nums must be >= 0, got {max_err_nums}")
        self.max_err_nums = max_err_nums
        self._pumps: dict[str, PumpEndpoint] = {}
        self.version = 0
        """Bumped whenever the available set or a score changes: the selector must be refreshed."""

    # ------------------------------------------------------------------------------ registry
    def apply(self, change: NodeChange) -> Applied:
        if change.status is None:
            return self.remove(change.node_id)
        return self.put(change.status)

    def put(self, status: NodeStatus) -> Applied:
        pump = self._pumps.get(status.node_id)
        if pump is None:
            pump = PumpEndpoint(status.node_id, status.host, status.state, status.score)
            self._pumps[status.node_id] = pump
            self.version += 1
            log.info(
                "pump added node_id=%s addr=%s state=%s available=%s",
                pump.node_id,
                pump.addr,
                pump.state.value,
                pump.available(self.max_err_nums),
            )
            return Applied(Change.ADDED, availability_changed=pump.available(self.max_err_nums))
        before = pump.available(self.max_err_nums)
        reconnect = False
        if status.host != pump.addr:
            log.info("pump node_id=%s moved from %s to %s", pump.node_id, pump.addr, status.host)
            pump.addr = status.host
            reconnect = True
        if status.state is not pump.state:
            log.info("pump node_id=%s state %s -> %s", pump.node_id, pump.state.value, status.state.value)
            if status.state is NodeState.ONLINE:
                pump.err_num = 0
                pump.suspect = False
                reconnect = True  # a pump that came back: start from a fresh connection
            pump.state = status.state
        score_changed = status.score != pump.score
        pump.score = status.score
        after = pump.available(self.max_err_nums)
        if before != after or (after and score_changed):
            self.version += 1
        if before != after:
            log.info("pump node_id=%s is now %s", pump.node_id, "available" if after else "unavailable")
        return Applied(Change.UPDATED, reconnect=reconnect, availability_changed=before != after)

    def remove(self, node_id: str) -> Applied:
        pump = self._pumps.pop(node_id, None)
        if pump is None:
            return Applied(Change.NONE)
        self.version += 1
        log.info("pump removed node_id=%s addr=%s", node_id, pump.addr)
        return Applied(Change.REMOVED, reconnect=True, availability_changed=pump.available(self.max_err_nums))

    # ------------------------------------------------------------------------------- outcomes
    def record_error(self, node_id: str, *, suspect: bool = False) -> bool:
        """Count a failed call (`suspect`: it timed out or found no server); True when this made the
        pump unavailable."""
        pump = self._pumps.get(node_id)
        if pump is None:
            return False
        before = pump.available(self.max_err_nums)
        pump.err_num += 1
        pump.suspect = pump.suspect or suspect
        if before and not pump.available(self.max_err_nums):
            self.version += 1
            if pump.err_num > self.max_err_nums:
                log.warning(
                    "pump node_id=%s unavailable after %d consecutive errors (max %d)",
                    node_id,
                    pump.err_num,
                    self.max_err_nums,
                )
            else:
                log.warning("pump node_id=%s unavailable: a call timed out or found no server", node_id)
            return True
        return False

    def record_success(self, node_id: str) -> bool:
        """Reset the error count and clear suspicion; True when this made the pump available again."""
        pump = self._pumps.get(node_id)
        if pump is None:
            return False
        before = pump.available(self.max_err_nums)
        pump.err_num = 0
        pump.suspect = False
        if not before and pump.available(self.max_err_nums):
            self.version += 1
            log.info("pump node_id=%s available again", node_id)
            return True
        return False

    # -------------------------------------------------------------------------------- queries
    def get(self, node_id: str) -> PumpInfo | None:
        pump = self._pumps.get(node_id)
        return None if pump is None else pump.info(self.max_err_nums)

    def __len__(self) -> int:
        return len(self._pumps)

    def candidates(self) -> list[Candidate]:
        """The available pumps, sorted by node id, with their scores."""
        return [Candidate(p.node_id, p.score) for p in self._sorted() if p.available(self.max_err_nums)]

    def available_count(self) -> int:
        return sum(1 for p in self._pumps.values() if p.available(self.max_err_nums))

    def online(self) -> list[PumpInfo]:
        """Every pump whose registry state is online, available or not (the last-resort pass)."""
        return [p.info(self.max_err_nums) for p in self._sorted() if p.state is NodeState.ONLINE]

    def to_probe(self) -> list[PumpInfo]:
        """Unavailable pumps whose registry state is online: the prober tries them."""
        return [p for p in self.online() if not p.available]

    def suspects(self) -> list[PumpInfo]:
        """Online pumps that are suspect: the prober tries them more often (a freeze is usually short)."""
        return [p for p in self.online() if p.suspect]

    def snapshot(self) -> list[PumpInfo]:
        return [p.info(self.max_err_nums) for p in self._sorted()]

    def _sorted(self) -> list[PumpEndpoint]:
        return [self._pumps[k] for k in sorted(self._pumps)]
