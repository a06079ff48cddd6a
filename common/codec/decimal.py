"""MySQL binary decimal (``decimal2bin`` / TiDB ``MyDecimal.WriteBin``) <-> :class:`decimal.Decimal`.

Layout of a DECIMAL(precision, frac) value (``precision`` 1..65, ``frac`` 0..30, ``frac <= precision``)::

    int digits  = precision - frac          frac digits = frac
    [lead int digits][9-digit groups ...] | [9-digit groups ...][trail frac digits]
     dig2bytes[intg%9]  4 B each            4 B each             dig2bytes[frac%9]

    dig2bytes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]   (bytes for 0..9 leftover digits)

Every chunk is an unsigned big-endian number.  Integer digits are right-aligned (the leading
chunk holds the most significant ``intg % 9`` digits), fraction digits left-aligned (.34 with
frac 2 -> chunk value 34; with frac 11 -> group 340000000 then trailing chunk 00).
A negative value has every byte XOR ``0xff``; finally the first byte is XOR ``0x80`` (so the
sign bit reads 1 for non-negative values).  Example: 1234567890.1234 as (14, 4) ->
``81 0d fb 38 d2 04 d2``; its negative -> ``7e f2 04 c7 2d fb 2d``.

Inside a datum (decimalFlag 6) the payload is ``precision u8 ‖ frac u8 ‖ bin``.
Because every chunk is a whole number of bytes, the whole layout is one big-endian integer made
of mixed-width fields, so encode/decode work on a single Python ``int`` per value: read from its
least significant end, the chunks are successive base-``10**digits`` digits of ``value * 10**frac``.
"""

from __future__ import annotations

import decimal as _decimal_module
from decimal import Decimal
from functools import lru_cache

from common.errors import CodecError

MAX_PRECISION = 65
MAX_FRAC = 30
DIGITS_PER_WORD = 9
WORD_SIZE = 4
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)

# Exact arithmetic for values up to 65 digits plus headroom; ROUND_HALF_UP is MySQL's rounding.
_CTX = _decimal_module.Context(prec=200, rounding=_decimal_module.ROUND_HALF_UP, Emax=999_999, Emin=-999_999)
_POW10 = tuple(10**i for i in range(MAX_PRECISION + 1))


