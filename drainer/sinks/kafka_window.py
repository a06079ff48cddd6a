"""The Kafka sink's pure core: which transactions are acknowledged, in order, and when to warn or give up.

No threads, no clock of its own, no I/O: `drainer.sinks.kafka` calls it under its lock.

`AckWindow` is a FIFO of the transactions added, each an `Entry(commit_ts, pending messages, bytes)`.
A transaction with n messages is complete once all n are acknowledged by the broker; an empty one
(a fake binlog, a filtered transaction: no message) is complete at once.  `pop_ready()` hands out the
commit_ts of complete entries at the head only, so commit_ts are reported in the order added even when
acknowledgements arrive out of order, and never past an entry still waiting.  A message that failed
marks its entry failed: it never completes, so nothing after it is reported.

Byte budget: `has_room(size)` is true while the unacknowledged bytes plus `size` fit the budget, or
nothing is unacknowledged (one transaction larger than the budget goes alone, so nothing waits forever).

`Watchdog` decides, at each tick, between nothing, a WARNING (every `warn_interval` while messages are
pending and none was acknowledged for that long) and a failure (`ack_timeout` without any
acknowledgement while messages are pending).  Its clock restarts at every acknowledgement and when a
message is added to a window with nothing pending (as the original's `lastSuccessTime`).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_WARN_INTERVAL",
    "AckWindow",
    "Entry",
    "KafkaStats",
    "Verdict",
    "Watchdog",
]

DEFAULT_WARN_INTERVAL: Final = 30.0


class Entry:
    """One added transaction: its messages not yet acknowledged and their bytes."""

    __slots__ = ("bytes", "commit_ts", "error", "pending")

    def __init__(self, commit_ts: int, pending: int, size: int) -> None:
        self.commit_ts = commit_ts
        self.pending = pending
        self.bytes = size
        self.error: str | None = None

    def __repr__(self) -> str:
        return f"Entry(commit_ts={self.commit_ts}, pending={self.pending}, bytes={self.bytes}, error={self.error!r})"


@dataclass(frozen=True, slots=True)
class KafkaStats:
    """The sink's numbers, for /status and the metrics."""

    topic: str
    messages: int
    """Messages acknowledged since start."""
    bytes: int
    """Bytes of the acknowledged messages' values."""
    pending_messages: int
    pending_bytes: int
    acked_commit_ts: int
    """The last commit_ts reported: it and everything before it are acknowledged (0: none yet)."""

    def to_json(self) -> dict[str, object]:
        return {
            "topic": self.topic,
            "messages": self.messages,
            "bytes": self.bytes,
            "pending_messages": self.pending_messages,
            "pending_bytes": self.pending_bytes,
            "acked_commit_ts": self.acked_commit_ts,
        }


class AckWindow:
    """See the module doc.  Not thread-safe: the caller holds a lock."""

    def __init__(self, budget: int) -> None:
        self.budget = max(1, budget)
        self._entries: deque[Entry] = deque()
        self.pending_messages = 0
        self.pending_bytes = 0
        self.acked_messages = 0
        self.acked_bytes = 0
        self.last_reported = 0

    def __len__(self) -> int:
        return len(self._entries)

    def has_room(self, size: int) -> bool:
        return self.pending_bytes == 0 or self.pending_bytes + size <= self.budget

    def append(self, commit_ts: int, sizes: list[int]) -> Entry:
        """A transaction of messages of `sizes` bytes (none for an empty one), after every one added so far."""
        if self._entries and commit_ts <= self._entries[-1].commit_ts:
            raise ValueError(f"commit_ts={commit_ts} added after commit_ts={self._entries[-1].commit_ts}")
        size = sum(sizes)
        entry = Entry(commit_ts, len(sizes), size)
        self._entries.append(entry)
        self.pending_messages += len(sizes)
        self.pending_bytes += size
        return entry

    def acked(self, entry: Entry, size: int) -> None:
        """One message of `size` bytes of `entry` is acknowledged."""
        if entry.pending <= 0:
            raise ValueError(f"more acknowledgements than messages for commit_ts={entry.commit_ts}")
        entry.pending -= 1
        self.pending_messages -= 1
        self.pending_bytes -= size
        self.acked_messages += 1
        self.acked_bytes += size

    def failed(self, entry: Entry, why: str) -> None:
        """A message of `entry` will never be acknowledged: the entry (and all after it) is never reported."""
        if entry.error is None:
            entry.error = why

    def pop_ready(self) -> list[int]:
        """The commit_ts of the complete entries at the head, removed, in order."""
        out: list[int] = []
        entries = self._entries
        while entries and entries[0].pending == 0 and entries[0].error is None:
            out.append(entries.popleft().commit_ts)
        if out:
            self.last_reported = out[-1]
        return out

    def oldest_pending(self) -> int | None:
        """The commit_ts of the first entry not yet complete, or None."""
        for e in self._entries:
            if e.pending or e.error is not None:
                return e.commit_ts
        return None

    def stats(self, topic: str) -> KafkaStats:
        return KafkaStats(
            topic=topic,
            messages=self.acked_messages,
            bytes=self.acked_bytes,
            pending_messages=self.pending_messages,
            pending_bytes=self.pending_bytes,
            acked_commit_ts=self.last_reported,
        )


class Verdict(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


class Watchdog:
    """See the module doc.  Times are seconds of one monotonic clock, passed in."""

    def __init__(self, ack_timeout: float, warn_interval: float = DEFAULT_WARN_INTERVAL) -> None:
        self.ack_timeout = ack_timeout
        self.warn_interval = warn_interval
        self.last_progress = 0.0
        self._last_warn = 0.0

    def sent(self, now: float, pending_before: int) -> None:
        """A message was handed to the producer; `pending_before` messages were unacknowledged before it."""
        if pending_before == 0:
            self.last_progress = now

    def acked(self, now: float) -> None:
        self.last_progress = now

    def silent_for(self, now: float) -> float:
        return now - self.last_progress

    def tick(self, now: float, pending: int) -> Verdict:
        if pending == 0:
            return Verdict.OK
        silent = now - self.last_progress
        if silent >= self.ack_timeout:
            return Verdict.FAIL
        if silent >= self.warn_interval and now - max(self.last_progress, self._last_warn) >= self.warn_interval:
            self._last_warn = now
            return Verdict.WARN
        return Verdict.OK
