"""Durations and byte sizes as config values.

Annotate a field with `Duration` (a float of seconds) or `ByteSize` (an int of bytes) and the loader accepts,
besides plain numbers, the strings the original Go configs use:

    Duration   "3s", "500ms", "1m30s", "10m", "1.5h", "250us", "0"   (Go's time.ParseDuration units:
               ns, us / µs, ms, s, m, h; several parts may follow each other) or a number of seconds.
    ByteSize   "500MiB", "10MB", "1G", "4096", "64 KiB"   (units B, K, M, G, T, P, each optionally followed
               by "B" or "iB", case-insensitive) or a number of bytes.

Every size unit is binary: "10MB" and "10MiB" are both 10 * 1024 * 1024 bytes, as in TiKV's readable sizes.

The parse functions raise ValueError (like int()); the loader turns that into a ConfigError naming the key.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Annotated, Final


class _Unit:
    """Marker placed in `Annotated[...]` to tag a number with a unit."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<config unit {self.name}>"


DURATION_UNIT: Final = _Unit("duration")
SIZE_UNIT: Final = _Unit("size")

Duration = Annotated[float, DURATION_UNIT]
"""A duration in seconds; config files may say "3s", "500ms", "1m30s" or a number of seconds."""

ByteSize = Annotated[int, SIZE_UNIT]
"""A size in bytes; config files may say "500MiB", "10MB", "1G" or a number of bytes."""

_NS_PER_UNIT: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign
    "μs": 1_000,  # U+03BC greek mu
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_NS_PER_SECOND: Final = 1_000_000_000
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([a-zµμ]+)")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")

_BYTES_PER_UNIT: Final[dict[str, int]] = {
    "": 1,
    "k": 1 << 10,
    "m": 1 << 20,
    "g": 1 << 30,
    "t": 1 << 40,
    "p": 1 << 50,
}
_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(?:i?b)?|b)?", re.IGNORECASE)


def parse_duration(value: str | float) -> float:
    """Seconds in a Go-style duration string ("1m30s") or a number of seconds.

    Raises ValueError for anything else, including bools and non-finite numbers.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite duration")
        return float(value)
    text = value.strip()
    if _PLAIN_NUMBER.fullmatch(text):
        return float(text)
    sign = 1
    if text and text[0] in "+-":
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    total = Fraction(0)
    pos = 0
    while pos < len(text):
        part = _DURATION_PART.match(text, pos)
        if part is None:
            raise ValueError(f"{value!r} is not a duration (expected e.g. '3s', '500ms', '1m30s')")
        number, unit = part.groups()
        if unit not in _NS_PER_UNIT:
            raise ValueError(f"{value!r} is not a duration: unknown unit {unit!r} (use ns, us, ms, s, m, h)")
        total += Fraction(number) * _NS_PER_UNIT[unit]
        pos = part.end()
    if pos == 0:
        raise ValueError(f"{value!r} is not a duration (expected e.g. '3s', '500ms', '1m30s')")
    return float(sign * total / _NS_PER_SECOND)


def format_duration(seconds: float) -> str:
    """Render seconds the way Go prints a time.Duration: "1m30s", "500ms", "1h0m0s", "0s"."""
    ns = round(seconds * _NS_PER_SECOND)
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    if ns == 0:
        return "0s"
    if ns < 1_000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_decimal(ns, 1_000)}us"
    if ns < _NS_PER_SECOND:
        return f"{sign}{_decimal(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, _NS_PER_UNIT["h"])
    minutes, rest = divmod(rest, _NS_PER_UNIT["m"])
    secs = _decimal(rest, _NS_PER_SECOND)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def _decimal(value: int, unit: int) -> str:
    """`value / unit` as an exact decimal without trailing zeros (unit is a power of ten)."""
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def parse_size(value: str | int) -> int:
    """Bytes in a size string ("500MiB", "10MB", "1G") or a non-negative integer.

    Raises ValueError for anything else, including bools, floats, negative numbers and fractions of a byte.
    """
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a size")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{value!r} is not a size: negative")
        return value
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a size (expected e.g. '500MiB', '10MB', '1G' or a number of bytes)")
    number, unit = match.groups()
    total = Fraction(number) * _BYTES_PER_UNIT[(unit or "").lower()]
    if total.denominator != 1:
        raise ValueError(f"{value!r} is not a whole number of bytes")
    return int(total)
