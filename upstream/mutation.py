"""Row changes of one transaction captured as TiDB does, into ``PrewriteValue`` (pure).

Per table one ``TableMutation``; every change appends its encoded row to the slot of its
kind and its kind to ``sequence``, in execution order, without merging (wire-formats §1,
§7.2).  So insert, insert, update, update, delete, insert on one table gives
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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.codec import EXTRA_HANDLE_ID, Datum, encode_deleted_row, encode_inserted_row, encode_updated_row, flatten
from common.codec.datum import int_datum
from common.pb import binlog_pb2
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
        self.inserted: list[bytes] = []
        self.updated: list[bytes] = []
        self.deleted: list[bytes] = []
        self.sequence: list[Any] = []


class MutationLog:
    """The binlog side of one transaction's row changes; also counts their encoded bytes."""

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
        data = encode_inserted_row(handle_datum_value(handle), ids, values)
        self._append(table, data, binlog_pb2.Insert, "inserted")

    def update(self, table: TableInfo, handle: int, old: Row, new: Row) -> None:
        ids, old_d = self._full_row(table, handle, old)
        _, new_d = self._full_row(table, handle, new)
        self._append(table, encode_updated_row(ids, old_d, new_d), binlog_pb2.Update, "updated")

    def delete(self, table: TableInfo, handle: int, old: Row) -> None:
        ids, old_d = self._full_row(table, handle, old)
        self._append(table, encode_deleted_row(ids, old_d), binlog_pb2.DeleteRow, "deleted")

    @staticmethod
    def _full_row(table: TableInfo, handle: int, row: Row) -> tuple[list[int], list[Datum]]:
        ids = [c.id for c in table.columns]
        values = [flatten(row[c.lname], c.ctype) for c in table.columns]
        if not table.pk_is_handle:
            ids.append(EXTRA_HANDLE_ID)
            values.append(int_datum(handle_datum_value(handle)))
        return ids, values

    def _append(self, table: TableInfo, data: bytes, kind: Any, slot: str) -> None:
        log = self._log(table)
        getattr(log, slot).append(data)
        log.sequence.append(kind)
        self.size += len(data) + 8

    def prewrite_value(self, schema_version: int) -> binlog_pb2.PrewriteValue:
        pv = binlog_pb2.PrewriteValue(schema_version=schema_version)
        for log in self._tables.values():
            m = pv.mutations.add()
            m.table_id = log.table_id
            m.inserted_rows.extend(log.inserted)
            m.updated_rows.extend(log.updated)
            m.deleted_rows.extend(log.deleted)
            m.sequence.extend(log.sequence)
        return pv
