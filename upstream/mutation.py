"""Row changes of one transaction captured as TiDB does, into ``PrewriteValue`` (pure).

Per table one ``TableMutation``; every change appends its encoded row to the slot of its
kind and its kind to ``sequence``, in execution order, without merging (docs/formats.md#prewritevalue-and-tablemutation,
docs/formats.md#row-format).  So insert, insert, update, update, delete, insert on one table gives
``inserted_rows=[i1, i2, i3]``, ``updated_rows=[u1, u2]``, ``deleted_rows=[d1]`` and
``sequence=[Insert, Insert, Update, Update, DeleteRow, Insert]``.

Row bytes (old row format, values flattened per column type):

    inserted_rows[i]  int handle datum ‖ row(all columns except the PK-is-handle column
                      and NULL values of columns whose default is NULL)
    updated_rows[i]   row(old, ids) ‖ row(new, ids), ids = every column, plus
                      (-1, handle) when the table has no integer primary key
    deleted_rows[i]   row(old, ids), same ids

The handle of a PK-is-handle table is its primary key value as an int64 (an unsigned value
as its int64 bit pattern); other tables use the hidden row id (``_tidb_rowid``, column id -1).

Memory: the log keeps each row once, already framed as its ``TableMutation`` field (gogo,
common/pb/gogo.py: ``12|1a|32 uvarint(len) row``), and each table's ``sequence`` field encoded
(``38 kind`` per change).  A row is a tuple of pieces in which every bytes value of
``BIG_VALUE`` (64 KiB) or more is the caller's own object (``row_pieces``), so blobs are not
copied at all.  ``prewrite_value_parts`` is then the gogo ``PrewriteValue`` as a list of
pieces that reference those rows:

    08 varint(schema_version)
    per table:  12 uvarint(len(tm))  ‖  tm = 08 varint(table_id) ‖ inserted ‖ updated ‖ deleted ‖ sequence

so a transaction's blobs exist once in its rows and once in the request the pump client joins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from common.codec import EXTRA_HANDLE_ID, Datum, flatten
from common.codec.datum import Kind, encode_datum, int_datum
from common.codec.number import encode_varint
from common.codec.row import encode_row
from common.pb import binlog_pb2
from common.pb.gogo import uvarint, varint
from common.schema.model import TableInfo

Row = Mapping[str, Any]
"""Column name (lower case) -> checked Python value, every column of the table present."""

_INT64_SIGN = 1 << 63


def handle_datum_value(handle: int) -> int:
    """A handle as the int64 TiDB stores (unsigned values wrap to their bit pattern)."""
    return handle - (1 << 64) if handle >= _INT64_SIGN else handle


class _TableLog:
    __slots__ = ("deleted", "inserted", "sequence", "table_id", "updated")

    def __init__(self, table_id: int) -> None:
        self.table_id = table_id
        self.inserted: list[Pieces] = []  # framed rows: tag ‖ uvarint(len) ‖ row, in pieces
        self.updated: list[Pieces] = []
        self.deleted: list[Pieces] = []
        self.sequence = bytearray()  # the encoded sequence field: 38 kind, per change

    def parts(self) -> list[bytes]:
        """The gogo TableMutation in pieces (rows referenced, not copied)."""
        parts = [varint_field(_TABLE_ID, self.table_id)]
        for slot in (self.inserted, self.updated, self.deleted):
            for row in slot:
                parts += row
        parts.append(bytes(self.sequence))
        return parts


Pieces = tuple[bytes, ...]
"""Byte strings that, joined, are one encoded value; large byte values stay the caller's objects."""
BIG_VALUE = 64 << 10
"""A bytes column value at least this long is referenced by the log, not copied into its row bytes."""
_COMPACT_BYTES = b"\x02"  # datum flag of a bytes value: 02 ‖ zigzag varint(len) ‖ bytes (docs/formats.md#datum-flags)


def row_pieces(prefix: bytes, rows: Sequence[tuple[Sequence[int], Sequence[Datum]]]) -> Pieces:
    """``prefix`` ‖ the old-row encoding of each ``(column ids, values)``, in pieces.

    Joined, the pieces are the bytes ``encode_inserted_row`` / ``encode_updated_row`` /
    ``encode_deleted_row`` give; a bytes value of BIG_VALUE or more is a piece of its own, the
    value object itself, so a blob exists once in the transaction, not once more in its binlog."""
    if not any(d[0] == Kind.BYTES and len(d[1]) >= BIG_VALUE for _, values in rows for d in values):
        return (prefix + b"".join(encode_row(ids, values) for ids, values in rows),)
    pieces: list[bytes] = []
    buf = [prefix]
    for ids, values in rows:
        for cid, d in zip(ids, values, strict=True):
            buf.append(encode_datum(int_datum(cid)))
            kind, v = d
            if kind == Kind.BYTES and len(v) >= BIG_VALUE:
                buf.append(_COMPACT_BYTES + encode_varint(len(v)))
                pieces.append(b"".join(buf))
                pieces.append(v)
                buf = []
            else:
                buf.append(encode_datum(d))
    if buf:
        pieces.append(b"".join(buf))
    return tuple(pieces)


