"""TSO (timestamp oracle) arithmetic.

A TSO is a 64-bit integer: ``physical_ms << 18 | logical``.

    bits 63..18  physical: milliseconds since the Unix epoch
    bits 17..0   logical:  counter within one millisecond (0 .. 262143)

All binlog ts fields carry these values in int64.
"""

from __future__ import annotations

import datetime as _dt
import time

LOGICAL_BITS = 18
MAX_LOGICAL = 1 << LOGICAL_BITS  # logical must stay below this
_LOGICAL_MASK = MAX_LOGICAL - 1


def compose(physical_ms: int, logical: int) -> int:
    """Build a TSO from its physical (ms) and logical parts."""
    if not 0 <= logical < MAX_LOGICAL:
        raise ValueError(f"logical part {logical} out of range 0..{MAX_LOGICAL - 1}")
    if physical_ms < 0:
        raise ValueError(f"physical part {physical_ms} is negative")
    return (physical_ms << LOGICAL_BITS) | logical


def physical(ts: int) -> int:
    """Milliseconds since the Unix epoch of a TSO."""
    return ts >> LOGICAL_BITS


def logical(ts: int) -> int:
    """Logical counter of a TSO."""
    return ts & _LOGICAL_MASK


def to_datetime(ts: int, tz: _dt.tzinfo = _dt.UTC) -> _dt.datetime:
    """The wall-clock time of a TSO (millisecond precision), in `tz` (UTC by default)."""
    return _dt.datetime.fromtimestamp(physical(ts) / 1000, tz=tz)


def from_datetime(when: _dt.datetime, logical_part: int = 0) -> int:
    """The TSO of a wall-clock time (naive datetimes are taken as local time)."""
    return compose(int(when.timestamp() * 1000), logical_part)


def now_ms() -> int:
    """The current wall-clock time in milliseconds."""
    return time.time_ns() // 1_000_000


def lag_seconds(ts: int, now: float | None = None) -> float:
    """Seconds between a TSO and now (positive when the TSO is in the past)."""
    current = time.time() if now is None else now
    return current - physical(ts) / 1000
