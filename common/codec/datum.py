"""TiDB datums and their flag-prefixed encoding (``util/codec/codec.go``).

Every encoded datum is ``flag u8 ‖ payload``:

====  ================  ===========================================================  ==========
flag  name              payload                                                      kind
====  ================  ===========================================================  ==========
0     NilFlag           none                                                         NULL
1     bytesFlag         memcomparable groups (8 B + marker ``0xff - pad``), keys      BYTES
2     compactBytesFlag  zigzag varint length ‖ bytes                                 BYTES
3     intFlag           8 B big-endian ``uint64(v) ^ 1<<63``, keys                   INT
4     uintFlag          8 B big-endian, keys                                         UINT
5     floatFlag         8 B comparable float (see :mod:`common.codec.number`)        FLOAT
6     decimalFlag       precision u8 ‖ frac u8 ‖ MySQL decimal bin                   DECIMAL
7     durationFlag      8 B comparable int of nanoseconds                            DURATION
8     varintFlag        zigzag varint int64                                          INT
9     uvarintFlag       LEB128 uvarint uint64                                        UINT
10    jsonFlag          JSON type code u8 ‖ binary JSON                              JSON
====  ================  ===========================================================  ==========

``encode_value`` is TiDB's ``EncodeValue`` (row values): INT -> 8, UINT -> 9, BYTES -> 2, FLOAT -> 5,
DECIMAL -> 6, DURATION -> 7, JSON -> 10, NULL -> 0.  ``encode_key`` is ``EncodeKey`` (memcomparable):
INT -> 3, UINT -> 4, BYTES -> 1, the rest as in values.  Examples: int 1 -> ``08 02``,
-1 -> ``08 01``, "abc" -> ``02 06 61 62 63``, 1.5 -> ``05 bf f8 00 00 00 00 00 00``, NULL -> ``00``.

A :class:`Datum` is ``(kind, value)``.  Values: NULL ``None``; INT/UINT/DURATION ``int``
(DURATION in nanoseconds); FLOAT ``float``; BYTES ``bytes``; DECIMAL :class:`SizedDecimal`
(the value with the precision/frac it is written with); JSON a :data:`JsonValue`.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from enum import IntEnum
from typing import Any, NamedTuple, TypeAlias

from common.codec.decimal import (
    MAX_FRAC,
    decimal_size_at,
    decode_decimal_bin,
    encode_decimal_bin,
    precision_and_frac,
)
from common.codec.json_binary import JsonValue, decode_json, encode_json, json_size
from common.codec.number import (
    decode_cmp_float,
    decode_cmp_int,
    decode_cmp_uint,
    decode_mem_bytes,
    decode_uvarint,
    encode_cmp_float,
    encode_cmp_int,
    encode_cmp_uint,
    encode_mem_bytes,
    encode_uvarint,
    encode_varint,
    peek_mem_bytes,
)
from common.errors import CodecError

NIL_FLAG = 0
BYTES_FLAG = 1
COMPACT_BYTES_FLAG = 2
INT_FLAG = 3
UINT_FLAG = 4
FLOAT_FLAG = 5
DECIMAL_FLAG = 6
DURATION_FLAG = 7
VARINT_FLAG = 8
UVARINT_FLAG = 9
JSON_FLAG = 10


class Kind(IntEnum):
    """What a datum holds (independent of the flag it was read from)."""

    NULL = 0
    INT = 1
    UINT = 2
    FLOAT = 3
    BYTES = 4
    DECIMAL = 5
    DURATION = 6
    JSON = 7


class SizedDecimal(NamedTuple):
    """A decimal with the (precision, frac) it is encoded with; precision 0 = the value's own."""

    value: Decimal
    precision: int = 0
    frac: int = 0


DatumValue: TypeAlias = "int | float | bytes | SizedDecimal | JsonValue | None"


class Datum(NamedTuple):
    """One TiDB datum: a :class:`Kind` and its Python value."""

    kind: Kind
    value: Any

    def __repr__(self) -> str:
        return f"Datum({self.kind.name}, {self.value!r})"


NULL = Datum(Kind.NULL, None)

# Hot-path aliases: enum member lookups and NamedTuple.__new__ are slow in CPython 3.11, so decoders
# build datums with tuple.__new__ and module-level kind constants.
_new = tuple.__new__
_INT = Kind.INT
_UINT = Kind.UINT
_FLOAT = Kind.FLOAT
_BYTES = Kind.BYTES
_DECIMAL = Kind.DECIMAL
_DURATION = Kind.DURATION
_JSON = Kind.JSON
_NULL = Kind.NULL
_UVARINT_PREFIXED = frozenset((VARINT_FLAG, UVARINT_FLAG, COMPACT_BYTES_FLAG))


