"""Schema objects and DDL jobs as stored in the DDL history (docs/formats.md#ddl-history), pure values only.

The upstream writer stores every DDL job as JSON at ``/tidb/ddl/history/<job_id, 20 digits>``;
the drainer rebuilds its schema from that history.  This module is the one definition of
that JSON, on both sides.  Layout (keys in this order; unknown keys are an error):

    job   {"id": int, "type": JobType value, "schema_id": int, "schema_name": str,
           "table_id": int, "table_name": str, "schema_version": int, "query": str,
           "state": JobState value, "schema_state": int, "start_ts": int,
           "db": db | null, "table": table | null, "old_schema_name": str, "old_table_name": str}
    db    {"id": int, "name": str}
    table {"id": int, "name": str, "pk_is_handle": bool,
           "columns": [column...], "indices": [index...],
           "max_column_id": int, "max_index_id": int, "charset": str, "collate": str}
    column {"id": int, "name": str, "offset": int, "type_text": str,
            "tp": int, "flen": int, "decimal": int, "unsigned": bool, "charset": str,
            "elems": [str...], "nullable": bool, "default": str | null,
            "auto_increment": bool}
    index {"id": int, "name": str, "columns": [str...], "unique": bool, "primary": bool}

``table`` is the table *after* the job (for drop table: the table that was dropped);
``charset``/``collate`` are the table's default character set and collation (the writer
records ``utf8mb4``/``utf8mb4_bin``, TiDB's default); history written before they existed
lacks both keys and loads with ``""`` (not recorded).  ``db`` is set on create/drop schema.
``default`` is the MySQL literal text of the column default (``null`` = no default, or
``DEFAULT NULL`` when the column is nullable).
Rename table keeps the table id and records the old names.  Truncate table gives the
table a new id (``table_id`` = the old id, ``table.id`` = the new one), as TiDB does.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum, StrEnum
from typing import Any

from common.codec.flatten import ColumnType, MySQLType
from common.errors import BinlogError

HISTORY_PREFIX = "/tidb/ddl/history/"
HIDDEN_HANDLE = "_tidb_rowid"
"""The store column holding the hidden row id of a table without an integer primary key."""


class SchemaError(BinlogError):
    """A schema object or DDL job is malformed, or refers to something that does not exist."""


class JobType(StrEnum):
    CREATE_SCHEMA = "create schema"
    DROP_SCHEMA = "drop schema"
    CREATE_TABLE = "create table"
    DROP_TABLE = "drop table"
    TRUNCATE_TABLE = "truncate table"
    RENAME_TABLE = "rename table"
    ADD_COLUMN = "add column"
    DROP_COLUMN = "drop column"
    ADD_INDEX = "add index"
    DROP_INDEX = "drop index"


class JobState(StrEnum):
    DONE = "done"
    SYNCED = "synced"
    CANCELLED = "cancelled"


class SchemaState(IntEnum):
    """TiDB ``model.SchemaState`` (binlog field ``ddl_schema_state``)."""

    NONE = 0
    DELETE_ONLY = 1
    WRITE_ONLY = 2
    WRITE_REORGANIZATION = 3
    DELETE_REORGANIZATION = 4
    PUBLIC = 5


@dataclass(frozen=True, slots=True)
class ColumnInfo:
    id: int
    name: str
    offset: int
    type_text: str
    """Canonical MySQL type text, e.g. ``bigint(20) unsigned``, ``decimal(10,2)``, ``enum('a','b')``."""
    ctype: ColumnType
    nullable: bool = True
    default: str | None = None
    auto_increment: bool = False

    @property
    def lname(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class IndexInfo:
    id: int
    name: str
    columns: tuple[str, ...]
    unique: bool = False
    primary: bool = False


@dataclass(frozen=True, slots=True)
class DBInfo:
    id: int
    name: str


@dataclass(frozen=True, slots=True)
class TableInfo:
    id: int
    name: str
    columns: tuple[ColumnInfo, ...]
    indices: tuple[IndexInfo, ...] = ()
    pk_is_handle: bool = False
    """The primary key is one integer column whose value is the row handle."""
    max_column_id: int = 0
    max_index_id: int = 0
    charset: str = ""
    """The table's default character set; "" = not recorded (history from before it was)."""
    collate: str = ""
    """The table's default collation; "" = not recorded."""
    _by_name: dict[str, ColumnInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, ColumnInfo] = {}
        for i, c in enumerate(self.columns):
            if c.offset != i:
                raise SchemaError(f"table {self.name}: column {c.name} has offset {c.offset}, expected {i}")
            if c.lname in by_name:
                raise SchemaError(f"table {self.name}: duplicate column {c.name}")
            by_name[c.lname] = c
        for ix in self.indices:
            for cn in ix.columns:
                if cn.lower() not in by_name:
                    raise SchemaError(f"table {self.name}: index {ix.name} names unknown column {cn}")
        if self.pk_is_handle:
            pk = self.primary_key
            if pk is None or len(pk.columns) != 1:
                raise SchemaError(f"table {self.name}: pk_is_handle needs a one-column primary key")
            if by_name[pk.columns[0].lower()].ctype.tp not in _HANDLE_TYPES:
                raise SchemaError(f"table {self.name}: pk_is_handle needs an integer primary key")
        object.__setattr__(self, "_by_name", by_name)

    def column(self, name: str) -> ColumnInfo:
        try:
            return self._by_name[name.lower()]
        except KeyError:
            raise SchemaError(f"table {self.name} has no column {name!r}") from None

    def has_column(self, name: str) -> bool:
        return name.lower() in self._by_name

    @property
    def primary_key(self) -> IndexInfo | None:
        for ix in self.indices:
            if ix.primary:
                return ix
        return None

    @property
    def handle_column(self) -> ColumnInfo | None:
        """The integer primary key column used as the handle, or None (hidden row id)."""
        pk = self.primary_key
        if self.pk_is_handle and pk is not None:
            return self._by_name[pk.columns[0].lower()]
        return None

    @property
    def unique_keys(self) -> tuple[IndexInfo, ...]:
        """Primary key first, then the unique indices in definition order."""
        pk = self.primary_key
        rest = tuple(ix for ix in self.indices if ix.unique and not ix.primary)
        return ((pk,) if pk is not None else ()) + rest

    def with_columns(self, columns: Iterable[ColumnInfo], **changes: Any) -> TableInfo:
        cols = tuple(replace(c, offset=i) for i, c in enumerate(columns))
        return replace(self, columns=cols, **changes)


