"""The pb-binlog file format: what the drainer's file sink writes and reparo and the Spark jobs read (pure).

Files are binlogfile-framed records (:mod:`common.binlogfile`); each record is one `pb_binlog.Binlog`.

Encoding (:func:`txn_to_pb`, the original's `translator/pb.go`).
    DML  Binlog{tp=DML, commit_ts, dml_data{events: one Event per row change, in order}}
         Event{schema_name, table_name, tp=Insert|Update|Delete, row: one marshaled `column` per column}
         column{name, tp=[MySQL type byte], mysql_type=TypeToStr, value, changed_value}
             Insert: value = new value; Delete: value = old value; Update: value = old, changed_value = new.
         A value is codec.EncodeValue of the "formatted" datum: NULL -> 00; date, datetime, timestamp (in the
         drainer host's time zone), time, decimal and JSON -> their text as a bytes datum (flag 02);
         enum, set, bit -> uint (09); integers -> varint (08) / uvarint (09); floats -> 05; strings -> 02.
    DDL  Binlog{tp=DDL, commit_ts, ddl_query="use `db`; <query>;"}  (backticks in db doubled); "<query>;" for
         CREATE DATABASE; the bare query when the DDL has no schema. A trailing ';' of the query is dropped first.

Decoding (:func:`event_to_dml`, :func:`decode_value`) gives back the drainer's DMLs.  Each `column` of an
Event row carries its name, `tp` (the MySQL type byte), `mysql_type` (TiDB's type name: "varbinary" / "blob"
mark binary strings) and `value` (`changed_value`: an update's new value), one encoded datum each. The file
sink "formatted" some types to text first; they come back as the values the loader's SQL layer
(`common.sql.render`, `common.sql.values.to_mysql`) takes:

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
import os
from collections.abc import Callable, Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from google.protobuf.message import DecodeError

from common.binlogfile import ReadStats, iter_records
from common.codec import (
    NULL,
    Datum,
    Kind,
    MySQLType,
    bytes_datum,
    decode_one,
    encode_datum,
    flatten,
    format_duration,
    format_time,
    json_to_text,
    parse_json_text,
)
from common.codec.flatten import BINARY_CHARSET, DEFAULT_CHARSET, ColumnType
from common.codec.mytime import MysqlTime
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.filters import ddl_event
from common.pb import pb_binlog_pb2
from common.schema.defaults import parse_date_text, parse_datetime_text, parse_time_text
from common.schema.model import ColumnInfo, IndexInfo, TableInfo

__all__ = [
    "EVENT_TYPES",
    "KeyLookup",
    "PbColumn",
    "Shapes",
    "ddl_query_text",
    "decode_value",
    "encode_value",
    "event_to_dml",
    "parse_columns",
    "read_pb_binlogs",
    "time_text",
    "txn_to_pb",
    "type_name",
]

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


# ----------------------------------------------------------------------------------------------- encoding

_TYPE_NAMES: Final = {
    0: "decimal",
    1: "tinyint",
    2: "smallint",
    3: "int",
    4: "float",
    5: "double",
    6: "null",
    7: "timestamp",
    8: "bigint",
    9: "mediumint",
    10: "date",
    11: "time",
    12: "datetime",
    13: "year",
    15: "varchar",
    16: "bit",
    245: "json",
    246: "decimal",
    247: "enum",
    248: "set",
    249: "tinytext",
    250: "mediumtext",
    251: "longtext",
    252: "text",
    253: "var_string",
    254: "char",
    255: "geometry",
}
_BLOB_TYPES: Final = frozenset({249, 250, 251, 252})
_CHAR_TYPES: Final = frozenset({MySQLType.STRING, MySQLType.VARCHAR})
_EVENT_TYPES: Final = {
    DMLType.INSERT: pb_binlog_pb2.Insert,
    DMLType.UPDATE: pb_binlog_pb2.Update,
    DMLType.DELETE: pb_binlog_pb2.Delete,
}
_NULL_BYTES: Final = encode_datum(NULL)


def type_name(ct: ColumnType) -> str:
    """TiDB's `types.TypeToStr`: "bigint", "varchar", and "varbinary" / "blob" for binary-charset columns."""
    name = _TYPE_NAMES.get(ct.tp, "")
    if ct.is_binary:
        if ct.tp in _BLOB_TYPES:
            return name.replace("text", "blob", 1)
        if ct.tp in _CHAR_TYPES:
            return name.replace("char", "binary", 1)
    return name


def time_text(value: Any, ct: ColumnType, tz: dt.tzinfo | None) -> str:
    """DATE / DATETIME / TIMESTAMP as text; TIMESTAMP in `tz` (None: this host's zone), naive ones taken as UTC."""
    if isinstance(value, MysqlTime):
        if ct.tp == MySQLType.DATE:
            return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        return format_time(value, ct.fsp)
    if isinstance(value, dt.datetime):
        if ct.tp == MySQLType.TIMESTAMP:
            aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
            value = aware.astimezone(tz).replace(tzinfo=None)
        if ct.tp == MySQLType.DATE:
            return format_time(value.date())
        return format_time(value, ct.fsp)
    if isinstance(value, dt.date):
        return format_time(value)
    raise CodecError(f"{type(value).__name__} value {value!r} does not fit column type {type_name(ct)}")


