"""Pump selection strategies (pure: no I/O, no clock, no threads; the client serializes calls).

A selector is told the available pumps (`set_pumps`, with the score each one publishes) and picks one
node id for a prewrite (`select(start_ts, retry)`; `retry` counts the attempts already made for this
binlog).  It returns None when no pump is available.

    range   round robin over the available pumps, in node id order.  The offset goes back to 0
            whenever the set of node ids changes (a score-only update keeps it), as the original.
    hash    sorted_node_ids[(start_ts + retry) % n].  Sorting makes the mapping the same whatever
            order etcd returned (the original used Go map order, so it was not stable).
    score   a weighted random choice: weight = the pump's published score (0..100).  A pump with
            score <= 0 gets TINY_WEIGHT, so it is rarely but not never picked; when no pump has a
            positive score (e.g. pumps that predate scores) it falls back to round robin.
            The original's `score` was a stub that always returned nil.

Commit and rollback binlogs do not go through a selector: they go to the pump that took the
prewrite (the client's start_ts map).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from common.errors import ConfigError

RANGE: Final = "range"
HASH: Final = "hash"
SCORE: Final = "score"
STRATEGIES: Final = (RANGE, HASH, SCORE)
TINY_WEIGHT: Final = 0.01
"""Weight of a pump whose score is <= 0 when some other pump has a positive score (1 % of score 1)."""


@dataclass(frozen=True)
class Candidate:
    """An available pump as a selector sees it."""

    node_id: str
    score: int = 0


class Selector(Protocol):
    def set_pumps(self, pumps: Sequence[Candidate]) -> None:
        """Replace the available pumps (any order)."""
        ...

    def select(self, start_ts: int, retry: int) -> str | None:
        """The node id to try for this prewrite attempt, or None when there is no available pump."""
        ...


class RangeSelector:
    """Round robin; the offset resets when the set of node ids changes."""

    def __init__(self) -> None:
        self._ids: tuple[str, ...] = ()
        self._offset = 0

    @property
    def node_ids(self) -> tuple[str, ...]:
        return self._ids

    def set_pumps(self, pumps: Sequence[Candidate]) -> None:
        ids = tuple(sorted(p.node_id for p in pumps))
        if ids != self._ids:
            self._ids = ids
            self._offset = 0

    def select(self, start_ts: int, retry: int) -> str | None:
        if not self._ids:
            return None
        if self._offset >= len(self._ids):
            self._offset = 0
        node_id = self._ids[self._offset]
        self._offset += 1
        return node_id


class HashSelector:
    """sorted_node_ids[(start_ts + retry) % n]."""

    def __init__(self) -> None:
        self._ids: tuple[str, ...] = ()

    def set_pumps(self, pumps: Sequence[Candidate]) -> None:
        self._ids = tuple(sorted(p.node_id for p in pumps))

    def select(self, start_ts: int, retry: int) -> str | None:
        if not self._ids:
            return None
        return self._ids[(start_ts + retry) % len(self._ids)]


class ScoreSelector:
    """Weighted random choice by published score; round robin when no score is positive."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._ids: tuple[str, ...] = ()
        self._cumulative: list[float] = []
        self._fallback = RangeSelector()
        self._weighted = False

    def set_pumps(self, pumps: Sequence[Candidate]) -> None:
        ordered = sorted(pumps, key=lambda p: p.node_id)
        self._ids = tuple(p.node_id for p in ordered)
        self._fallback.set_pumps(ordered)
        self._weighted = any(p.score > 0 for p in ordered)
        total = 0.0
        self._cumulative = []
        for p in ordered:
            total += weight(p.score)
            self._cumulative.append(total)

    def weights(self) -> dict[str, float]:
        """The probability of each pump being picked (for logs and tests)."""
        if not self._ids:
            return {}
        if not self._weighted:
            return dict.fromkeys(self._ids, 1.0 / len(self._ids))
        total = self._cumulative[-1]
        previous = 0.0
        out: dict[str, float] = {}
        for node_id, upto in zip(self._ids, self._cumulative, strict=True):
            out[node_id] = (upto - previous) / total
            previous = upto
        return out

    def select(self, start_ts: int, retry: int) -> str | None:
        if not self._ids:
            return None
        if not self._weighted:
            return self._fallback.select(start_ts, retry)
        point = self._rng.random() * self._cumulative[-1]
        index = bisect.bisect_right(self._cumulative, point)
        return self._ids[min(index, len(self._ids) - 1)]


def weight(score: int) -> float:
    """The weight of a published score in the `score` strategy."""
    return float(score) if score > 0 else TINY_WEIGHT


def make_selector(strategy: str, *, rng: random.Random | None = None) -> Selector:
    """The selector for a strategy name; ConfigError for an unknown one (the original fell back to range)."""
    if strategy == RANGE:
        return RangeSelector()
    if strategy == HASH:
        return HashSelector()
    if strategy == SCORE:
        return ScoreSelector(rng)
    raise ConfigError(f"unknown pump client strategy {strategy!r}: expected one of {', '.join(STRATEGIES)}")
