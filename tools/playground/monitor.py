"""Live progress of a playground: what the pumps stored, where the drainer is, on one screen.

Readings come over HTTP: each pump's ``GET /status`` (``Checkpoint.writeCount``: binlogs
stored by this pump process, fake ones included), the drainer's ``GET /commit_ts`` (its saved
checkpoint) and ``GET /metrics`` (``binlog_drainer_event{type}``: rows and DDLs handed to
the sink).  Lag is the wall clock minus the physical time of the checkpoint TSO; the drainer
saves its checkpoint every 3 s, so the lag shown is up to that much above the replication lag.

On a terminal the progress is a block of lines rewritten in place; elsewhere (a pipe, CI) it
is one plain line every few seconds.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, TextIO

from common import tso
from upstream import Snapshot, percentile

HTTP_TIMEOUT = 2.0
PLAIN_INTERVAL = 5.0
"""Seconds between progress lines when the output is not a terminal."""
EVENT_TYPES = ("Insert", "Update", "Delete", "DDL")
_EVENT = re.compile(r'^binlog_drainer_event\{type="(\w+)"\}\s+([0-9.eE+]+)\s*$', re.MULTILINE)


def parse_events(metrics_text: str) -> dict[str, int]:
    """``binlog_drainer_event`` by type from Prometheus text (types never seen are absent)."""
    return {m.group(1): int(float(m.group(2))) for m in _EVENT.finditer(metrics_text)}


def lag_seconds(ts: int, wall: float) -> float | None:
    """Seconds the TSO `ts` is behind the wall clock `wall`; None before the first checkpoint."""
    return None if ts <= 0 else max(0.0, wall - tso.physical(ts) / 1000)


def clock(ts: int) -> str:
    """The local wall-clock time of a TSO, to the millisecond."""
    when = datetime.datetime.fromtimestamp(tso.physical(ts) / 1000)
    return when.strftime("%H:%M:%S.%f")[:-3]


def http_get(addr: str, path: str, timeout: float = HTTP_TIMEOUT) -> bytes:
    with urllib.request.urlopen(f"http://{addr}{path}", timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


@dataclass(frozen=True)
class PumpReading:
    name: str
    binlogs: int | None
    """None when the pump did not answer."""


@dataclass(frozen=True)
class Reading:
    wall: float
    mono: float
    pumps: tuple[PumpReading, ...]
    checkpoint: int | None
    """The drainer's saved checkpoint TSO; None when it did not answer."""
    events: dict[str, int] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(self.events.get(t, 0) for t in ("Insert", "Update", "Delete"))

    @property
    def lag(self) -> float | None:
        return None if self.checkpoint is None else lag_seconds(self.checkpoint, self.wall)


def read_pump(name: str, status_addr: str) -> PumpReading:
    try:
        doc: Any = json.loads(http_get(status_addr, "/status"))
        return PumpReading(name, int(doc["Checkpoint"]["writeCount"]))
    except (OSError, ValueError, KeyError, TypeError):
        return PumpReading(name, None)


def read_drainer(status_addr: str) -> tuple[int | None, dict[str, int]]:
    try:
        ts = int(json.loads(http_get(status_addr, "/commit_ts"))["data"]["ts"])
    except (OSError, ValueError, KeyError, TypeError):
        return None, {}
    try:
        events = parse_events(http_get(status_addr, "/metrics").decode(errors="replace"))
    except OSError:
        events = {}
    return ts, events


def take_reading(pumps: list[tuple[str, str]], drainer_status: str) -> Reading:
    """Ask every pump (name, status address) and the drainer."""
    readings = tuple(read_pump(name, addr) for name, addr in pumps)
    checkpoint, events = read_drainer(drainer_status)
    return Reading(time.time(), time.monotonic(), readings, checkpoint, events)


@dataclass
class LagStats:
    samples: list[float] = field(default_factory=list)

    def add(self, lag: float | None) -> None:
        if lag is not None:
            self.samples.append(lag)

    def p50(self) -> float:
        return percentile(sorted(self.samples), 0.5)

    def max(self) -> float:
        return max(self.samples) if self.samples else math.nan


