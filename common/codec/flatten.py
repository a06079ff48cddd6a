"""Column types and TiDB's ``flatten`` (Python value -> row datum) / ``unflatten`` (datum -> value).

What a column value becomes inside a binlog row (docs/formats.md#flatten):

=========================================  ====================  ==============================
column type                                datum                 Python value (unflatten)
=========================================  ====================  ==============================
TINY/SHORT/INT24/LONG/LONGLONG/YEAR         INT (UINT unsigned)   ``int``
FLOAT                                       FLOAT (float32 value) ``float`` rounded to float32
DOUBLE                                      FLOAT                 ``float``
DECIMAL/NEWDECIMAL                          DECIMAL (flen, dec)   ``Decimal``
DATE / DATETIME                             UINT packed time      ``date`` / naive ``datetime``
TIMESTAMP                                   UINT packed, **UTC**  aware ``datetime``
DURATION (TIME)                             INT nanoseconds       ``timedelta``
ENUM                                        UINT 1-based index    ``str`` ('' for index 0)
SET                                         UINT bitmask          ``str`` ("a,c", elems order)
BIT                                         UINT big-endian       ``bytes`` of (flen+7)//8
VARCHAR/STRING/VAR_STRING/*BLOB             BYTES                 ``str`` (``bytes`` if binary)
JSON                                        JSON                  JSON value
GEOMETRY                                    BYTES                 ``bytes``
any column, NULL                            NULL                  ``None``
=========================================  ====================  ==============================

Zero and other out-of-``datetime`` dates come back as :class:`~common.codec.mytime.MysqlTime`.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from enum import IntEnum
from typing import Any

from common.codec.datum import NULL, Datum, Kind, SizedDecimal
from common.codec.json_binary import JsonValue
from common.codec.mytime import (
    MysqlTime,
    duration_to_ns,
    ns_to_duration,
    pack_time,
    round_duration,
    round_fsp,
    unpack_date,
    unpack_datetime,
)
from common.codec.number import INT64_MAX, INT64_MIN, UINT64_MAX
from common.errors import CodecError

_F32 = struct.Struct("<f")
_UTC = _dt.UTC


class MySQLType(IntEnum):
    """MySQL column type bytes (``mysql.TypeXxx``)."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    DURATION = 11
    DATETIME = 12
    YEAR = 13
    VARCHAR = 15
    BIT = 16
    JSON = 245
    NEW_DECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


INTEGER_TYPES = frozenset(
    {MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG, MySQLType.YEAR}
)
STRING_TYPES = frozenset(
    {
        MySQLType.VARCHAR,
        MySQLType.STRING,
        MySQLType.VAR_STRING,
        MySQLType.TINY_BLOB,
        MySQLType.MEDIUM_BLOB,
        MySQLType.LONG_BLOB,
        MySQLType.BLOB,
    }
)
TIME_TYPES = frozenset({MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP})
DECIMAL_TYPES = frozenset({MySQLType.DECIMAL, MySQLType.NEW_DECIMAL})

UNSPECIFIED = -1
"""``flen``/``decimal`` not given (TiDB's ``UnspecifiedLength``)."""

BINARY_CHARSET = "binary"
DEFAULT_CHARSET = "utf8mb4"
_PY_CODECS = {
    "utf8mb4": "utf-8",
    "utf8": "utf-8",
    "utf8mb3": "utf-8",
    "ascii": "ascii",
    "latin1": "cp1252",
    "gbk": "gbk",
    "gb18030": "gb18030",
}


@dataclass(frozen=True, slots=True)
class ColumnType:
    """The parts of a column's type that decide how its values are stored in rows."""

    tp: int
    flen: int = UNSPECIFIED
    decimal: int = UNSPECIFIED
    unsigned: bool = False
    charset: str = DEFAULT_CHARSET
    elems: tuple[str, ...] = ()
    py_codec: str = field(init=False, repr=False, compare=False)
    """Python codec of the charset (UTF-8 for unknown charsets); derived."""

    def __post_init__(self) -> None:
        if self.tp == MySQLType.BIT and self.flen > 64:
            raise CodecError(f"BIT({self.flen}) is wider than 64 bits")
        object.__setattr__(self, "py_codec", _PY_CODECS.get(self.charset.lower(), "utf-8"))

    @property
    def is_binary(self) -> bool:
        """Whether string values are raw bytes (charset ``binary``)."""
        return self.charset == BINARY_CHARSET

    @property
    def fsp(self) -> int:
        """Fractional seconds precision of a time column (0 when unspecified)."""
        return self.decimal if 0 <= self.decimal <= 6 else 0


