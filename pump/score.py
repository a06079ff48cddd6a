"""The routing score a pump publishes in its registry status (`score`, 0..100).

The pump client's `score` strategy picks pumps at random with the published scores as weights, so a pump
with a slow disk or little free space gets less traffic.  (The original published 0 and its client's
`score` strategy was a stub.)

    available <= stop_write_at                        -> 0   (the pump refuses writes: no space)
    disk    = min(1, (available - stop_write_at) / max(stop_write_at, DISK_REFERENCE_MIN))
    latency = LATENCY_REFERENCE / (LATENCY_REFERENCE + ewma)              (1 before any write batch)
    score   = max(1, round(100 * disk * latency))

`ewma` is the exponentially weighted moving average (weight EWMA_ALPHA per sample) of the storage's
group-commit batch time, value-log write + fdatasync, in seconds (`StorageMetrics.write_batch` feeds
it).  With the defaults (stop-write-at-available-space 10 GiB, LATENCY_REFERENCE 20 ms):

    free 50 GiB, batches 2 ms    -> disk 1.0, latency 0.91 -> 91
    free 50 GiB, batches 20 ms   -> disk 1.0, latency 0.5  -> 50
    free 15 GiB, batches 2 ms    -> disk 0.5, latency 0.91 -> 45
    free 10 GiB                  -> 0

A pump that can still write never publishes less than 1, so it keeps getting a little traffic and its
latency estimate stays fresh (idle pumps also write a fake binlog every few seconds).  Only an `online`
pump publishes a score; every other state publishes 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from pump.storage.api import StorageStatus

MAX_SCORE: Final = 100
LATENCY_REFERENCE: Final = 0.020
"""Seconds of batch write+fsync at which the latency factor is 1/2."""
DISK_REFERENCE_MIN: Final = 1 << 30
"""Free space above the threshold at which the disk factor reaches 1, when the threshold is smaller."""
EWMA_ALPHA: Final = 0.2
"""Weight of the newest batch in the latency average."""


def compute_score(available_bytes: int, stop_write_at: int, write_seconds: float | None) -> int:
    """The score (0..100) for this free space, threshold and average batch time (None: no batch yet)."""
    if available_bytes <= stop_write_at:
        return 0
    disk = min(1.0, (available_bytes - stop_write_at) / max(stop_write_at, DISK_REFERENCE_MIN))
    latency = 1.0 if write_seconds is None else LATENCY_REFERENCE / (LATENCY_REFERENCE + max(0.0, write_seconds))
    return max(1, min(MAX_SCORE, round(MAX_SCORE * disk * latency)))


class LatencyEWMA:
    """Thread-safe exponentially weighted moving average of durations in seconds."""

    def __init__(self, alpha: float = EWMA_ALPHA) -> None:
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self._alpha = alpha
        self._lock = threading.Lock()
        self._value: float | None = None

    def observe(self, seconds: float) -> None:
        with self._lock:
            if self._value is None:
                self._value = seconds
            else:
                self._value += self._alpha * (seconds - self._value)

    @property
    def value(self) -> float | None:
        """The average, or None before the first sample."""
        with self._lock:
            return self._value


class PumpScore:
    """`() -> int`: the current score of a pump, from its storage status and write latency."""

    def __init__(self, latency: LatencyEWMA, status: Callable[[], StorageStatus], stop_write_at: int) -> None:
        self._latency = latency
        self._status = status
        self._stop_write_at = stop_write_at

    def __call__(self) -> int:
        return compute_score(self._status().available_bytes, self._stop_write_at, self._latency.value)