def encode_value(value: Any, ct: ColumnType, tz: dt.tzinfo | None = None) -> bytes:
    """The `column.value` bytes of one column value (`tz`: for TIMESTAMP text; None = the host's zone)."""
    if value is None:
        return _NULL_BYTES
    tp = ct.tp
    if tp in (MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP):
        return encode_datum(bytes_datum(time_text(value, ct, tz)))
    if tp == MySQLType.DURATION:
        if not isinstance(value, dt.timedelta):
            raise CodecError(f"{type(value).__name__} value {value!r} does not fit column type time")
        return encode_datum(bytes_datum(format_duration(value, ct.fsp)))
    if tp in (MySQLType.DECIMAL, MySQLType.NEW_DECIMAL):
        number = value if isinstance(value, Decimal) else Decimal(str(value))
        return encode_datum(bytes_datum(format(number, "f")))
    if tp == MySQLType.JSON:
        return encode_datum(bytes_datum(json_to_text(value)))
    return encode_datum(flatten(value, ct))


def _event(dml: DML, tz: dt.tzinfo | None) -> pb_binlog_pb2.Event:
    shape = dml.shape
    tp = dml.tp
    new = dml.values
    old = dml.old_values
    if tp in (DMLType.INSERT, DMLType.UPDATE) and new is None:
        raise CodecError(f"{tp.name} of {shape.db}.{shape.table} has no new row")
    if tp in (DMLType.UPDATE, DMLType.DELETE) and old is None:
        raise CodecError(f"{tp.name} of {shape.db}.{shape.table} has no old row")
    rows: list[bytes] = []
    for i, col in enumerate(shape.columns):
        ct = col.ctype
        column = pb_binlog_pb2.column(name=col.name, tp=bytes((ct.tp,)), mysql_type=type_name(ct))
        if tp == DMLType.INSERT:
            assert new is not None
            column.value = encode_value(new[i], ct, tz)
        elif tp == DMLType.DELETE:
            assert old is not None
            column.value = encode_value(old[i], ct, tz)
        else:
            assert new is not None
            assert old is not None
            column.value = encode_value(old[i], ct, tz)
            column.changed_value = encode_value(new[i], ct, tz)
        rows.append(column.SerializeToString())
    return pb_binlog_pb2.Event(schema_name=shape.db, table_name=shape.table, tp=_EVENT_TYPES[tp], row=rows)


def ddl_query_text(db: str, query: str) -> str:
    """The pb `ddl_query` of a DDL: "use `db`; <query>;", "<query>;" for CREATE DATABASE, bare without db."""
    text = query.strip().rstrip(";").rstrip()
    if ddl_event(text) == "create database":
        return text + ";"
    if not db:
        return text
    return "use `" + db.replace("`", "``") + "`; " + text + ";"


def _ddl_binlog(commit_ts: int, ddl: DDL) -> pb_binlog_pb2.Binlog:
    return pb_binlog_pb2.Binlog(
        tp=pb_binlog_pb2.DDL, commit_ts=commit_ts, ddl_query=ddl_query_text(ddl.db, ddl.query).encode("utf-8")
    )


def txn_to_pb(txn: Txn, tz: dt.tzinfo | None = None) -> pb_binlog_pb2.Binlog | None:
    """The record of one transaction, or None when nothing is written (empty txn, skipped DDL).

    Raises CodecError for a value that does not fit its column.
    """
    if txn.ddl is not None:
        return None if txn.ddl.skip else _ddl_binlog(txn.commit_ts, txn.ddl)
    if not txn.dmls:
        return None
    data = pb_binlog_pb2.DMLData(events=[_event(dml, tz) for dml in txn.dmls])
    return pb_binlog_pb2.Binlog(tp=pb_binlog_pb2.DML, commit_ts=txn.commit_ts, dml_data=data)


def read_pb_binlogs(
    directory: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Iterator[pb_binlog_pb2.Binlog]:
    """Every `pb_binlog.Binlog` of a file sink directory, in write order (damaged records are skipped).

    Raises CodecError for a good record that is not a pb_binlog.Binlog.
    """
    for pos, payload in iter_records(directory, stats=stats):
        binlog = pb_binlog_pb2.Binlog()
        try:
            binlog.ParseFromString(payload)
        except DecodeError as exc:
            raise CodecError(
                f"record at file {pos.file_index} offset {pos.offset} of {os.fspath(directory)!r} "
                f"is not a pb_binlog.Binlog: {exc}"
            ) from None
        yield binlog


# ----------------------------------------------------------------------------------------------- decoding


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
