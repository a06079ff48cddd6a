"""Golden byte vectors of docs/formats.md#value-vectors (and its decimal and JSON ones), both directions."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from common.codec import (
    NULL,
    ColumnType,
    Datum,
    Kind,
    MySQLType,
    SizedDecimal,
    bytes_datum,
    decimal_datum,
    decode_inserted_row,
    decode_one,
    decode_updated_row,
    encode_datum,
    encode_inserted_row,
    encode_updated_row,
    flatten,
    float_datum,
    int_datum,
    json_datum,
    uint_datum,
    unflatten,
)
from common.codec.decimal import decode_decimal_bin, encode_decimal_bin
from common.codec.mytime import pack_time

H = bytes.fromhex

DATUM_VECTORS: list[tuple[str, Datum, str]] = [
    ("int 1", int_datum(1), "08 02"),
    ("int -1", int_datum(-1), "08 01"),
    ("int 300", int_datum(300), "08 d8 04"),
    ("uint 2^64-1", uint_datum(2**64 - 1), "09 ff ff ff ff ff ff ff ff ff 01"),
    ("string abc", bytes_datum(b"abc"), "02 06 61 62 63"),
    ("string empty", bytes_datum(b""), "02 00"),
    ("double 1.5", float_datum(1.5), "05 bf f8 00 00 00 00 00 00"),
    ("double -1.5", float_datum(-1.5), "05 40 07 ff ff ff ff ff ff"),
    ("double 0.0", float_datum(0.0), "05 80 00 00 00 00 00 00 00"),
    ("datetime packed", uint_datum(1847043405759119366), "09 86 80 80 a8 90 86 81 d1 19"),
    ("enum index 2", uint_datum(2), "09 02"),
    ("NULL", NULL, "00"),
    ("decimal 12.34 (10,2)", decimal_datum(Decimal("12.34"), 10, 2), "06 0a 02 80 00 00 0c 22"),
    (
        'json {"a":1}',
        json_datum({"a": 1}),
        "0a 01 01 00 00 00 1c 00 00 00 13 00 00 00 01 00 09 14 00 00 00 61 01 00 00 00 00 00 00 00",
    ),
    ('json "x"', json_datum("x"), "0a 0c 01 78"),
    ("json true", json_datum(True), "0a 04 01"),
]


@pytest.mark.parametrize(("name", "datum", "hexbytes"), DATUM_VECTORS, ids=[v[0] for v in DATUM_VECTORS])
def test_datum_vector(name: str, datum: Datum, hexbytes: str) -> None:
    raw = H(hexbytes)
    assert encode_datum(datum) == raw, name
    decoded, end = decode_one(raw)
    assert end == len(raw)
    assert decoded == datum
    assert decoded.kind == datum.kind


@pytest.mark.parametrize(
    ("value", "precision", "frac", "hexbytes"),
    [
        (Decimal("1234567890.1234"), 14, 4, "81 0D FB 38 D2 04 D2"),
        (Decimal("-1234567890.1234"), 14, 4, "7E F2 04 C7 2D FB 2D"),
        (Decimal("12.34"), 10, 2, "80 00 00 0c 22"),
    ],
)
def test_decimal_bin_vectors(value: Decimal, precision: int, frac: int, hexbytes: str) -> None:
    raw = H(hexbytes)
    assert encode_decimal_bin(value, precision, frac) == raw
    assert decode_decimal_bin(raw, 0, precision, frac) == (value, len(raw))


def test_datetime_vector_through_flatten() -> None:
    ct = ColumnType(MySQLType.DATETIME, decimal=6)
    value = dt.datetime(2019, 1, 2, 3, 4, 5, 6)
    assert pack_time(value) == 1847043405759119366
    d = flatten(value, ct)
    assert encode_datum(d) == H("09 86 80 80 a8 90 86 81 d1 19")
    assert unflatten(decode_one(encode_datum(d))[0], ct) == value


def test_date_vector_through_flatten() -> None:
    ct = ColumnType(MySQLType.DATE)
    d = flatten(dt.date(2019, 1, 2), ct)
    assert encode_datum(d) == H("09 80 80 80 80 80 80 81 d1 19")
    assert unflatten(decode_one(H("09 80 80 80 80 80 80 81 d1 19"))[0], ct) == dt.date(2019, 1, 2)


@pytest.mark.parametrize(
    ("value", "hexbytes"),
    [
        (-dt.timedelta(hours=1), "08 ff ff c4 8b c6 d1 01"),
        (dt.timedelta(hours=12, minutes=34, seconds=56), "08 80 80 eb bf c9 cc 14"),
    ],
)
def test_time_vectors(value: dt.timedelta, hexbytes: str) -> None:
    ct = ColumnType(MySQLType.DURATION)
    assert encode_datum(flatten(value, ct)) == H(hexbytes)
    assert unflatten(decode_one(H(hexbytes))[0], ct) == value


def test_enum_vector() -> None:
    ct = ColumnType(MySQLType.ENUM, elems=("a", "b", "c"))
    assert encode_datum(flatten("b", ct)) == H("09 02")
    assert unflatten(decode_one(H("09 02"))[0], ct) == "b"


INSERTED = "08 02 08 04 02 06 61 62 63 08 06 06 0a 02 80 00 00 0c 22"
UPDATED = "08 04 02 02 61 08 01 08 0e 08 04 02 02 62 08 01 08 0e"


def test_inserted_row_with_int_handle() -> None:
    raw = H(INSERTED)
    assert encode_inserted_row(1, [2, 3], [bytes_datum("abc"), decimal_datum("12.34", 10, 2)]) == raw
    handle, row = decode_inserted_row(raw)
    assert handle == (int_datum(1),)
    assert row == {2: Datum(Kind.BYTES, b"abc"), 3: Datum(Kind.DECIMAL, SizedDecimal(Decimal("12.34"), 10, 2))}


def test_updated_row_without_pk_handle() -> None:
    raw = H(UPDATED)
    assert encode_updated_row([2, -1], [bytes_datum("a"), int_datum(7)], [bytes_datum("b"), int_datum(7)]) == raw
    old, new = decode_updated_row(raw)
    assert old == {2: bytes_datum(b"a"), -1: int_datum(7)}
    assert new == {2: bytes_datum(b"b"), -1: int_datum(7)}
    assert list(old) == [2, -1]
