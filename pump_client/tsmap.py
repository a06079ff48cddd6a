"""start_ts -> node id of the pump that took the prewrite (thread-safe, bounded).

Set after a successful prewrite, removed when the commit or rollback is sent: the commit must go to
the same pump (the pump pairs them).  The original kept this map in a package global without a bound;
here it lives on the client and holds at most `max_entries`.  On overflow the oldest entry is evicted
with a warning: its commit will then find no pump and is dropped (logged), and the pump's resolver
decides that transaction from the upstream's transaction-status store.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict

log = logging.getLogger(__name__)

DEFAULT_MAX_TRACKED_TXNS = 1_000_000
"""Prewrites awaiting their commit the client remembers (~100 bytes each)."""
_WARN_EVERY = 10_000


class StartTsMap:
    def __init__(self, max_entries: int = DEFAULT_MAX_TRACKED_TXNS) -> None:
        if max_entries < 1:
            raise ValueError(f"max_tracked_txns must be >= 1, got {max_entries}")
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._map: OrderedDict[int, str] = OrderedDict()
        self.evicted = 0

    def set(self, start_ts: int, node_id: str) -> None:
        evicted: list[tuple[int, str]] = []
        with self._lock:
            self._map[start_ts] = node_id
            self._map.move_to_end(start_ts)
            while len(self._map) > self.max_entries:
                evicted.append(self._map.popitem(last=False))
            self.evicted += len(evicted)
            total = self.evicted
        first = total - len(evicted) + 1
        for count, (old_ts, old_node) in enumerate(evicted, start=first):
            if count == 1 or count % _WARN_EVERY == 0:  # the first, then one line per 10,000
                log.warning(
                    "start_ts map full (%d entries): forgot start_ts=%d (node_id=%s); its commit will be "
                    "dropped and left to the pump's resolver (%d forgotten so far)",
                    self.max_entries,
                    old_ts,
                    old_node,
                    count,
                )

    def pop(self, start_ts: int) -> str | None:
        with self._lock:
            return self._map.pop(start_ts, None)

    def get(self, start_ts: int) -> str | None:
        with self._lock:
            return self._map.get(start_ts)

    def __len__(self) -> int:
        with self._lock:
            return len(self._map)
