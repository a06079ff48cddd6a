"""How a checked column value is stored in, and read back from, each upstream store (pure).

Every function takes values produced by :func:`common.schema.types.check_value` and gives them
back exactly: ``from_x(col, <what the driver returns for to_x(col, v)>) == v``.

sqlite (``sqlite_decl``: ``"name" <decl type> [NOT NULL] [DEFAULT <sqlite literal>]``):

============================================  =========  ==========================================
column type                                   decl type  stored value
============================================  =========  ==========================================
TINYINT..BIGINT, YEAR (not BIGINT UNSIGNED)   INTEGER    int
BIGINT UNSIGNED                               BLOB       int when <= 2**63-1, else 20-digit TEXT
FLOAT, DOUBLE                                 REAL       float (a FLOAT's float32 value is exact)
DECIMAL(p,s)                                  TEXT       plain text with s fraction digits
CHAR, VARCHAR, TEXT family, ENUM, SET         TEXT       str
BINARY, VARBINARY, BLOB family, BIT           BLOB       bytes (BINARY padded, BIT (n+7)//8 bytes)
DATE                                          TEXT       ``YYYY-MM-DD``
DATETIME(fsp), TIMESTAMP(fsp)                 TEXT       ``YYYY-MM-DD HH:MM:SS[.f{fsp}]``, TIMESTAMP in UTC
TIME(fsp)                                     TEXT       ``[-]HH:MM:SS[.f{fsp}]`` (hours up to 838)
JSON                                          TEXT       canonical JSON text (``json_to_text``)
============================================  =========  ==========================================

BIGINT UNSIGNED: sqlite integers are signed 64-bit, so values above 2**63-1 are stored as
their decimal text zero-padded to 20 digits.  The column is declared ``BLOB`` so sqlite applies
no type conversion (an INTEGER or NUMERIC column would turn that text into a lossy REAL).
Each value has exactly one stored form, so equality and unique indexes work, and since sqlite
orders every INTEGER before every TEXT, ``ORDER BY`` and range comparisons stay numeric too
(pass parameters through :func:`to_sqlite`).  Text in TEXT columns compares with sqlite's
BINARY collation, i.e. case-sensitively, like TiDB's default ``utf8mb4_bin``.

MySQL/MariaDB (``mysql_decl``: ``` `name` <canonical type text> [NULL|NOT NULL] [DEFAULT literal] ```):
the column has its own type; values go to pymysql as below and come back as pymysql returns them.

=================  =====================================  ==========================================
column type        parameter (to_mysql)                   returned by pymysql (from_mysql input)
=================  =====================================  ==========================================
integers, YEAR     int                                    int
FLOAT              float                                  float; exact only through
                                                          :func:`mysql_select_expr` (see below)
DOUBLE             float                                  float
DECIMAL            Decimal (pymysql writes it as plain    Decimal (quantized to s digits again)
                   ``format(d, "f")``: an exact literal)
CHAR, VARCHAR ...  str                                    str (CHAR without trailing spaces)
binary types       bytes                                  bytes (BINARY(n) zero-padded to n)
DATE, DATETIME     date, naive datetime                   date, datetime
TIMESTAMP          naive UTC datetime                     naive UTC datetime -> aware UTC
TIME               text ``[-]HH:MM:SS.ffffff``            timedelta
JSON               canonical JSON text                    str (or bytes) -> parsed
ENUM, SET          str                                    str (a ``set`` of names is accepted too)
BIT(n)             int                                    bytes of (n+7)//8
=================  =====================================  ==========================================

Requirements on the MySQL store's sessions and tables:

* ``SET time_zone = '+00:00'``: TIMESTAMP values and defaults are exchanged as UTC wall clock.
* strict ``sql_mode`` without ``NO_BACKSLASH_ESCAPES`` (DEFAULT literals escape ``\\`` and NUL).
* tables ``DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`` (TiDB's default collation: strings
  compare case-sensitively, as in the sqlite store); connections with charset ``utf8mb4``.
* read FLOAT columns with :func:`mysql_select_expr`: MariaDB sends FLOAT values as text with
  only 6 significant digits (``1.23457``), which cannot give the stored float32 back; the
  expression widens the column to DOUBLE in the query (``(`f` + 0E0)``), which is exact.

Declarations never say AUTO_INCREMENT: the writer allocates ids itself (as TiDB does) and
passes them in.  A nullable TIMESTAMP is declared ``NULL`` explicitly, because with
``explicit_defaults_for_timestamp`` off MySQL would make it NOT NULL with a CURRENT_TIMESTAMP
default.
"""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import TypeAlias, cast

from common.codec.flatten import ColumnType, MySQLType, to_float32
from common.codec.json_binary import JsonValue, json_to_text, parse_json_text
from common.codec.mytime import format_duration, format_time
from common.errors import CodecError
from common.schema.defaults import default_literal, default_value, parse_date_text, parse_datetime_text, parse_time_text
from common.schema.model import ColumnInfo
from common.schema.types import ValueCheckError, check_type_value

