"""The bytes of a relay record / secondary-binlog Kafka message, written directly (pure).

What a record holds is `drainer.relay_codec`'s contract (docs/formats.md#relay-records); this module
writes it fast, byte for byte what protobuf's ``SerializeToString`` gives for the same
``slave.binlog.Binlog`` message (``proto/secondary_binlog.proto``, proto2).  The wire rules it relies on:

* fields in field-number order; a proto2 optional field is written when set, even to its default
  (``Binlog.type`` DML is ``08 00``, ``ColumnInfo.decimal`` 0 is ``28 00``); a repeated field is one
  tag per element (nothing here is packed);
* a tag is one byte, ``field << 3 | wire type`` (0 varint, 1 fixed64, 2 length-delimited); a
  length-delimited field is ``tag ‖ uvarint(len) ‖ bytes``; int64 / int32 / enum varints are two's
  complement (a negative value is a 10-byte varint); a double is 8 bytes little-endian;
* tags: ``Binlog`` type 08, commit_ts 10, dml_data 1a, ddl_data 22, time_zone 2a; ``DMLData`` tables 0a;
  ``Table`` schema_name 0a, table_name 12, column_info 1a, mutations 22, unique_keys 2a; ``ColumnInfo``
  name 0a, mysql_type 12, is_primary_key 18, flen 20, decimal 28; ``Key`` name 0a, column_names 12;
  ``TableMutation`` type 08, row 12, change_row 1a; ``Row`` columns 0a; ``Column`` is_null 08,
  int64_value 10, uint64_value 18, double_value 21, bytes_value 2a, string_value 32; ``DDLData``
  schema_name 0a, table_name 12, ddl_query 1a.

Per table shape (one object per table definition) an encoder is built once and cached by the shape's
identity: the ``Table`` bytes that do not depend on rows (fields 1-3 before the mutations, field 5
after them) and one value writer per column, which returns the whole ``Row.columns`` element of a
non-null value.  A record is assembled as a list of pieces joined once.

Values are what ``check_value`` / ``unflatten`` return (docs of `drainer.relay_codec`); a value that
does not fit its column (an int out of range, a str for an int, a bool, bytes that are no UTF-8 for
a text column, a row of the wrong length) raises ``CodecError`` naming the table, commit_ts and column.
"""

from __future__ import annotations

import datetime as _dt
import struct
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, Final

from common.codec.flatten import DECIMAL_TYPES, INTEGER_TYPES, TIME_TYPES, ColumnType, MySQLType
from common.codec.json_binary import json_to_text
from common.codec.mytime import format_duration
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb.gogo import uvarint, varint
from common.pbfile import time_text, type_name
from common.schema.model import IndexInfo, JobType, TableInfo

__all__ = [
    "RELAY_TIME_ZONE",
    "SHAPE_CACHE_LIMIT",
    "closing_marker",
    "ddl_schema_name",
    "encode_txn",
    "opening_marker",
]

RELAY_TIME_ZONE: Final = "UTC"
SHAPE_CACHE_LIMIT: Final = 1024
"""Table encoders kept (one per table shape); the cache is emptied when it holds this many."""

Writer = Callable[[Any], bytes]
"""The ``Row.columns`` element (``0a len Column``) of one non-null value."""

INT_VALUE_TYPES: Final = INTEGER_TYPES - {MySQLType.YEAR}
"""Integer columns, carried in int64_value / uint64_value (YEAR is text, as the original's)."""
_I64_MIN: Final = -(1 << 63)
_I64_MAX: Final = (1 << 63) - 1
_U64_MAX: Final = (1 << 64) - 1
_I32_MIN: Final = -(1 << 31)
_I32_MAX: Final = (1 << 31) - 1
_U32_MAX: Final = (1 << 32) - 1

_INSERT: Final = DMLType.INSERT
_UPDATE: Final = DMLType.UPDATE
_DELETE: Final = DMLType.DELETE
_MUTATION_TYPE: Final = {_INSERT: b"\x08\x00", _UPDATE: b"\x08\x01", _DELETE: b"\x08\x02"}
_SHORT_ROW: Final = 0x7C
# `22 len 08 type 12 k`: the head of a TableMutation of one row of k < 124 bytes (len = k + 4 < 128), by type.
_MUTATION_HEAD: Final = {
    tp: tuple(b"\x22" + bytes((k + 4,)) + kind + b"\x12" + bytes((k,)) for k in range(_SHORT_ROW))
    for tp, kind in _MUTATION_TYPE.items()
}
_MEDIUM_ROW: Final = 0x4000 - 5
_NULL: Final = b"\x0a\x02\x08\x01"  # Column{is_null: true}
_DML_HEAD: Final = b"\x08\x00\x10"  # Binlog{type: DML, commit_ts: ...
_DDL_HEAD: Final = b"\x08\x01\x10"  # Binlog{type: DDL, commit_ts: ...
_TIME_ZONE: Final = b"\x2a\x03" + RELAY_TIME_ZONE.encode()

