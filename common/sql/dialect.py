"""The SQL engines this project writes to and reads from (MySQL and sqlite): quoting, placeholders,
value conversion per column type (:mod:`common.sql.values`), and the statements that create tables and
apply DDL jobs.  The upstream writer's stores, the drainer's sqlite sink, the audit and the Spark jobs
share them, so one table looks the same wherever it is written.

A logical table ``db.t`` is one real table (sqlite: ``"db.t"`` in the one file; MySQL:
`` `<prefix>db`.`t` ``).  Its key column is the integer primary key when the table uses it as the
handle, else a hidden ``_tidb_rowid`` column; the declared primary key of such a table becomes a
unique index named :data:`PK_INDEX`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from common.errors import BinlogError
from common.schema.infoschema import InfoSchema
from common.schema.model import HIDDEN_HANDLE, ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.sql import values

PK_INDEX = "pk_unique"


def index_clause(ix: IndexInfo) -> str:
    """The MySQL clause of an index inside ``CREATE TABLE`` (``PRIMARY KEY (...)``, ``UNIQUE KEY `n` (...)``)."""
    cols = ",".join(_mysql_quote(c) for c in ix.columns)
    if ix.primary:
        return f"PRIMARY KEY ({cols})"
    return f"{'UNIQUE KEY' if ix.unique else 'KEY'} {_mysql_quote(ix.name)} ({cols})"


def _mysql_quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class StoreError(BinlogError):
    """The store refused a statement (other than a duplicate key)."""


class Dialect(abc.ABC):
    """Quoting, placeholders and value conversion of one SQL engine."""

    placeholder = "?"

    @abc.abstractmethod
    def quote(self, name: str) -> str: ...

    @abc.abstractmethod
    def table(self, db: str, table: str) -> str:
        """The quoted physical name of a logical table."""

    @abc.abstractmethod
    def column_decl(self, col: ColumnInfo) -> str: ...

    @abc.abstractmethod
    def to_store(self, col: ColumnInfo, value: Any) -> Any: ...

    @abc.abstractmethod
    def from_store(self, col: ColumnInfo, raw: Any) -> Any: ...

    def select_expr(self, col: ColumnInfo) -> str:
        """How to read a column back exactly (a plain quoted name unless the engine needs help)."""
        return self.quote(col.name)

    @abc.abstractmethod
    def handle_decl(self) -> str:
        """Declaration of the hidden handle column."""

    @abc.abstractmethod
    def index_name(self, db: str, table: str, index: str) -> str:
        """The quoted physical name of an index."""

    # -------------------------------------------------------------- statements
    def key_column(self, t: TableInfo) -> str:
        h = t.handle_column
        return h.name if h is not None else HIDDEN_HANDLE

    def create_table_sql(self, db: str, t: TableInfo) -> list[str]:
        cols = [self.column_decl(c) for c in t.columns]
        if t.pk_is_handle:
            pk = t.handle_column
            assert pk is not None
            cols.append(f"PRIMARY KEY ({self.quote(pk.name)})")
        else:
            cols.insert(0, self.handle_decl())
        stmts = [f"CREATE TABLE {self.table(db, t.name)} ({', '.join(cols)})"]
        stmts += self.index_statements(db, t)
        return stmts

    def physical_index(self, ix: IndexInfo) -> str:
        """The store's name of an index (a declared primary key of a hidden-handle table is a unique index)."""
        return PK_INDEX if ix.primary else ix.name

    def index_statements(self, db: str, t: TableInfo) -> list[str]:
        return [
            self.create_index_sql(db, t.name, self.physical_index(ix), ix.columns, ix.unique or ix.primary)
            for ix in t.indices
            if not (ix.primary and t.pk_is_handle)
        ]

    def create_index_sql(self, db: str, table: str, name: str, columns: Sequence[str], unique: bool) -> str:
        cols = ", ".join(self.quote(c) for c in columns)
        kind = "UNIQUE INDEX" if unique else "INDEX"
        return f"CREATE {kind} {self.index_name(db, table, name)} ON {self.table(db, table)} ({cols})"

    index_names_follow_table = False
    """True when index names embed the table name (sqlite: index names are per database)."""

    @abc.abstractmethod
    def drop_index_sql(self, db: str, table: str, name: str, *, old_db: str = "", old_table: str = "") -> str: ...

    @abc.abstractmethod
    def rename_sql(self, db: str, old: str, new_db: str, new: str) -> str: ...

    def ddl_statements(self, job: Job, before: InfoSchema) -> list[str]:
        """The physical statements that apply `job` (planned against `before`)."""
        t = job.type
        if t in (JobType.CREATE_SCHEMA, JobType.DROP_SCHEMA):
            return self.schema_statements(job, before)
        table = job.table
        assert table is not None
        db = job.schema_name
        if t == JobType.CREATE_TABLE:
            return self.create_table_sql(db, table)
        old_ref = before.table_by_id(job.table_id)
        assert old_ref is not None
        old = old_ref.table
        if t == JobType.DROP_TABLE:
            return [f"DROP TABLE {self.table(db, old.name)}"]
        if t == JobType.TRUNCATE_TABLE:
            return [f"DELETE FROM {self.table(db, old.name)}"]
        if t == JobType.RENAME_TABLE:
            stmts = [self.rename_sql(old_ref.db.name, old.name, db, table.name)]
            if self.index_names_follow_table:  # recreate the indexes under names of the new table
                stmts += [
                    self.drop_index_sql(
                        db, table.name, self.physical_index(ix), old_db=old_ref.db.name, old_table=old.name
                    )
                    for ix in old.indices
                    if not (ix.primary and old.pk_is_handle)
                ]
                stmts += self.index_statements(db, table)
            return stmts
        if t == JobType.ADD_COLUMN:
            return [f"ALTER TABLE {self.table(db, old.name)} ADD COLUMN {self.column_decl(table.columns[-1])}"]
        if t == JobType.DROP_COLUMN:
            gone = next(c for c in old.columns if not table.has_column(c.name))
            return [f"ALTER TABLE {self.table(db, old.name)} DROP COLUMN {self.quote(gone.name)}"]
        if t == JobType.ADD_INDEX:
            ix = table.indices[-1]
            return [self.create_index_sql(db, table.name, ix.name, ix.columns, ix.unique)]
        if t == JobType.DROP_INDEX:
            names = {ix.name for ix in table.indices}
            gone_ix = next(ix for ix in old.indices if ix.name not in names)
            return [self.drop_index_sql(db, table.name, self.physical_index(gone_ix))]
        raise StoreError(f"job type {t} has no store statements")

    @abc.abstractmethod
    def schema_statements(self, job: Job, before: InfoSchema) -> list[str]: ...


