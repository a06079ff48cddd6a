"""The schema built by applying DDL jobs in order, with every table's past versions (pure).

Both sides replay the DDL history through :meth:`InfoSchema.apply`: the upstream writer to
know its current tables, the drainer to decode rows of a binlog with the table info that was
valid at the binlog's ``schema_version`` (:meth:`InfoSchema.table_at`): a column added or
dropped later must not break decoding of older rows.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from common.schema.model import DBInfo, Job, JobState, JobType, SchemaError, TableInfo


@dataclass(frozen=True, slots=True)
class TableRef:
    db: DBInfo
    table: TableInfo


class InfoSchema:
    """Databases and tables by name and id, plus per-table-id version history."""

    def __init__(self) -> None:
        self.version = 0
        self._dbs: dict[str, DBInfo] = {}  # lower-case name -> db
        self._db_ids: dict[int, DBInfo] = {}
        self._tables: dict[int, TableRef] = {}  # table id -> current table
        self._names: dict[tuple[str, str], int] = {}  # (db lower, table lower) -> table id
        # table id -> ascending [(schema_version, table or None when dropped)]
        self._history: dict[int, list[tuple[int, TableInfo | None]]] = {}

    def copy(self) -> InfoSchema:
        """An independent copy (the schema objects themselves are immutable and shared)."""
        c = InfoSchema()
        c.version = self.version
        c._dbs = dict(self._dbs)
        c._db_ids = dict(self._db_ids)
        c._tables = dict(self._tables)
        c._names = dict(self._names)
        c._history = {k: list(v) for k, v in self._history.items()}
        return c

    @classmethod
    def from_jobs(cls, jobs: Iterable[Job], upto_version: int | None = None) -> InfoSchema:
        s = cls()
        for job in sorted(jobs, key=lambda j: (j.schema_version, j.id)):
            if upto_version is not None and job.schema_version > upto_version:
                break
            s.apply(job)
        return s

    # ------------------------------------------------------------------ lookups
    def db(self, name: str) -> DBInfo:
        try:
            return self._dbs[name.lower()]
        except KeyError:
            raise SchemaError(f"unknown database {name!r}") from None

    def has_db(self, name: str) -> bool:
        return name.lower() in self._dbs

    def databases(self) -> list[DBInfo]:
        return sorted(self._dbs.values(), key=lambda d: d.id)

    def table(self, db: str, name: str) -> TableInfo:
        return self.table_ref(db, name).table

    def table_ref(self, db: str, name: str) -> TableRef:
        tid = self._names.get((db.lower(), name.lower()))
        if tid is None:
            self.db(db)
            raise SchemaError(f"unknown table {db}.{name}")
        return self._tables[tid]

    def has_table(self, db: str, name: str) -> bool:
        return (db.lower(), name.lower()) in self._names

    def tables(self, db: str | None = None) -> list[TableRef]:
        refs = [r for r in self._tables.values() if db is None or r.db.name.lower() == db.lower()]
        return sorted(refs, key=lambda r: r.table.id)

    def table_by_id(self, table_id: int) -> TableRef | None:
        return self._tables.get(table_id)

    def table_at(self, table_id: int, schema_version: int) -> TableInfo | None:
        """The table as it was at ``schema_version`` (None when it did not exist then)."""
        hist = self._history.get(table_id)
        if not hist:
            return None
        i = bisect.bisect_right(hist, schema_version, key=lambda e: e[0])
        return hist[i - 1][1] if i else None

    # ------------------------------------------------------------------ apply
    def apply(self, job: Job) -> None:
        """Apply one finished job; raises SchemaError if it does not fit the current schema."""
        if job.state == JobState.CANCELLED:
            return
        if job.schema_version <= self.version:
            raise SchemaError(f"job {job.id}: schema version {job.schema_version} is not above {self.version}")
        t = job.type
        if t == JobType.CREATE_SCHEMA:
            self._create_db(job)
        elif t == JobType.DROP_SCHEMA:
            db = self._db_by_id(job)
            for ref in self.tables(db.name):
                self._drop_table(ref.table.id, job.schema_version)
            del self._dbs[db.name.lower()]
            del self._db_ids[db.id]
        else:
            table = job.table
            if table is None:
                raise SchemaError(f"job {job.id} ({t}) has no table info")
            db = self._db_by_id(job)
            if t == JobType.CREATE_TABLE:
                self._check_free(db, table)
            elif t in (JobType.DROP_TABLE, JobType.TRUNCATE_TABLE):
                self._existing(job)
                self._drop_table(job.table_id, job.schema_version)
            elif t == JobType.RENAME_TABLE:
                old = self._existing(job)
                del self._names[(old.db.name.lower(), old.table.name.lower())]
                self._check_free(db, table)
            else:  # column and index jobs replace the table info
                self._existing(job)
            if t != JobType.DROP_TABLE:
                self._put_table(db, table, job.schema_version)
        self.version = job.schema_version

    def _create_db(self, job: Job) -> None:
        if job.db is None:
            raise SchemaError(f"job {job.id} (create schema) has no db info")
        if job.db.name.lower() in self._dbs or job.db.id in self._db_ids:
            raise SchemaError(f"job {job.id}: database {job.db.name} already exists")
        self._dbs[job.db.name.lower()] = job.db
        self._db_ids[job.db.id] = job.db

    def _db_by_id(self, job: Job) -> DBInfo:
        db = self._db_ids.get(job.schema_id)
        if db is None:
            raise SchemaError(f"job {job.id} ({job.type}): unknown database id {job.schema_id}")
        return db

    def _existing(self, job: Job) -> TableRef:
        ref = self._tables.get(job.table_id)
        if ref is None:
            raise SchemaError(f"job {job.id} ({job.type}): unknown table id {job.table_id}")
        return ref

    def _check_free(self, db: DBInfo, table: TableInfo) -> None:
        if (db.name.lower(), table.name.lower()) in self._names:
            raise SchemaError(f"table {db.name}.{table.name} already exists")

    def _put_table(self, db: DBInfo, table: TableInfo, version: int) -> None:
        self._tables[table.id] = TableRef(db, table)
        self._names[(db.name.lower(), table.name.lower())] = table.id
        self._history.setdefault(table.id, []).append((version, table))

    def _drop_table(self, table_id: int, version: int) -> None:
        ref = self._tables.pop(table_id)
        del self._names[(ref.db.name.lower(), ref.table.name.lower())]
        self._history.setdefault(table_id, []).append((version, None))
