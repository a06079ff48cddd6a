"""MySQL DATE/DATETIME/TIMESTAMP packed as uint64, and TIME as nanoseconds.

Packed time (TiDB ``types.Time.ToPackedUint``; the zero date ``0000-00-00 00:00:00`` packs to 0)::

    ymd    = ((year * 13 + month) << 5) | day
    hms    = hour << 12 | minute << 6 | second
    packed = ((ymd << 17 | hms) << 24) | microsecond

    bits: 0YYYYYYY.YYYYYYYY.YYdddddh.hhhhmmmm.mmssssss.ffffffff.ffffffff.ffffffff
          (the 17 "Y" bits hold year*13+month)

In a row the packed value is a uvarint datum (``09 …``); TIMESTAMP values are in UTC.
2019-01-02 03:04:05.000006 packs to 1847043405759119366.

TIME (``types.Duration``) is an int64 count of nanoseconds, negative allowed (``-01:00:00`` is
-3_600_000_000_000); in a row it is a varint datum (``08 …``).  Python's :class:`datetime.timedelta`
has microsecond resolution, which covers fsp 0..6.

Values Python's ``datetime`` cannot hold (the zero date, zero month/day such as ``2019-00-00``,
year 0, or day 31 of a 30-day month allowed by ``ALLOW_INVALID_DATES``) decode to
:class:`MysqlTime`, a plain tuple of the fields.
"""

from __future__ import annotations

import datetime as _dt
from typing import NamedTuple

from common.errors import CodecError

MAX_FSP = 6
_NS_PER_US = 1000
_NS_PER_SEC = 1_000_000_000
_US_PER_SEC = 1_000_000
_USEC_MASK = (1 << 24) - 1
_HMS_MASK = (1 << 17) - 1


class MysqlTime(NamedTuple):
    """A MySQL date/time value that ``datetime`` cannot represent (e.g. the zero date)."""

    year: int
    month: int
    day: int
    hour: int = 0
    minute: int = 0
    second: int = 0
    microsecond: int = 0

    def __str__(self) -> str:
        return format_time(self, MAX_FSP if self.microsecond else 0)


ZERO_TIME = MysqlTime(0, 0, 0)

TimeValue = _dt.datetime | _dt.date | MysqlTime


def _pack(ymd: int, hms: int, microsecond: int) -> int:
    return (((ymd << 17) | hms) << 24) | microsecond


def pack_time(value: TimeValue) -> int:
    """Packed uint64 of a date, naive datetime (or its wall clock if aware) or :class:`MysqlTime`."""
    if isinstance(value, _dt.datetime):
        return _pack(
            ((value.year * 13 + value.month) << 5) | value.day,
            (value.hour << 12) | (value.minute << 6) | value.second,
            value.microsecond,
        )
    if isinstance(value, _dt.date):
        return _pack(((value.year * 13 + value.month) << 5) | value.day, 0, 0)
    if isinstance(value, MysqlTime):
        if not (
            0 <= value.year <= 9999
            and 0 <= value.month <= 12
            and 0 <= value.day <= 31
            and 0 <= value.hour <= 23
            and 0 <= value.minute <= 59
            and 0 <= value.second <= 59
            and 0 <= value.microsecond <= 999_999
        ):
            raise CodecError(f"time fields out of range: {value!r}")
        return _pack(
            ((value.year * 13 + value.month) << 5) | value.day,
            (value.hour << 12) | (value.minute << 6) | value.second,
            value.microsecond,
        )
    raise CodecError(f"cannot pack {type(value).__name__} as a MySQL time")