# --------------------------------------------------------------------------- flatten

_new = tuple.__new__
_K_INT, _K_UINT, _K_FLOAT, _K_BYTES, _K_DECIMAL, _K_JSON, _K_DURATION, _K_NULL = (
    Kind.INT,
    Kind.UINT,
    Kind.FLOAT,
    Kind.BYTES,
    Kind.DECIMAL,
    Kind.JSON,
    Kind.DURATION,
    Kind.NULL,
)
_BYTES_LIKE = (bytes, bytearray, memoryview)

FlattenFn = Callable[[Any, ColumnType, _dt.tzinfo], Datum]
UnflattenFn = Callable[[Kind, Any, ColumnType, _dt.tzinfo], Any]


def flatten(value: Any, ct: ColumnType, tz: _dt.tzinfo = _UTC) -> Datum:
    """The datum TiDB writes into a row for ``value`` in a column of type ``ct``.

    Naive TIMESTAMP values are read in ``tz`` (default UTC) and stored in UTC.
    """
    if value is None:
        return NULL
    fn = _FLATTEN.get(ct.tp)
    if fn is None:
        raise CodecError(f"unsupported column type {ct.tp}")
    return fn(value, ct, tz)


def _mismatch(value: Any, ct: ColumnType) -> CodecError:
    return CodecError(f"{type(value).__name__} value {value!r} does not fit column type {_type_name(ct.tp)}")


def _type_name(tp: int) -> str:
    try:
        return MySQLType(tp).name
    except ValueError:
        return str(tp)


def to_float32(f: float) -> float:
    """``f`` rounded to the nearest float32 (as TiDB stores FLOAT columns)."""
    try:
        return float(_F32.unpack(_F32.pack(f))[0])
    except OverflowError:
        raise CodecError(f"{f} overflows a FLOAT column") from None


