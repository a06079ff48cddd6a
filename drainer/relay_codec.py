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
* a DDL: ``Binlog{type=DDL, commit_ts, ddl_data{schema_name, table_name, ddl_query}}``;
* a transaction the drainer applies in parts (``Txn.partial``): an opening marker (a DML record
  without ``dml_data``), one record per part, and a closing marker (a DML record whose ``dml_data``
  has no tables).  A reader knows a transaction cut by a crash (no closing marker) and leaves it
  out; a reader of the original format sees two empty transactions.

Empty transactions (fake binlogs, filtered ones) and skipped DDLs have no record.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from common.codec.flatten import BINARY_CHARSET, DEFAULT_CHARSET, ColumnType, MySQLType
from common.codec.json_binary import json_to_text, parse_json_text
from common.codec.mytime import format_duration
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.filters import ddl_event
from common.pb import secondary_binlog_pb2 as spb
from common.pbfile import time_text, type_name
from common.schema.defaults import parse_date_text, parse_datetime_text, parse_time_text
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo

__all__ = [
    "RELAY_TIME_ZONE",
    "ShapeCache",
    "closing_marker",
    "decode_record",
    "encode_txn",
    "marker_kind",
    "opening_marker",
]

RELAY_TIME_ZONE: Final = "UTC"

_TO_MUTATION: Final = {DMLType.INSERT: spb.Insert, DMLType.UPDATE: spb.Update, DMLType.DELETE: spb.Delete}
_FROM_MUTATION: Final = {v: k for k, v in _TO_MUTATION.items()}
_INT_TYPES: Final = frozenset({MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG})
_TIME_TYPES: Final = frozenset({MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP})
_DECIMAL_TYPES: Final = frozenset({MySQLType.DECIMAL, MySQLType.NEW_DECIMAL})

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


# ------------------------------------------------------------------------------------------ encode


def opening_marker(commit_ts: int) -> bytes:
    """The record before the first part of a transaction written in parts: a DML binlog without dml_data."""
    return spb.Binlog(type=spb.DML, commit_ts=commit_ts).SerializeToString()


def closing_marker(commit_ts: int) -> bytes:
    """The record after its last part: a DML binlog whose dml_data has no tables."""
    return spb.Binlog(type=spb.DML, commit_ts=commit_ts, dml_data=spb.DMLData()).SerializeToString()


def marker_kind(b: spb.Binlog) -> str:
    """ "open", "close", or "" for a record that is not a marker."""
    if b.type != spb.DML:
        return ""
    if not b.HasField("dml_data"):
        return "open"
    return "" if b.dml_data.tables else "close"


def encode_txn(txn: Txn) -> bytes | None:
    """The record of one transaction (or one part of it); None when it has nothing to write.

    Raises CodecError for a value that does not fit its column."""
    ts = txn.commit_ts
    if txn.ddl is not None:
        if txn.ddl.skip:
            return None
        ddl = spb.DDLData(schema_name=txn.ddl.db, table_name=txn.ddl.table, ddl_query=txn.ddl.query.encode())
        return spb.Binlog(type=spb.DDL, commit_ts=ts, ddl_data=ddl).SerializeToString()
    if not txn.dmls:
        return None
    data = spb.DMLData()
    for shape, dmls in _runs(txn.dmls):
        table = data.tables.add(schema_name=shape.db, table_name=shape.table)
        _put_table_info(table, shape)
        for d in dmls:
            _put_mutation(table.mutations.add(type=_TO_MUTATION[d.tp]), d)
    return spb.Binlog(type=spb.DML, commit_ts=ts, dml_data=data, time_zone=RELAY_TIME_ZONE).SerializeToString()


def _runs(dmls: Sequence[DML]) -> Iterator[tuple[TableShape, list[DML]]]:
    """Consecutive DMLs of one shape, in order."""
    run: list[DML] = []
    for d in dmls:
        if run and d.shape is not run[0].shape:
            yield run[0].shape, run
            run = []
        run.append(d)
    if run:
        yield run[0].shape, run