def int_datum(v: int) -> Datum:
    """A signed int64 datum."""
    return Datum(Kind.INT, v)


def uint_datum(v: int) -> Datum:
    """An unsigned uint64 datum."""
    return Datum(Kind.UINT, v)


def float_datum(v: float) -> Datum:
    """A float64 datum."""
    return Datum(Kind.FLOAT, v)


def bytes_datum(v: bytes | str) -> Datum:
    """A bytes datum (``str`` is stored as UTF-8)."""
    return Datum(Kind.BYTES, v.encode("utf-8") if isinstance(v, str) else v)


def decimal_datum(v: Decimal | int | str, precision: int = 0, frac: int = 0) -> Datum:
    """A decimal datum written as DECIMAL(precision, frac); precision 0 uses the value's own."""
    return Datum(Kind.DECIMAL, SizedDecimal(v if isinstance(v, Decimal) else Decimal(v), precision, frac))


def duration_datum(ns: int) -> Datum:
    """A TIME datum in nanoseconds (flag 7; rows carry TIME flattened to an INT datum instead)."""
    return Datum(Kind.DURATION, ns)


def json_datum(v: JsonValue) -> Datum:
    """A JSON datum of a Python JSON value."""
    return Datum(Kind.JSON, v)


# --------------------------------------------------------------------------- encode

_SMALL_VARINT = tuple(b"\x08" + encode_varint(v) for v in range(-64, 64))  # index v + 64
_SMALL_BYTES_HEAD = tuple(b"\x02" + encode_varint(n) for n in range(64))


def encode_decimal_payload(d: SizedDecimal) -> bytes:
    """``precision ‖ frac ‖ bin`` of a decimal datum value."""
    precision, frac = d.precision, d.frac
    if precision == 0:
        precision, frac = precision_and_frac(d.value)
    frac = min(frac, MAX_FRAC)  # TiDB caps the scale at 30
    return bytes((precision, frac)) + encode_decimal_bin(d.value, precision, frac)


def encode_datum(d: Datum) -> bytes:
    """``EncodeValue`` of one datum."""
    kind, v = d
    try:
        if kind == _INT:
            if -64 <= v < 64:
                small: bytes = _SMALL_VARINT[v + 64]
                return small
            return b"\x08" + encode_varint(v)
        if kind == _BYTES:
            n = len(v)
            return (_SMALL_BYTES_HEAD[n] if n < 64 else b"\x02" + encode_varint(n)) + bytes(v)
        if kind == _UINT:
            return b"\x09" + encode_uvarint(v)
        if kind == _NULL:
            return b"\x00"
        return _encode_shared(kind, v)
    except CodecError:
        raise
    except (TypeError, AttributeError, ValueError) as exc:
        raise CodecError(f"cannot encode {d!r}: {exc}") from None


def encode_key_datum(d: Datum) -> bytes:
    """``EncodeKey`` of one datum (memcomparable)."""
    kind, v = d
    try:
        if kind == _INT:
            return b"\x03" + encode_cmp_int(v)
        if kind == _BYTES:
            return b"\x01" + encode_mem_bytes(v)
        if kind == _UINT:
            return b"\x04" + encode_cmp_uint(v)
        if kind == _NULL:
            return b"\x00"
        return _encode_shared(kind, v)
    except CodecError:
        raise
    except (TypeError, AttributeError, ValueError) as exc:
        raise CodecError(f"cannot encode {d!r}: {exc}") from None


def _encode_shared(kind: Kind, v: Any) -> bytes:
    """Kinds whose value and key encodings are the same."""
    if kind == _FLOAT:
        return b"\x05" + encode_cmp_float(v)
    if kind == _DECIMAL:
        return b"\x06" + encode_decimal_payload(v)
    if kind == _DURATION:
        return b"\x07" + encode_cmp_int(v)
    if kind == _JSON:
        code, payload = encode_json(v)
        return bytes((JSON_FLAG, code)) + payload
    raise CodecError(f"cannot encode datum kind {kind!r}")


def encode_value(datums: Iterable[Datum]) -> bytes:
    """``EncodeValue``: the datums' value encodings concatenated."""
    return b"".join([encode_datum(d) for d in datums])


def encode_key(datums: Iterable[Datum]) -> bytes:
    """``EncodeKey``: memcomparable encodings (ints 03, uints 04, bytes 01) concatenated."""
    return b"".join([encode_key_datum(d) for d in datums])