class MySQLDialect(Dialect):
    placeholder = "%s"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def physical_db(self, db: str) -> str:
        return self.prefix + db

    def table(self, db: str, table: str) -> str:
        return f"{self.quote(self.physical_db(db))}.{self.quote(table)}"

    def index_name(self, db: str, table: str, index: str) -> str:
        return self.quote(index)

    def column_decl(self, col: ColumnInfo) -> str:
        return values.mysql_decl(col)

    def to_store(self, col: ColumnInfo, value: Any) -> Any:
        return values.to_mysql(col, value)

    def from_store(self, col: ColumnInfo, raw: Any) -> Any:
        return values.from_mysql(col, raw)

    def select_expr(self, col: ColumnInfo) -> str:
        return values.mysql_select_expr(col)

    def handle_decl(self) -> str:
        return f"{self.quote(HIDDEN_HANDLE)} BIGINT NOT NULL PRIMARY KEY"

    def create_table_sql(self, db: str, t: Any) -> list[str]:
        stmts = super().create_table_sql(db, t)
        return [stmts[0] + " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin", *stmts[1:]]

    def drop_index_sql(self, db: str, table: str, name: str, *, old_db: str = "", old_table: str = "") -> str:
        return f"DROP INDEX {self.quote(name)} ON {self.table(db, table)}"

    def rename_sql(self, db: str, old: str, new_db: str, new: str) -> str:
        return f"RENAME TABLE {self.table(db, old)} TO {self.table(new_db, new)}"

    def schema_statements(self, job: Job, before: InfoSchema) -> list[str]:
        name = self.quote(self.physical_db(job.schema_name))
        if job.type == JobType.CREATE_SCHEMA:
            return [f"CREATE DATABASE {name} DEFAULT CHARACTER SET utf8mb4"]
        return [f"DROP DATABASE {name}"]


class SqliteDialect(Dialect):
    placeholder = "?"

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def table(self, db: str, table: str) -> str:
        return self.quote(f"{db}.{table}")

    def index_name(self, db: str, table: str, index: str) -> str:
        return self.quote(f"{db}.{table}.{index}")

    def column_decl(self, col: ColumnInfo) -> str:
        return values.sqlite_decl(col)

    def to_store(self, col: ColumnInfo, value: Any) -> Any:
        return values.to_sqlite(col, value)

    def from_store(self, col: ColumnInfo, raw: Any) -> Any:
        return values.from_sqlite(col, raw)

    def handle_decl(self) -> str:
        return f"{self.quote(HIDDEN_HANDLE)} INTEGER PRIMARY KEY"

    index_names_follow_table = True

    def drop_index_sql(self, db: str, table: str, name: str, *, old_db: str = "", old_table: str = "") -> str:
        return f"DROP INDEX {self.index_name(old_db or db, old_table or table, name)}"

    def rename_sql(self, db: str, old: str, new_db: str, new: str) -> str:
        return f"ALTER TABLE {self.table(db, old)} RENAME TO {self.table(new_db, new)}"

    def schema_statements(self, job: Job, before: InfoSchema) -> list[str]:
        if job.type == JobType.DROP_SCHEMA:
            return [f"DROP TABLE {self.table(job.schema_name, r.table.name)}" for r in before.tables(job.schema_name)]
        return []
