"""sync-mode 2 (partial columns): DMLs cut down to the columns the downstream table has.

The original (``pkg/loader`` ``SyncPartialColumn``) reads each table's columns from the downstream's
``information_schema``, drops the values of the others (``removeOrphanCols``), re-reads them after
a DDL and when a statement fails with "unknown column" (1054), and relaxes the session's
``sql_mode`` by removing ``STRICT_TRANS_TABLES`` (so a downstream column the rows do not carry
gets its implicit default).  We do the same, with one difference in how rows are found: the
original uses the downstream table's own keys; we use the upstream table's unique keys whose columns
all exist downstream (still unique: downstream rows are upstream rows cut down), and refuse a table
whose **primary key** lost a column downstream, with an error naming the table and column, because
then neither ``REPLACE`` (safe mode, merge) nor a key lookup can find its rows.

:class:`PartialColumns` is shared by a sink's executors: the downstream columns per table and the
cut-down shape per upstream shape, both dropped by :meth:`PartialColumns.evict`.  The functions
:func:`project_shape` and :func:`project_dml` are pure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from common.events import DML, Row, TableShape

log = logging.getLogger(__name__)

__all__ = [
    "COLUMNS_QUERY",
    "PartialColumnError",
    "PartialColumns",
    "project_dml",
    "project_shape",
    "relaxed_sql_mode",
]

COLUMNS_QUERY = "SELECT COLUMN_NAME, EXTRA FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
"""A downstream table's columns (the original's ``colsSQL``); generated ones are left out by EXTRA."""
_GENERATED_EXTRA = frozenset({"GENERATED", "VIRTUAL", "PERSISTENT", "STORED"})
"""Words of EXTRA that mark a generated column ("VIRTUAL GENERATED", MariaDB's older "PERSISTENT"); matched
as whole words, because MySQL 8 and TiDB show an ordinary column with an expression default (DEFAULT
CURRENT_TIMESTAMP) as "DEFAULT_GENERATED", and its values must be written."""
STRICT_MODE = "STRICT_TRANS_TABLES"
_CACHE_LIMIT = 4096

ColumnReader = Callable[[str, str], "frozenset[str] | None"]
"""(db, table) -> the downstream table's writable column names, lower case; None if it does not exist."""


class PartialColumnError(ValueError):
    """A table cannot be written in sync-mode 2 (a primary key column, or every column, is missing downstream)."""


def writable_columns(rows: Sequence[Sequence[object]]) -> frozenset[str] | None:
    """The lower-case names of :data:`COLUMNS_QUERY`'s rows that are not generated; None for no rows."""
    if not rows:
        return None
    return frozenset(
        str(name).lower() for name, extra in rows if _GENERATED_EXTRA.isdisjoint(str(extra or "").upper().split())
    )


def relaxed_sql_mode(mode: str) -> str:
    """``mode`` without STRICT_TRANS_TABLES (the original's ``relaxSQLMode``)."""
    return ",".join(m for m in mode.split(",") if m and m.strip().upper() != STRICT_MODE)


def project_shape(shape: TableShape, downstream: frozenset[str]) -> tuple[TableShape, tuple[int, ...]]:
    """``shape`` cut down to the columns in ``downstream`` (lower case), and the kept positions.

    Unique keys with a dropped column are dropped; a dropped primary key column, or no column left,
    raises :class:`PartialColumnError`."""
    keep = tuple(i for i, c in enumerate(shape.columns) if c.lname in downstream)
    if len(keep) == len(shape.columns):
        return shape, keep
    where = f"`{shape.db}`.`{shape.table}`"
    if not keep:
        raise PartialColumnError(
            f"sync-mode 2: no column of {where} exists downstream; create the table downstream with its columns"
        )
    if shape.info.primary_key is not None and shape.unique_keys:
        lost = [shape.columns[i].name for i in shape.unique_keys[0] if i not in keep]
        if lost:
            raise PartialColumnError(
                f"sync-mode 2: column `{lost[0]}` of the primary key of {where} is missing downstream; "
                "rows are found by their primary key, so add the column to the downstream table"
            )
    pos = {old: new for new, old in enumerate(keep)}
    keys = tuple(tuple(pos[i] for i in k) for k in shape.unique_keys if all(i in pos for i in k))
    columns = tuple(shape.columns[i] for i in keep)
    return TableShape(db=shape.db, table=shape.table, info=shape.info, columns=columns, unique_keys=keys), keep


def _cut(row: Row | None, keep: tuple[int, ...]) -> Row | None:
    return None if row is None else tuple(row[i] for i in keep)


def project_dml(dml: DML, shape: TableShape, keep: tuple[int, ...]) -> DML:
    """``dml`` with only the values at ``keep``, on the cut-down ``shape``."""
    return DML(dml.tp, shape, _cut(dml.values, keep), _cut(dml.old_values, keep), dml.commit_ts, dml.size)


class PartialColumns:
    """Downstream columns and cut-down shapes, shared by a sink's executors (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._columns: dict[tuple[str, str], frozenset[str]] = {}
        self._shapes: dict[int, tuple[TableShape, TableShape, tuple[int, ...]]] = {}
        self._logged: set[tuple[str, str, tuple[str, ...]]] = set()

    def evict(self) -> None:
        """Forget every table (after a DDL, or an "unknown column" error): the next DML reads them again."""
        with self._lock:
            self._columns.clear()
            self._shapes.clear()

    def project(self, dmls: Sequence[DML], read: ColumnReader) -> Sequence[DML]:
        """``dmls`` cut down to the downstream's columns (the same list when nothing is missing).

        A table missing downstream is left as it is (its statement fails as in sync-mode 1)."""
        out: list[DML] | None = None
        for n, d in enumerate(dmls):
            shape, keep = self._shape(d.shape, read)
            if shape is d.shape:
                if out is not None:
                    out.append(d)
                continue
            if out is None:
                out = list(dmls[:n])
            out.append(project_dml(d, shape, keep))
        return dmls if out is None else out

    def _shape(self, shape: TableShape, read: ColumnReader) -> tuple[TableShape, tuple[int, ...]]:
        with self._lock:
            hit = self._shapes.get(id(shape))
            if hit is not None and hit[0] is shape:
                return hit[1], hit[2]
            cols = self._columns.get((shape.db, shape.table))
        if cols is None:
            cols = read(shape.db, shape.table)
            if cols is None:
                return shape, ()
        target, keep = project_shape(shape, cols)
        with self._lock:
            if len(self._shapes) >= _CACHE_LIMIT:
                self._shapes.clear()
                self._columns.clear()
            self._columns[(shape.db, shape.table)] = cols
            self._shapes[id(shape)] = (shape, target, keep)  # holds the shape: its id is not reused meanwhile
            dropped = tuple(c.name for c in shape.columns if c.lname not in cols)
            first = bool(dropped) and (shape.db, shape.table, dropped) not in self._logged
            if first:
                self._logged.add((shape.db, shape.table, dropped))
        if first:
            log.info(
                "sync-mode 2: column(s) %s of `%s`.`%s` are not downstream; their values are dropped",
                ", ".join(dropped),
                shape.db,
                shape.table,
            )
        return target, keep
