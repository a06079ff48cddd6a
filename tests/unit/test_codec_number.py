"""Varints, comparable ints/floats and memcomparable bytes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec.number import (
    INT64_MAX,
    INT64_MIN,
    UINT64_MAX,
    decode_cmp_float,
    decode_cmp_int,
    decode_cmp_uint,
    decode_mem_bytes,
    decode_uvarint,
    decode_varint,
    encode_cmp_float,
    encode_cmp_int,
    encode_cmp_uint,
    encode_mem_bytes,
    encode_uvarint,
    encode_varint,
    peek_mem_bytes,
    zigzag_decode,
    zigzag_encode,
)
from common.errors import CodecError

FAST = settings(max_examples=200, deadline=None, database=None)
int64s = st.integers(INT64_MIN, INT64_MAX)
uint64s = st.integers(0, UINT64_MAX)


@FAST
@given(uint64s)
def test_uvarint_round_trip(n: int) -> None:
    raw = encode_uvarint(n)
    assert decode_uvarint(b"\xee" + raw + b"\xff", 1) == (n, 1 + len(raw))
    assert len(raw) == max(1, math.ceil(n.bit_length() / 7))


@FAST
@given(int64s)
def test_varint_round_trip(v: int) -> None:
    raw = encode_varint(v)
    assert decode_varint(raw, 0) == (v, len(raw))
    assert zigzag_decode(zigzag_encode(v)) == v
    assert zigzag_encode(v) == ((v << 1) ^ (v >> 63)) & UINT64_MAX


def test_zigzag_small_values() -> None:
    assert [zigzag_encode(v) for v in (0, -1, 1, -2, 2)] == [0, 1, 2, 3, 4]
    assert encode_varint(INT64_MIN) == b"\xff" * 9 + b"\x01"


@pytest.mark.parametrize("raw", [b"", b"\x80", b"\xff\xff", b"\x80" * 9])
def test_uvarint_truncated(raw: bytes) -> None:
    with pytest.raises(CodecError, match="offset 0"):
        decode_uvarint(raw, 0)


@pytest.mark.parametrize("raw", [b"\xff" * 9 + b"\x02", b"\x80" * 10 + b"\x01"])
def test_uvarint_overflow(raw: bytes) -> None:
    with pytest.raises(CodecError, match="overflows"):
        decode_uvarint(raw, 0)


@pytest.mark.parametrize("bad", [-1, UINT64_MAX + 1])
def test_uvarint_range(bad: int) -> None:
    with pytest.raises(CodecError):
        encode_uvarint(bad)


@pytest.mark.parametrize("bad", [INT64_MIN - 1, INT64_MAX + 1])
def test_int64_range(bad: int) -> None:
    with pytest.raises(CodecError):
        encode_varint(bad)
    with pytest.raises(CodecError):
        encode_cmp_int(bad)


@FAST
@given(int64s, int64s)
def test_cmp_int_orders_and_round_trips(a: int, b: int) -> None:
    ea, eb = encode_cmp_int(a), encode_cmp_int(b)
    assert decode_cmp_int(ea, 0) == (a, 8)
    assert (ea < eb) == (a < b)


@FAST
@given(uint64s)
def test_cmp_uint_round_trip(n: int) -> None:
    assert decode_cmp_uint(encode_cmp_uint(n), 0) == (n, 8)


@FAST
@given(st.floats(allow_nan=False), st.floats(allow_nan=False))
def test_cmp_float_orders_and_round_trips(a: float, b: float) -> None:
    ea, eb = encode_cmp_float(a), encode_cmp_float(b)
    assert decode_cmp_float(ea, 0)[0] == a
    if a < b:
        assert ea < eb


def test_cmp_float_negative_zero_encodes_like_zero() -> None:
    assert encode_cmp_float(-0.0) == encode_cmp_float(0.0) == b"\x80" + b"\x00" * 7


def test_cmp_float_refuses_nan() -> None:
    with pytest.raises(CodecError, match="NaN"):
        encode_cmp_float(math.nan)


def test_cmp_truncated() -> None:
    for fn in (decode_cmp_int, decode_cmp_uint, decode_cmp_float):
        with pytest.raises(CodecError, match="offset 3"):
            fn(b"\x00" * 10, 3)


def test_mem_bytes_vectors() -> None:
    assert encode_mem_bytes(b"abc") == b"abc" + b"\x00" * 5 + b"\xfa"
    assert encode_mem_bytes(b"") == b"\x00" * 8 + b"\xf7"
    assert encode_mem_bytes(b"12345678") == b"12345678\xff" + b"\x00" * 8 + b"\xf7"


@FAST
@given(st.binary(max_size=40), st.binary(max_size=40))
def test_mem_bytes_round_trip_and_order(a: bytes, b: bytes) -> None:
    ea, eb = encode_mem_bytes(a), encode_mem_bytes(b)
    assert decode_mem_bytes(ea + b"tail", 0) == (a, len(ea))
    assert peek_mem_bytes(ea, 0) == len(ea)
    assert (ea < eb) == (a < b)


@pytest.mark.parametrize(
    ("raw", "offset"),
    [
        (b"abc", 0),  # short group
        (b"abc\x00\x00\x00\x00\x00\xf0", 8),  # marker says pad 15
        (b"abc\x00\x00\x01\x00\x00\xfa", 3),  # padding not zero
        (b"12345678\xff1234", 9),  # second group cut
    ],
)
def test_mem_bytes_corrupt(raw: bytes, offset: int) -> None:
    with pytest.raises(CodecError) as info:
        decode_mem_bytes(raw, 0)
    assert info.value.offset == offset
