"""MySQL binary decimal at every (precision, frac) up to (65, 30)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import Datum, Kind, SizedDecimal, decimal_datum, decode_one, encode_datum, peek
from common.codec.decimal import (
    MAX_FRAC,
    MAX_PRECISION,
    bin_size,
    decode_decimal_bin,
    encode_decimal_bin,
    precision_and_frac,
)
from common.errors import CodecError

FAST = settings(max_examples=300, deadline=None, database=None)


@st.composite
def sized_decimals(draw: st.DrawFn) -> tuple[Decimal, int, int]:
    precision = draw(st.integers(1, MAX_PRECISION))
    frac = draw(st.integers(0, min(MAX_FRAC, precision)))
    bound = 10**precision - 1
    n = draw(st.one_of(st.integers(-bound, bound), st.sampled_from([bound, -bound, 0, 1, -1])))
    return Decimal(f"{n}E-{frac}"), precision, frac


@FAST
@given(sized_decimals())
def test_round_trip(case: tuple[Decimal, int, int]) -> None:
    value, precision, frac = case
    raw = encode_decimal_bin(value, precision, frac)
    assert len(raw) == bin_size(precision, frac)
    decoded, end = decode_decimal_bin(raw, 0, precision, frac)
    assert end == len(raw)
    assert decoded == value
    assert decoded.as_tuple().exponent == -frac


@st.composite
def decimal_pairs(draw: st.DrawFn) -> tuple[int, int, int, int]:
    precision = draw(st.integers(1, MAX_PRECISION))
    frac = draw(st.integers(0, min(MAX_FRAC, precision)))
    bound = 10**precision - 1
    return precision, frac, draw(st.integers(-bound, bound)), draw(st.integers(-bound, bound))


@FAST
@given(decimal_pairs())
def test_binary_order_matches_numeric_order(case: tuple[int, int, int, int]) -> None:
    precision, frac, a, b = case
    ea = encode_decimal_bin(Decimal(f"{a}E-{frac}"), precision, frac)
    eb = encode_decimal_bin(Decimal(f"{b}E-{frac}"), precision, frac)
    assert (ea < eb) == (a < b)


@pytest.mark.parametrize("precision", range(1, MAX_PRECISION + 1))
def test_every_precision_negative_extremes(precision: int) -> None:
    for frac in {0, min(precision, MAX_FRAC) // 2, min(precision, MAX_FRAC)}:
        for n in (10**precision - 1, -(10**precision - 1), -1, 123456789 % 10**precision):
            value = Decimal(f"{n}E-{frac}")
            raw = encode_decimal_bin(value, precision, frac)
            assert decode_decimal_bin(raw, 0, precision, frac)[0] == value


def test_bin_size() -> None:
    assert bin_size(14, 4) == 7
    assert bin_size(10, 2) == 5
    assert bin_size(65, 30) == 30
    assert bin_size(9, 0) == 4
    assert bin_size(1, 1) == 1


def test_rounds_half_up() -> None:
    assert decode_decimal_bin(encode_decimal_bin(Decimal("1.005"), 3, 2), 0, 3, 2)[0] == Decimal("1.01")
    assert decode_decimal_bin(encode_decimal_bin(Decimal("-1.005"), 3, 2), 0, 3, 2)[0] == Decimal("-1.01")
    assert decode_decimal_bin(encode_decimal_bin(Decimal("-0.001"), 3, 2), 0, 3, 2)[0] == Decimal("0.00")


def test_negative_zero_is_zero() -> None:
    assert encode_decimal_bin(Decimal("-0.00"), 4, 2) == encode_decimal_bin(Decimal("0"), 4, 2)


@pytest.mark.parametrize(
    ("value", "precision", "frac"),
    [("100", 2, 0), ("9.995", 3, 2), ("1E+70", 65, 0), ("Infinity", 10, 0), ("NaN", 10, 0)],
)
def test_overflow_and_non_finite(value: str, precision: int, frac: int) -> None:
    with pytest.raises(CodecError):
        encode_decimal_bin(Decimal(value), precision, frac)


@pytest.mark.parametrize(("precision", "frac"), [(0, 0), (66, 0), (10, 31), (3, 4)])
def test_bad_precision(precision: int, frac: int) -> None:
    with pytest.raises(CodecError):
        encode_decimal_bin(Decimal(1), precision, frac)
    with pytest.raises(CodecError, match="offset 0"):
        decode_decimal_bin(b"\x80" * 40, 0, precision, frac)


def test_corrupt_digit_group() -> None:
    # DECIMAL(9,0): one 4-byte group; 0x7fffffff > 999999999
    with pytest.raises(CodecError, match="digit group"):
        decode_decimal_bin(b"\xff\xff\xff\xff", 0, 9, 0)


def test_truncated() -> None:
    raw = encode_decimal_bin(Decimal("1234567890.1234"), 14, 4)
    for cut in range(len(raw)):
        with pytest.raises(CodecError, match="offset 0"):
            decode_decimal_bin(raw[:cut], 0, 14, 4)


def test_precision_and_frac_of_value() -> None:
    assert precision_and_frac(Decimal("12.340")) == (5, 3)
    assert precision_and_frac(Decimal("0")) == (1, 0)
    assert precision_and_frac(Decimal("0.00")) == (2, 2)
    assert precision_and_frac(Decimal("0.05")) == (2, 2)
    assert precision_and_frac(Decimal("1E+2")) == (3, 0)


def test_datum_with_unset_precision_uses_value() -> None:
    raw = encode_datum(decimal_datum(Decimal("-12.340")))
    assert raw[:3] == b"\x06\x05\x03"
    assert decode_one(raw)[0] == Datum(Kind.DECIMAL, SizedDecimal(Decimal("-12.340"), 5, 3))


def test_datum_frac_capped_at_30() -> None:
    value = Decimal("0." + "1" * 34 + "9")
    raw = encode_datum(decimal_datum(value))
    assert raw[2] == 30
    assert decode_one(raw)[0].value.value == Decimal("0." + "1" * 30)


@FAST
@given(sized_decimals())
def test_datum_round_trip_and_peek(case: tuple[Decimal, int, int]) -> None:
    value, precision, frac = case
    raw = encode_datum(decimal_datum(value, precision, frac))
    assert peek(raw) == len(raw) == 3 + bin_size(precision, frac)
    assert decode_one(raw) == (Datum(Kind.DECIMAL, SizedDecimal(value, precision, frac)), len(raw))
