"""Table definitions as the stores themselves describe them, and how one table is audited (pure).

The audit needs no etcd: each side's table is described by its own store (``read.py`` asks
``information_schema`` on MySQL, ``PRAGMA table_info`` / ``index_list`` on sqlite) as a
:class:`StoreTable`, and :func:`audit_table` merges the two descriptions into the one
:class:`AuditTable` both sides are read with:

* columns: the upstream's visible columns in its order (never the writer's hidden handle
  ``_tidb_rowid``); the downstream must have the same names (``common.audit.column_mismatch``).
* types: a MySQL side knows them (``COLUMN_TYPE``, parsed by ``common.schema.types.parse_type``;
  a MariaDB JSON column is ``longtext`` with a ``json_valid`` check and is read as JSON), and
  then both sides convert their values through it (``Dialect.from_store``), so an sqlite store
  compares with a MySQL one.  Upstream's types win when both are MySQL.  Two sqlite sides compare
  their raw stored values (``typed = False``).
* the key rows are matched by: ``common.audit.choose_key`` on the upstream's unique keys: the
  primary key, else the first unique key, else whole rows.  The writer's stores keep a declared
  non-integer primary key as a unique index named ``pk_unique`` (behind the hidden handle); it
  counts as the primary key here.
* the chunk key: the longest prefix of the match key whose columns are NOT NULL on both sides
  and compare in the same order in both stores, so one range predicate selects the same rows on
  each side.  Integers, floats, strings (compared as bytes: ``read.py`` wraps a MySQL column with a
  non-binary collation in ``BINARY``), binary strings, DATE, DATETIME and TIMESTAMP do; DECIMAL
  and TIME (sqlite TEXT), ENUM and SET (MySQL orders them by member number), BIT and JSON do not.
  A table with no usable chunk key is one chunk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from common.audit import KeyChoice, choose_key, column_mismatch
from common.codec.flatten import INTEGER_TYPES, STRING_TYPES, MySQLType
from common.errors import BinlogError
from common.schema.model import HIDDEN_HANDLE, ColumnInfo, IndexInfo, TableInfo
from common.schema.types import parse_type
from common.sql.dialect import PK_INDEX

__all__ = [
    "AuditTable",
    "StoreColumn",
    "StoreIndex",
    "StoreTable",
    "TableProblemError",
    "audit_table",
]

ORDERED_TYPES: Final = frozenset(
    {*INTEGER_TYPES, *STRING_TYPES, MySQLType.FLOAT, MySQLType.DOUBLE}
    | {MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP}
)
"""Column types whose values sort the same in sqlite (as the writer stores them) and in MySQL."""

_SQLITE_PLACEHOLDER: Final = {"INTEGER": "bigint", "REAL": "double", "BLOB": "longblob"}
"""Declared sqlite type -> a MySQL type for the TableInfo of an untyped table (TEXT and others: longtext)."""


class TableProblemError(BinlogError):
    """One table cannot be compared (the message says why; the audit reports it and goes on)."""


@dataclass(frozen=True, slots=True)
class StoreColumn:
    name: str
    type_text: str
    """MySQL ``COLUMN_TYPE`` (``json`` for a MariaDB JSON column), or the declared sqlite type."""
    nullable: bool
    binary_order: bool = True
    """Strings compare byte-wise (a ``*_bin`` or ``binary`` collation; always so in sqlite)."""


@dataclass(frozen=True, slots=True)
class StoreIndex:
    """A unique index (or the primary key) as the store has it."""

    name: str
    columns: tuple[str, ...]
    primary: bool = False


@dataclass(frozen=True, slots=True)
class StoreTable:
    """One side's description of a table."""

    db: str
    name: str
    typed: bool
    """The column types are MySQL types (a MySQL store), not sqlite's declared types."""
    columns: tuple[StoreColumn, ...]
    unique: tuple[StoreIndex, ...] = ()

    @property
    def full_name(self) -> str:
        return f"{self.db}.{self.name}"

    def column(self, name: str) -> StoreColumn | None:
        lname = name.lower()
        return next((c for c in self.columns if c.name.lower() == lname), None)

    def visible(self) -> tuple[StoreColumn, ...]:
        return tuple(c for c in self.columns if c.name.lower() != HIDDEN_HANDLE)


