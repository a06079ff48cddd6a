"""pb binlog rows -> the drainer's DMLs (pure): the file sink's encoding (`drainer.sinks.file`) reversed.

Each `column` of an Event row carries its name, `tp` (the MySQL type byte), `mysql_type` (TiDB's type
name: "varbinary" / "blob" mark binary strings) and `value` (`changed_value`: an update's new value),
one encoded datum each. The file sink "formatted" some types to text first; they come back as the
values the loader's SQL layer (`common.sql.render`, `common.sql.values.to_mysql`) takes:

    datum            column type                          value given to the loader
    NULL (00)        any                                  None
    varint / uvarint integers, YEAR                       int
                     ENUM (1-based index), SET (bitmask)  int: MySQL takes a number as the index / the bits
                     BIT                                  int
    float (05)       FLOAT, DOUBLE                        float
    bytes (02)       CHAR, VARCHAR, TEXT, ...             str (UTF-8), or bytes when binary or not UTF-8
                     BINARY, VARBINARY, BLOB, GEOMETRY    bytes
                     DECIMAL text                         Decimal
                     DATE / DATETIME text                 date / naive datetime
                     TIMESTAMP text, in the drainer's     aware datetime (`tz`: the zone the drainer wrote
                       time zone                            the text in; None = this host's zone)
                     TIME text                            timedelta
                     JSON text                            the parsed JSON value
    decimal (06)     DECIMAL (not written by our sink)    Decimal

A DATE / DATETIME / TIMESTAMP / TIME text Python cannot hold (the zero date `0000-00-00`) stays text:
MySQL parses it. A DML's table shape has the row's columns in row order and the unique keys a
`KeyLookup` gives for the table (the downstream's primary and unique keys; none for print), so the
loader can build WHERE clauses and causality keys exactly as the drainer does.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from google.protobuf.message import DecodeError

from common.codec import Datum, Kind, MySQLType, decode_one, parse_json_text
from common.codec.flatten import BINARY_CHARSET, DEFAULT_CHARSET, ColumnType
from common.errors import CodecError
from common.events import DML, DMLType, TableShape
from common.pb import pb_binlog_pb2
from common.schema.defaults import parse_date_text, parse_datetime_text, parse_time_text
from common.schema.model import ColumnInfo, IndexInfo, TableInfo

__all__ = ["EVENT_TYPES", "KeyLookup", "PbColumn", "Shapes", "decode_value", "event_to_dml", "parse_columns"]

KeyLookup = Callable[[str, str], Sequence[Sequence[str]]]
"""(db, table) -> its unique keys as column names, the primary key first."""

EVENT_TYPES: Final = {
    pb_binlog_pb2.Insert: DMLType.INSERT,
    pb_binlog_pb2.Update: DMLType.UPDATE,
    pb_binlog_pb2.Delete: DMLType.DELETE,
}

_BINARY_NAMES: Final = ("binary", "blob")
_TEXT_TYPES: Final = frozenset(
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
_TEMPORAL_TEXT: Final = frozenset({MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP, MySQLType.DURATION})
_DECIMALS: Final = frozenset({MySQLType.DECIMAL, MySQLType.NEW_DECIMAL})
_SHAPE_CACHE_LIMIT: Final = 4096


class PbColumn:
    """One decoded `column` message: its type and its datum(s)."""

    __slots__ = ("binary", "changed", "mysql_type", "name", "raw_size", "tp", "value")

    def __init__(self, msg: pb_binlog_pb2.column, raw_size: int) -> None:
        self.name = msg.name
        self.tp = msg.tp[0] if msg.tp else MySQLType.NULL
        self.mysql_type = msg.mysql_type
        self.binary = any(word in self.mysql_type.lower() for word in _BINARY_NAMES) or self.tp == MySQLType.GEOMETRY
        self.value: Datum = _datum(msg.value, self.name, "value") if msg.HasField("value") else _NULL_DATUM
        self.changed: Datum | None = (
            _datum(msg.changed_value, self.name, "changed_value") if msg.HasField("changed_value") else None
        )
        self.raw_size = raw_size


_NULL_DATUM: Final = Datum(Kind.NULL, None)


def _datum(data: bytes, column: str, what: str) -> Datum:
    try:
        datum, end = decode_one(data)
    except CodecError as exc:
        raise CodecError(f"column {column!r}: bad {what}: {exc}") from None
    if end != len(data):
        raise CodecError(f"column {column!r}: {len(data) - end} bytes after the {what} datum")
    return datum


def parse_columns(event: pb_binlog_pb2.Event) -> list[PbColumn]:
    """The columns of one Event row; CodecError for a malformed one."""
    out: list[PbColumn] = []
    for raw in event.row:
        msg = pb_binlog_pb2.column()
        try:
            msg.ParseFromString(raw)
        except DecodeError as exc:
            raise CodecError(
                f"{event.schema_name}.{event.table_name}: a row column is not a pb column: {exc}"
            ) from None
        out.append(PbColumn(msg, len(raw)))
    return out


# ----------------------------------------------------------------------------------------------- values


def _text(v: bytes, column: str) -> str:
    try:
        return v.decode("utf-8")
    except UnicodeDecodeError:
        raise CodecError(f"column {column!r}: formatted value is not UTF-8 text") from None


def decode_value(datum: Datum, col: PbColumn, tz: dt.tzinfo | None = None) -> Any:
    """The loader's value of one datum of `col` (see the module table)."""
    kind, v = datum
    if kind == Kind.NULL:
        return None
    tp = col.tp
    if kind == Kind.BYTES:
        if tp in _TEXT_TYPES:
            if col.binary:
                return v
            try:
                return v.decode("utf-8")
            except UnicodeDecodeError:
                return v  # not UTF-8 (another charset): the bytes go to MySQL as they are
        if tp in _DECIMALS:
            text = _text(v, col.name)
            try:
                return Decimal(text)
            except InvalidOperation:
                raise CodecError(f"column {col.name!r}: {text!r} is not a decimal") from None
        if tp in _TEMPORAL_TEXT:
            return _temporal(tp, _text(v, col.name), tz)
        if tp == MySQLType.JSON:
            return parse_json_text(_text(v, col.name))
        return v
    if kind == Kind.DECIMAL:
        return v.value
    if kind == Kind.DURATION:
        return dt.timedelta(microseconds=v // 1000)
    return v  # INT, UINT, FLOAT, JSON


def _temporal(tp: int, text: str, tz: dt.tzinfo | None) -> Any:
    try:
        if tp == MySQLType.DATE:
            return parse_date_text(text)
        if tp == MySQLType.DURATION:
            return parse_time_text(text)
        value = parse_datetime_text(text)
    except ValueError:
        return text  # the zero date and other values Python cannot hold: MySQL reads the text
    if tp == MySQLType.TIMESTAMP:
        local = value.replace(tzinfo=tz) if tz is not None else value.astimezone()
        return local.astimezone(dt.UTC)
    return value


# ----------------------------------------------------------------------------------------------- shapes


class Shapes:
    """Table shapes by (db, table, columns), with keys from `lookup`; `clear()` after a DDL."""

    def __init__(self, lookup: KeyLookup | None = None) -> None:
        self._lookup = lookup
        self._shapes: dict[tuple[str, str, tuple[tuple[str, int, str], ...]], TableShape] = {}
        self._keys: dict[tuple[str, str], Sequence[Sequence[str]]] = {}

    def clear(self) -> None:
        self._shapes.clear()
        self._keys.clear()

    def shape(self, db: str, table: str, cols: Sequence[PbColumn]) -> TableShape:
        sig = tuple((c.name, c.tp, c.mysql_type) for c in cols)
        key = (db, table, sig)
        found = self._shapes.get(key)
        if found is not None:
            return found
        if len(self._shapes) >= _SHAPE_CACHE_LIMIT:
            self._shapes.clear()
        shape = self._shapes[key] = self._build(db, table, cols)
        return shape

    def _table_keys(self, db: str, table: str) -> Sequence[Sequence[str]]:
        if self._lookup is None:
            return ()
        keys = self._keys.get((db, table))
        if keys is None:
            keys = self._keys[(db, table)] = self._lookup(db, table)
        return keys

    def _build(self, db: str, table: str, cols: Sequence[PbColumn]) -> TableShape:
        columns = tuple(
            ColumnInfo(
                id=i + 1,
                name=c.name,
                offset=i,
                type_text=c.mysql_type,
                ctype=ColumnType(tp=c.tp, charset=BINARY_CHARSET if c.binary else DEFAULT_CHARSET),
            )
            for i, c in enumerate(cols)
        )
        pos = {c.name.lower(): i for i, c in enumerate(columns)}
        if len(pos) != len(columns):
            raise CodecError(f"{db}.{table}: a row names one column twice")
        keys: list[tuple[int, ...]] = []
        indices: list[IndexInfo] = []
        for n, names in enumerate(self._table_keys(db, table)):
            if not names or any(name.lower() not in pos for name in names):
                continue  # a key on columns this row does not carry cannot find it
            positions = tuple(pos[name.lower()] for name in names)
            if positions not in keys:
                keys.append(positions)
                indices.append(IndexInfo(id=n + 1, name=f"k{n}", columns=tuple(names), unique=True))
        info = TableInfo(id=0, name=table, columns=columns, indices=tuple(indices))
        return TableShape(db=db, table=table, info=info, columns=columns, unique_keys=tuple(keys))


def event_to_dml(event: pb_binlog_pb2.Event, shapes: Shapes, commit_ts: int, tz: dt.tzinfo | None = None) -> DML:
    """The DML of one Event (its columns in row order); CodecError for a malformed one."""
    tp = EVENT_TYPES.get(event.tp)
    where = f"{event.schema_name}.{event.table_name}"
    if tp is None:
        raise CodecError(f"{where}: unknown event type {event.tp}")
    cols = parse_columns(event)
    shape = shapes.shape(event.schema_name, event.table_name, cols)
    first = tuple(decode_value(c.value, c, tz) for c in cols)
    size = sum(c.raw_size for c in cols)
    if tp == DMLType.INSERT:
        return DML(tp, shape, values=first, commit_ts=commit_ts, size=size)
    if tp == DMLType.DELETE:
        return DML(tp, shape, old_values=first, commit_ts=commit_ts, size=size)
    missing = [c.name for c in cols if c.changed is None]
    if missing:
        raise CodecError(f"{where}: update without a new value for column(s) {', '.join(missing)}")
    new = tuple(decode_value(c.changed, c, tz) for c in cols if c.changed is not None)
    return DML(tp, shape, values=new, old_values=first, commit_ts=commit_ts, size=size)
