"""Relay log records: a drainer transaction as `slave.binlog.Binlog` (docs/formats.md#relay-records) and back (pure).

The relay log must be readable with nothing but itself: when the upstream (etcd, pd-server) is gone,
the drainer rebuilds every transaction from its records alone.  So each record carries, per table,
the column names and types (``ColumnInfo``: ``mysql_type`` as TiDB's ``TypeToStr``, ``flen``,
``decimal``, ``is_primary_key``) and the unique keys (``Key``, ``PRIMARY`` first), as the original's
Kafka translator writes them.  Values follow the original's table, with three additions a reader of
the original format never sees (proto2 optional fields, all set side by side):

* ENUM and SET carry the 1-based index / bitmask in ``uint64_value`` as the original, *and* the member
  text in ``string_value`` (the index alone cannot be turned back into a value without the table's
  definition, which the record does not hold);
* TIMESTAMP text is UTC wall clock, and ``Binlog.time_zone`` says ``UTC`` (the original wrote the
  drainer host's zone and left ``time_zone`` unset);
* JSON is our canonical text (``json_to_text``), read back with ``parse_json_text``.

Record layout, in commit_ts order:

* a DML transaction: one record ``Binlog{type=DML, commit_ts, dml_data}``; consecutive DMLs of one
  table (one shape) form one ``Table`` whose mutations keep their order;
* a DDL: ``Binlog{type=DDL, commit_ts, ddl_data{schema_name, table_name, ddl_query}}``, ``schema_name``
  the database the statement runs in, for CREATE DATABASE the new database (as the original; read back,
  the DDL runs in no database);
* a transaction the drainer applies in parts (``Txn.partial``): an opening marker (a DML record
  without ``dml_data``), one record per part, and a closing marker (a DML record whose ``dml_data``
  has no tables).  A reader knows a transaction cut by a crash (no closing marker) and leaves it
  out; a reader of the original format sees two empty transactions.

Empty transactions (fake binlogs, filtered ones) and skipped DDLs have no record.

Records are written by `drainer.relay_encoder` (``encode_txn`` and the markers, re-exported here).
"""

from __future__ import annotations

import datetime as _dt
import operator
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from common.codec.flatten import BINARY_CHARSET, DECIMAL_TYPES, DEFAULT_CHARSET, ColumnType, MySQLType
from common.codec.json_binary import parse_json_text
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.filters import ddl_event
from common.pb import secondary_binlog_pb2 as spb
from common.schema.defaults import parse_date_text, parse_datetime_text, parse_time_text
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from drainer.relay_encoder import (
    INT_VALUE_TYPES,
    RELAY_TIME_ZONE,
    closing_marker,
    ddl_schema_name,
    encode_txn,
    opening_marker,
)

__all__ = [
    "RELAY_TIME_ZONE",
    "ShapeCache",
    "closing_marker",
    "ddl_schema_name",
    "decode_record",
    "encode_txn",
    "marker_kind",
    "opening_marker",
]

_FROM_MUTATION: Final = {spb.Insert: DMLType.INSERT, spb.Update: DMLType.UPDATE, spb.Delete: DMLType.DELETE}

# mysql_type name -> (type byte, binary charset)
_NAME_TYPES: Final[dict[str, tuple[int, bool]]] = {
    "tinyint": (MySQLType.TINY, False),
    "smallint": (MySQLType.SHORT, False),
    "mediumint": (MySQLType.INT24, False),
    "int": (MySQLType.LONG, False),
    "bigint": (MySQLType.LONGLONG, False),
    "float": (MySQLType.FLOAT, False),
    "double": (MySQLType.DOUBLE, False),
    "decimal": (MySQLType.NEW_DECIMAL, False),
    "date": (MySQLType.DATE, False),
    "datetime": (MySQLType.DATETIME, False),
    "timestamp": (MySQLType.TIMESTAMP, False),
    "time": (MySQLType.DURATION, False),
    "year": (MySQLType.YEAR, False),
    "char": (MySQLType.STRING, False),
    "varchar": (MySQLType.VARCHAR, False),
    "var_string": (MySQLType.VAR_STRING, False),
    "binary": (MySQLType.STRING, True),
    "varbinary": (MySQLType.VARCHAR, True),
    "tinytext": (MySQLType.TINY_BLOB, False),
    "text": (MySQLType.BLOB, False),
    "mediumtext": (MySQLType.MEDIUM_BLOB, False),
    "longtext": (MySQLType.LONG_BLOB, False),
    "tinyblob": (MySQLType.TINY_BLOB, True),
    "blob": (MySQLType.BLOB, True),
    "mediumblob": (MySQLType.MEDIUM_BLOB, True),
    "longblob": (MySQLType.LONG_BLOB, True),
    "json": (MySQLType.JSON, False),
    "enum": (MySQLType.ENUM, False),
    "set": (MySQLType.SET, False),
    "bit": (MySQLType.BIT, True),
}
_NO_TYPE: Final = (-1, False)
ValueReader = Callable[[spb.Column], Any]
"""Reads the (non-null) value of one column of a row."""