@dataclass(frozen=True, slots=True)
class AuditTable:
    """How one table is compared: the columns and types both sides are read with, and its keys."""

    up: StoreTable
    down: StoreTable
    info: TableInfo
    """The visible columns (upstream order, the types used to read both sides) and unique keys."""
    typed: bool
    """Values go through the stores' readers (``from_store``); False: raw sqlite values on both sides."""
    key: KeyChoice
    chunk_key: tuple[int, ...]
    """Column positions of the match key's prefix that chunks are key ranges of (empty: one chunk)."""

    @property
    def db(self) -> str:
        return self.up.db

    @property
    def name(self) -> str:
        return self.up.name

    @property
    def full_name(self) -> str:
        return self.up.full_name

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.info.columns]

    @property
    def int_ranges(self) -> bool:
        """Chunked by one integer column: the chunks split [min, max] evenly (no sampling)."""
        if len(self.chunk_key) != 1:
            return False
        col = self.info.columns[self.chunk_key[0]]
        if self.typed:
            return col.ctype.tp in INTEGER_TYPES
        return col.type_text == "bigint"

    def columns_for_values(self) -> list[ColumnInfo | None]:
        """The column of each value for hashing (None when values are raw sqlite values)."""
        return list(self.info.columns) if self.typed else [None] * len(self.info.columns)


def _is_primary(ix: StoreIndex) -> bool:
    """The primary key, or the writer's stand-in for a declared non-integer one (``pk_unique``)."""
    return ix.primary or ix.name == PK_INDEX or ix.name.endswith("." + PK_INDEX)


def _columns(source: StoreTable, order: StoreTable) -> tuple[ColumnInfo, ...]:
    """ColumnInfos in `order`'s visible column order, with `source`'s types (TableProblemError if one is unknown)."""
    out = []
    for i, c in enumerate(order.visible()):
        typed = source.column(c.name)
        assert typed is not None  # the caller checked both sides have the same columns
        text = typed.type_text if source.typed else _SQLITE_PLACEHOLDER.get(typed.type_text.upper(), "longtext")
        try:
            ctype, canonical = parse_type(text)
        except BinlogError as exc:
            raise TableProblemError(f"column {c.name}: type {typed.type_text!r} is not supported ({exc})") from None
        out.append(ColumnInfo(id=i + 1, name=c.name, offset=i, type_text=canonical, ctype=ctype, nullable=c.nullable))
    return tuple(out)


def _indices(up: StoreTable, names: set[str]) -> tuple[IndexInfo, ...]:
    """The upstream's unique keys over visible columns, primary key first."""
    keys = [ix for ix in up.unique if ix.columns and all(c.lower() in names for c in ix.columns)]
    keys.sort(key=lambda ix: not _is_primary(ix))  # stable: the store's order otherwise
    out = []
    for i, ix in enumerate(keys):
        primary = i == 0 and _is_primary(ix)
        out.append(IndexInfo(id=i + 1, name=ix.name, columns=ix.columns, unique=not primary, primary=primary))
    return tuple(out)


def _orders_alike(col: ColumnInfo, typed: bool, up: StoreColumn, down: StoreColumn) -> bool:
    if up.nullable or down.nullable:
        return False  # a range predicate never selects NULL
    return not typed or col.ctype.tp in ORDERED_TYPES


def audit_table(up: StoreTable, down: StoreTable) -> AuditTable:
    """Merge both sides' descriptions; TableProblemError when the columns differ or a type is unsupported."""
    if not up.visible():
        raise TableProblemError("upstream table has no columns")
    upstream_names = TableInfo(
        id=0,
        name=up.name,
        columns=tuple(
            ColumnInfo(id=i + 1, name=c.name, offset=i, type_text="int", ctype=parse_type("int")[0])
            for i, c in enumerate(up.visible())
        ),
    )
    mismatch = column_mismatch(upstream_names, [c.name for c in down.columns])
    if mismatch:
        raise TableProblemError(mismatch)
    typed_side = up if up.typed else down if down.typed else up
    columns = _columns(typed_side, up)
    names = {c.lname for c in columns}
    info = TableInfo(id=0, name=up.name, columns=columns, indices=_indices(up, names))
    typed = typed_side.typed
    key = choose_key(info)
    chunk: list[int] = []
    for pos in key.positions:
        col = info.columns[pos]
        u, d = up.column(col.name), down.column(col.name)
        assert u is not None
        assert d is not None
        if not _orders_alike(col, typed, u, d):
            break
        chunk.append(pos)
    return AuditTable(up, down, info, typed, key, tuple(chunk))