__all__ = [
    "SqliteValue",
    "from_mysql",
    "from_sqlite",
    "mysql_decl",
    "mysql_select_expr",
    "sqlite_decl",
    "to_mysql",
    "to_sqlite",
]

SqliteValue: TypeAlias = int | float | str | bytes | None

INT64_MAX = (1 << 63) - 1
_U64_TEXT_DIGITS = 20

_INTS = frozenset(
    {MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG, MySQLType.YEAR}
)
_STRINGS = frozenset(
    {
        MySQLType.STRING,
        MySQLType.VARCHAR,
        MySQLType.VAR_STRING,
        MySQLType.TINY_BLOB,
        MySQLType.BLOB,
        MySQLType.MEDIUM_BLOB,
        MySQLType.LONG_BLOB,
    }
)
_DECIMALS = frozenset({MySQLType.NEW_DECIMAL, MySQLType.DECIMAL})


def _is_u64(ct: ColumnType) -> bool:
    return ct.tp == MySQLType.LONGLONG and ct.unsigned


def _bad_raw(col: ColumnInfo, raw: object, store: str) -> ValueCheckError:
    text = repr(raw)
    if len(text) > 60:
        text = text[:57] + "..."
    return ValueCheckError(f"column {col.name}: {store} returned {text}, which does not fit {col.type_text}")


def _unchecked(col: ColumnInfo, value: object) -> ValueCheckError:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return ValueCheckError(f"column {col.name}: {text} is not a checked {col.type_text} value (use check_value)")


# ----------------------------------------------------------------------------- sqlite


def sqlite_type(ct: ColumnType) -> str:
    """The declared sqlite type (it decides the column's affinity; see the module table)."""
    tp = ct.tp
    if _is_u64(ct):
        return "BLOB"
    if tp in _INTS:
        return "INTEGER"
    if tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        return "REAL"
    if tp == MySQLType.BIT or (tp in _STRINGS and ct.is_binary):
        return "BLOB"
    return "TEXT"


def _sqlite_literal(v: SqliteValue) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    if isinstance(v, str):
        if "\0" in v:  # SQL text cannot hold NUL: a constant expression (database encoding UTF-8)
            return f"(CAST(X'{v.encode('utf-8').hex()}' AS TEXT))"
        return "'" + v.replace("'", "''") + "'"
    return repr(v)


def _quote_sqlite_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sqlite_decl(col: ColumnInfo) -> str:
    """Column declaration for sqlite CREATE TABLE / ALTER TABLE ADD COLUMN."""
    parts = [_quote_sqlite_name(col.name), sqlite_type(col.ctype)]
    if not col.nullable:
        parts.append("NOT NULL")
    dv = default_value(col)
    if dv is not None:
        parts.append("DEFAULT " + _sqlite_literal(to_sqlite(col, dv)))
    return " ".join(parts)


def to_sqlite(col: ColumnInfo, value: object) -> SqliteValue:
    """The sqlite parameter for a checked ``value`` of ``col`` (also for WHERE comparisons)."""
    if value is None:
        return None
    ct = col.ctype
    tp = ct.tp
    if tp in _INTS and isinstance(value, int) and not isinstance(value, bool):
        if _is_u64(ct) and value > INT64_MAX:
            return str(value).zfill(_U64_TEXT_DIGITS)
        return value
    if tp in (MySQLType.FLOAT, MySQLType.DOUBLE) and isinstance(value, float):
        return value
    if tp in _DECIMALS and isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, str | bytes) and (tp in _STRINGS or tp in (MySQLType.ENUM, MySQLType.SET, MySQLType.BIT)):
        return value
    if tp == MySQLType.DATE and isinstance(value, _dt.date):
        return format_time(value)
    if tp in (MySQLType.DATETIME, MySQLType.TIMESTAMP) and isinstance(value, _dt.datetime):
        if tp == MySQLType.TIMESTAMP:
            value = value.astimezone(_dt.UTC).replace(tzinfo=None)
        return format_time(value, ct.fsp)
    if tp == MySQLType.DURATION and isinstance(value, _dt.timedelta):
        return format_duration(value, ct.fsp)
    if tp == MySQLType.JSON:
        try:
            return json_to_text(_json(value))
        except CodecError as exc:
            raise ValueCheckError(f"column {col.name}: {exc}") from None
    raise _unchecked(col, value)


def _json(value: object) -> JsonValue:
    return cast("JsonValue", value)


