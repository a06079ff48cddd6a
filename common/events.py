"""Values that flow through the drainer, from the translator to the sinks (pure, no I/O).

    merger ─► syncer ─► translator ─► Txn(dmls | ddl) ─► Sink.add ─► on_success(commit_ts)

* A :class:`TableShape` is what SQL rendering and causality need of one table at one schema
  version: its names, its writable columns (with their types) and its unique keys as column
  positions, primary key first.
* A :class:`DML` is one row change.  ``values`` / ``old_values`` are tuples aligned with
  ``shape.columns``; each value is what :func:`common.codec.unflatten` returns for the column
  (the same canonical Python value :func:`common.schema.types.check_value` gives), or ``None``
  for SQL NULL.
* A :class:`DDL` is one schema change: the job from the DDL history, the schema before it (a
  sink that plans its own statements, such as sqlite, needs it) and the original query text.
* A :class:`Txn` is one upstream transaction at one commit_ts, as handed to a sink: DMLs, or
  one DDL, or nothing at all (a fake binlog or a fully filtered transaction, which only moves
  the checkpoint).  ``binlog`` is the tipb binlog of a DDL or an empty txn (a DML txn does not
  keep its binlog: translated, it is only memory); ``size`` is its approximate bytes, for byte
  budgets.  A transaction too large to translate at once reaches a sink that takes parts
  (``Sink.takes_parts``) as several Txns with its commit_ts: every one but the last has
  ``partial`` set, and the sink reports the commit_ts only once all of them are applied.
* :func:`dml_memory` estimates what a DML's Python objects take, the unit of the drainer's
  byte budgets after translation: a decoded row is much larger than its encoded bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from common.schema.model import ColumnInfo, Job, TableInfo

if TYPE_CHECKING:
    from common.pb import binlog_pb2
    from common.schema.infoschema import InfoSchema


class DMLType(IntEnum):
    INSERT = 1
    UPDATE = 2
    DELETE = 3


@dataclass(frozen=True, slots=True)
class TableShape:
    db: str
    table: str
    info: TableInfo
    columns: tuple[ColumnInfo, ...]
    """Writable columns in table order."""
    unique_keys: tuple[tuple[int, ...], ...]
    """Unique keys as positions into ``columns``: the primary key first, then unique indexes in order."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @staticmethod
    def of(db: str, info: TableInfo) -> TableShape:
        cols = info.columns
        pos = {c.lname: i for i, c in enumerate(cols)}
        keys: list[tuple[int, ...]] = []
        pk = info.primary_key
        if pk is not None:
            keys.append(tuple(pos[c.lower()] for c in pk.columns))
        for ix in info.unique_keys:
            if ix.primary:
                continue
            keys.append(tuple(pos[c.lower()] for c in ix.columns))
        return TableShape(db=db, table=info.name, info=info, columns=cols, unique_keys=tuple(keys))


Row = tuple[Any, ...]


@dataclass(slots=True)
class DML:
    tp: DMLType
    shape: TableShape
    values: Row | None = None
    """The new row (insert, update)."""
    old_values: Row | None = None
    """The old row (update, delete)."""
    commit_ts: int = 0
    size: int = 0
    """Encoded bytes of the row(s) it was decoded from."""


DML_BASE_BYTES = 200
"""Bytes of a DML's own objects: the DML (7 slots), its values tuple header(s), a list slot."""
VALUE_BYTES = 48
"""Bytes per column and row image on top of the value's encoded bytes: a tuple slot and an object header
(an int is 28-32 bytes for its 1-9 encoded ones, a str or bytes 33-49 plus its length)."""


def dml_memory(d: DML) -> int:
    """About how many bytes ``d``'s Python objects take (its encoded size plus per-object overheads;
    ``tests/unit/test_drainer_memory.py`` checks it against tracemalloc)."""
    images = (d.values is not None) + (d.old_values is not None)
    return DML_BASE_BYTES + d.size + images * VALUE_BYTES * len(d.shape.columns)


@dataclass(frozen=True, slots=True)
class DDL:
    db: str
    """The schema the statement runs in (``USE db``); empty for CREATE DATABASE."""
    table: str
    query: str
    job: Job
    before: InfoSchema
    """The drainer's schema before the job (sinks that plan their own statements need it)."""
    skip: bool = False
    """Not executed downstream (filtered by a DDL rule or ``sync-ddl = false``); caches still evicted."""
    prelude: tuple[str, ...] = ()
    """Statements a MySQL sink runs first, outside any schema (table routing: ``CREATE DATABASE IF NOT
    EXISTS`` of the target schemas the query needs)."""


@dataclass(slots=True)
class Txn:
    commit_ts: int
    dmls: list[DML] = field(default_factory=list)
    ddl: DDL | None = None
    binlog: binlog_pb2.Binlog | None = None
    size: int = 0
    schema_version: int = 0
    partial: bool = False
    """One part of a transaction translated in parts; the part with ``partial`` unset comes last."""

    @property
    def is_empty(self) -> bool:
        """Nothing to execute: a fake binlog or a transaction filtered away (it only moves the checkpoint)."""
        return not self.dmls and self.ddl is None