def bin_size(precision: int, frac: int) -> int:
    """Bytes of the binary form of DECIMAL(precision, frac) (``DecimalBinSize``)."""
    intg = precision - frac
    return (
        (intg // DIGITS_PER_WORD) * WORD_SIZE
        + DIG2BYTES[intg % DIGITS_PER_WORD]
        + (frac // DIGITS_PER_WORD) * WORD_SIZE
        + DIG2BYTES[frac % DIGITS_PER_WORD]
    )


def check_precision(precision: int, frac: int, offset: int | None = None) -> None:
    """Raise :class:`CodecError` unless ``1 <= precision <= 65`` and ``0 <= frac <= min(30, precision)``."""
    if not 1 <= precision <= MAX_PRECISION or not 0 <= frac <= MAX_FRAC or frac > precision:
        raise CodecError(f"bad decimal precision/frac ({precision}, {frac})", offset=offset)


@lru_cache(maxsize=2048)
def _plan(precision: int, frac: int) -> tuple[int, tuple[tuple[int, int, int], ...]]:
    """``(size, chunks)`` with chunks as ``(bit width, 10**digits, bit shift)`` from the least significant.

    Read from the least significant end, the scaled integer ``value * 10**frac`` splits into the
    trailing ``frac % 9`` fraction digits, the 9-digit fraction groups, the 9-digit integer groups
    and the leading ``intg % 9`` integer digits -- exactly the binary chunks in reverse order.
    """
    intg = precision - frac
    digits: list[int] = []
    if frac % DIGITS_PER_WORD:
        digits.append(frac % DIGITS_PER_WORD)
    digits.extend([DIGITS_PER_WORD] * (frac // DIGITS_PER_WORD + intg // DIGITS_PER_WORD))
    if intg % DIGITS_PER_WORD:
        digits.append(intg % DIGITS_PER_WORD)
    chunks: list[tuple[int, int, int]] = []
    shift = 0
    for d in digits:
        width = 8 * DIG2BYTES[d]
        chunks.append((width, 10**d, shift))
        shift += width
    return shift // 8, tuple(chunks)


def precision_and_frac(value: Decimal) -> tuple[int, int]:
    """The value's own (precision, frac), as TiDB's ``PrecisionAndFrac`` (used when precision is 0)."""
    if not value.is_finite():
        raise CodecError(f"cannot encode non-finite decimal {value}")
    exp = value.as_tuple().exponent
    assert isinstance(exp, int)
    frac = max(0, -exp)
    int_digits = 0 if value.is_zero() else max(0, value.adjusted() + 1)
    return max(1, int_digits + frac), frac


def scaled_int(value: Decimal, precision: int, frac: int) -> int:
    """``value * 10**frac`` rounded half-up to an int; CodecError if it needs more than ``precision`` digits."""
    if not value.is_finite():
        raise CodecError(f"cannot encode non-finite decimal {value}")
    if not value.is_zero() and value.adjusted() >= precision - frac:
        raise CodecError(f"decimal {value} overflows DECIMAL({precision},{frac})")
    try:
        n = int(value.scaleb(frac, _CTX).to_integral_value(context=_CTX))
    except _decimal_module.DecimalException:
        raise CodecError(f"decimal {value} cannot be scaled to {frac} fraction digits") from None
    if n >= _POW10[precision] or -n >= _POW10[precision]:
        raise CodecError(f"decimal {value} overflows DECIMAL({precision},{frac})")
    return n


def encode_decimal_bin(value: Decimal, precision: int, frac: int) -> bytes:
    """MySQL ``decimal2bin`` of ``value`` rounded half-up to ``frac`` digits."""
    check_precision(precision, frac)
    n = scaled_int(value, precision, frac)
    size, chunks = _plan(precision, frac)
    neg = n < 0
    if neg:
        n = -n
    acc = 0
    for _, pow10, shift in chunks:
        n, chunk = divmod(n, pow10)
        acc |= chunk << shift
    bits = 8 * size
    if neg:
        acc ^= (1 << bits) - 1
    return (acc ^ (1 << (bits - 1))).to_bytes(size, "big")


def decode_decimal_bin(data: bytes, pos: int, precision: int, frac: int) -> tuple[Decimal, int]:
    """Read DECIMAL(precision, frac) binary at ``pos``; returns ``(value, next_pos)``.

    The result has exactly ``frac`` fraction digits (``Decimal('12.30')`` for (4, 2)).
    """
    check_precision(precision, frac, offset=pos)
    size, chunks = _plan(precision, frac)
    end = pos + size
    if end > len(data):
        raise CodecError(f"truncated DECIMAL({precision},{frac}) needs {size} bytes", offset=pos)
    bits = 8 * size
    acc = int.from_bytes(data[pos:end], "big") ^ (1 << (bits - 1))
    neg = acc >> (bits - 1)  # the sign bit, flipped back, is 1 only for negative values
    if neg:
        acc ^= (1 << bits) - 1
    n = 0
    mult = 1
    for width, pow10, shift in chunks:
        chunk = (acc >> shift) & ((1 << width) - 1)
        if chunk >= pow10:
            raise CodecError(f"decimal digit group {chunk} exceeds {len(str(pow10)) - 1} digits", offset=pos)
        n += chunk * mult
        mult *= pow10
    if neg:
        n = -n
    return Decimal(n).scaleb(-frac, _CTX), end


def decimal_size_at(data: bytes, pos: int) -> int:
    """Bytes of a ``precision ‖ frac ‖ bin`` payload starting at ``pos`` (decimal datum without its flag)."""
    if pos + 2 > len(data):
        raise CodecError("truncated decimal precision/frac", offset=pos)
    precision, frac = data[pos], data[pos + 1]
    check_precision(precision, frac, offset=pos)
    return 2 + bin_size(precision, frac)
