"""Packed DATE/DATETIME/TIMESTAMP and TIME as nanoseconds."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec.mytime import (
    ZERO_TIME,
    MysqlTime,
    duration_to_ns,
    format_duration,
    format_time,
    ns_to_duration,
    pack_time,
    round_duration,
    round_fsp,
    unpack_date,
    unpack_datetime,
    unpack_fields,
)
from common.errors import CodecError

FAST = settings(max_examples=200, deadline=None, database=None)
MAX_TIME_US = (838 * 3600 + 59 * 60 + 59) * 1_000_000 + 999_999


@FAST
@given(st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999999)))
def test_datetime_round_trip(value: dt.datetime) -> None:
    packed = pack_time(value)
    assert 0 < packed < 1 << 63
    assert unpack_datetime(packed) == value


@FAST
@given(st.dates())
def test_date_round_trip(value: dt.date) -> None:
    assert unpack_date(pack_time(value)) == value


@FAST
@given(st.datetimes(), st.datetimes())
def test_packed_order_matches_time_order(a: dt.datetime, b: dt.datetime) -> None:
    assert (pack_time(a) < pack_time(b)) == (a < b)


def test_known_packing() -> None:
    assert pack_time(dt.datetime(2019, 1, 2, 3, 4, 5, 6)) == 1847043405759119366
    assert unpack_fields(1847043405759119366) == MysqlTime(2019, 1, 2, 3, 4, 5, 6)


def test_zero_date() -> None:
    assert pack_time(ZERO_TIME) == 0
    assert unpack_datetime(0) is ZERO_TIME
    assert unpack_date(0) is ZERO_TIME
    assert str(ZERO_TIME) == "0000-00-00 00:00:00"
    assert format_time(ZERO_TIME, 6) == "0000-00-00 00:00:00.000000"


@pytest.mark.parametrize(
    "fields",
    [MysqlTime(2019, 0, 0), MysqlTime(2019, 2, 30, 1, 2, 3), MysqlTime(0, 1, 1), MysqlTime(2019, 4, 31, 0, 0, 0, 5)],
)
def test_dates_python_cannot_hold(fields: MysqlTime) -> None:
    packed = pack_time(fields)
    assert unpack_datetime(packed) == fields


@pytest.mark.parametrize(
    "packed",
    [
        pack_time(MysqlTime(2019, 1, 1)) | (24 << 36),  # hour 24
        pack_time(MysqlTime(2019, 1, 1)) | (60 << 24),  # second 60
        pack_time(MysqlTime(2019, 1, 1)) | 1_000_000,  # microsecond overflow
        -1,
        1 << 63,
    ],
)
def test_bad_packed_values(packed: int) -> None:
    with pytest.raises(CodecError):
        unpack_datetime(packed)


def test_pack_refuses_bad_fields() -> None:
    with pytest.raises(CodecError):
        pack_time(MysqlTime(2019, 13, 1))
    with pytest.raises(CodecError):
        pack_time("2019-01-01")  # type: ignore[arg-type]


@FAST
@given(st.datetimes(max_value=dt.datetime(9999, 12, 31, 23, 59, 58)), st.integers(0, 6))
def test_round_fsp(value: dt.datetime, fsp: int) -> None:
    rounded = round_fsp(value, fsp)
    unit = 10 ** (6 - fsp)
    assert rounded.microsecond % unit == 0
    assert abs((rounded - value) / dt.timedelta(microseconds=1)) <= unit / 2


def test_round_fsp_half_up_carries() -> None:
    assert round_fsp(dt.datetime(2019, 12, 31, 23, 59, 59, 999500), 3) == dt.datetime(2020, 1, 1)
    assert round_fsp(dt.datetime(2019, 1, 1, 0, 0, 0, 123456), 3) == dt.datetime(2019, 1, 1, 0, 0, 0, 123000)
    assert round_fsp(dt.datetime(2019, 1, 1, 0, 0, 0, 123500), 3) == dt.datetime(2019, 1, 1, 0, 0, 0, 124000)


@FAST
@given(st.integers(-MAX_TIME_US, MAX_TIME_US))
def test_duration_round_trip(us: int) -> None:
    td = dt.timedelta(microseconds=us)
    ns = duration_to_ns(td)
    assert ns == us * 1000
    assert ns_to_duration(ns) == td


def test_duration_truncates_sub_microseconds_toward_zero() -> None:
    assert ns_to_duration(-1999) == dt.timedelta(microseconds=-1)
    assert ns_to_duration(1999) == dt.timedelta(microseconds=1)


def test_round_duration() -> None:
    assert round_duration(dt.timedelta(microseconds=-1500), 3) == dt.timedelta(microseconds=-2000)
    assert round_duration(dt.timedelta(microseconds=1499), 3) == dt.timedelta(microseconds=1000)
    assert round_duration(dt.timedelta(seconds=1), 0) == dt.timedelta(seconds=1)


def test_formatting() -> None:
    assert format_duration(-dt.timedelta(hours=1)) == "-01:00:00"
    assert format_duration(dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=5), 6) == "838:59:59.000005"
    assert format_time(dt.datetime(2019, 1, 2, 3, 4, 5, 6), 6) == "2019-01-02 03:04:05.000006"
    assert format_time(dt.datetime(2019, 1, 2, 3, 4, 5, 6)) == "2019-01-02 03:04:05"
    assert format_time(dt.date(19, 1, 2)) == "0019-01-02"
    assert str(MysqlTime(2019, 2, 30, 1, 2, 3, 4)) == "2019-02-30 01:02:03.000004"
