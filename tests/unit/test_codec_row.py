"""Old row format and the inserted/updated/deleted slots: round trips and corrupt input.

Truncation policy (documented in ``common/codec/row.py``): the row format has no column count, so
a row cut exactly after a complete value decodes as the row of its leading columns; every other
cut, and an empty input, raises :class:`CodecError`.  Updated rows never decode when cut.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import (
    EXTRA_HANDLE_ID,
    NULL,
    ColumnType,
    Datum,
    MySQLType,
    bytes_datum,
    decimal_datum,
    decode_deleted_row,
    decode_inserted_row,
    decode_int_handle,
    decode_row,
    decode_updated_row,
    duration_datum,
    encode_deleted_row,
    encode_inserted_row,
    encode_row,
    encode_updated_row,
    flatten,
    float_datum,
    int_datum,
    json_datum,
    uint_datum,
)
from common.errors import CodecError
from tests.unit.test_codec_datum import datums

FAST = settings(max_examples=150, deadline=None, database=None)

col_ids = st.lists(st.integers(-1, 2**31), unique=True, max_size=8)


@st.composite
def rows(draw: st.DrawFn) -> tuple[list[int], list[Datum]]:
    ids = draw(col_ids)
    return ids, [draw(datums) for _ in ids]


def _reencode(ids: list[int], values: list[Datum]) -> list[Datum]:
    """JSON object keys come back sorted; compare through one encode/decode of each value."""
    return list(decode_row(encode_row(ids, values)).values())


@FAST
@given(rows())
def test_row_round_trip(row: tuple[list[int], list[Datum]]) -> None:
    ids, values = row
    raw = encode_row(ids, values)
    decoded = decode_row(raw)
    assert list(decoded) == ids
    assert encode_row(list(decoded), list(decoded.values())) == raw
    assert decode_deleted_row(encode_deleted_row(ids, values)) == decoded


def test_zero_columns() -> None:
    assert encode_row([], []) == b"\x00"
    assert decode_row(b"\x00") == {}
    assert encode_updated_row([], [], []) == b"\x00\x00"
    assert decode_updated_row(b"\x00\x00") == ({}, {})
    assert decode_inserted_row(encode_inserted_row(5, [], [])) == ((int_datum(5),), {})


@FAST
@given(rows(), st.lists(datums, min_size=1, max_size=3))
def test_inserted_row_with_common_handle(row: tuple[list[int], list[Datum]], handle: list[Datum]) -> None:
    ids, values = row
    raw = encode_inserted_row(handle, ids, values)
    got_handle, got_row = decode_inserted_row(raw, handle_datums=len(handle))
    assert len(got_handle) == len(handle)
    assert list(got_row) == ids
    assert encode_inserted_row(list(got_handle), list(got_row), list(got_row.values())) == raw


@FAST
@given(st.integers(-(2**63), 2**63 - 1), rows())
def test_inserted_row_with_int_handle(handle: int, row: tuple[list[int], list[Datum]]) -> None:
    ids, values = row
    got_handle, got_row = decode_inserted_row(encode_inserted_row(handle, ids, values))
    assert decode_int_handle(got_handle) == handle
    assert got_row == dict(zip(ids, _reencode(ids, values), strict=True))


def test_unsigned_pk_handle_from_int64_pattern() -> None:
    (handle,) = decode_inserted_row(encode_inserted_row(-1, [], []))[0:1]
    assert decode_int_handle(handle, unsigned=True) == 2**64 - 1
    with pytest.raises(CodecError):
        decode_int_handle((bytes_datum(b"x"),))


@FAST
@given(rows(), st.data())
def test_updated_row_round_trip(row: tuple[list[int], list[Datum]], data: st.DataObject) -> None:
    ids, old = row
    new = [data.draw(datums) for _ in ids]
    if EXTRA_HANDLE_ID not in ids:  # a table without PK handle carries (-1, rowid) in both halves
        ids, old, new = [*ids, EXTRA_HANDLE_ID], [*old, int_datum(7)], [*new, int_datum(7)]
    got_old, got_new = decode_updated_row(encode_updated_row(ids, old, new))
    assert got_old == dict(zip(ids, _reencode(ids, old), strict=True))
    assert got_new == dict(zip(ids, _reencode(ids, new), strict=True))


def _mixed_row() -> tuple[list[int], list[Datum]]:
    ids = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    values = [
        int_datum(-42),
        uint_datum(2**64 - 1),
        bytes_datum("héllo wörld"),
        decimal_datum(Decimal("-1234567890.12"), 12, 2),
        flatten(dt.datetime(2019, 1, 2, 3, 4, 5, 6), ColumnType(MySQLType.DATETIME, decimal=6)),
        float_datum(-1.5),
        json_datum({"k": [1, "v", None, {"x": 2.5}]}),
        NULL,
        flatten(dt.timedelta(hours=-1, microseconds=5), ColumnType(MySQLType.DURATION, decimal=6)),
        bytes_datum(b"12345678" * 3),
        duration_datum(5),
    ]
    return ids, values


def _boundaries(ids: list[int], values: list[Datum]) -> dict[int, dict[int, Datum]]:
    """Byte length of each complete-column prefix -> the row it decodes to."""
    out: dict[int, dict[int, Datum]] = {}
    for k in range(1, len(ids) + 1):
        out[len(encode_row(ids[:k], values[:k]))] = decode_row(encode_row(ids[:k], values[:k]))
    return out


def test_row_truncated_at_every_length() -> None:
    ids, values = _mixed_row()
    raw = encode_row(ids, values)
    prefixes = _boundaries(ids, values)
    assert len(raw) in prefixes
    for cut in range(len(raw)):
        if cut in prefixes:
            assert decode_row(raw[:cut]) == prefixes[cut]
            continue
        with pytest.raises(CodecError) as info:
            decode_row(raw[:cut])
        assert info.value.offset is not None
        assert 0 <= info.value.offset <= cut
        assert f"at offset {info.value.offset}" in str(info.value)


def test_inserted_row_truncated_at_every_length() -> None:
    ids, values = _mixed_row()
    raw = encode_inserted_row(12345, ids, values)
    handle_len = len(encode_inserted_row(12345, [], [])) - 1
    prefixes = {handle_len + n for n in _boundaries(ids, values)}
    for cut in range(len(raw)):
        if cut in prefixes:
            decode_inserted_row(raw[:cut])
            continue
        with pytest.raises(CodecError, match="at offset"):
            decode_inserted_row(raw[:cut])


def test_updated_row_truncated_at_every_length() -> None:
    ids, values = _mixed_row()
    raw = encode_updated_row(ids, values, list(reversed(values)))
    for cut in range(len(raw)):
        with pytest.raises(CodecError, match="at offset"):
            decode_updated_row(raw[:cut])


def _codec_error(decode: Callable[[bytes], object], raw: bytes) -> CodecError | None:
    """The CodecError ``decode`` raises, or None if it decodes; any other exception propagates."""
    try:
        decode(raw)
    except CodecError as exc:
        return exc
    return None


def test_flipped_bytes_raise_only_codec_error() -> None:
    ids, values = _mixed_row()
    raw = encode_row(ids, values)
    for i in range(len(raw)):
        for mask in (0x01, 0x80, 0xFF, 0x0A):
            corrupt = bytearray(raw)
            corrupt[i] ^= mask
            err = _codec_error(decode_row, bytes(corrupt))
            assert err is None or err.offset is not None


@FAST
@given(st.binary(max_size=64))
def test_random_bytes_raise_only_codec_error(raw: bytes) -> None:
    for decode in (decode_row, decode_updated_row, decode_inserted_row):
        err = _codec_error(decode, raw)
        assert err is None or err.offset is not None


@pytest.mark.parametrize(
    ("raw", "offset", "message"),
    [
        (b"", 0, "empty row"),
        (b"\x08\x02\x0b\x00", 2, "unknown datum flag 11"),
        (b"\x08\x02\x14\x00", 2, "unknown datum flag 20"),
        (b"\x02\x02a\x08\x02", 0, "column id must be a varint datum"),
        (b"\x08\x02\x08\x02\x08\x02\x08\x04", 4, "duplicate column id 1"),
        (b"\x08\x02", 2, "column 1 has no value"),
        (b"\x08\x02\x00\x00", 3, "column id must be a varint datum"),
    ],
)
def test_corrupt_rows(raw: bytes, offset: int, message: str) -> None:
    with pytest.raises(CodecError, match=message) as info:
        decode_row(raw)
    assert info.value.offset == offset


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "empty"),
        (encode_row([1], [int_datum(1)]), "odd number"),
        (encode_row([1, 2], [int_datum(1), int_datum(2)]), "different column ids"),
        (encode_row([1, 1, 2, 2], [int_datum(1)] * 4), "duplicate column id 1"),
    ],
)
def test_corrupt_updated_rows(raw: bytes, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        decode_updated_row(raw)


def test_encode_row_length_mismatch() -> None:
    with pytest.raises(CodecError):
        encode_row([1, 2], [NULL])
    with pytest.raises(CodecError):
        encode_inserted_row([], [1], [NULL])
    with pytest.raises(CodecError):
        decode_inserted_row(b"\x08\x02\x00", handle_datums=0)
