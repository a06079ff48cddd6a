"""Datum encode/decode/peek over every flag, value and key mode."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import (
    NULL,
    Datum,
    Kind,
    SizedDecimal,
    bytes_datum,
    decode_datums,
    decode_one,
    duration_datum,
    encode_datum,
    encode_key,
    encode_value,
    float_datum,
    int_datum,
    json_datum,
    peek,
    uint_datum,
)
from common.codec.number import INT64_MAX, INT64_MIN, UINT64_MAX
from common.errors import CodecError
from tests.unit.test_codec_json import json_values

FAST = settings(max_examples=200, deadline=None, database=None)


@st.composite
def decimal_datums(draw: st.DrawFn) -> Datum:
    precision = draw(st.integers(1, 65))
    frac = draw(st.integers(0, min(30, precision)))
    n = draw(st.integers(-(10**precision) + 1, 10**precision - 1))
    return Datum(Kind.DECIMAL, SizedDecimal(Decimal(f"{n}E-{frac}"), precision, frac))


datums: st.SearchStrategy[Datum] = st.one_of(
    st.just(NULL),
    st.integers(INT64_MIN, INT64_MAX).map(int_datum),
    st.sampled_from([INT64_MIN, INT64_MAX, 0, -1]).map(int_datum),
    st.integers(0, UINT64_MAX).map(uint_datum),
    st.just(uint_datum(UINT64_MAX)),
    st.floats(allow_nan=False).map(float_datum),
    st.binary(max_size=40).map(bytes_datum),
    decimal_datums(),
    st.integers(INT64_MIN, INT64_MAX).map(duration_datum),
    json_values.map(json_datum),
)
"""Every datum kind a binlog row can carry (JSON object keys drawn unsorted)."""

key_datums: st.SearchStrategy[Datum] = st.one_of(
    st.just(NULL),
    st.integers(INT64_MIN, INT64_MAX).map(int_datum),
    st.integers(0, UINT64_MAX).map(uint_datum),
    st.floats(allow_nan=False).map(float_datum),
    st.binary(max_size=40).map(bytes_datum),
    decimal_datums(),
    st.integers(INT64_MIN, INT64_MAX).map(duration_datum),
)


@FAST
@given(datums)
def test_value_round_trip(d: Datum) -> None:
    raw = encode_datum(d)
    assert peek(raw + b"\x00junk") == len(raw)
    decoded, end = decode_one(raw + b"\x00junk")
    assert end == len(raw)
    assert decoded.kind == d.kind
    if d.kind == Kind.JSON:
        assert encode_datum(decoded) == raw
    else:
        assert decoded == d


@FAST
@given(st.lists(key_datums, max_size=6))
def test_key_round_trip(ds: list[Datum]) -> None:
    raw = encode_key(ds)
    assert decode_datums(raw) == ds


@FAST
@given(st.lists(datums, max_size=6))
def test_value_sequence_round_trip(ds: list[Datum]) -> None:
    raw = encode_value(ds)
    decoded = decode_datums(raw)
    assert [d.kind for d in decoded] == [d.kind for d in ds]
    assert encode_value(decoded) == raw


def test_flags_per_kind() -> None:
    assert encode_value([int_datum(1)])[0] == 8
    assert encode_key([int_datum(1)]) == b"\x03\x80\x00\x00\x00\x00\x00\x00\x01"
    assert encode_value([uint_datum(1)])[0] == 9
    assert encode_key([uint_datum(1)]) == b"\x04" + b"\x00" * 7 + b"\x01"
    assert encode_value([bytes_datum(b"a")])[0] == 2
    assert encode_key([bytes_datum(b"a")]) == b"\x01a" + b"\x00" * 7 + b"\xf8"
    assert encode_value([duration_datum(-1)]) == b"\x07\x7f" + b"\xff" * 7
    assert bytes_datum("é") == Datum(Kind.BYTES, "é".encode())


def test_key_form_handle_datums_decode() -> None:
    # durationFlag survives in common-handle prefixes; ints/uints/bytes may arrive in key form too.
    raw = encode_key([int_datum(-5), uint_datum(7), bytes_datum(b"abcdefgh"), duration_datum(3_600_000_000_000)])
    assert decode_datums(raw) == [
        int_datum(-5),
        uint_datum(7),
        bytes_datum(b"abcdefgh"),
        duration_datum(3_600_000_000_000),
    ]


@pytest.mark.parametrize("flag", [11, 19, 20, 250, 255])
def test_unknown_flag(flag: int) -> None:
    with pytest.raises(CodecError, match=f"unknown datum flag {flag} \\(at offset 2\\)"):
        decode_one(b"\x08\x02" + bytes([flag, 0, 0]), 2)
    with pytest.raises(CodecError, match="at offset 0"):
        peek(bytes([flag]))


def test_negative_compact_bytes_length() -> None:
    with pytest.raises(CodecError, match="negative"):
        decode_one(b"\x02\x01a")
    with pytest.raises(CodecError, match="negative"):
        peek(b"\x02\x01a")


@FAST
@given(datums, st.data())
def test_truncated_datum_raises_codec_error_with_offset(d: Datum, data: st.DataObject) -> None:
    raw = encode_datum(d)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CodecError) as info:
        decode_one(b"\x00" + raw[:cut], 1)
    assert info.value.offset is not None
    assert info.value.offset >= 1
    assert "offset" in str(info.value)
    with pytest.raises(CodecError):
        peek(raw[:cut])


@pytest.mark.parametrize(
    "bad",
    [
        int_datum(INT64_MAX + 1),
        uint_datum(-1),
        uint_datum(UINT64_MAX + 1),
        float_datum(float("nan")),
        Datum(Kind.BYTES, "not bytes"),
        Datum(Kind.DECIMAL, SizedDecimal(Decimal("100"), 2, 0)),
        json_datum({1: 2}),  # type: ignore[dict-item]
        Datum(Kind.INT, "1"),
    ],
)
def test_unencodable(bad: Datum) -> None:
    with pytest.raises(CodecError):
        encode_datum(bad)