def _key_names(info: TableInfo) -> list[IndexInfo]:
    """The unique keys in `TableShape.unique_keys` order: the primary key first."""
    pk = info.primary_key
    rest = [ix for ix in info.unique_keys if not ix.primary]
    return ([pk] if pk is not None else []) + rest


def _put_table_info(table: spb.Table, shape: TableShape) -> None:
    keys = _key_names(shape.info)
    pk_cols = {c.lower() for c in keys[0].columns} if keys and keys[0].primary else set()
    for col in shape.columns:
        ct = col.ctype
        table.column_info.add(
            name=col.name,
            mysql_type=type_name(ct),
            is_primary_key=col.lname in pk_cols,
            flen=ct.flen,
            decimal=ct.decimal,
        )
    names = [c.name for c in shape.columns]
    for ix, positions in zip(keys, shape.unique_keys, strict=True):
        table.unique_keys.add(name="PRIMARY" if ix.primary else ix.name, column_names=[names[p] for p in positions])


def _put_mutation(m: spb.TableMutation, d: DML) -> None:
    cols = d.shape.columns
    if d.tp == DMLType.INSERT:
        _put_row(m.row, cols, d.values, d)
    elif d.tp == DMLType.DELETE:
        _put_row(m.row, cols, d.old_values, d)
    else:
        _put_row(m.row, cols, d.values, d)
        _put_row(m.change_row, cols, d.old_values, d)


def _put_row(row: spb.Row, cols: Sequence[ColumnInfo], values: Sequence[Any] | None, d: DML) -> None:
    if values is None:
        raise CodecError(f"{d.tp.name} of {d.shape.db}.{d.shape.table} at commit_ts={d.commit_ts} has no row image")
    for col, v in zip(cols, values, strict=True):
        c = row.columns.add()
        if v is None:
            c.is_null = True
        else:
            try:
                _put_value(c, v, col.ctype)
            except (TypeError, ValueError, AttributeError) as exc:
                raise CodecError(f"column {col.name}: {type(v).__name__} value {v!r} does not fit: {exc}") from None


def _put_value(c: spb.Column, v: Any, ct: ColumnType) -> None:
    tp = ct.tp
    if tp in _INT_TYPES:
        if ct.unsigned:
            c.uint64_value = v
        else:
            c.int64_value = v
    elif tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        c.double_value = float(v)
    elif tp in _DECIMAL_TYPES:
        c.string_value = format(v if isinstance(v, Decimal) else Decimal(str(v)), "f")
    elif tp == MySQLType.YEAR:
        c.string_value = str(int(v))
    elif tp in _TIME_TYPES:
        c.string_value = time_text(v, ct, _dt.UTC)
    elif tp == MySQLType.DURATION:
        c.string_value = format_duration(v, ct.fsp)
    elif tp == MySQLType.JSON:
        c.bytes_value = json_to_text(v).encode()
    elif tp == MySQLType.ENUM:
        c.string_value = v
        c.uint64_value = _enum_index(ct, v)
    elif tp == MySQLType.SET:
        c.string_value = v
        c.uint64_value = _set_mask(ct, v)
    elif tp == MySQLType.BIT or ct.is_binary:
        c.bytes_value = bytes(v)
    else:
        c.string_value = v


def _enum_index(ct: ColumnType, v: str) -> int:
    lowered = v.lower()
    for i, e in enumerate(ct.elems, 1):
        if e.lower() == lowered:
            return i
    return 0


def _set_mask(ct: ColumnType, v: str) -> int:
    members = {m.lower() for m in v.split(",") if m}
    return sum(1 << i for i, e in enumerate(ct.elems) if e.lower() in members)


# ------------------------------------------------------------------------------------------ decode