def unpack_fields(packed: int) -> MysqlTime:
    """Broken-down fields of a packed time (no validation)."""
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    ym = ymd >> 5
    hms = ymdhms & _HMS_MASK
    return MysqlTime(ym // 13, ym % 13, ymd & 31, hms >> 12, (hms >> 6) & 63, hms & 63, packed & _USEC_MASK)


def unpack_datetime(packed: int) -> _dt.datetime | MysqlTime:
    """A packed value as a naive ``datetime``; :class:`MysqlTime` when ``datetime`` cannot hold it."""
    if packed == 0:
        return ZERO_TIME
    if packed < 0 or packed >> 63:
        raise CodecError(f"packed time out of range: {packed}")
    ymdhms = packed >> 24
    ymd = ymdhms >> 17
    ym = ymd >> 5
    hms = ymdhms & _HMS_MASK
    year, month, day = ym // 13, ym % 13, ymd & 31
    hour, minute, second, usec = hms >> 12, (hms >> 6) & 63, hms & 63, packed & _USEC_MASK
    if hour > 23 or minute > 59 or second > 59 or usec > 999_999 or year > 9999:
        raise CodecError(f"packed time {packed} has out-of-range fields {unpack_fields(packed)!r}")
    try:
        return _dt.datetime(year, month, day, hour, minute, second, usec)
    except ValueError:
        return MysqlTime(year, month, day, hour, minute, second, usec)


def unpack_date(packed: int) -> _dt.date | MysqlTime:
    """A packed value as a ``date`` (time of day ignored); :class:`MysqlTime` for invalid dates."""
    if packed == 0:
        return ZERO_TIME
    if packed < 0 or packed >> 63:
        raise CodecError(f"packed time out of range: {packed}")
    ymd = packed >> 41
    ym = ymd >> 5
    year, month, day = ym // 13, ym % 13, ymd & 31
    if year > 9999:
        raise CodecError(f"packed time {packed} has out-of-range year {year}")
    try:
        return _dt.date(year, month, day)
    except ValueError:
        return MysqlTime(year, month, day)


def round_fsp(value: _dt.datetime, fsp: int) -> _dt.datetime:
    """Round microseconds half-up to ``fsp`` fractional digits (may carry into the seconds)."""
    if fsp >= MAX_FSP:
        return value
    unit = 10 ** (MAX_FSP - fsp)
    rem = value.microsecond % unit
    if not rem:
        return value
    value = value.replace(microsecond=value.microsecond - rem)
    if rem * 2 >= unit:
        try:
            value += _dt.timedelta(microseconds=unit)
        except OverflowError:
            raise CodecError(f"rounding {value} to fsp {fsp} overflows") from None
    return value


def duration_to_ns(value: _dt.timedelta) -> int:
    """Nanoseconds of a TIME value."""
    return ((value.days * 86400 + value.seconds) * _US_PER_SEC + value.microseconds) * _NS_PER_US


def ns_to_duration(ns: int) -> _dt.timedelta:
    """TIME value of a nanosecond count (sub-microsecond digits truncated toward zero)."""
    us = ns // _NS_PER_US if ns >= 0 else -((-ns) // _NS_PER_US)
    return _dt.timedelta(microseconds=us)


def round_duration(value: _dt.timedelta, fsp: int) -> _dt.timedelta:
    """Round a TIME half away from zero to ``fsp`` fractional digits."""
    if fsp >= MAX_FSP:
        return value
    unit = 10 ** (MAX_FSP - fsp)
    us = value // _dt.timedelta(microseconds=1)
    mag = abs(us)
    rem = mag % unit
    if not rem:
        return value
    mag = mag - rem + (unit if rem * 2 >= unit else 0)
    return _dt.timedelta(microseconds=mag if us >= 0 else -mag)


def format_time(value: TimeValue, fsp: int = 0) -> str:
    """MySQL text of a date/datetime with ``fsp`` fractional digits (``2019-01-02 03:04:05.000006``)."""
    if isinstance(value, MysqlTime):
        text = (
            f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value.hour:02d}:{value.minute:02d}:{value.second:02d}"
        )
        usec = value.microsecond
    elif isinstance(value, _dt.datetime):
        text = f"{value.year:04d}-{value.month:02d}-{value.day:02d} {value:%H:%M:%S}"
        usec = value.microsecond
    else:
        return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
    if fsp > 0:
        text += "." + f"{usec:06d}"[:fsp]
    return text


def format_duration(value: _dt.timedelta, fsp: int = 0) -> str:
    """MySQL text of a TIME (``-01:00:00``, ``838:59:59.000000``)."""
    us = value // _dt.timedelta(microseconds=1)
    sign = "-" if us < 0 else ""
    secs, usec = divmod(abs(us), _US_PER_SEC)
    hours, rest = divmod(secs, 3600)
    text = f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    if fsp > 0:
        text += "." + f"{usec:06d}"[:fsp]
    return text
