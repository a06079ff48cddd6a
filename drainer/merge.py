"""Merge by key: one batch's DMLs of one table -> one final change per primary key (pure; ``[syncer.to] merge``).

The original (``pkg/loader/merge.go`` ``mergeByPrimaryKey``) collapses the history of each primary
key value in a batch; we keep its rules:

================================  ================================================================
history of one key in the batch   merged result
================================  ================================================================
insert, then update               insert of the update's new row
insert, then delete               delete (of a row that may not exist downstream: a no-op there)
update, then update               one change to the last new row
update, then delete               delete
delete, then insert               insert of the new row
update that changes the key       delete of the old key, insert of the new key (each then merged
                                  with the rest of its own key's history)
insert/update, then insert        the last insert (possible only in a replay: safe mode)
delete, then update               the update's new row (the original logs "abnormal" and keeps it)
================================  ================================================================

The result is a list of DELETEs (``old_values`` = the row as last seen, found by its primary key)
followed by INSERTs (the final rows), to be applied in **safe mode**: an INSERT becomes ``REPLACE``,
so an "insert" that merged an update, or that replaces a row another key's ``REPLACE`` removed,
writes the whole final row whatever the downstream holds.  As in the original, a merged update is
a ``REPLACE`` of the whole row, never an ``UPDATE``.

Why the order inside a batch does not matter: every merged change touches one primary key, and
each key has one change.  A ``DELETE ... WHERE pk`` removes only that key's row; a ``REPLACE`` of a
final row removes the rows its values collide with on any unique key and writes the row.  The
final rows of a batch never collide with each other nor with the rows the batch leaves alone
(upstream held them together), so a ``REPLACE`` can only remove a row that still has values the
batch changes, and that row is rewritten or deleted by its own change.  So the merged changes
may run in any order, split over workers, and give the state of applying the batch one by one.
Ordering against *earlier* batches still in flight is the loader's causality, on the merged
changes' keys.

Which tables merge (:func:`merge_key`): those with a primary key (the original merges only those)
whose columns are integers, decimals or dates/times.  A string key is left alone: downstream may
compare 'a', 'A' and 'a ' as one key (a ``_ci`` or PAD SPACE collation) while Python sees three, and
then a merged DELETE and REPLACE of "different" keys would hit one row in an order that matters.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from common.codec.flatten import INTEGER_TYPES, MySQLType
from common.events import DML, DMLType, Row, TableShape

__all__ = ["MERGE_KEY_TYPES", "merge_by_key", "merge_key"]

MERGE_KEY_TYPES = INTEGER_TYPES | {
    MySQLType.DECIMAL,
    MySQLType.NEW_DECIMAL,
    MySQLType.DATE,
    MySQLType.DATETIME,
    MySQLType.TIMESTAMP,
    MySQLType.DURATION,
}
"""Primary key column types whose Python values are equal exactly when the downstream's are."""


def merge_key(shape: TableShape) -> tuple[int, ...] | None:
    """The primary key's column positions when the table's DMLs may be merged, else None."""
    if shape.info.primary_key is None or not shape.unique_keys:
        return None
    key = shape.unique_keys[0]  # TableShape.of puts the primary key first
    if all(shape.columns[i].ctype.tp in MERGE_KEY_TYPES for i in key):
        return key
    return None


def _key_of(key: tuple[int, ...], row: Row) -> Hashable:
    if len(key) == 1:
        value: Hashable = row[key[0]]
        return value
    return tuple(row[i] for i in key)


def merge_by_key(dmls: Sequence[DML]) -> list[DML]:
    """The merged changes of ``dmls`` (one table, in commit order): DELETEs, then INSERTs (see the module doc).

    Every DML's shape must have a :func:`merge_key`; DMLs are not modified (a merged update becomes a
    new INSERT).  Raises ValueError for a DML without the row image its type needs."""
    final: dict[Hashable, DML] = {}
    keys: dict[int, tuple[int, ...]] = {}  # id(shape) -> key, for the shapes of this call (all alive)
    for d in dmls:
        shape = d.shape
        key = keys.get(id(shape))
        if key is None:
            key = merge_key(shape)
            if key is None:
                raise ValueError(f"{shape.db}.{shape.table} has no primary key to merge by")
            keys[id(shape)] = key
        tp = d.tp
        if tp == DMLType.INSERT:
            if d.values is None:
                raise ValueError(f"insert into {shape.db}.{shape.table} has no values")
            final[_key_of(key, d.values)] = d
        elif tp == DMLType.DELETE:
            if d.old_values is None:
                raise ValueError(f"delete from {shape.db}.{shape.table} has no old values")
            final[_key_of(key, d.old_values)] = d
        else:
            new, old = d.values, d.old_values
            if new is None or old is None:
                raise ValueError(f"update of {shape.db}.{shape.table} lacks its old or new values")
            k_new, k_old = _key_of(key, new), _key_of(key, old)
            if k_old != k_new:
                final[k_old] = DML(DMLType.DELETE, shape, old_values=old, commit_ts=d.commit_ts, size=d.size)
            final[k_new] = DML(DMLType.INSERT, shape, values=new, commit_ts=d.commit_ts, size=d.size)
    deletes = [d for d in final.values() if d.tp == DMLType.DELETE]
    inserts = [d for d in final.values() if d.tp != DMLType.DELETE]
    return deletes + inserts