# ----------------------------------------------------------------------------------------- markers


def marker_kind(b: spb.Binlog) -> str:
    """ "open", "close", or "" for a record that is not a marker."""
    if b.type != spb.DML:
        return ""
    if not b.HasField("dml_data"):
        return "open"
    return "" if b.dml_data.tables else "close"


# ------------------------------------------------------------------------------------------ decode


class ShapeCache:
    """Table shapes rebuilt from records, one object per distinct table definition (the SQL layer caches
    statement text per shape object).  Bounded: cleared when it holds `limit` shapes."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._shapes: dict[bytes, tuple[TableShape, tuple[ValueReader, ...]]] = {}

    def shape(self, table: spb.Table, unsigned: frozenset[int]) -> TableShape:
        return self.decoder(table, unsigned)[0]

    def decoder(self, table: spb.Table, unsigned: frozenset[int]) -> tuple[TableShape, tuple[ValueReader, ...]]:
        """The table's shape and a reader of each of its columns' values (built once per shape)."""
        key = (
            b"".join(ci.SerializeToString() + b"\0" for ci in table.column_info)
            + b"|"
            + b"".join(k.SerializeToString() + b"\0" for k in table.unique_keys)
            + f"|{table.schema_name}|{table.table_name}|{sorted(unsigned)}".encode()
        )
        found = self._shapes.get(key)
        if found is None:
            if len(self._shapes) >= self._limit:
                self._shapes.clear()
            shape = _build_shape(table, unsigned)
            found = self._shapes[key] = (shape, tuple(_reader(c.ctype) for c in shape.columns))
        return found


def _build_shape(table: spb.Table, unsigned: frozenset[int]) -> TableShape:
    where = f"{table.schema_name}.{table.table_name}"
    cols: list[ColumnInfo] = []
    for i, ci in enumerate(table.column_info):
        spec = _NAME_TYPES.get(ci.mysql_type)
        if spec is None:
            raise CodecError(f"relay record of {where}: column {ci.name} has unknown type {ci.mysql_type!r}")
        tp, binary = spec
        ct = ColumnType(
            tp,
            flen=ci.flen,
            decimal=ci.decimal,
            unsigned=i in unsigned or tp == MySQLType.YEAR,
            charset=BINARY_CHARSET if binary else DEFAULT_CHARSET,
        )
        cols.append(ColumnInfo(id=i + 1, name=ci.name, offset=i, type_text=ci.mysql_type, ctype=ct))
    names = {c.name.lower() for c in cols}
    indices: list[IndexInfo] = []
    for n, key in enumerate(table.unique_keys, 1):
        missing = [c for c in key.column_names if c.lower() not in names]
        if missing:
            raise CodecError(f"relay record of {where}: key {key.name} names unknown columns {missing}")
        primary = key.name == "PRIMARY"
        indices.append(IndexInfo(n, key.name, tuple(key.column_names), unique=True, primary=primary))
    info = TableInfo(id=0, name=table.table_name, columns=tuple(cols), indices=tuple(indices))
    return TableShape.of(table.schema_name, info)


def decode_record(b: spb.Binlog, shapes: ShapeCache) -> Txn:
    """The transaction (or part) of one record.  Raises CodecError for a record that does not decode."""
    ts = b.commit_ts
    if b.type == spb.DDL:
        d = b.ddl_data
        query = d.ddl_query.decode("utf-8", errors="replace")
        jtype = JobType.CREATE_SCHEMA if ddl_event(query) == "create database" else JobType.CREATE_TABLE
        job = Job(0, jtype, 0, d.schema_name, 0, d.table_name, 0, query)
        db = "" if jtype == JobType.CREATE_SCHEMA else d.schema_name  # CREATE DATABASE runs in no database
        return Txn(ts, ddl=DDL(db, d.table_name, query, job, InfoSchema()))
    if b.type != spb.DML:
        raise CodecError(f"relay record at commit_ts={ts} has unknown type {b.type}")
    dmls: list[DML] = []
    for table in b.dml_data.tables:
        shape, readers = shapes.decoder(table, _unsigned_columns(table))
        where = f"{shape.db}.{shape.table} at commit_ts={ts}"
        for m in table.mutations:
            tp = _FROM_MUTATION[m.type]
            row = _values(m.row, readers, shape, where)
            if tp == DMLType.INSERT:
                dmls.append(DML(tp, shape, values=row, commit_ts=ts, size=m.row.ByteSize()))
            elif tp == DMLType.DELETE:
                dmls.append(DML(tp, shape, old_values=row, commit_ts=ts, size=m.row.ByteSize()))
            else:
                if not m.HasField("change_row"):
                    raise CodecError(f"relay record of {where}: an update without its old row")
                old = _values(m.change_row, readers, shape, where)
                size = m.row.ByteSize() + m.change_row.ByteSize()
                dmls.append(DML(tp, shape, values=row, old_values=old, commit_ts=ts, size=size))
    return Txn(ts, dmls=dmls, size=b.ByteSize())


def _unsigned_columns(table: spb.Table) -> frozenset[int]:
    """Integer columns written as uint64 (the original marks UNSIGNED columns only that way): the first
    non-null value of the column in the record decides (an encoder writes a column one way)."""
    ints = [
        i for i, ci in enumerate(table.column_info) if _NAME_TYPES.get(ci.mysql_type, _NO_TYPE)[0] in INT_VALUE_TYPES
    ]
    if not ints:
        return frozenset()
    found: set[int] = set()
    mutations = table.mutations
    rows = [m.row.columns for m in mutations]
    rows += [m.change_row.columns for m in mutations if m.HasField("change_row")]
    for i in ints:
        for columns in rows:
            if i >= len(columns):
                continue  # a short row: _values refuses it
            c = columns[i]
            if not c.is_null:
                if c.HasField("uint64_value") and not c.HasField("string_value"):
                    found.add(i)
                break
    return frozenset(found)


def _values(row: spb.Row, readers: Sequence[ValueReader], shape: TableShape, where: str) -> tuple[Any, ...]:
    columns = row.columns
    if len(columns) != len(readers):
        raise CodecError(f"relay record of {where}: a row of {len(columns)} columns, the table has {len(readers)}")
    try:
        return tuple([None if c.is_null else read(c) for c, read in zip(columns, readers, strict=True)])
    except (ValueError, InvalidOperation, CodecError) as exc:
        failed = exc
    for c, read, col in zip(columns, readers, shape.columns, strict=True):  # name the column that failed
        try:
            None if c.is_null else read(c)
        except (ValueError, InvalidOperation, CodecError) as exc:
            raise CodecError(f"relay record of {where}: column {col.name}: {exc}") from None
    raise CodecError(f"relay record of {where}: {failed}") from None


def _int_value(c: spb.Column) -> Any:
    return c.uint64_value if c.HasField("uint64_value") else c.int64_value


def _enum_set_value(c: spb.Column) -> Any:
    if not c.HasField("string_value"):
        raise CodecError("an ENUM/SET value without its text (a record not written by this drainer)")
    return c.string_value


_double_value: Final[ValueReader] = operator.attrgetter("double_value")
_string_value: Final[ValueReader] = operator.attrgetter("string_value")
_bytes_value: Final[ValueReader] = operator.attrgetter("bytes_value")


def _reader(ct: ColumnType) -> ValueReader:
    """How a non-null value of a column of type `ct` is read from its `spb.Column`."""
    tp = ct.tp
    if tp in INT_VALUE_TYPES:
        return _int_value
    if tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        return _double_value
    if tp in DECIMAL_TYPES:
        return lambda c: Decimal(c.string_value)
    if tp == MySQLType.YEAR:
        return lambda c: int(c.string_value)
    if tp == MySQLType.DATE:
        return lambda c: parse_date_text(c.string_value)
    if tp == MySQLType.DATETIME:
        return lambda c: parse_datetime_text(c.string_value)
    if tp == MySQLType.TIMESTAMP:
        return lambda c: parse_datetime_text(c.string_value).replace(tzinfo=_dt.UTC)
    if tp == MySQLType.DURATION:
        return lambda c: parse_time_text(c.string_value)
    if tp == MySQLType.JSON:
        return lambda c: parse_json_text(c.bytes_value)
    if tp in (MySQLType.ENUM, MySQLType.SET):
        return _enum_set_value
    if tp == MySQLType.BIT or ct.is_binary:
        return _bytes_value
    return _string_value
