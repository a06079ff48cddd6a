"""DEFAULT clauses: the literal text of a column default and the Python value it stands for (pure).

``default_literal(ctype, value)`` writes the text a DEFAULT clause holds, as TiDB's SHOW CREATE TABLE
prints it (quoted strings such as ``'5'`` and ``'1.50'``, ``X'..'`` for binary columns, ``b'101'``
for BIT, TIMESTAMP as UTC text); ``default_value(col)`` parses ``col.default`` back into the value
:func:`common.schema.types.check_value` gives.  TEXT, BLOB and JSON columns cannot have a default
(as in TiDB) and ``CURRENT_TIMESTAMP`` is not supported.  The date/time text parsers are shared
with the stores.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from decimal import Decimal

from common.codec.flatten import ColumnType, MySQLType, to_float32
from common.codec.mytime import format_duration, format_time
from common.schema.model import ColumnInfo, SchemaError
from common.schema.types import (
    _INTEGER_TYPES,
    _NO_DEFAULT_TYPES,
    ValueCheckError,
    _quote,
    _scan_quoted,
    _type_label,
    check_type_value,
)


@dataclass(frozen=True, slots=True)
class _Literal:
    kind: str  # "null" | "str" | "num" | "bytes" | "bool"
    text: str = ""
    raw: bytes = b""


_NUM_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_HEX_RE = re.compile(r"[xX]'([0-9a-fA-F]*)'|0x([0-9a-fA-F]+)")
_BITS_RE = re.compile(r"[bB]'([01]*)'|0b([01]+)")


def _parse_literal(text: str, where: str) -> _Literal:
    t = text.strip()
    up = t.upper()
    if up == "NULL":
        return _Literal("null")
    if up in ("TRUE", "FALSE"):
        return _Literal("bool", "1" if up == "TRUE" else "0")
    if up.startswith(("CURRENT_TIMESTAMP", "NOW(")):
        raise SchemaError(f"{where}: non-constant DEFAULT {t} is not supported")
    if t[:1] in ("'", '"'):
        value, end = _scan_quoted(t, 0, where)
        if t[end:].strip():
            raise SchemaError(f"{where}: unexpected {t[end:].strip()!r} after the DEFAULT string")
        return _Literal("str", value)
    if _NUM_RE.fullmatch(t):
        return _Literal("num", t)
    m = _HEX_RE.fullmatch(t)
    if m is not None:
        digits = m.group(1) if m.group(1) is not None else m.group(2)
        if len(digits) % 2:
            digits = "0" + digits
        return _Literal("bytes", raw=bytes.fromhex(digits))
    m = _BITS_RE.fullmatch(t)
    if m is not None:
        bits = m.group(1) if m.group(1) is not None else m.group(2)
        v = int(bits, 2) if bits else 0
        return _Literal("bytes", raw=v.to_bytes((len(bits) + 7) // 8, "big"))
    raise SchemaError(f"{where}: cannot parse DEFAULT {t!r}")


_DATE_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_DATETIME_RE = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6})\d*)?)?")
_TIME_RE = re.compile(r"(-)?(\d{1,3}):(\d{1,2}):(\d{1,2})(?:\.(\d{1,6})\d*)?")


def _usec(frac: str | None) -> int:
    return int((frac or "").ljust(6, "0"))


def parse_date_text(text: str) -> _dt.date:
    """``YYYY-MM-DD`` as a date; ValueError when malformed."""
    m = _DATE_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a date: {text!r}")
    return _dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))


def parse_datetime_text(text: str) -> _dt.datetime:
    """``YYYY-MM-DD[ HH:MM:SS[.ffffff]]`` as a naive datetime (fraction beyond 6 digits cut)."""
    m = _DATETIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a datetime: {text!r}")
    y, mo, d, h, mi, s, frac = m.groups()
    return _dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), _usec(frac))


def parse_time_text(text: str) -> _dt.timedelta:
    """``[-]HHH:MM:SS[.ffffff]`` as a timedelta."""
    m = _TIME_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a time: {text!r}")
    neg, h, mi, s, frac = m.groups()
    if int(mi) > 59 or int(s) > 59:
        raise ValueError(f"not a time: {text!r}")
    td = _dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(s), microseconds=_usec(frac))
    return -td if neg else td


def _literal_to_python(ct: ColumnType, lit: _Literal, where: str) -> object:
    tp = ct.tp
    kind, text = lit.kind, lit.text
    try:
        if tp in _INTEGER_TYPES:
            if kind == "bytes":
                return int.from_bytes(lit.raw, "big")
            d = Decimal(text.strip())
            if d != d.to_integral_value():
                raise ValueError(f"{text!r} is not an integer")
            return int(d)
        if tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
            return float(text)
        if tp in (MySQLType.NEW_DECIMAL, MySQLType.DECIMAL):
            return text.strip()
        if tp == MySQLType.BIT:
            if kind == "bytes":
                return lit.raw
            return int(Decimal(text))
        if tp in (MySQLType.STRING, MySQLType.VARCHAR, MySQLType.VAR_STRING):
            if ct.is_binary:
                return lit.raw if kind == "bytes" else text.encode("utf-8")
            return lit.raw.decode("utf-8") if kind == "bytes" else text
        if kind not in ("str", "num"):
            raise ValueError(f"a {kind} literal does not fit {_type_label(ct)}")
        if tp == MySQLType.DATE:
            return parse_date_text(text)
        if tp in (MySQLType.DATETIME, MySQLType.TIMESTAMP):
            return parse_datetime_text(text)
        if tp == MySQLType.DURATION:
            return parse_time_text(text)
        if tp in (MySQLType.ENUM, MySQLType.SET):
            return text
    except (ValueError, ArithmeticError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{where}: DEFAULT does not fit {_type_label(ct)}: {exc}") from None
    raise SchemaError(f"{where}: {_type_label(ct)} columns cannot have a DEFAULT")


def default_value(col: ColumnInfo) -> object | None:
    """The checked Python value of ``col.default`` (None when there is none or it is NULL)."""
    if col.default is None:
        return None
    where = f"column {col.name}"
    lit = _parse_literal(col.default, where)
    if lit.kind == "null":
        if not col.nullable:
            raise SchemaError(f"{where}: DEFAULT NULL on a NOT NULL column")
        return None
    if col.ctype.tp in _NO_DEFAULT_TYPES:
        raise SchemaError(f"{where}: TEXT, BLOB and JSON columns cannot have a DEFAULT (as in TiDB)")
    value = _literal_to_python(col.ctype, lit, where)
    try:
        return check_type_value(col.ctype, value, col.name)
    except ValueCheckError as exc:
        raise ValueCheckError(f"invalid DEFAULT: {exc}") from None


def _float32_text(f: float) -> str:
    """Shortest decimal text that reads back as the same float32."""
    for digits in range(6, 10):
        text = f"{f:.{digits}g}"
        if to_float32(float(text)) == f:
            return text
    return repr(f)


def default_literal(col_type: ColumnType, value: object) -> str:
    """The DEFAULT clause literal of ``value`` (checked first), e.g. ``'5'``, ``X'00ff'``, ``b'101'``."""
    if value is None:
        return "NULL"
    if col_type.tp in _NO_DEFAULT_TYPES:
        raise SchemaError(f"{_type_label(col_type)} columns cannot have a DEFAULT (as in TiDB)")
    v = check_type_value(col_type, value, "default")
    tp = col_type.tp
    if tp == MySQLType.BIT:
        assert isinstance(v, bytes)
        return f"b'{int.from_bytes(v, 'big'):b}'"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    if tp == MySQLType.FLOAT:
        assert isinstance(v, float)
        return _quote(_float32_text(v))
    if isinstance(v, float):
        return _quote(repr(v))
    if isinstance(v, Decimal):
        return _quote(f"{v:f}")
    if isinstance(v, _dt.datetime):
        return _quote(format_time(v.replace(tzinfo=None), col_type.fsp))
    if isinstance(v, _dt.date):
        return _quote(format_time(v))
    if isinstance(v, _dt.timedelta):
        return _quote(format_duration(v, col_type.fsp))
    return _quote(str(v))