_HANDLE_TYPES = frozenset(
    {MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG, MySQLType.YEAR}
)


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    type: JobType
    schema_id: int
    schema_name: str
    table_id: int
    table_name: str
    schema_version: int
    query: str
    state: JobState = JobState.SYNCED
    schema_state: SchemaState = SchemaState.PUBLIC
    start_ts: int = 0
    db: DBInfo | None = None
    table: TableInfo | None = None
    old_schema_name: str = ""
    old_table_name: str = ""

    def key(self) -> str:
        return history_key(self.id)

    def to_json(self) -> str:
        return json.dumps(job_to_dict(self), separators=(",", ":"), ensure_ascii=False)

    @staticmethod
    def from_json(data: bytes | str, where: str = "job") -> Job:
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SchemaError(f"{where}: not JSON: {exc}") from None
        return job_from_dict(doc, where)


def history_key(job_id: int) -> str:
    if job_id <= 0:
        raise SchemaError(f"job id must be positive, got {job_id}")
    return f"{HISTORY_PREFIX}{job_id:020d}"


# ----------------------------------------------------------------------------- to dict


def column_to_dict(c: ColumnInfo) -> dict[str, Any]:
    t = c.ctype
    return {
        "id": c.id,
        "name": c.name,
        "offset": c.offset,
        "type_text": c.type_text,
        "tp": int(t.tp),
        "flen": t.flen,
        "decimal": t.decimal,
        "unsigned": t.unsigned,
        "charset": t.charset,
        "elems": list(t.elems),
        "nullable": c.nullable,
        "default": c.default,
        "auto_increment": c.auto_increment,
    }


def table_to_dict(t: TableInfo) -> dict[str, Any]:
    return {
        "id": t.id,
        "name": t.name,
        "pk_is_handle": t.pk_is_handle,
        "columns": [column_to_dict(c) for c in t.columns],
        "indices": [
            {"id": ix.id, "name": ix.name, "columns": list(ix.columns), "unique": ix.unique, "primary": ix.primary}
            for ix in t.indices
        ],
        "max_column_id": t.max_column_id,
        "max_index_id": t.max_index_id,
        "charset": t.charset,
        "collate": t.collate,
    }


def job_to_dict(j: Job) -> dict[str, Any]:
    return {
        "id": j.id,
        "type": j.type.value,
        "schema_id": j.schema_id,
        "schema_name": j.schema_name,
        "table_id": j.table_id,
        "table_name": j.table_name,
        "schema_version": j.schema_version,
        "query": j.query,
        "state": j.state.value,
        "schema_state": int(j.schema_state),
        "start_ts": j.start_ts,
        "db": None if j.db is None else {"id": j.db.id, "name": j.db.name},
        "table": None if j.table is None else table_to_dict(j.table),
        "old_schema_name": j.old_schema_name,
        "old_table_name": j.old_table_name,
    }


# ----------------------------------------------------------------------------- from dict


