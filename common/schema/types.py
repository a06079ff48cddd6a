"""Column types: parse MySQL type text, check values, and read/write DEFAULT literals (pure).

:func:`parse_type` turns a type as a user writes it into the :class:`ColumnType` the row codec
uses and the canonical text MySQL's ``SHOW CREATE TABLE`` prints (lower case, TiDB's default
display widths).  :func:`check_value` validates a Python value for a column and returns the one
normalized value that :func:`common.codec.flatten.flatten` accepts and ``unflatten`` gives back,
so what the writer stores equals what a reader decodes.

=================================  ===========================  ===========  ================  ==========
user text (case-insensitive)       canonical text               tp           flen / decimal    Python value
=================================  ===========================  ===========  ================  ==========
TINYINT[(w)] [UNSIGNED], BOOL      tinyint(4), tinyint(3) uns.  TINY         w / 0             int
SMALLINT[(w)] [UNSIGNED]           smallint(6), (5) unsigned    SHORT        w / 0             int
MEDIUMINT[(w)] [UNSIGNED]          mediumint(9), (8) unsigned   INT24        w / 0             int
INT, INTEGER [(w)] [UNSIGNED]      int(11), int(10) unsigned    LONG         w / 0             int
BIGINT[(w)] [UNSIGNED]             bigint(20) [unsigned]        LONGLONG     w / 0             int
FLOAT                              float                        FLOAT        12 / -1           float (a float32)
DOUBLE [PRECISION], REAL           double                       DOUBLE       22 / -1           float
DECIMAL, NUMERIC, DEC, FIXED       decimal(p,s), p,s = 10,0     NEW_DECIMAL  p / s             Decimal, s digits
CHAR[(n)]                          char(n), n = 1               STRING       n / 0             str
VARCHAR(n)                         varchar(n)                   VARCHAR      n / 0             str
[TINY|MEDIUM|LONG]TEXT             same, lower case             [*_]BLOB     bytes / 0         str
BINARY[(n)]                        binary(n), n = 1             STRING       n / 0  (binary)   bytes (n long)
VARBINARY(n)                       varbinary(n)                 VARCHAR      n / 0  (binary)   bytes
[TINY|MEDIUM|LONG]BLOB             same, lower case             [*_]BLOB     bytes / 0 (bin.)  bytes
DATE                               date                         DATE         10 / 0            date
DATETIME[(fsp)]                    datetime[(fsp)]              DATETIME     19[+1+fsp] / fsp  naive datetime
TIMESTAMP[(fsp)]                   timestamp[(fsp)]             TIMESTAMP    19[+1+fsp] / fsp  datetime, UTC
TIME[(fsp)]                        time[(fsp)]                  DURATION     10[+1+fsp] / fsp  timedelta
YEAR[(4)]                          year(4)                      YEAR         4 / 0 (unsigned)  int
JSON                               json                         JSON         -1 / 0            JSON value
ENUM('a',...)                      enum('a','b')                ENUM         max len / -1      str
SET('a',...)                       set('a','b')                 SET          sum+n-1 / -1      str "a,c"
BIT[(n)]                           bit(n), n = 1                BIT          n / 0  (binary)   bytes
=================================  ===========================  ===========  ================  ==========

Charset is ``binary`` where marked, ``utf8mb4`` otherwise.  ``[*_]BLOB`` is TINY_BLOB, BLOB,
MEDIUM_BLOB or LONG_BLOB by size, with flen 255, 65535, 16777215 or 4294967295 bytes.
``w`` is the display width written by the user, else TiDB's default shown in the canonical
column.  Limits: DECIMAL p 1..65, s 0..30, s <= p; CHAR/BINARY n 0..255; VARCHAR n 0..16383
(utf8mb4); VARBINARY n 0..65535; fsp 0..6; BIT n 1..64; SET at most 64 members; member names
lose trailing spaces and must differ case-insensitively (as in MySQL).  YEAR carries the
unsigned flag as in TiDB (its datum stays signed INT).

Value rules of :func:`check_value` (MySQL strict mode; an error instead of a silent change):

* integers: ``int`` (not ``bool``) in the type's range; YEAR 1901..2155 or 0.
* FLOAT/DOUBLE: finite ``int``/``float``; FLOAT is rounded to the nearest float32.
* DECIMAL: ``Decimal``/``int``/``str`` (no ``float``: pass its exact decimal text); extra fraction
  digits are rounded half away from zero, more than p-s integer digits is an error; -0 becomes 0.
* CHAR/VARCHAR: ``str`` of at most n characters (code points); CHAR drops trailing spaces first
  (TiDB stores CHAR without them, MySQL returns CHAR without them).  TEXT family: at most
  255/65535/16M-1/4G-1 UTF-8 bytes.  Strings must encode as UTF-8 (no lone surrogates).
* BINARY/VARBINARY/BLOB: ``bytes``-like, length in bytes; BINARY(n) is padded with zero bytes
  to n, as TiDB and MySQL store it.
* DATE: ``date`` (not ``datetime``).  DATETIME: naive ``datetime``, rounded half-up to fsp.
  TIMESTAMP: ``datetime``; **naive means UTC**, aware ones are converted; rounded to fsp and
  within 1970-01-01 00:00:01 .. 2038-01-19 03:14:07.999999 UTC; returned with ``tzinfo=UTC``.
  Zero dates are not accepted.
* TIME: ``timedelta`` rounded half away from zero to fsp, within ±838:59:59.
* JSON: ``None``/``bool``/``int`` (-2**63 .. 2**64-1)/finite ``float``/``str``/``list``
  (tuples become lists)/``dict`` with ``str`` keys, nested at most 100 deep.  A top-level
  ``None`` is SQL NULL: a JSON ``null`` document cannot be stored at the top level.
* ENUM: a member name, matched case-insensitively; returns the declared spelling.
* SET: ``"a,c"`` or an iterable of member names (case-insensitive, duplicates collapse);
  returns the members in declared order joined by ``,`` (``""`` is the empty set).
* BIT(n): ``int`` 0..2**n-1 or big-endian ``bytes`` whose value fits; returns (n+7)//8 bytes.
* ``None``: only for nullable columns (callers fill AUTO_INCREMENT values before checking).

DEFAULT literals (``ColumnInfo.default``, written by :func:`default_literal`, read by
:func:`default_value`): ``NULL``; a quoted string (``'...'`` with ``''``, ``\\\\``, ``\\0``
escapes; values of numeric, decimal, date/time, ENUM and SET columns are written this way too,
as TiDB's ``SHOW CREATE TABLE`` does); ``X'hex'`` for binary columns; ``b'101'`` for BIT.
TIMESTAMP defaults are UTC wall-clock text (the stores run their sessions in UTC).  Reading
also accepts unquoted numbers, ``TRUE``/``FALSE``, ``0x..``, ``0b..`` and double-quoted strings.
TEXT, BLOB and JSON columns cannot have a default (as in TiDB); ``CURRENT_TIMESTAMP`` is not
supported.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from common.codec.flatten import (
    BINARY_CHARSET,
    DEFAULT_CHARSET,
    UNSPECIFIED,
    ColumnType,
    MySQLType,
    to_float32,
)
from common.codec.json_binary import MAX_DEPTH
from common.codec.mytime import round_duration, round_fsp
from common.errors import CodecError
from common.schema.model import ColumnInfo, SchemaError

__all__ = [
    "ValueCheckError",
    "check_type_value",
    "check_value",
    "is_integer_type",
    "parse_type",
]


class ValueCheckError(SchemaError):
    """A value does not fit its column (wrong Python type, out of range, too long, not a member)."""


# ----------------------------------------------------------------------------- limits

MAX_DECIMAL_PRECISION = 65
MAX_DECIMAL_SCALE = 30
MAX_CHAR_LENGTH = 255
MAX_VARCHAR_LENGTH = 16383
"""utf8mb4: 65535 bytes / 4 bytes per character."""
MAX_VARBINARY_LENGTH = 65535
MAX_FSP = 6
MAX_BIT_WIDTH = 64
MAX_SET_MEMBERS = 64
MAX_ENUM_MEMBERS = 65535
MAX_DISPLAY_WIDTH = 255

_INT_BITS = {MySQLType.TINY: 8, MySQLType.SHORT: 16, MySQLType.INT24: 24, MySQLType.LONG: 32, MySQLType.LONGLONG: 64}
_INT_NAMES = {
    MySQLType.TINY: "tinyint",
    MySQLType.SHORT: "smallint",
    MySQLType.INT24: "mediumint",
    MySQLType.LONG: "int",
    MySQLType.LONGLONG: "bigint",
}
# default display width: (signed, unsigned)
_INT_WIDTHS = {
    MySQLType.TINY: (4, 3),
    MySQLType.SHORT: (6, 5),
    MySQLType.INT24: (9, 8),
    MySQLType.LONG: (11, 10),
    MySQLType.LONGLONG: (20, 20),
}
_BLOB_BYTES = {
    MySQLType.TINY_BLOB: 255,
    MySQLType.BLOB: 65535,
    MySQLType.MEDIUM_BLOB: 16777215,
    MySQLType.LONG_BLOB: 4294967295,
}
_BLOB_NAMES = {
    MySQLType.TINY_BLOB: "tiny",
    MySQLType.BLOB: "",
    MySQLType.MEDIUM_BLOB: "medium",
    MySQLType.LONG_BLOB: "long",
}
_INTEGER_TYPES = frozenset((*_INT_BITS, MySQLType.YEAR))
_NO_DEFAULT_TYPES = frozenset((*_BLOB_BYTES, MySQLType.JSON))

TIMESTAMP_MIN = _dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=_dt.UTC)
TIMESTAMP_MAX = _dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=_dt.UTC)
TIME_MAX = _dt.timedelta(hours=838, minutes=59, seconds=59)
JSON_INT_MIN = -(1 << 63)
JSON_INT_MAX = (1 << 64) - 1

_DEC_CONTEXT = decimal.Context(prec=MAX_DECIMAL_PRECISION + MAX_DECIMAL_SCALE + 10, rounding=decimal.ROUND_HALF_UP)


def is_integer_type(ct: ColumnType) -> bool:
    """TINYINT..BIGINT and YEAR (TiDB's ``mysql.IsIntegerType``)."""
    return ct.tp in _INTEGER_TYPES


# ----------------------------------------------------------------------------- parse_type


@dataclass(frozen=True, slots=True)
class _Parsed:
    name: str
    args: tuple[int, ...] | None  # None = no parentheses
    elems: tuple[str, ...] | None  # ENUM / SET members
    attrs: tuple[str, ...]


_NAME_RE = re.compile(r"\s*([a-z][a-z0-9_]*)", re.IGNORECASE)
_ARG_RE = re.compile(r"\s*(\d+)\s*")
_ATTR_RE = re.compile(r"\s*([a-z]+)", re.IGNORECASE)
_PRECISION_RE = re.compile(r"\s+precision\b", re.IGNORECASE)
_OPEN_RE = re.compile(r"\s*\(")


def _scan(text: str) -> _Parsed:
    m = _NAME_RE.match(text)
    if m is None:
        raise SchemaError(f"unknown column type {text!r}")
    name = m.group(1).lower()
    pos = m.end()
    if name == "double":  # DOUBLE PRECISION
        m2 = _PRECISION_RE.match(text, pos)
        if m2 is not None:
            pos = m2.end()
    args: tuple[int, ...] | None = None
    elems: tuple[str, ...] | None = None
    m = _OPEN_RE.match(text, pos)
    if m is not None:
        pos = m.end()
        if name in ("enum", "set"):
            elems, pos = _scan_members(text, pos)
        else:
            close = text.find(")", pos)
            if close < 0:
                raise SchemaError(f"column type {text!r}: missing ')'")
            parts = text[pos:close].split(",")
            vals = []
            for part in parts:
                am = _ARG_RE.fullmatch(part)
                if am is None:
                    raise SchemaError(f"column type {text!r}: bad length or precision {part.strip()!r}")
                vals.append(int(am.group(1)))
            args = tuple(vals)
            pos = close + 1
    attrs: list[str] = []
    while True:
        m = _ATTR_RE.match(text, pos)
        if m is None:
            break
        attrs.append(m.group(1).lower())
        pos = m.end()
    if text[pos:].strip():
        raise SchemaError(f"column type {text!r}: unexpected {text[pos:].strip()!r}")
    return _Parsed(name, args, elems, tuple(attrs))


_ESCAPES = {"0": "\0", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a"}


def _scan_quoted(text: str, pos: int, what: str) -> tuple[str, int]:
    """A MySQL quoted string starting at ``text[pos]`` (``'`` or ``"``); returns (value, end)."""
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            if i + 1 >= n:
                break
            nxt = text[i + 1]
            if nxt in "%_":
                out.append("\\" + nxt)
            else:
                out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if ch == quote:
            if i + 1 < n and text[i + 1] == quote:
                out.append(quote)
                i += 2
                continue
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise SchemaError(f"{what}: unterminated quoted string")


def _scan_members(text: str, pos: int) -> tuple[tuple[str, ...], int]:
    members: list[str] = []
    n = len(text)
    while True:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos >= n or text[pos] not in "'\"":
            raise SchemaError(f"column type {text!r}: expected a quoted member at offset {pos}")
        value, pos = _scan_quoted(text, pos, f"column type {text!r}")
        members.append(value.rstrip(" "))
        while pos < n and text[pos].isspace():
            pos += 1
        if pos < n and text[pos] == ",":
            pos += 1
            continue
        if pos < n and text[pos] == ")":
            return tuple(members), pos + 1
        raise SchemaError(f"column type {text!r}: expected ',' or ')' at offset {pos}")


def _quote(s: str) -> str:
    """A single-quoted MySQL string literal (``'`` doubled, backslash and NUL escaped)."""
    return "'" + s.replace("\\", "\\\\").replace("'", "''").replace("\0", "\\0") + "'"


_TEMPORAL = {"date": MySQLType.DATE, "datetime": MySQLType.DATETIME, "timestamp": MySQLType.TIMESTAMP}


def parse_type(text: str) -> tuple[ColumnType, str]:
    """The column type and canonical text of a MySQL type such as ``INT UNSIGNED`` or ``decimal(5,2)``."""
    p = _scan(text)
    attrs = set(p.attrs)
    if len(attrs) != len(p.attrs) or not attrs <= {"unsigned", "signed"} or len(attrs) > 1:
        raise SchemaError(f"column type {text!r}: unsupported attribute(s) {' '.join(p.attrs)}")
    unsigned = "unsigned" in attrs
    name = p.name
    if attrs and name not in ("tinyint", "smallint", "mediumint", "int", "integer", "bigint"):
        raise SchemaError(f"column type {text!r}: {' '.join(p.attrs).upper()} only applies to integer types")

    def nargs(*allowed: int) -> tuple[int, ...]:
        got = 0 if p.args is None else len(p.args)
        if got not in allowed:
            if allowed == (0,):
                raise SchemaError(f"column type {text!r}: {name.upper()} takes no length or precision")
            raise SchemaError(f"column type {text!r}: wrong number of arguments for {name.upper()}")
        return p.args or ()

    if name in ("bool", "boolean"):
        nargs(0)
        return ColumnType(MySQLType.TINY, 1, 0), "tinyint(1)"
    int_tp = {
        "tinyint": MySQLType.TINY,
        "smallint": MySQLType.SHORT,
        "mediumint": MySQLType.INT24,
        "int": MySQLType.LONG,
        "integer": MySQLType.LONG,
        "bigint": MySQLType.LONGLONG,
    }.get(name)
    if int_tp is not None:
        a = nargs(0, 1)
        width = a[0] if a else _INT_WIDTHS[int_tp][unsigned]
        if not 1 <= width <= MAX_DISPLAY_WIDTH:
            raise SchemaError(f"column type {text!r}: display width must be 1..{MAX_DISPLAY_WIDTH}")
        canon = f"{_INT_NAMES[int_tp]}({width})" + (" unsigned" if unsigned else "")
        return ColumnType(int_tp, width, 0, unsigned), canon
    if name == "float":
        nargs(0)
        return ColumnType(MySQLType.FLOAT, 12, UNSPECIFIED), "float"
    if name in ("double", "real"):
        nargs(0)
        return ColumnType(MySQLType.DOUBLE, 22, UNSPECIFIED), "double"
    if name in ("decimal", "numeric", "dec", "fixed"):
        a = nargs(0, 1, 2)
        prec = a[0] if a else 10
        scale = a[1] if len(a) > 1 else 0
        if not 1 <= prec <= MAX_DECIMAL_PRECISION:
            raise SchemaError(f"column type {text!r}: DECIMAL precision must be 1..{MAX_DECIMAL_PRECISION}")
        if scale > MAX_DECIMAL_SCALE:
            raise SchemaError(f"column type {text!r}: DECIMAL scale must be at most {MAX_DECIMAL_SCALE}")
        if scale > prec:
            raise SchemaError(f"column type {text!r}: DECIMAL scale {scale} is larger than precision {prec}")
        return ColumnType(MySQLType.NEW_DECIMAL, prec, scale), f"decimal({prec},{scale})"
    if name in ("char", "binary"):
        a = nargs(0, 1)
        n = a[0] if a else 1
        if n > MAX_CHAR_LENGTH:
            raise SchemaError(f"column type {text!r}: {name.upper()} length must be at most {MAX_CHAR_LENGTH}")
        cs = BINARY_CHARSET if name == "binary" else DEFAULT_CHARSET
        return ColumnType(MySQLType.STRING, n, 0, charset=cs), f"{name}({n})"
    if name in ("varchar", "varbinary"):
        if p.args is None:
            raise SchemaError(f"column type {text!r}: {name.upper()} needs a length")
        (n,) = nargs(1)
        limit = MAX_VARCHAR_LENGTH if name == "varchar" else MAX_VARBINARY_LENGTH
        if n > limit:
            raise SchemaError(f"column type {text!r}: {name.upper()} length must be at most {limit}")
        cs = BINARY_CHARSET if name == "varbinary" else DEFAULT_CHARSET
        return ColumnType(MySQLType.VARCHAR, n, 0, charset=cs), f"{name}({n})"
    m = re.fullmatch(r"(tiny|medium|long)?(text|blob)", name)
    if m is not None:
        nargs(0)
        size, kind = m.group(1) or "", m.group(2)
        tp = {"tiny": MySQLType.TINY_BLOB, "": MySQLType.BLOB, "medium": MySQLType.MEDIUM_BLOB}.get(
            size, MySQLType.LONG_BLOB
        )
        cs = BINARY_CHARSET if kind == "blob" else DEFAULT_CHARSET
        return ColumnType(tp, _BLOB_BYTES[tp], 0, charset=cs), name
    if name == "date":
        nargs(0)
        return ColumnType(MySQLType.DATE, 10, 0), "date"
    if name in ("datetime", "timestamp", "time"):
        a = nargs(0, 1)
        fsp = a[0] if a else 0
        if fsp > MAX_FSP:
            raise SchemaError(f"column type {text!r}: fractional seconds precision must be 0..{MAX_FSP}")
        tp = _TEMPORAL.get(name, MySQLType.DURATION)
        base = 10 if tp == MySQLType.DURATION else 19
        flen = base + (fsp + 1 if fsp else 0)
        return ColumnType(tp, flen, fsp), name + (f"({fsp})" if fsp else "")
    if name == "year":
        a = nargs(0, 1)
        if a and a[0] != 4:
            raise SchemaError(f"column type {text!r}: only YEAR(4) is supported")
        return ColumnType(MySQLType.YEAR, 4, 0, unsigned=True), "year(4)"
    if name == "json":
        nargs(0)
        return ColumnType(MySQLType.JSON, UNSPECIFIED, 0), "json"
    if name in ("enum", "set"):
        if p.elems is None:
            raise SchemaError(f"column type {text!r}: {name.upper()} needs a member list")
        return _parse_members(text, name, p.elems)
    if name == "bit":
        a = nargs(0, 1)
        n = a[0] if a else 1
        if not 1 <= n <= MAX_BIT_WIDTH:
            raise SchemaError(f"column type {text!r}: BIT width must be 1..{MAX_BIT_WIDTH}")
        return ColumnType(MySQLType.BIT, n, 0, charset=BINARY_CHARSET), f"bit({n})"
    raise SchemaError(f"unknown column type {text!r}")


def _parse_members(text: str, name: str, elems: tuple[str, ...]) -> tuple[ColumnType, str]:
    folded = [e.casefold() for e in elems]
    if len(set(folded)) != len(folded):
        dup = next(e for i, e in enumerate(elems) if folded.index(e.casefold()) != i)
        raise SchemaError(f"column type {text!r}: duplicate member {dup!r}")
    if name == "set":
        if len(elems) > MAX_SET_MEMBERS:
            raise SchemaError(f"column type {text!r}: SET has more than {MAX_SET_MEMBERS} members")
        bad = [e for e in elems if "," in e]
        if bad:
            raise SchemaError(f"column type {text!r}: SET member {bad[0]!r} contains ','")
        flen = sum(len(e) for e in elems) + len(elems) - 1
        tp = MySQLType.SET
    else:
        if len(elems) > MAX_ENUM_MEMBERS:
            raise SchemaError(f"column type {text!r}: ENUM has more than {MAX_ENUM_MEMBERS} members")
        flen = max(len(e) for e in elems)
        tp = MySQLType.ENUM
    canon = f"{name}({','.join(_quote(e) for e in elems)})"
    return ColumnType(tp, flen, UNSPECIFIED, elems=elems), canon


# ----------------------------------------------------------------------------- check_value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fail(name: str, value: object, rule: str) -> ValueCheckError:
    return ValueCheckError(f"column {name}: {_short(value)} {rule}")


def _type_label(ct: ColumnType) -> str:
    try:
        return MySQLType(ct.tp).name
    except ValueError:
        return str(ct.tp)


def check_value(col: ColumnInfo, value: object) -> object:
    """The normalized value of ``value`` for ``col`` (see the module docstring), or ValueCheckError."""
    if value is None:
        if not col.nullable:
            raise ValueCheckError(f"column {col.name}: NULL in a NOT NULL column")
        return None
    return check_type_value(col.ctype, value, col.name)


def check_type_value(ct: ColumnType, value: object, name: str = "value") -> object:
    """:func:`check_value` for a bare column type (``None`` passes); ``name`` labels errors."""
    if value is None:
        return None
    fn = _CHECKERS.get(ct.tp)
    if fn is None:
        raise ValueCheckError(f"column {name}: unsupported column type {_type_label(ct)}")
    return fn(ct, value, name)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_int(ct: ColumnType, value: object, name: str) -> object:
    if not _is_int(value):
        raise _fail(name, value, f"is not an int ({_type_label(ct)} column)")
    assert isinstance(value, int)
    bits = _INT_BITS[MySQLType(ct.tp)]
    lo, hi = (0, (1 << bits) - 1) if ct.unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if not lo <= value <= hi:
        kind = "unsigned " if ct.unsigned else ""
        raise _fail(name, value, f"is out of range {lo}..{hi} ({kind}{_type_label(ct)})")
    return int(value)


def _check_year(ct: ColumnType, value: object, name: str) -> object:
    if not _is_int(value):
        raise _fail(name, value, "is not an int (YEAR column)")
    assert isinstance(value, int)
    if value != 0 and not 1901 <= value <= 2155:
        raise _fail(name, value, "is out of range for YEAR (1901..2155 or 0)")
    return int(value)


def _check_real(ct: ColumnType, value: object, name: str) -> object:
    if not (_is_int(value) or isinstance(value, float)):
        raise _fail(name, value, f"is not a float ({_type_label(ct)} column)")
    assert isinstance(value, int | float)
    try:
        f = float(value)
    except OverflowError:
        raise _fail(name, value, f"is out of range for {_type_label(ct)}") from None
    if not math.isfinite(f):
        raise _fail(name, value, f"is not finite ({_type_label(ct)} column)")
    if ct.tp == MySQLType.FLOAT:
        try:
            return to_float32(f)
        except CodecError:
            raise _fail(name, value, "is out of range for FLOAT") from None
    return f


def _decimal_ps(ct: ColumnType) -> tuple[int, int]:
    prec = ct.flen if ct.flen > 0 else 10
    scale = ct.decimal if ct.decimal >= 0 else 0
    return prec, scale


def _check_decimal(ct: ColumnType, value: object, name: str) -> object:
    prec, scale = _decimal_ps(ct)
    if isinstance(value, Decimal):
        d = value
    elif _is_int(value) or isinstance(value, str):
        assert isinstance(value, int | str)
        try:
            d = Decimal(value.strip() if isinstance(value, str) else value)
        except decimal.InvalidOperation:
            raise _fail(name, value, "is not a decimal number") from None
    else:
        raise _fail(name, value, "is not a Decimal, int or str (DECIMAL column)")
    if not d.is_finite():
        raise _fail(name, value, "is not finite (DECIMAL column)")
    try:
        q = d.quantize(Decimal(1).scaleb(-scale), context=_DEC_CONTEXT)
    except decimal.InvalidOperation:  # more digits than the context holds: far out of range
        q = None
    if q is None or (q.adjusted() >= prec - scale and not q.is_zero()):
        raise _fail(name, value, f"is out of range for DECIMAL({prec},{scale}) (at most {prec - scale} integer digits)")
    if q.is_zero() and q.is_signed():
        q = q.copy_abs()
    return q


def _check_char(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, str):
        raise _fail(name, value, f"is not a str ({_type_label(ct)} column)")
    s = value.rstrip(" ") if ct.tp == MySQLType.STRING else value
    _check_utf8(s, name)
    if ct.flen >= 0 and len(s) > ct.flen:
        raise _fail(name, value, f"is longer than {ct.flen} characters")
    return s


def _check_utf8(s: str, name: str) -> bytes:
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail(name, s, f"cannot be stored as utf8mb4 ({exc.reason})") from None


def _check_text(ct: ColumnType, value: object, name: str) -> object:
    if ct.is_binary:
        return _check_bytes(ct, value, name)
    if not isinstance(value, str):
        raise _fail(name, value, f"is not a str ({_type_label(ct)} column)")
    limit = _BLOB_BYTES[MySQLType(ct.tp)]
    if len(_check_utf8(value, name)) > limit:
        raise _fail(name, value, f"is longer than {limit} bytes in UTF-8")
    return value


def _check_bytes(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise _fail(name, value, f"is not bytes ({_type_label(ct)} binary column)")
    b = bytes(value)
    limit = _BLOB_BYTES.get(MySQLType(ct.tp), ct.flen)
    if limit >= 0 and len(b) > limit:
        raise _fail(name, value, f"is longer than {limit} bytes")
    if ct.tp == MySQLType.STRING and len(b) < ct.flen:
        b += bytes(ct.flen - len(b))
    return b


def _check_string(ct: ColumnType, value: object, name: str) -> object:
    if ct.is_binary:
        return _check_bytes(ct, value, name)
    return _check_char(ct, value, name)


def _check_date(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, _dt.date) or isinstance(value, _dt.datetime):
        raise _fail(name, value, "is not a datetime.date (DATE column)")
    return value


def _round_time(ct: ColumnType, value: _dt.datetime, name: str) -> _dt.datetime:
    try:
        return round_fsp(value, ct.fsp)
    except CodecError:
        raise _fail(name, value, f"overflows when rounded to {ct.fsp} fractional digits") from None


def _check_datetime(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, _dt.datetime):
        raise _fail(name, value, "is not a datetime.datetime (DATETIME column)")
    if value.tzinfo is not None:
        raise _fail(name, value, "is time-zone aware (DATETIME has no time zone; pass a naive datetime)")
    return _round_time(ct, value, name)


def _check_timestamp(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, _dt.datetime):
        raise _fail(name, value, "is not a datetime.datetime (TIMESTAMP column)")
    try:
        utc = value.replace(tzinfo=_dt.UTC) if value.tzinfo is None else value.astimezone(_dt.UTC)
    except OverflowError:
        raise _fail(name, value, "is out of range for TIMESTAMP") from None
    rounded = _round_time(ct, utc, name)
    if not TIMESTAMP_MIN <= rounded <= TIMESTAMP_MAX:
        raise _fail(name, value, "is out of range for TIMESTAMP (1970-01-01 00:00:01 .. 2038-01-19 03:14:07 UTC)")
    return rounded


def _check_duration(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, _dt.timedelta):
        raise _fail(name, value, "is not a datetime.timedelta (TIME column)")
    rounded = round_duration(value, ct.fsp)
    if abs(rounded) > TIME_MAX:
        raise _fail(name, value, "is out of range for TIME (-838:59:59 .. 838:59:59)")
    return rounded


def _check_json(ct: ColumnType, value: object, name: str) -> object:
    return _json_value(value, name, 0)


def _json_value(v: object, name: str, depth: int) -> Any:
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        if not JSON_INT_MIN <= v <= JSON_INT_MAX:
            raise _fail(name, v, "is out of the 64-bit range of JSON integers")
        return int(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise _fail(name, v, "is not finite (JSON)")
        return float(v)
    if isinstance(v, str):
        _check_utf8(v, name)
        return str(v)
    if depth >= MAX_DEPTH:
        raise _fail(name, v, f"nests JSON deeper than {MAX_DEPTH}")
    if isinstance(v, list | tuple):
        return [_json_value(x, name, depth + 1) for x in v]
    if isinstance(v, dict):
        out: dict[str, Any] = {}
        for k, x in v.items():
            if not isinstance(k, str):
                raise _fail(name, k, "is not a str JSON object key")
            _check_utf8(k, name)
            out[str(k)] = _json_value(x, name, depth + 1)
        return out
    raise _fail(name, v, f"is not a JSON value ({type(v).__name__})")


def _check_enum(ct: ColumnType, value: object, name: str) -> object:
    if not isinstance(value, str):
        raise _fail(name, value, "is not a str (ENUM column)")
    if value in ct.elems:
        return value
    folded = value.casefold()
    for e in ct.elems:
        if e.casefold() == folded:
            return e
    raise _fail(name, value, f"is not a member of ENUM{ct.elems!r}")


def _check_set(ct: ColumnType, value: object, name: str) -> object:
    names: list[object]
    if isinstance(value, str):
        names = list(value.split(",")) if value else []
    elif isinstance(value, list | tuple | set | frozenset):
        names = list(value)
    else:
        raise _fail(name, value, "is not a str or a collection of member names (SET column)")
    folded = [e.casefold() for e in ct.elems]
    mask = 0
    for n in names:
        if not isinstance(n, str):
            raise _fail(name, value, f"has a member {n!r} that is not a str (SET column)")
        try:
            mask |= 1 << folded.index(n.casefold())
        except ValueError:
            raise _fail(name, value, f"has {n!r}, not a member of SET{ct.elems!r}") from None
    return ",".join(e for i, e in enumerate(ct.elems) if mask >> i & 1)


def _bit_width(ct: ColumnType) -> int:
    return ct.flen if 1 <= ct.flen <= MAX_BIT_WIDTH else 1


def _check_bit(ct: ColumnType, value: object, name: str) -> object:
    width = _bit_width(ct)
    if isinstance(value, bytes | bytearray | memoryview):
        v = int.from_bytes(value, "big")
    elif _is_int(value):
        assert isinstance(value, int)
        v = value
    else:
        raise _fail(name, value, f"is not an int or bytes (BIT({width}) column)")
    if not 0 <= v < (1 << width):
        raise _fail(name, value, f"does not fit BIT({width})")
    return v.to_bytes((width + 7) // 8, "big")


_Checker = Callable[[ColumnType, object, str], object]
_CHECKERS: dict[int, _Checker] = {
    **dict.fromkeys(_INT_BITS, _check_int),
    MySQLType.YEAR: _check_year,
    MySQLType.FLOAT: _check_real,
    MySQLType.DOUBLE: _check_real,
    MySQLType.NEW_DECIMAL: _check_decimal,
    MySQLType.DECIMAL: _check_decimal,
    MySQLType.STRING: _check_string,
    MySQLType.VARCHAR: _check_string,
    MySQLType.VAR_STRING: _check_string,
    **dict.fromkeys(_BLOB_BYTES, _check_text),
    MySQLType.DATE: _check_date,
    MySQLType.DATETIME: _check_datetime,
    MySQLType.TIMESTAMP: _check_timestamp,
    MySQLType.DURATION: _check_duration,
    MySQLType.JSON: _check_json,
    MySQLType.ENUM: _check_enum,
    MySQLType.SET: _check_set,
    MySQLType.BIT: _check_bit,
}