def secs(value: float | None) -> str:
    """Seconds with one decimal, "-" for no value."""
    return "-" if value is None or math.isnan(value) else f"{value:.1f}s"


def rate(now: Reading, before: Reading | None) -> float | None:
    """Rows per second handed to the sink between two readings."""
    if before is None or now.mono <= before.mono:
        return None
    return (now.rows - before.rows) / (now.mono - before.mono)


def progress_lines(
    elapsed: float, snap: Snapshot, snap_before: Snapshot | None, now: Reading, before: Reading | None
) -> list[str]:
    """The live block: upstream, pumps, drainer (pure)."""
    txn_rate = snap.txn_per_s
    if snap_before is not None and snap.elapsed > snap_before.elapsed:
        txn_rate = (snap.committed - snap_before.committed) / (snap.elapsed - snap_before.elapsed)
    up = f"{snap.committed} txns committed  {txn_rate:.1f} txn/s  {snap.failed} failed  {snap.retried} retried" + (
        f"  {snap.ddl} ddl" if snap.ddl else ""
    )
    pumps = "  ".join(f"{p.name} {'down' if p.binlogs is None else p.binlogs}" for p in now.pumps)
    if now.checkpoint is None:
        drainer = "not answering"
    else:
        r = rate(now, before)
        where = clock(now.checkpoint) if now.checkpoint > 0 else "none yet"
        drainer = (
            f"checkpoint {where}  lag {secs(now.lag)}  "
            f"{'-' if r is None else f'{r:.0f}'} rows/s applied  ({now.rows} rows in all)"
        )
    return [
        f"{elapsed:7.1f}s  upstream  {up}",
        f"          pumps     {pumps}  binlogs stored",
        f"          drainer   {drainer}",
    ]


def plain_line(elapsed: float, snap: Snapshot, now: Reading, before: Reading | None) -> str:
    """The same, as one line for logs and pipes (pure)."""
    parts = [f"{elapsed:7.1f}s", f"txns {snap.committed} ({snap.txn_per_s:.1f}/s)"]
    parts.append("binlogs " + " ".join(f"{p.name}={'down' if p.binlogs is None else p.binlogs}" for p in now.pumps))
    r = rate(now, before)
    parts.append(f"lag {secs(now.lag)}")
    parts.append(f"rows {now.rows} ({'-' if r is None else f'{r:.0f}'}/s)")
    return "  ".join(parts)


class Screen:
    """A block of lines rewritten in place on a terminal; a plain line every few seconds elsewhere."""

    def __init__(self, stream: TextIO, *, tty: bool | None = None, plain_interval: float = PLAIN_INTERVAL) -> None:
        self.stream = stream
        self.tty = stream.isatty() if tty is None else tty
        self.plain_interval = plain_interval
        self._shown = 0
        self._last_plain = -math.inf

    def show(self, lines: list[str], plain: str, *, force: bool = False) -> None:
        if self.tty:
            up = f"\x1b[{self._shown}F" if self._shown else ""
            self.stream.write(up + "".join(f"{line}\x1b[K\n" for line in lines))
            self._shown = len(lines)
        elif force or time.monotonic() - self._last_plain >= self.plain_interval:
            self.stream.write(plain + "\n")
            self._last_plain = time.monotonic()
        self.stream.flush()

    def detach(self) -> None:
        """Leave the live block as it was last drawn; the next `show` starts a new one below it."""
        self._shown = 0

    def replace(self, text: str) -> None:
        """A permanent line in place of the live block (on a terminal; below it elsewhere)."""
        if self.tty and self._shown:
            self.stream.write(f"\x1b[{self._shown}F\x1b[J")
        self.say(text)

    def say(self, text: str) -> None:
        """A permanent line below the live block (which stays as it was last drawn)."""
        self.detach()
        self.stream.write(text + "\n")
        self.stream.flush()