class _Reader:
    """Strict field access on one JSON object: every key typed, unknown keys rejected."""

    def __init__(self, doc: object, where: str, keys: Sequence[str]) -> None:
        if not isinstance(doc, Mapping):
            raise SchemaError(f"{where}: expected an object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - set(keys))
        if unknown:
            raise SchemaError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}")
        self.doc = doc
        self.where = where

    def _get(self, key: str, types: tuple[type, ...], tname: str) -> Any:
        if key not in self.doc:
            raise SchemaError(f"{self.where}: missing key {key!r}")
        v = self.doc[key]
        if not isinstance(v, types) or (bool not in types and isinstance(v, bool)):
            raise SchemaError(f"{self.where}.{key}: expected {tname}, got {type(v).__name__}")
        return v

    def get_int(self, key: str) -> int:
        v: int = self._get(key, (int,), "an integer")
        return v

    def get_str(self, key: str) -> str:
        v: str = self._get(key, (str,), "a string")
        return v

    def get_bool(self, key: str) -> bool:
        v: bool = self._get(key, (bool,), "a boolean")
        return v

    def get_str_or(self, key: str, absent: str) -> str:
        """A string key that older documents may lack (`absent` then)."""
        return self.get_str(key) if key in self.doc else absent

    def get_opt_str(self, key: str) -> str | None:
        v: str | None = self._get(key, (str, type(None)), "a string or null")
        return v

    def get_list(self, key: str) -> list[Any]:
        v: list[Any] = self._get(key, (list,), "a list")
        return v

    def get_obj(self, key: str) -> Mapping[str, Any] | None:
        v: Mapping[str, Any] | None = self._get(key, (dict, type(None)), "an object or null")
        return v


_COLUMN_KEYS = [
    "id",
    "name",
    "offset",
    "type_text",
    "tp",
    "flen",
    "decimal",
    "unsigned",
    "charset",
    "elems",
    "nullable",
    "default",
    "auto_increment",
]
_TABLE_KEYS = [
    "id",
    "name",
    "pk_is_handle",
    "columns",
    "indices",
    "max_column_id",
    "max_index_id",
    "charset",
    "collate",
]
_INDEX_KEYS = ["id", "name", "columns", "unique", "primary"]
_JOB_KEYS = [
    "id",
    "type",
    "schema_id",
    "schema_name",
    "table_id",
    "table_name",
    "schema_version",
    "query",
    "state",
    "schema_state",
    "start_ts",
    "db",
    "table",
    "old_schema_name",
    "old_table_name",
]


def _str_list(values: list[Any], where: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) for v in values):
        raise SchemaError(f"{where}: expected a list of strings")
    return tuple(values)


def column_from_dict(doc: object, where: str) -> ColumnInfo:
    r = _Reader(doc, where, _COLUMN_KEYS)
    try:
        ctype = ColumnType(
            tp=MySQLType(r.get_int("tp")),
            flen=r.get_int("flen"),
            decimal=r.get_int("decimal"),
            unsigned=r.get_bool("unsigned"),
            charset=r.get_str("charset"),
            elems=_str_list(r.get_list("elems"), f"{where}.elems"),
        )
    except ValueError as exc:
        raise SchemaError(f"{where}: bad column type: {exc}") from None
    return ColumnInfo(
        id=r.get_int("id"),
        name=r.get_str("name"),
        offset=r.get_int("offset"),
        type_text=r.get_str("type_text"),
        ctype=ctype,
        nullable=r.get_bool("nullable"),
        default=r.get_opt_str("default"),
        auto_increment=r.get_bool("auto_increment"),
    )


def table_from_dict(doc: object, where: str) -> TableInfo:
    r = _Reader(doc, where, _TABLE_KEYS)
    columns = [column_from_dict(c, f"{where}.columns[{i}]") for i, c in enumerate(r.get_list("columns"))]
    indices = []
    for i, d in enumerate(r.get_list("indices")):
        ir = _Reader(d, f"{where}.indices[{i}]", _INDEX_KEYS)
        indices.append(
            IndexInfo(
                id=ir.get_int("id"),
                name=ir.get_str("name"),
                columns=_str_list(ir.get_list("columns"), f"{ir.where}.columns"),
                unique=ir.get_bool("unique"),
                primary=ir.get_bool("primary"),
            )
        )
    try:
        return TableInfo(
            id=r.get_int("id"),
            name=r.get_str("name"),
            columns=tuple(columns),
            indices=tuple(indices),
            pk_is_handle=r.get_bool("pk_is_handle"),
            max_column_id=r.get_int("max_column_id"),
            max_index_id=r.get_int("max_index_id"),
            charset=r.get_str_or("charset", ""),
            collate=r.get_str_or("collate", ""),
        )
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None


def job_from_dict(doc: object, where: str = "job") -> Job:
    r = _Reader(doc, where, _JOB_KEYS)
    try:
        jtype = JobType(r.get_str("type"))
        state = JobState(r.get_str("state"))
        sstate = SchemaState(r.get_int("schema_state"))
    except ValueError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    db_doc = r.get_obj("db")
    db = None
    if db_doc is not None:
        dr = _Reader(db_doc, f"{where}.db", ("id", "name"))
        db = DBInfo(dr.get_int("id"), dr.get_str("name"))
    table_doc = r.get_obj("table")
    return Job(
        id=r.get_int("id"),
        type=jtype,
        schema_id=r.get_int("schema_id"),
        schema_name=r.get_str("schema_name"),
        table_id=r.get_int("table_id"),
        table_name=r.get_str("table_name"),
        schema_version=r.get_int("schema_version"),
        query=r.get_str("query"),
        state=state,
        schema_state=sstate,
        start_ts=r.get_int("start_ts"),
        db=db,
        table=None if table_doc is None else table_from_dict(table_doc, f"{where}.table"),
        old_schema_name=r.get_str("old_schema_name"),
        old_table_name=r.get_str("old_table_name"),
    )
