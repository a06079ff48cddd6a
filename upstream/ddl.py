"""Structured DDL: what a user asks for -> a DDL job with its MySQL text and the new table info (pure).

The planner checks the request against the current :class:`InfoSchema`, allocates ids through
a callback (one global sequence for jobs, databases, tables; column and index ids per table,
as TiDB), and returns the finished :class:`Job` for schema version ``version``.  Applying it to
the store, publishing it in etcd and emitting its binlogs is :mod:`upstream.database`'s work.

Rules that keep every store and every downstream able to follow:
  * a NOT NULL column added to an existing table needs a default;
  * a column in the primary key or in an index cannot be dropped, nor the last column;
  * a table with a one-column integer primary key uses it as the handle (``pk_is_handle``),
    any other table gets a hidden row id, as TiDB does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from common.schema.defaults import default_literal
from common.schema.infoschema import InfoSchema
from common.schema.model import (
    HIDDEN_HANDLE,
    ColumnInfo,
    DBInfo,
    IndexInfo,
    Job,
    JobType,
    SchemaError,
    TableInfo,
)
from common.schema.types import check_value, is_integer_type, parse_type
from common.sql.dialect import index_clause

NO_DEFAULT: object = object()
"""Marker: the column has no DEFAULT clause."""

MAX_NAME = 64
TABLE_CHARSET = "utf8mb4"
TABLE_COLLATE = "utf8mb4_bin"
"""Every table's default character set and collation, recorded in its table info: TiDB's defaults
(strings compare exactly, case and all); nothing here lets a user choose others."""


@dataclass(frozen=True)
class Column:
    """A column as a user declares it, e.g. ``Column("balance", "DECIMAL(20,2)", nullable=False, default=0)``."""

    name: str
    type: str
    nullable: bool = True
    default: object = field(default=NO_DEFAULT)
    auto_increment: bool = False


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _check_name(kind: str, name: str) -> None:
    if not name or len(name) > MAX_NAME or name != name.strip():
        raise SchemaError(f"invalid {kind} name {name!r}: 1-{MAX_NAME} characters, no surrounding spaces")
    if name.lower() == HIDDEN_HANDLE:
        raise SchemaError(f"{kind} name {name!r} is reserved")


def column_sql(c: ColumnInfo) -> str:
    parts = [quote(c.name), c.type_text]
    if not c.nullable:
        parts.append("NOT NULL")
    if c.default is not None:
        parts.append(f"DEFAULT {c.default}")
    elif c.nullable and not c.auto_increment:
        parts.append("DEFAULT NULL")
    if c.auto_increment:
        parts.append("AUTO_INCREMENT")
    return " ".join(parts)


class Planner:
    """Plans one job at a time against `schema` at the next schema version."""

    def __init__(self, schema: InfoSchema, alloc_ids: Callable[[int], int], start_ts: int) -> None:
        self.schema = schema
        self.alloc_ids = alloc_ids
        self.start_ts = start_ts
        self.version = schema.version + 1

    def _job(self, jtype: JobType, db: DBInfo, query: str, table: TableInfo | None, table_id: int = 0) -> Job:
        return Job(
            id=self.alloc_ids(1),
            type=jtype,
            schema_id=db.id,
            schema_name=db.name,
            table_id=table_id or (table.id if table else 0),
            table_name=table.name if table else "",
            schema_version=self.version,
            query=query,
            start_ts=self.start_ts,
            db=db if jtype in (JobType.CREATE_SCHEMA, JobType.DROP_SCHEMA) else None,
            table=table,
        )

    # ----------------------------------------------------------------- databases
    def create_database(self, name: str) -> Job:
        _check_name("database", name)
        if self.schema.has_db(name):
            raise SchemaError(f"database {name} already exists")
        db = DBInfo(self.alloc_ids(1), name)
        return self._job(JobType.CREATE_SCHEMA, db, f"CREATE DATABASE {quote(name)}", None)

    def drop_database(self, name: str) -> Job:
        db = self.schema.db(name)
        return self._job(JobType.DROP_SCHEMA, db, f"DROP DATABASE {quote(db.name)}", None)

    # ----------------------------------------------------------------- tables
    def create_table(
        self,
        db_name: str,
        name: str,
        columns: Sequence[Column],
        *,
        primary_key: Sequence[str] = (),
        unique_keys: Sequence[Sequence[str]] = (),
        indexes: Sequence[Sequence[str]] = (),
    ) -> Job:
        db = self.schema.db(db_name)
        _check_name("table", name)
        if self.schema.has_table(db.name, name):
            raise SchemaError(f"table {db.name}.{name} already exists")
        if not columns:
            raise SchemaError(f"table {db.name}.{name} needs at least one column")
        pk = {c.lower() for c in primary_key}
        infos = [self._column(c, i + 1, i, in_pk=c.name.lower() in pk) for i, c in enumerate(columns)]
        table_id = self.alloc_ids(1)
        indices: list[IndexInfo] = []
        if primary_key:
            indices.append(IndexInfo(1, "PRIMARY", tuple(primary_key), unique=True, primary=True))
        for cols in unique_keys:
            indices.append(IndexInfo(len(indices) + 1, "uk_" + "_".join(cols), tuple(cols), unique=True))
        for cols in indexes:
            indices.append(IndexInfo(len(indices) + 1, "idx_" + "_".join(cols), tuple(cols)))
        pk_is_handle = False
        if len(primary_key) == 1:
            pk_col = next((c for c in infos if c.lname == primary_key[0].lower()), None)
            pk_is_handle = pk_col is not None and is_integer_type(pk_col.ctype)
        table = TableInfo(
            id=table_id,
            name=name,
            columns=tuple(infos),
            indices=tuple(indices),
            pk_is_handle=pk_is_handle,
            max_column_id=len(infos),
            max_index_id=len(indices),
            charset=TABLE_CHARSET,
            collate=TABLE_COLLATE,
        )
        for c in infos:
            if c.auto_increment and not any(ix.unique and ix.columns[0].lower() == c.lname for ix in indices):
                raise SchemaError(f"column {c.name}: AUTO_INCREMENT needs to be the first column of a key")
        body = ",\n  ".join([column_sql(c) for c in infos] + [index_clause(ix) for ix in indices])
        query = f"CREATE TABLE {quote(name)} (\n  {body}\n)"
        return self._job(JobType.CREATE_TABLE, db, query, table)

    def drop_table(self, db_name: str, name: str) -> Job:
        ref = self.schema.table_ref(db_name, name)
        return self._job(JobType.DROP_TABLE, ref.db, f"DROP TABLE {quote(ref.table.name)}", ref.table)

    def truncate_table(self, db_name: str, name: str) -> Job:
        ref = self.schema.table_ref(db_name, name)
        new = replace(ref.table, id=self.alloc_ids(1))
        query = f"TRUNCATE TABLE {quote(ref.table.name)}"
        return self._job(JobType.TRUNCATE_TABLE, ref.db, query, new, table_id=ref.table.id)

    def rename_table(self, db_name: str, name: str, new_name: str, new_db: str | None = None) -> Job:
        ref = self.schema.table_ref(db_name, name)
        target = self.schema.db(new_db) if new_db else ref.db
        _check_name("table", new_name)
        if self.schema.has_table(target.name, new_name):
            raise SchemaError(f"table {target.name}.{new_name} already exists")
        new = replace(ref.table, name=new_name)
        query = f"RENAME TABLE {quote(ref.db.name)}.{quote(ref.table.name)} TO {quote(target.name)}.{quote(new_name)}"
        job = self._job(JobType.RENAME_TABLE, target, query, new)
        return replace(job, old_schema_name=ref.db.name, old_table_name=ref.table.name)

    # ----------------------------------------------------------------- columns
    def add_column(self, db_name: str, table_name: str, column: Column) -> Job:
        ref = self.schema.table_ref(db_name, table_name)
        t = ref.table
        if t.has_column(column.name):
            raise SchemaError(f"column {column.name} already exists in {ref.db.name}.{t.name}")
        if column.auto_increment:
            raise SchemaError("cannot add an AUTO_INCREMENT column to an existing table")
        info = self._column(column, t.max_column_id + 1, len(t.columns), in_pk=False)
        if not info.nullable and info.default is None:
            raise SchemaError(f"adding NOT NULL column {column.name} to {ref.db.name}.{t.name} needs a default")
        new = t.with_columns((*t.columns, info), max_column_id=info.id)
        query = f"ALTER TABLE {quote(t.name)} ADD COLUMN {column_sql(info)}"
        return self._job(JobType.ADD_COLUMN, ref.db, query, new)

    def drop_column(self, db_name: str, table_name: str, column_name: str) -> Job:
        ref = self.schema.table_ref(db_name, table_name)
        t = ref.table
        col = t.column(column_name)
        if len(t.columns) == 1:
            raise SchemaError(f"cannot drop the only column of {ref.db.name}.{t.name}")
        for ix in t.indices:
            if col.lname in (c.lower() for c in ix.columns):
                raise SchemaError(f"cannot drop column {col.name}: it is part of index {ix.name}")
        new = t.with_columns(c for c in t.columns if c is not col)
        query = f"ALTER TABLE {quote(t.name)} DROP COLUMN {quote(col.name)}"
        return self._job(JobType.DROP_COLUMN, ref.db, query, new)

    # ----------------------------------------------------------------- indexes
    def add_index(self, db_name: str, table_name: str, name: str, columns: Sequence[str], unique: bool = False) -> Job:
        ref = self.schema.table_ref(db_name, table_name)
        t = ref.table
        _check_name("index", name)
        if name.lower() == "primary" or any(ix.name.lower() == name.lower() for ix in t.indices):
            raise SchemaError(f"index {name} already exists on {ref.db.name}.{t.name}")
        if not columns:
            raise SchemaError(f"index {name} needs at least one column")
        cols = tuple(t.column(c).name for c in columns)
        ix = IndexInfo(t.max_index_id + 1, name, cols, unique=unique)
        new = replace(t, indices=(*t.indices, ix), max_index_id=ix.id)
        kind = "UNIQUE INDEX" if unique else "INDEX"
        query = f"CREATE {kind} {quote(name)} ON {quote(t.name)} ({','.join(quote(c) for c in cols)})"
        return self._job(JobType.ADD_INDEX, ref.db, query, new)

    def drop_index(self, db_name: str, table_name: str, name: str) -> Job:
        ref = self.schema.table_ref(db_name, table_name)
        t = ref.table
        found = [ix for ix in t.indices if ix.name.lower() == name.lower()]
        if not found:
            raise SchemaError(f"index {name} does not exist on {ref.db.name}.{t.name}")
        if found[0].primary:
            raise SchemaError(f"cannot drop the primary key of {ref.db.name}.{t.name}")
        new = replace(t, indices=tuple(ix for ix in t.indices if ix is not found[0]))
        query = f"DROP INDEX {quote(found[0].name)} ON {quote(t.name)}"
        return self._job(JobType.DROP_INDEX, ref.db, query, new)

    # ----------------------------------------------------------------- helpers
    def _column(self, c: Column, col_id: int, offset: int, *, in_pk: bool) -> ColumnInfo:
        _check_name("column", c.name)
        ctype, text = parse_type(c.type)
        nullable = c.nullable and not in_pk
        info = ColumnInfo(
            id=col_id,
            name=c.name,
            offset=offset,
            type_text=text,
            ctype=ctype,
            nullable=nullable,
            auto_increment=c.auto_increment,
        )
        if c.auto_increment and not is_integer_type(ctype):
            raise SchemaError(f"column {c.name}: AUTO_INCREMENT needs an integer type")
        if c.default is NO_DEFAULT or c.default is None:
            if c.default is None and not nullable:
                raise SchemaError(f"column {c.name} is NOT NULL and cannot default to NULL")
            return info
        value = check_value(info, c.default)
        return ColumnInfo(
            id=col_id,
            name=c.name,
            offset=offset,
            type_text=text,
            ctype=ctype,
            nullable=nullable,
            default=default_literal(ctype, value),
            auto_increment=c.auto_increment,
        )