_TABLE_ID = b"\x08"  # TableMutation.table_id (1) and PrewriteValue.schema_version (1), varint
_MUTATION = b"\x12"  # PrewriteValue.mutations (2), length-delimited
_SLOT_TAG = {"inserted": b"\x12", "updated": b"\x1a", "deleted": b"\x32"}  # TableMutation fields 2, 3, 6
_SEQUENCE = 0x38  # TableMutation.sequence (7), varint, one tag per element


def varint_field(tag: bytes, value: int) -> bytes:
    return tag + varint(value)


def unframe(framed: bytes) -> bytes:
    """The value of one length-delimited field (``tag ‖ uvarint(len) ‖ value``)."""
    pos = 1
    while framed[pos] & 0x80:
        pos += 1
    return framed[pos + 1 :]


class MutationLog:
    """The binlog side of one transaction's row changes; ``size`` is their encoded bytes."""

    def __init__(self) -> None:
        self._tables: dict[int, _TableLog] = {}
        self.size = 0

    def __bool__(self) -> bool:
        return bool(self._tables)

    def _log(self, table: TableInfo) -> _TableLog:
        log = self._tables.get(table.id)
        if log is None:
            log = self._tables[table.id] = _TableLog(table.id)
        return log

    def insert(self, table: TableInfo, handle: int, row: Row) -> None:
        ids: list[int] = []
        values: list[Datum] = []
        handle_col = table.handle_column
        for c in table.columns:
            if c is handle_col:
                continue
            v = row[c.lname]
            if v is None and c.default is None:
                continue
            ids.append(c.id)
            values.append(flatten(v, c.ctype))
        handle_datum = encode_datum(int_datum(handle_datum_value(handle)))
        self._append(table, row_pieces(handle_datum, [(ids, values)]), binlog_pb2.Insert, "inserted")

    def update(self, table: TableInfo, handle: int, old: Row, new: Row) -> None:
        ids, old_d = self._full_row(table, handle, old)
        _, new_d = self._full_row(table, handle, new)
        self._append(table, row_pieces(b"", [(ids, old_d), (ids, new_d)]), binlog_pb2.Update, "updated")

    def delete(self, table: TableInfo, handle: int, old: Row) -> None:
        ids, old_d = self._full_row(table, handle, old)
        self._append(table, row_pieces(b"", [(ids, old_d)]), binlog_pb2.DeleteRow, "deleted")

    @staticmethod
    def _full_row(table: TableInfo, handle: int, row: Row) -> tuple[list[int], list[Datum]]:
        ids = [c.id for c in table.columns]
        values = [flatten(row[c.lname], c.ctype) for c in table.columns]
        if not table.pk_is_handle:
            ids.append(EXTRA_HANDLE_ID)
            values.append(int_datum(handle_datum_value(handle)))
        return ids, values

    def _append(self, table: TableInfo, row: Pieces, kind: int, slot: str) -> None:
        log = self._log(table)
        n = sum(len(p) for p in row)
        head = _SLOT_TAG[slot] + uvarint(n)
        framed = (head + row[0], *row[1:])
        getattr(log, slot).append(framed)
        log.sequence += bytes((_SEQUENCE, kind))
        self.size += len(head) + n + 2

    def prewrite_value_parts(self, schema_version: int) -> list[bytes]:
        """The gogo bytes of the ``PrewriteValue`` as pieces (see the module docstring); join to get them."""
        parts = [varint_field(_TABLE_ID, schema_version)]
        for log in self._tables.values():
            tm = log.parts()
            parts.append(_MUTATION + uvarint(sum(len(p) for p in tm)))
            parts += tm
        return parts

    def clear(self) -> None:
        """Forget the rows (once the prewrite binlog holds them); ``size`` stays."""
        self._tables = {}

    def prewrite_value(self, schema_version: int) -> binlog_pb2.PrewriteValue:
        pv = binlog_pb2.PrewriteValue(schema_version=schema_version)
        for log in self._tables.values():
            m = pv.mutations.add()
            m.table_id = log.table_id
            m.inserted_rows.extend(unframe(b"".join(r)) for r in log.inserted)
            m.updated_rows.extend(unframe(b"".join(r)) for r in log.updated)
            m.deleted_rows.extend(unframe(b"".join(r)) for r in log.deleted)
            m.sequence.extend(cast("list[binlog_pb2.MutationType]", list(log.sequence[1::2])))
        return pv