def _flatten_int(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise _mismatch(value, ct)
    if ct.unsigned and ct.tp != MySQLType.YEAR:
        if not 0 <= value <= UINT64_MAX:
            raise CodecError(f"{value} out of range for an unsigned column")
        return _new(Datum, (_K_UINT, int(value)))
    if not INT64_MIN <= value <= INT64_MAX:
        raise CodecError(f"{value} out of range for a signed column")
    return _new(Datum, (_K_INT, int(value)))


def _flatten_string(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, str):
        try:
            return _new(Datum, (_K_BYTES, value.encode(ct.py_codec)))
        except UnicodeEncodeError as exc:
            raise CodecError(f"string cannot be stored as {ct.charset}: {exc.reason}") from None
    if isinstance(value, _BYTES_LIKE):
        return _new(Datum, (_K_BYTES, bytes(value)))
    raise _mismatch(value, ct)


def _flatten_geometry(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, _BYTES_LIKE):
        return _new(Datum, (_K_BYTES, bytes(value)))
    raise _mismatch(value, ct)


def _flatten_double(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, float | int) and not isinstance(value, bool):
        return _new(Datum, (_K_FLOAT, float(value)))
    raise _mismatch(value, ct)


def _flatten_float(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, float | int) and not isinstance(value, bool):
        return _new(Datum, (_K_FLOAT, to_float32(float(value))))
    raise _mismatch(value, ct)


def _flatten_decimal(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, int | str) and not isinstance(value, bool):
        try:
            d = Decimal(value)
        except ArithmeticError:
            raise _mismatch(value, ct) from None
    elif isinstance(value, float):
        d = Decimal(repr(value))
    else:
        raise _mismatch(value, ct)
    if ct.flen > 0:
        return _new(Datum, (_K_DECIMAL, SizedDecimal(d, ct.flen, max(ct.decimal, 0))))
    return _new(Datum, (_K_DECIMAL, SizedDecimal(d)))


def _flatten_time(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, _dt.datetime):
        if ct.tp == MySQLType.TIMESTAMP:
            value = (value if value.tzinfo else value.replace(tzinfo=tz)).astimezone(_UTC)
        elif ct.tp == MySQLType.DATE:
            return _new(Datum, (_K_UINT, pack_time(value.date())))
        return _new(Datum, (_K_UINT, pack_time(round_fsp(value, ct.fsp))))
    if isinstance(value, _dt.date):
        if ct.tp == MySQLType.TIMESTAMP:
            return _flatten_time(_dt.datetime(value.year, value.month, value.day), ct, tz)
        return _new(Datum, (_K_UINT, pack_time(value)))
    if isinstance(value, MysqlTime):
        return _new(Datum, (_K_UINT, pack_time(value)))
    raise _mismatch(value, ct)


def _flatten_duration(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, _dt.timedelta):
        return _new(Datum, (_K_INT, duration_to_ns(round_duration(value, ct.fsp))))
    raise _mismatch(value, ct)


def _flatten_json(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    jv: JsonValue = value
    return _new(Datum, (_K_JSON, jv))


def _flatten_null(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    return NULL


def _flatten_enum(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value <= len(ct.elems):
            raise CodecError(f"enum index {value} out of range 0..{len(ct.elems)}")
        return _new(Datum, (_K_UINT, value))
    if not isinstance(value, str):
        raise _mismatch(value, ct)
    if value == "":
        return _new(Datum, (_K_UINT, 0))
    if value in ct.elems:
        return _new(Datum, (_K_UINT, ct.elems.index(value) + 1))
    folded = value.casefold()
    for i, name in enumerate(ct.elems, 1):
        if name.casefold() == folded:
            return _new(Datum, (_K_UINT, i))
    raise CodecError(f"{value!r} is not a member of enum {ct.elems!r}")


def _flatten_set(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 <= value < (1 << len(ct.elems)):
            raise CodecError(f"set bitmask {value} out of range for {len(ct.elems)} members")
        return _new(Datum, (_K_UINT, value))
    names: Iterable[str]
    if isinstance(value, str):
        names = value.split(",") if value else ()
    elif isinstance(value, set | frozenset | list | tuple):
        names = value
    else:
        raise _mismatch(value, ct)
    folded = [e.casefold() for e in ct.elems]
    mask = 0
    for name in names:
        if name in ct.elems:
            mask |= 1 << ct.elems.index(name)
        elif isinstance(name, str) and name.casefold() in folded:
            mask |= 1 << folded.index(name.casefold())
        else:
            raise CodecError(f"{name!r} is not a member of set {ct.elems!r}")
    return _new(Datum, (_K_UINT, mask))


def _bit_width(ct: ColumnType) -> int:
    return ct.flen if 1 <= ct.flen <= 64 else 1


def _flatten_bit(value: Any, ct: ColumnType, tz: _dt.tzinfo) -> Datum:
    if isinstance(value, bytes | bytearray):
        v = int.from_bytes(value, "big")
    elif isinstance(value, int) and not isinstance(value, bool):
        v = value
    else:
        raise _mismatch(value, ct)
    if not 0 <= v < (1 << _bit_width(ct)):
        raise CodecError(f"{v} does not fit BIT({_bit_width(ct)})")
    return _new(Datum, (_K_UINT, v))


# --------------------------------------------------------------------------- unflatten


def unflatten(datum: Datum, ct: ColumnType, tz: _dt.tzinfo = _UTC) -> Any:
    """The Python value of a row datum in a column of type ``ct``.

    TIMESTAMP values (UTC in rows) are returned as aware datetimes converted to ``tz``.
    """
    kind, v = datum
    if kind == _K_NULL:
        return None
    fn = _UNFLATTEN.get(ct.tp)
    if fn is None:
        raise CodecError(f"unsupported column type {ct.tp}")
    return fn(kind, v, ct, tz)


def _wrong_kind(kind: Kind, ct: ColumnType) -> CodecError:
    return CodecError(f"{Kind(kind).name} datum does not fit column type {_type_name(ct.tp)}")


def _unflatten_int(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind in (_K_INT, _K_UINT):
        return v & UINT64_MAX if v < 0 and ct.unsigned else v
    raise _wrong_kind(kind, ct)


def _unflatten_string(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_BYTES:
        raise _wrong_kind(kind, ct)
    if ct.charset == BINARY_CHARSET:
        return v
    try:
        return v.decode(ct.py_codec)
    except UnicodeDecodeError as exc:
        raise CodecError(f"string value is not valid {ct.charset}: {exc.reason}") from None


def _unflatten_geometry(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_BYTES:
        raise _wrong_kind(kind, ct)
    return v


def _unflatten_double(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_FLOAT:
        raise _wrong_kind(kind, ct)
    return v


def _unflatten_float(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_FLOAT:
        raise _wrong_kind(kind, ct)
    return to_float32(v)


def _unflatten_decimal(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_DECIMAL:
        raise _wrong_kind(kind, ct)
    return v.value


def _unflatten_date(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    return unpack_date(v)


def _unflatten_datetime(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    return unpack_datetime(v)


def _unflatten_timestamp(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    value = unpack_datetime(v)
    if isinstance(value, _dt.datetime):
        value = value.replace(tzinfo=_UTC)
        return value if tz is _UTC else value.astimezone(tz)
    return value


def _unflatten_duration(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind in (_K_INT, _K_DURATION):
        return ns_to_duration(v)
    raise _wrong_kind(kind, ct)


def _unflatten_json(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_JSON:
        raise _wrong_kind(kind, ct)
    return v


def _unflatten_enum(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    if v == 0:
        return ""
    if v > len(ct.elems):
        raise CodecError(f"enum index {v} out of range 1..{len(ct.elems)}")
    return ct.elems[v - 1]


def _unflatten_set(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    if v >> len(ct.elems):
        raise CodecError(f"set bitmask {v} has bits beyond its {len(ct.elems)} members")
    return ",".join(name for i, name in enumerate(ct.elems) if v >> i & 1)


def _unflatten_bit(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    if kind != _K_UINT:
        raise _wrong_kind(kind, ct)
    width = _bit_width(ct)
    if v >> width:
        raise CodecError(f"{v} does not fit BIT({width})")
    return v.to_bytes((width + 7) // 8, "big")


def _unflatten_null(kind: Kind, v: Any, ct: ColumnType, tz: _dt.tzinfo) -> Any:
    raise _wrong_kind(kind, ct)


_FLATTEN: dict[int, FlattenFn] = {
    **dict.fromkeys(INTEGER_TYPES, _flatten_int),
    **dict.fromkeys(STRING_TYPES, _flatten_string),
    **dict.fromkeys(DECIMAL_TYPES, _flatten_decimal),
    **dict.fromkeys(TIME_TYPES, _flatten_time),
    MySQLType.DOUBLE: _flatten_double,
    MySQLType.FLOAT: _flatten_float,
    MySQLType.DURATION: _flatten_duration,
    MySQLType.JSON: _flatten_json,
    MySQLType.ENUM: _flatten_enum,
    MySQLType.SET: _flatten_set,
    MySQLType.BIT: _flatten_bit,
    MySQLType.GEOMETRY: _flatten_geometry,
    MySQLType.NULL: _flatten_null,
}

_UNFLATTEN: dict[int, UnflattenFn] = {
    **dict.fromkeys(INTEGER_TYPES, _unflatten_int),
    **dict.fromkeys(STRING_TYPES, _unflatten_string),
    **dict.fromkeys(DECIMAL_TYPES, _unflatten_decimal),
    MySQLType.DATE: _unflatten_date,
    MySQLType.DATETIME: _unflatten_datetime,
    MySQLType.TIMESTAMP: _unflatten_timestamp,
    MySQLType.DOUBLE: _unflatten_double,
    MySQLType.FLOAT: _unflatten_float,
    MySQLType.DURATION: _unflatten_duration,
    MySQLType.JSON: _unflatten_json,
    MySQLType.ENUM: _unflatten_enum,
    MySQLType.SET: _unflatten_set,
    MySQLType.BIT: _unflatten_bit,
    MySQLType.GEOMETRY: _unflatten_geometry,
    MySQLType.NULL: _unflatten_null,
}