# `0a len 32 n` / `0a len 2a n`: the head of a Column with a string / bytes value of n < 126 bytes.
_SHORT: Final = 0x7E
_STRING_HEAD: Final = tuple(bytes((0x0A, n + 2, 0x32, n)) for n in range(_SHORT))
_BYTES_HEAD: Final = tuple(bytes((0x0A, n + 2, 0x2A, n)) for n in range(_SHORT))
_double_column: Final = struct.Struct("<3sd").pack
_DOUBLE_HEAD: Final = b"\x0a\x09\x21"


# ------------------------------------------------------------------------------------------ wire pieces


def _field(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: ``tag ‖ uvarint(len) ‖ data``."""
    return tag + uvarint(len(data)) + data


def _text_field(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode())


def _int32(v: int, what: str) -> bytes:
    """An int32 field's varint; a value of 2**31..2**32-1 wraps as Go's ``int32(x)`` does (LONGTEXT's and
    LONGBLOB's flen 4294967295 is written as -1: protobuf's own setter refuses it)."""
    if _I32_MAX < v <= _U32_MAX:
        v -= 1 << 32
    if not _I32_MIN <= v <= _I32_MAX:
        raise CodecError(f"{what} {v} does not fit in int32")
    return varint(v)


# -------------------------------------------------------------------------------------- value writers


def _int_writer(tag: int, lowest: int, highest: int) -> Writer:
    """The writer of an int64 (tag 10) or uint64 (tag 18) value in ``lowest..highest``: ``0a len tag varint``,
    varints of up to five bytes (values below 2**35) computed inline."""
    small = tuple(bytes((0x0A, 2, tag, v)) for v in range(0x80))

    def write(value: Any) -> bytes:
        v: int = value if type(value) is int else _as_int(value)
        if v >= 0:
            if v < 0x80:
                return small[v]
            if v < 0x4000:
                return bytes((0x0A, 3, tag, v & 0x7F | 0x80, v >> 7))
            if v < 0x200000:
                return bytes((0x0A, 4, tag, v & 0x7F | 0x80, v >> 7 & 0x7F | 0x80, v >> 14))
            if v < 0x10000000:
                return bytes((0x0A, 5, tag, v & 0x7F | 0x80, v >> 7 & 0x7F | 0x80, v >> 14 & 0x7F | 0x80, v >> 21))
            if v < 0x800000000:
                low, high = v & 0x1FFFFF, v >> 21
                return bytes(
                    (
                        0x0A,
                        6,
                        tag,
                        low & 0x7F | 0x80,
                        low >> 7 & 0x7F | 0x80,
                        low >> 14 | 0x80,
                        high & 0x7F | 0x80,
                        high >> 7,
                    )
                )
            if v > highest:
                raise ValueError(f"value out of range: {v}")
        elif v < lowest:
            raise ValueError(f"value out of range: {v}")
        enc = varint(v)
        return bytes((0x0A, len(enc) + 1, tag)) + enc

    return write


_int64: Final = _int_writer(0x10, _I64_MIN, _I64_MAX)
_uint64: Final = _int_writer(0x18, 0, _U64_MAX)


def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise TypeError("expected an int, got a boolean")
    return int(v.__index__())  # an int-like object; anything else (float, str, Decimal) is refused


def _string_column(b: bytes) -> bytes:
    n = len(b)
    if n < _SHORT:
        return _STRING_HEAD[n] + b
    head = uvarint(n)
    return b"".join((b"\x0a", uvarint(1 + len(head) + n), b"\x32", head, b))


def _bytes_column(b: bytes) -> bytes:
    n = len(b)
    if n < _SHORT:
        return _BYTES_HEAD[n] + b
    head = uvarint(n)
    return b"".join((b"\x0a", uvarint(1 + len(head) + n), b"\x2a", head, b))


def _utf8(v: Any) -> bytes:
    """A string field's bytes: a str as UTF-8, or bytes that are valid UTF-8."""
    if type(v) is str:
        return v.encode()
    if isinstance(v, bytes):
        v.decode()  # raises UnicodeDecodeError (a ValueError) for bytes that are no UTF-8
        return bytes(v)
    if isinstance(v, str):
        return v.encode()
    raise TypeError(f"expected str, {type(v).__name__} found")


def _string(v: Any) -> bytes:
    if type(v) is str:
        b = v.encode()
        n = len(b)
        if n < _SHORT:
            return _STRING_HEAD[n] + b
        return _string_column(b)
    return _string_column(_utf8(v))


def _bytes(v: Any) -> bytes:
    return _bytes_column(bytes(v))


def _double(v: Any) -> bytes:
    return _double_column(_DOUBLE_HEAD, float(v))


def _decimal(v: Any) -> bytes:
    return _string_column(format(v if isinstance(v, Decimal) else Decimal(str(v)), "f").encode())


def _year(v: Any) -> bytes:
    return _string_column(str(int(v)).encode())


def _json(v: Any) -> bytes:
    return _bytes_column(json_to_text(v).encode())


def _with_index(v: Any, index: int) -> bytes:
    """Column{uint64_value: index, string_value: v} (ENUM, SET: the index / bitmask and the text)."""
    body = b"\x18" + uvarint(index) + b"\x32"
    text = _utf8(v)
    head = uvarint(len(text))
    return b"".join((b"\x0a", uvarint(len(body) + len(head) + len(text)), body, head, text))


def _enum_writer(ct: ColumnType) -> Writer:
    index: dict[str, int] = {}
    for i, e in enumerate(ct.elems, 1):
        index.setdefault(e.lower(), i)  # the first member of that name, case-insensitively

    def enum(v: Any) -> bytes:
        return _with_index(v, index.get(v.lower(), 0))

    return enum


def _set_writer(ct: ColumnType) -> Writer:
    bits: dict[str, int] = {}
    for i, e in enumerate(ct.elems):
        bits[e.lower()] = bits.get(e.lower(), 0) | 1 << i

    def set_(v: Any) -> bytes:
        mask = 0
        for m in v.split(","):
            if m:
                mask |= bits.get(m.lower(), 0)
        return _with_index(v, mask)

    return set_


def _writer(ct: ColumnType) -> Writer:
    """How a non-null value of a column of type `ct` is written."""
    tp = ct.tp
    if tp in INT_VALUE_TYPES:
        return _uint64 if ct.unsigned else _int64
    if tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        return _double
    if tp in DECIMAL_TYPES:
        return _decimal
    if tp == MySQLType.YEAR:
        return _year
    if tp in TIME_TYPES:
        return lambda v: _string_column(time_text(v, ct, _dt.UTC).encode())
    if tp == MySQLType.DURATION:
        fsp = ct.fsp
        return lambda v: _string_column(format_duration(v, fsp).encode())
    if tp == MySQLType.JSON:
        return _json
    if tp == MySQLType.ENUM:
        return _enum_writer(ct)
    if tp == MySQLType.SET:
        return _set_writer(ct)
    if tp == MySQLType.BIT or ct.is_binary:
        return _bytes
    return _string


# ---------------------------------------------------------------------------------------- table encoder


def _keys(info: TableInfo) -> list[IndexInfo]:
    """The unique keys in `TableShape.unique_keys` order: the primary key first."""
    pk = info.primary_key
    rest = [ix for ix in info.unique_keys if not ix.primary]
    return ([pk] if pk is not None else []) + rest


RowEncoder = Callable[[Sequence[Any]], bytes]
"""The bytes of a ``Row`` (its ``columns`` elements) of a row of values; raises on a value that does not fit."""


def _row_encoder(writers: Sequence[Writer]) -> RowEncoder:
    """A function that writes a row with `writers`, one per column, without a loop: for a table of two
    columns ``v0, v1 = values; return b"".join((NULL if v0 is None else w0(v0), ...))`` (a row of the
    wrong length fails to unpack).  A text column's short str is written inline, without a call.  Its
    source holds only generated names, never a column's."""
    items = []
    for i, w in enumerate(writers):
        v = f"v{i}"
        if w is _string:
            short = f"(SHORT[n] + e if (n := len(e := {v}.encode())) < {_SHORT} else LONG(e))"
            items.append(f"NULL if {v} is None else ({short} if type({v}) is str else w{i}({v}))")
        else:
            items.append(f"NULL if {v} is None else w{i}({v})")
    names = "".join(f"v{i}, " for i in range(len(writers)))
    source = f"def row(values):\n    ({names}) = values\n    return b''.join(({''.join(f'{x}, ' for x in items)}))\n"
    namespace: dict[str, Any] = {f"w{i}": w for i, w in enumerate(writers)}
    namespace.update(NULL=_NULL, SHORT=_STRING_HEAD, LONG=_string_column)
    exec(source, namespace)  # generated from constant text and the column count only
    row: RowEncoder = namespace["row"]
    return row


class _TableEncoder:
    """What a table shape's records share: the row-independent ``Table`` bytes and the row writer."""

    __slots__ = ("head", "row", "shape", "tail", "writers")

    def __init__(self, shape: TableShape) -> None:
        self.shape = shape
        keys = _keys(shape.info)
        pk_cols = {c.lower() for c in keys[0].columns} if keys and keys[0].primary else set()
        head = [_text_field(b"\x0a", shape.db), _text_field(b"\x12", shape.table)]
        for col in shape.columns:
            ct = col.ctype
            info = b"".join(
                (
                    _text_field(b"\x0a", col.name),
                    _text_field(b"\x12", type_name(ct)),
                    b"\x18\x01" if col.lname in pk_cols else b"\x18\x00",
                    b"\x20" + _int32(ct.flen, f"column {col.name}: flen"),
                    b"\x28" + _int32(ct.decimal, f"column {col.name}: decimal"),
                )
            )
            head.append(_field(b"\x1a", info))
        self.head = b"".join(head)
        """Table fields 1-3: schema_name, table_name, column_info."""
        names = [c.name for c in shape.columns]
        tail = []
        for ix, positions in zip(keys, shape.unique_keys, strict=True):
            key = _text_field(b"\x0a", "PRIMARY" if ix.primary else ix.name)
            key += b"".join(_text_field(b"\x12", names[p]) for p in positions)
            tail.append(_field(b"\x2a", key))
        self.tail = b"".join(tail)
        """Table field 5: unique_keys."""
        self.writers = tuple(_writer(c.ctype) for c in shape.columns)
        self.row = _row_encoder(self.writers)

    def explain(self, values: Sequence[Any] | None, d: DML) -> None:
        """Raises the CodecError that says what is wrong with a row that does not encode; returns if nothing is."""
        where = f"{d.tp.name} of {self.shape.db}.{self.shape.table} at commit_ts={d.commit_ts}"
        if values is None:
            raise CodecError(f"{where} has no row image")
        if len(values) != len(self.writers):
            raise CodecError(f"{where}: a row of {len(values)} values, the table has {len(self.writers)} columns")
        for col, w, v in zip(self.shape.columns, self.writers, values, strict=True):
            if v is None:
                continue
            try:
                w(v)
            except _VALUE_ERRORS as exc:
                shown = repr(v)
                if len(shown) > _SHOWN_CHARS:
                    shown = shown[: _SHOWN_CHARS - 3] + "..."
                what = f"{type(v).__name__} value {shown}"
                raise CodecError(f"{where}: column {col.name}: {what} does not fit: {exc}") from None


_VALUE_ERRORS: Final = (TypeError, ValueError, AttributeError, OverflowError, CodecError)
"""What a writer raises for a value that does not fit (the protobuf library raises TypeError and ValueError)."""
_SHOWN_CHARS: Final = 80
"""At most this much of a bad value's repr goes into the error."""
_ENCODERS: dict[int, _TableEncoder] = {}


def _encoder(shape: TableShape) -> _TableEncoder:
    """The shape's encoder, cached by identity (the cache holds the shape, so its id is not reused)."""
    enc = _ENCODERS.get(id(shape))
    if enc is None or enc.shape is not shape:
        enc = _TableEncoder(shape)
        if len(_ENCODERS) >= SHAPE_CACHE_LIMIT:
            _ENCODERS.clear()
        _ENCODERS[id(shape)] = enc
    return enc


# --------------------------------------------------------------------------------------------- records


def opening_marker(commit_ts: int) -> bytes:
    """The record before the first part of a transaction written in parts: a DML binlog without dml_data."""
    return _DML_HEAD + varint(commit_ts)


def closing_marker(commit_ts: int) -> bytes:
    """The record after its last part: a DML binlog whose dml_data has no tables."""
    return _DML_HEAD + varint(commit_ts) + b"\x1a\x00"


def ddl_schema_name(ddl: DDL) -> str:
    """`DDLData.schema_name` of a DDL: the database it runs in; for CREATE DATABASE the new database, as the
    original (a consumer such as the arbiter knows CREATE DATABASE by its text and does not `USE` it)."""
    if ddl.job.type == JobType.CREATE_SCHEMA:
        return ddl.db or ddl.job.schema_name
    return ddl.db


def encode_txn(txn: Txn) -> bytes | None:
    """The record of one transaction (or one part of it); None when it has nothing to write.

    Raises CodecError for a value that does not fit its column."""
    ts = txn.commit_ts
    if txn.ddl is not None:
        if txn.ddl.skip:
            return None
        ddl = txn.ddl
        data = b"".join(
            (
                _text_field(b"\x0a", ddl_schema_name(ddl)),
                _text_field(b"\x12", ddl.table),
                _field(b"\x1a", ddl.query.encode()),
            )
        )
        return b"".join((_DDL_HEAD, varint(ts), b"\x22", uvarint(len(data)), data))
    if not txn.dmls:
        return None
    try:
        tables, size = _dml_data(txn.dmls)
    except _VALUE_ERRORS as exc:
        for d in txn.dmls:
            enc = _encoder(d.shape)
            enc.explain(d.old_values if d.tp == DMLType.DELETE else d.values, d)
            if d.tp == DMLType.UPDATE:
                enc.explain(d.old_values, d)
        raise CodecError(f"commit_ts={ts}: {exc}") from None
    tables[0] = b"".join((_DML_HEAD, varint(ts), b"\x1a", uvarint(size), tables[0]))
    tables.append(_TIME_ZONE)
    return b"".join(tables)


def _dml_data(dmls: Sequence[DML]) -> tuple[list[bytes], int]:
    """The pieces of ``DMLData.tables`` (a ``Table`` per run of consecutive DMLs of one shape), their size."""
    parts: list[bytes] = []
    append = parts.append
    shape: TableShape | None = None
    enc: _TableEncoder | None = None
    row: RowEncoder = _no_row
    at = size = total = 0  # size: of the current Table; total: of the tables before it, with their headers
    for d in dmls:
        if d.shape is not shape:
            if enc is not None:
                total += _close_table(parts, at, enc, size)
            shape = d.shape
            enc = _encoder(shape)
            row = enc.row
            at = len(parts)
            parts += (b"", enc.head)  # [at]: the Table header, once its size is known
            size = len(enc.head) + len(enc.tail)
        tp = d.tp
        if tp is _INSERT:
            new = row(d.values)  # type: ignore[arg-type]
        elif tp is _DELETE:
            new = row(d.old_values)  # type: ignore[arg-type]
        else:
            if tp is not _UPDATE:
                raise CodecError(f"unknown DML type {tp!r}")
            new, old = row(d.values), row(d.old_values)  # type: ignore[arg-type]
            new_len, old_len = uvarint(len(new)), uvarint(len(old))
            mutation = 4 + len(new_len) + len(new) + len(old_len) + len(old)
            head = b"\x22" + uvarint(mutation) + b"\x08\x01\x12" + new_len
            parts += (head, new, b"\x1a" + old_len, old)
            size += len(head) + mutation - 3 - len(new_len)
            continue
        k = len(new)
        if k < _SHORT_ROW:
            append(_MUTATION_HEAD[tp][k])
            size += k + 6
        elif 0x80 <= k < _MEDIUM_ROW:  # two-byte lengths of the row and of the mutation (k + 5 bytes)
            m = k + 5
            append(bytes((0x22, m & 0x7F | 0x80, m >> 7, 0x08, tp - 1, 0x12, k & 0x7F | 0x80, k >> 7)))
            size += k + 8
        else:
            new_len = uvarint(k)
            head = b"".join((b"\x22", uvarint(3 + len(new_len) + k), _MUTATION_TYPE[tp], b"\x12", new_len))
            append(head)
            size += len(head) + k
        append(new)
    if enc is not None:
        total += _close_table(parts, at, enc, size)
    return parts, total


def _no_row(values: Sequence[Any]) -> bytes:
    raise AssertionError("no table")  # pragma: no cover - replaced before the first row


def _close_table(parts: list[bytes], at: int, enc: _TableEncoder, size: int) -> int:
    """Appends the table's tail, puts its header at ``parts[at]``; returns its size with the header."""
    parts.append(enc.tail)
    parts[at] = head = b"\x0a" + uvarint(size)
    return len(head) + size