# --------------------------------------------------------------------------- decode


def peek(data: bytes, pos: int = 0) -> int:
    """Length in bytes of the datum starting at ``pos`` (flag included), bounds checked."""
    end = len(data)
    if pos >= end:
        raise CodecError("truncated datum: no flag byte", offset=pos)
    flag = data[pos]
    p = pos + 1
    if flag == NIL_FLAG:
        return 1
    if flag in (INT_FLAG, UINT_FLAG, FLOAT_FLAG, DURATION_FLAG):
        size = 8
    elif flag in (VARINT_FLAG, UVARINT_FLAG):
        return decode_uvarint(data, p)[1] - pos
    elif flag == COMPACT_BYTES_FLAG:
        n, start = decode_uvarint(data, p)
        if n & 1:
            raise CodecError("negative compact bytes length", offset=p)
        size = start - p + (n >> 1)
    elif flag == DECIMAL_FLAG:
        size = decimal_size_at(data, p)
    elif flag == BYTES_FLAG:
        return peek_mem_bytes(data, p) - pos
    elif flag == JSON_FLAG:
        if p >= end:
            raise CodecError("truncated JSON datum: no type code", offset=p)
        size = 1 + json_size(data, data[p], p + 1)
    else:
        raise CodecError(f"unknown datum flag {flag}", offset=pos)
    if p + size > end:
        raise CodecError(f"truncated datum with flag {flag}", offset=pos)
    return 1 + size


def decode_one(data: bytes, pos: int = 0) -> tuple[Datum, int]:
    """Decode the datum at ``pos``; returns ``(datum, next_pos)``."""
    try:
        flag = data[pos]
    except IndexError:
        raise CodecError("truncated datum: no flag byte", offset=pos) from None
    p = pos + 1
    if flag in _UVARINT_PREFIXED:
        if p < len(data) and data[p] < 0x80:
            u = data[p]
            p += 1
        else:
            u, p = decode_uvarint(data, p)
        if flag == VARINT_FLAG:
            return _new(Datum, (_INT, (u >> 1) if not u & 1 else -((u + 1) >> 1))), p
        if flag == UVARINT_FLAG:
            return _new(Datum, (_UINT, u)), p
        if u & 1:
            raise CodecError("negative compact bytes length", offset=pos + 1)
        stop = p + (u >> 1)
        if stop > len(data):
            raise CodecError(f"truncated bytes datum of length {u >> 1}", offset=pos)
        return _new(Datum, (_BYTES, data[p:stop])), stop
    if flag == NIL_FLAG:
        return NULL, p
    return _decode_other(data, flag, pos)


def _decode_other(data: bytes, flag: int, pos: int) -> tuple[Datum, int]:
    p = pos + 1
    end = len(data)
    if flag == FLOAT_FLAG:
        f, p = decode_cmp_float(data, p)
        return _new(Datum, (_FLOAT, f)), p
    if flag == DECIMAL_FLAG:
        if p + 2 > end:
            raise CodecError("truncated decimal datum", offset=pos)
        precision, frac = data[p], data[p + 1]
        dec, p = decode_decimal_bin(data, p + 2, precision, frac)
        return _new(Datum, (_DECIMAL, SizedDecimal(dec, precision, frac))), p
    if flag == JSON_FLAG:
        if p >= end:
            raise CodecError("truncated JSON datum: no type code", offset=pos)
        code = data[p]
        stop = p + 1 + json_size(data, code, p + 1)
        return _new(Datum, (_JSON, decode_json(data, code, p + 1, stop))), stop
    if flag == INT_FLAG:
        i, p = decode_cmp_int(data, p)
        return _new(Datum, (_INT, i)), p
    if flag == UINT_FLAG:
        i, p = decode_cmp_uint(data, p)
        return _new(Datum, (_UINT, i)), p
    if flag == DURATION_FLAG:
        i, p = decode_cmp_int(data, p)
        return _new(Datum, (_DURATION, i)), p
    if flag == BYTES_FLAG:
        b, p = decode_mem_bytes(data, p)
        return _new(Datum, (_BYTES, b)), p
    raise CodecError(f"unknown datum flag {flag}", offset=pos)


def decode_datums(data: bytes, pos: int = 0) -> list[Datum]:
    """Decode datums from ``pos`` to the end of ``data`` (``DecodeRange``-like)."""
    out: list[Datum] = []
    end = len(data)
    while pos < end:
        d, pos = decode_one(data, pos)
        out.append(d)
    return out
