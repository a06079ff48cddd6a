"""Row changes: the DataFrame both readers produce (pump value logs, file sinks), and the pure decoding
of one transaction's row events into its rows.

    schema STRING    database of the table when the change was made
    table STRING     its name then
    table_id LONG    the table's id (stable across renames; a truncate gives a new one)
    commit_ts LONG   the transaction's commit ts
    seq INT          the change's position in its transaction (0, 1, ...)
    op STRING        insert | update | delete
    key STRING       canonical JSON of the key values (`spark_jobs.rowjson`): the new key, or the
                     deleted row's key
    values STRING    canonical JSON of the row by column name: the new row (insert, update), the
                     deleted row (delete)
    old_key STRING   an update that changed the key: the old key (else NULL); for replay it is a
                     delete of the old key and an insert of the new one

The last change of a key wins by (commit_ts, seq).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Final

from common.events import DML, DMLType
from common.schema.model import ColumnInfo, TableInfo
from spark_jobs.rowjson import encode_key, encode_row, key_columns

if TYPE_CHECKING:
    from pyspark import Accumulator

__all__ = ["CHANGE_DDL", "OP_DELETE", "OP_INSERT", "OP_UPDATE", "Change", "KeyPlan", "counted", "dml_changes"]

CHANGE_DDL: Final = (
    "schema STRING, table STRING, table_id LONG, commit_ts LONG, seq INT, op STRING, "
    "key STRING, values STRING, old_key STRING"
)

OP_INSERT: Final = "insert"
OP_UPDATE: Final = "update"
OP_DELETE: Final = "delete"

Change = tuple[str, str, int, int, int, str, str, str, str | None]
"""One row of `CHANGE_DDL`."""


class KeyPlan:
    """Where the key columns of one table version sit in its row tuples."""

    __slots__ = ("columns", "key_cols", "positions")

    def __init__(self, columns: tuple[ColumnInfo, ...], info: TableInfo) -> None:
        self.columns = columns
        pos = {c.lname: i for i, c in enumerate(columns)}
        self.key_cols = key_columns(info)
        self.positions = tuple(pos[c.lname] for c in self.key_cols)

    def key(self, row: tuple[object, ...]) -> str:
        return encode_key(self.key_cols, [row[i] for i in self.positions])

    def row(self, row: tuple[object, ...]) -> str:
        return encode_row(self.columns, row)


def dml_changes(dmls: Iterable[DML], commit_ts: int, first_seq: int = 0) -> Iterator[Change]:
    """The changes of one transaction's DMLs, numbered from `first_seq` in order."""
    plans: dict[int, KeyPlan] = {}
    for seq, d in enumerate(dmls, first_seq):
        shape = d.shape
        plan = plans.get(id(shape))
        if plan is None:
            plan = plans[id(shape)] = KeyPlan(shape.columns, shape.info)
        tid = shape.info.id
        if d.tp == DMLType.INSERT:
            assert d.values is not None
            yield (shape.db, shape.table, tid, commit_ts, seq, OP_INSERT, plan.key(d.values), plan.row(d.values), None)
        elif d.tp == DMLType.UPDATE:
            assert d.values is not None
            assert d.old_values is not None
            key = plan.key(d.values)
            old = plan.key(d.old_values)
            yield (
                shape.db,
                shape.table,
                tid,
                commit_ts,
                seq,
                OP_UPDATE,
                key,
                plan.row(d.values),
                old if old != key else None,
            )
        else:
            assert d.old_values is not None
            row = d.old_values
            yield (shape.db, shape.table, tid, commit_ts, seq, OP_DELETE, plan.key(row), plan.row(row), None)


def counted(changes: Iterable[Change], counter: Accumulator[int] | None) -> Iterator[Change]:
    """`changes`, adding how many there were to `counter` once the task has taken them all (counting in
    the reading task itself: a count over the DataFrame would send every row back to Python)."""
    n = 0
    for c in changes:
        n += 1
        yield c
    if counter is not None:
        counter.add(n)
