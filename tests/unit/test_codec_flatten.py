"""flatten/unflatten per column type, through the row bytes."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import (
    NULL,
    ZERO_TIME,
    ColumnType,
    Datum,
    Kind,
    MysqlTime,
    MySQLType,
    SizedDecimal,
    decode_row,
    encode_row,
    flatten,
    int_datum,
    to_float32,
    uint_datum,
    unflatten,
)
from common.errors import CodecError
from tests.unit.test_codec_json import json_values, same, sort_keys

FAST = settings(max_examples=100, deadline=None, database=None)
T = MySQLType

INT_RANGES = {
    T.TINY: 8,
    T.SHORT: 16,
    T.INT24: 24,
    T.LONG: 32,
    T.LONGLONG: 64,
}


def through_row(value: Any, ct: ColumnType, tz: dt.tzinfo = dt.UTC) -> Any:
    """flatten -> row bytes -> decode -> unflatten."""
    raw = encode_row([7], [flatten(value, ct, tz)])
    return unflatten(decode_row(raw)[7], ct, tz)


@st.composite
def int_cases(draw: st.DrawFn) -> tuple[ColumnType, int]:
    tp = draw(st.sampled_from(sorted(INT_RANGES)))
    bits = INT_RANGES[tp]
    unsigned = draw(st.booleans())
    if unsigned:
        value = draw(st.one_of(st.integers(0, 2**bits - 1), st.just(2**bits - 1)))
    else:
        value = draw(st.one_of(st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1), st.just(-(2 ** (bits - 1)))))
    return ColumnType(tp, unsigned=unsigned), value


@FAST
@given(int_cases())
def test_integers(case: tuple[ColumnType, int]) -> None:
    ct, value = case
    d = flatten(value, ct)
    assert d.kind == (Kind.UINT if ct.unsigned else Kind.INT)
    assert through_row(value, ct) == value


def test_year_is_int_datum() -> None:
    ct = ColumnType(T.YEAR, unsigned=True)
    assert flatten(2019, ct) == int_datum(2019)
    assert through_row(2019, ct) == 2019


def test_integer_extremes() -> None:
    assert through_row(2**64 - 1, ColumnType(T.LONGLONG, unsigned=True)) == 2**64 - 1
    assert through_row(-(2**63), ColumnType(T.LONGLONG)) == -(2**63)
    # unsigned PK handles arrive as their int64 bit pattern
    assert unflatten(int_datum(-1), ColumnType(T.LONGLONG, unsigned=True)) == 2**64 - 1
    with pytest.raises(CodecError):
        flatten(2**64, ColumnType(T.LONGLONG, unsigned=True))
    with pytest.raises(CodecError):
        flatten(2**63, ColumnType(T.LONGLONG))
    with pytest.raises(CodecError):
        flatten(-1, ColumnType(T.LONG, unsigned=True))
    with pytest.raises(CodecError):
        flatten("1", ColumnType(T.LONG))


@FAST
@given(st.floats(allow_nan=False, width=32))
def test_float_column_has_float32_semantics(value: float) -> None:
    ct = ColumnType(T.FLOAT)
    assert through_row(value, ct) == value


def test_float_column_rounds_to_float32() -> None:
    assert flatten(0.1, ColumnType(T.FLOAT)).value == to_float32(0.1) != 0.1
    assert through_row(0.1, ColumnType(T.DOUBLE)) == 0.1
    with pytest.raises(CodecError):
        flatten(1e300, ColumnType(T.FLOAT))


@FAST
@given(st.floats(allow_nan=False))
def test_double(value: float) -> None:
    assert through_row(value, ColumnType(T.DOUBLE)) == value


@st.composite
def decimal_cases(draw: st.DrawFn) -> tuple[ColumnType, Decimal]:
    flen = draw(st.integers(1, 65))
    dec = draw(st.integers(0, min(30, flen)))
    n = draw(st.integers(-(10**flen) + 1, 10**flen - 1))
    return ColumnType(T.NEW_DECIMAL, flen=flen, decimal=dec), Decimal(f"{n}E-{dec}")


@FAST
@given(decimal_cases())
def test_decimals(case: tuple[ColumnType, Decimal]) -> None:
    ct, value = case
    d = flatten(value, ct)
    assert d.value == SizedDecimal(value, ct.flen, ct.decimal)
    got = through_row(value, ct)
    assert got == value
    assert got.as_tuple().exponent == -ct.decimal


def test_decimal_inputs() -> None:
    ct = ColumnType(T.NEW_DECIMAL, flen=10, decimal=2)
    assert through_row(12, ct) == Decimal("12.00")
    assert through_row("12.345", ct) == Decimal("12.35")
    assert through_row(0.1, ct) == Decimal("0.10")
    assert flatten(Decimal("1.5"), ColumnType(T.NEW_DECIMAL)).value == SizedDecimal(Decimal("1.5"))


naive_datetimes = st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 58))


@FAST
@given(naive_datetimes, st.integers(0, 6))
def test_datetimes_every_fsp(value: dt.datetime, fsp: int) -> None:
    unit = 10 ** (6 - fsp)
    value = value.replace(microsecond=value.microsecond - value.microsecond % unit)
    assert through_row(value, ColumnType(T.DATETIME, decimal=fsp)) == value


@FAST
@given(naive_datetimes, st.integers(0, 6))
def test_datetime_rounds_to_fsp(value: dt.datetime, fsp: int) -> None:
    got = through_row(value, ColumnType(T.DATETIME, decimal=fsp))
    assert got.microsecond % 10 ** (6 - fsp) == 0
    assert abs(got - value) <= dt.timedelta(microseconds=10 ** (6 - fsp) // 2)


@FAST
@given(st.dates())
def test_dates(value: dt.date) -> None:
    assert through_row(value, ColumnType(T.DATE)) == value


def test_date_column_drops_time_of_day() -> None:
    assert through_row(dt.datetime(2019, 1, 2, 3, 4, 5), ColumnType(T.DATE)) == dt.date(2019, 1, 2)


@FAST
@given(
    st.datetimes(
        min_value=dt.datetime(1970, 1, 2),
        max_value=dt.datetime(2038, 1, 18),
        timezones=st.sampled_from([dt.UTC, dt.timezone(dt.timedelta(hours=8)), dt.timezone(dt.timedelta(hours=-5))]),
    ),
    st.integers(0, 6),
)
def test_timestamps_are_utc_inside_rows(value: dt.datetime, fsp: int) -> None:
    unit = 10 ** (6 - fsp)
    value = value.replace(microsecond=value.microsecond - value.microsecond % unit)
    ct = ColumnType(T.TIMESTAMP, decimal=fsp)
    got = through_row(value, ct)
    assert got == value
    assert got.tzinfo is dt.UTC
    assert unflatten(flatten(value, ct), ct, value.tzinfo or dt.UTC).utcoffset() == value.utcoffset()


def test_timestamp_naive_in_session_zone() -> None:
    ct = ColumnType(T.TIMESTAMP)
    plus8 = dt.timezone(dt.timedelta(hours=8))
    d = flatten(dt.datetime(2019, 1, 2, 8, 0, 0), ct, tz=plus8)
    assert unflatten(d, ct) == dt.datetime(2019, 1, 2, 0, 0, 0, tzinfo=dt.UTC)
    assert unflatten(d, ct, plus8).replace(tzinfo=None) == dt.datetime(2019, 1, 2, 8, 0, 0)
    assert through_row(dt.date(2019, 1, 2), ct) == dt.datetime(2019, 1, 2, tzinfo=dt.UTC)


@pytest.mark.parametrize("tp", [T.DATE, T.DATETIME, T.TIMESTAMP])
def test_zero_dates(tp: MySQLType) -> None:
    ct = ColumnType(tp)
    assert flatten(ZERO_TIME, ct) == uint_datum(0)
    assert through_row(ZERO_TIME, ct) is ZERO_TIME
    assert through_row(MysqlTime(2019, 2, 30), ct) == MysqlTime(2019, 2, 30)


@FAST
@given(st.integers(-(838 * 3600 + 3599) * 10**6, (838 * 3600 + 3599) * 10**6), st.integers(0, 6))
def test_time_every_fsp_negative_too(us: int, fsp: int) -> None:
    unit = 10 ** (6 - fsp)
    us -= us % unit if us >= 0 else -((-us) % unit)
    value = dt.timedelta(microseconds=us)
    ct = ColumnType(T.DURATION, decimal=fsp)
    assert flatten(value, ct) == int_datum(us * 1000)
    assert through_row(value, ct) == value


def test_time_key_form_duration_datum() -> None:
    assert unflatten(Datum(Kind.DURATION, -3_600_000_000_000), ColumnType(T.DURATION)) == -dt.timedelta(hours=1)


ENUM = ColumnType(T.ENUM, elems=("small", "Medium", "large"))
SET = ColumnType(T.SET, elems=("a", "b", "c", "d"))


@pytest.mark.parametrize(
    ("value", "index"), [("small", 1), ("Medium", 2), ("medium", 2), ("large", 3), ("", 0), (3, 3)]
)
def test_enum(value: str | int, index: int) -> None:
    assert flatten(value, ENUM) == uint_datum(index)
    assert through_row(value, ENUM) == (ENUM.elems[index - 1] if index else "")


@FAST
@given(st.sets(st.sampled_from(SET.elems)))
def test_set(members: set[str]) -> None:
    text = ",".join(e for e in SET.elems if e in members)
    assert through_row(members, SET) == text
    assert through_row(text, SET) == text
    assert flatten(text, SET) == uint_datum(sum(1 << SET.elems.index(m) for m in members))


@pytest.mark.parametrize(
    ("value", "ct"),
    [
        ("huge", ENUM),
        (4, ENUM),
        ("a,z", SET),
        (16, SET),
        (b"\x01\x00", ColumnType(T.BIT, flen=8)),
        (1.5, ENUM),
        (dt.timedelta(1), ColumnType(T.DATETIME)),
        ("12:00:00", ColumnType(T.DURATION)),
        (object(), ColumnType(T.NEW_DECIMAL)),
        (True, ColumnType(T.DOUBLE)),
        ("x", ColumnType(T.GEOMETRY)),
    ],
)
def test_flatten_refuses(value: Any, ct: ColumnType) -> None:
    with pytest.raises(CodecError):
        flatten(value, ct)


@pytest.mark.parametrize(
    ("datum", "ct"),
    [
        (uint_datum(4), ENUM),
        (uint_datum(16), SET),
        (uint_datum(256), ColumnType(T.BIT, flen=8)),
        (Datum(Kind.BYTES, b"\xff"), ColumnType(T.VARCHAR)),
        (Datum(Kind.BYTES, b"1"), ColumnType(T.LONG)),
        (int_datum(1), ColumnType(T.VARCHAR)),
        (int_datum(1), ColumnType(T.DATETIME)),
    ],
)
def test_unflatten_refuses(datum: Datum, ct: ColumnType) -> None:
    with pytest.raises(CodecError):
        unflatten(datum, ct)


@FAST
@given(st.integers(1, 64), st.data())
def test_bit(width: int, data: st.DataObject) -> None:
    ct = ColumnType(T.BIT, flen=width)
    value = data.draw(st.integers(0, 2**width - 1))
    got = through_row(value, ct)
    assert got == value.to_bytes((width + 7) // 8, "big")
    assert through_row(got, ct) == got


@FAST
@given(st.text(max_size=80), st.sampled_from([T.VARCHAR, T.STRING, T.VAR_STRING, T.BLOB, T.TINY_BLOB]))
def test_strings(value: str, tp: MySQLType) -> None:
    assert through_row(value, ColumnType(tp)) == value


@FAST
@given(st.binary(max_size=80), st.sampled_from([T.VARCHAR, T.STRING, T.BLOB, T.LONG_BLOB, T.MEDIUM_BLOB]))
def test_binary_strings(value: bytes, tp: MySQLType) -> None:
    assert through_row(value, ColumnType(tp, charset="binary")) == value


def test_other_charsets_and_geometry() -> None:
    assert through_row("¥€", ColumnType(T.VARCHAR, charset="latin1")) == "¥€"
    assert flatten("é", ColumnType(T.VARCHAR, charset="latin1")).value == b"\xe9"
    assert through_row("中文", ColumnType(T.VARCHAR, charset="gbk")) == "中文"
    assert through_row(b"\x00\x01", ColumnType(T.GEOMETRY)) == b"\x00\x01"
    assert through_row(b"ab", ColumnType(T.VARCHAR)) == "ab"


@FAST
@given(json_values)
def test_json(value: Any) -> None:
    assert same(through_row(value, ColumnType(T.JSON)), sort_keys(value))


@pytest.mark.parametrize(
    "ct",
    [
        ColumnType(tp, flen=10, decimal=2, elems=("a",))
        for tp in T
        if tp not in (T.DECIMAL,)  # covered as NEW_DECIMAL
    ],
)
def test_null_in_every_column_type(ct: ColumnType) -> None:
    assert flatten(None, ct) == NULL
    assert through_row(None, ct) is None


def test_column_type_properties() -> None:
    assert ColumnType(T.DATETIME).fsp == 0
    assert ColumnType(T.DATETIME, decimal=3).fsp == 3
    assert ColumnType(T.BLOB, charset="binary").is_binary
    assert ColumnType(T.VARCHAR, charset="weird").py_codec == "utf-8"
    with pytest.raises(AttributeError):
        ColumnType(T.LONG).tp = 3  # type: ignore[misc]