def from_sqlite(col: ColumnInfo, raw: object) -> object:
    """The checked Python value of what sqlite returned for a column stored by :func:`to_sqlite`."""
    if raw is None:
        return None
    ct = col.ctype
    tp = ct.tp
    try:
        if tp in _INTS:
            if isinstance(raw, int) and not isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and _is_u64(ct) and raw.isdigit():
                return int(raw)
        elif tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
            if isinstance(raw, float | int) and not isinstance(raw, bool):
                return to_float32(float(raw)) if tp == MySQLType.FLOAT else float(raw)
        elif tp in _DECIMALS:
            if isinstance(raw, str | int):
                return check_type_value(ct, str(raw), col.name)
        elif tp in _STRINGS or tp in (MySQLType.ENUM, MySQLType.SET, MySQLType.BIT):
            if isinstance(raw, bytes) and (ct.is_binary or tp == MySQLType.BIT):
                return raw
            if isinstance(raw, str) and not ct.is_binary:
                return raw
        elif isinstance(raw, str):
            return _parse_temporal_or_json(ct, raw)
    except (ValueError, CodecError):
        pass
    raise _bad_raw(col, raw, "sqlite")


def _parse_temporal_or_json(ct: ColumnType, raw: str) -> object:
    tp = ct.tp
    if tp == MySQLType.DATE:
        return parse_date_text(raw)
    if tp == MySQLType.DATETIME:
        return parse_datetime_text(raw)
    if tp == MySQLType.TIMESTAMP:
        return parse_datetime_text(raw).replace(tzinfo=_dt.UTC)
    if tp == MySQLType.DURATION:
        return parse_time_text(raw)
    if tp == MySQLType.JSON:
        return parse_json_text(raw)
    raise ValueError(f"unexpected column type {tp}")


# ----------------------------------------------------------------------------- MySQL


def _quote_mysql_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def mysql_decl(col: ColumnInfo) -> str:
    """Column declaration for MySQL CREATE TABLE / ALTER TABLE ADD COLUMN."""
    parts = [_quote_mysql_name(col.name), col.type_text]
    if not col.nullable:
        parts.append("NOT NULL")
    elif col.ctype.tp == MySQLType.TIMESTAMP:
        parts.append("NULL")
    dv = default_value(col)
    if dv is not None:
        parts.append("DEFAULT " + default_literal(col.ctype, dv))
    return " ".join(parts)


def mysql_select_expr(col: ColumnInfo) -> str:
    """The expression to SELECT for ``col`` so that :func:`from_mysql` gets the exact value.

    The column name, except for FLOAT: ``(`name` + 0E0)``, the float32 widened to a DOUBLE.
    """
    name = _quote_mysql_name(col.name)
    return f"({name} + 0E0)" if col.ctype.tp == MySQLType.FLOAT else name


def to_mysql(col: ColumnInfo, value: object) -> object:
    """The pymysql parameter for a checked ``value`` of ``col`` (session time zone UTC)."""
    if value is None:
        return None
    ct = col.ctype
    tp = ct.tp
    if tp == MySQLType.TIMESTAMP and isinstance(value, _dt.datetime):
        return value.astimezone(_dt.UTC).replace(tzinfo=None) if value.tzinfo is not None else value
    if tp == MySQLType.DURATION and isinstance(value, _dt.timedelta):
        return format_duration(value, 6)
    if tp == MySQLType.JSON:
        try:
            return json_to_text(_json(value))
        except CodecError as exc:
            raise ValueCheckError(f"column {col.name}: {exc}") from None
    if tp == MySQLType.BIT and isinstance(value, bytes):
        return int.from_bytes(value, "big")
    return value


def from_mysql(col: ColumnInfo, raw: object) -> object:
    """The checked Python value of what pymysql returned for ``col`` (read via :func:`mysql_select_expr`)."""
    if raw is None:
        return None
    ct = col.ctype
    tp = ct.tp
    value: object = raw
    try:
        if tp == MySQLType.TIMESTAMP and isinstance(raw, _dt.datetime):
            value = raw.replace(tzinfo=_dt.UTC) if raw.tzinfo is None else raw
        elif tp == MySQLType.JSON:
            if isinstance(raw, bytes | bytearray):
                raw = bytes(raw).decode("utf-8")
            if not isinstance(raw, str):
                raise _bad_raw(col, raw, "MySQL")
            value = parse_json_text(raw)
        elif tp in _STRINGS and ct.is_binary and isinstance(raw, bytearray):
            value = bytes(raw)
        elif tp in _STRINGS and not ct.is_binary and isinstance(raw, bytes | bytearray):
            raise _bad_raw(col, raw, "MySQL")
        elif tp == MySQLType.SET and isinstance(raw, set | frozenset):
            value = sorted(raw)
        elif tp == MySQLType.DATE and isinstance(raw, _dt.datetime):
            raise _bad_raw(col, raw, "MySQL")
        return check_type_value(ct, value, col.name)
    except (ValueCheckError, CodecError, UnicodeDecodeError):
        raise _bad_raw(col, raw, "MySQL") from None
