"""Name the pump that holds the merge back (docs/architecture.md#merger).

The merge emits a binlog only when every source (pump) has one: a pump the drainer cannot hear from
(paused by SIGSTOP, crashed, unreachable) stops replication for all, as in the original.  A healthy pump
always delivers: an idle one writes a fake binlog every few seconds.  So a source the merge waits for
that delivered nothing for longer than `pump-stall-report-after` is *stalled*, and the operator is told
which one: in `/status` (`stalled_pumps`), in the metrics (`binlog_drainer_pump_stalled_seconds`,
`binlog_drainer_pump_stalled`), in the log (WARN once when a stall starts, INFO when it clears) and in
`binlogctl -cmd drainers`.  A pump marked offline leaves the merge and is never reported.

`StallMonitor` only reads the merger; it changes nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from drainer.merger import Merger

log = logging.getLogger(__name__)

DEFAULT_STALL_REPORT_AFTER: Final = 30.0
"""Seconds without a binlog from the pump the merge waits for before it is reported as stalled."""


@dataclass(frozen=True, slots=True)
class StalledPump:
    """A pump the merge waits for that delivered nothing for `seconds`."""

    node_id: str
    addr: str
    since: float
    """Unix time of its last delivery (or of its joining the merge, if it never delivered)."""
    seconds: float
    last_ts: int
    """The last commit_ts received from it (0: none since the drainer started)."""

    def to_json(self) -> dict[str, object]:
        return {
            "node_id": self.node_id,
            "addr": self.addr,
            "since": round(self.since, 3),
            "seconds": round(self.seconds, 3),
            "last_ts": self.last_ts,
        }


class StallMonitor:
    """Finds stalled pumps in a `Merger`; `check()` also logs when a stall starts and when it clears.

    `clock` must be the merger's clock (monotonic by default); `wall` gives unix time for `since`.
    `addrs` maps node ids to pump addresses (the collector's pullers)."""

    def __init__(
        self,
        merger: Merger,
        report_after: float = DEFAULT_STALL_REPORT_AFTER,
        *,
        addrs: Callable[[], dict[str, str]] = dict,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not report_after > 0:
            raise ValueError(f"report_after must be > 0, not {report_after}")
        self._merger = merger
        self.report_after = report_after
        self._addrs = addrs
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._reported: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> list[StalledPump]:
        """The stalled pumps now, by node id; logs the stalls that started or cleared since the last check."""
        now, wall = self._clock(), self._wall()
        try:
            addrs = self._addrs()
        except Exception:  # a closing collector: report without addresses
            addrs = {}
        stalled = []
        for node_id, delivered_at, last_ts in self._merger.waiting_for():
            seconds = now - delivered_at
            if seconds > self.report_after:
                stalled.append(StalledPump(node_id, addrs.get(node_id, ""), wall - seconds, seconds, last_ts))
        stalled.sort(key=lambda p: p.node_id)
        with self._lock:
            names = {p.node_id for p in stalled}
            started, cleared = names - self._reported, self._reported - names
            self._reported = names
        for p in stalled:
            if p.node_id in started:
                log.warning(
                    "pump %s (%s) holds the merge back: nothing received from it for %.1fs (last commit_ts=%d); "
                    "replication waits until it delivers again or is marked offline",
                    p.node_id,
                    p.addr,
                    p.seconds,
                    p.last_ts,
                )
        for node_id in sorted(cleared):
            log.info("pump %s no longer holds the merge back", node_id)
        return stalled

    def stalled_seconds(self) -> dict[str, float]:
        """node_id -> seconds the pump has been stalled for, 0 for every other merge source (metrics)."""
        stalled = {p.node_id: p.seconds for p in self.check()}
        return {node_id: stalled.get(node_id, 0.0) for node_id in self._merger.source_ids()}

    # ------------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Check on a thread, often enough that a stall is logged within a quarter of `report_after`."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="drainer-stall-monitor", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        interval = min(1.0, self.report_after / 4)
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:
                log.exception("stall monitor: check failed")

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(5.0)