class ShapeCache:
    """Table shapes rebuilt from records, one object per distinct table definition (the SQL layer caches
    statement text per shape object).  Bounded: cleared when it holds `limit` shapes."""

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._shapes: dict[bytes, TableShape] = {}

    def shape(self, table: spb.Table, unsigned: frozenset[int]) -> TableShape:
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
            found = self._shapes[key] = _build_shape(table, unsigned)
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
        return Txn(ts, ddl=DDL(d.schema_name, d.table_name, query, job, InfoSchema()))
    if b.type != spb.DML:
        raise CodecError(f"relay record at commit_ts={ts} has unknown type {b.type}")
    dmls: list[DML] = []
    for table in b.dml_data.tables:
        shape = shapes.shape(table, _unsigned_columns(table))
        cts = [c.ctype for c in shape.columns]
        where = f"{shape.db}.{shape.table} at commit_ts={ts}"
        for m in table.mutations:
            tp = _FROM_MUTATION[m.type]
            row = _values(m.row, cts, shape, where)
            if tp == DMLType.INSERT:
                dmls.append(DML(tp, shape, values=row, commit_ts=ts, size=m.row.ByteSize()))
            elif tp == DMLType.DELETE:
                dmls.append(DML(tp, shape, old_values=row, commit_ts=ts, size=m.row.ByteSize()))
            else:
                if not m.HasField("change_row"):
                    raise CodecError(f"relay record of {where}: an update without its old row")
                old = _values(m.change_row, cts, shape, where)
                size = m.row.ByteSize() + m.change_row.ByteSize()
                dmls.append(DML(tp, shape, values=row, old_values=old, commit_ts=ts, size=size))
    return Txn(ts, dmls=dmls, size=b.ByteSize())


def _unsigned_columns(table: spb.Table) -> frozenset[int]:
    """Integer columns written as uint64 (the original marks UNSIGNED columns only that way)."""
    found: set[int] = set()
    for m in table.mutations:
        for row in (m.row, m.change_row):
            for i, c in enumerate(row.columns):
                if c.HasField("uint64_value") and not c.HasField("string_value"):
                    found.add(i)
    return frozenset(found)


def _values(row: spb.Row, cts: Sequence[ColumnType], shape: TableShape, where: str) -> tuple[Any, ...]:
    if len(row.columns) != len(cts):
        raise CodecError(f"relay record of {where}: a row of {len(row.columns)} columns, the table has {len(cts)}")
    out: list[Any] = []
    for c, ct, col in zip(row.columns, cts, shape.columns, strict=True):
        try:
            out.append(None if c.is_null else _value(c, ct))
        except (ValueError, InvalidOperation, CodecError) as exc:
            raise CodecError(f"relay record of {where}: column {col.name}: {exc}") from None
    return tuple(out)


def _value(c: spb.Column, ct: ColumnType) -> Any:
    tp = ct.tp
    if tp in _INT_TYPES:
        return c.uint64_value if c.HasField("uint64_value") else c.int64_value
    if tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        return c.double_value
    if tp in _DECIMAL_TYPES:
        return Decimal(c.string_value)
    if tp == MySQLType.YEAR:
        return int(c.string_value)
    if tp == MySQLType.DATE:
        return parse_date_text(c.string_value)
    if tp == MySQLType.DATETIME:
        return parse_datetime_text(c.string_value)
    if tp == MySQLType.TIMESTAMP:
        return parse_datetime_text(c.string_value).replace(tzinfo=_dt.UTC)
    if tp == MySQLType.DURATION:
        return parse_time_text(c.string_value)
    if tp == MySQLType.JSON:
        return parse_json_text(c.bytes_value)
    if tp in (MySQLType.ENUM, MySQLType.SET):
        if not c.HasField("string_value"):
            raise CodecError("an ENUM/SET value without its text (a record not written by this drainer)")
        return c.string_value
    if tp == MySQLType.BIT or ct.is_binary:
        return c.bytes_value
    return c.string_value
