"""A MySQL store: logical database ``db`` is the real database ``<prefix>db``.

Sessions run with ``time_zone = '+00:00'`` (TIMESTAMP values are UTC, as in the binlog) and
InnoDB row locks: the prewrite locks every row it changes with ``SELECT ... FOR UPDATE``,
so conflicting transactions commit in commit_ts order.  The txn-status row may be written
on a second connection while a data transaction is open (``parallel_status = True``).
"""

from __future__ import annotations

from typing import Any

import pymysql

from common.dsn import MySQLDSN
from common.schema.infoschema import InfoSchema
from common.schema.model import HIDDEN_HANDLE, ColumnInfo, Job, JobType
from upstream.store import values
from upstream.store.base import Dialect, DuplicateKeyError, LockConflictError, Session, Store, StoreError

ER_DUP_ENTRY = 1062
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
CONNECT_TIMEOUT = 10.0
LOCK_WAIT_TIMEOUT = 50


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


def _translate(exc: BaseException) -> BaseException | None:
    if isinstance(exc, pymysql.err.IntegrityError):
        if exc.args and exc.args[0] == ER_DUP_ENTRY:
            return DuplicateKeyError(f"duplicate key: {exc.args[1]}")
        return StoreError(f"constraint violated: {exc}")
    if isinstance(exc, pymysql.err.MySQLError) and exc.args and exc.args[0] in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT):
        return LockConflictError(f"lock conflict: {exc.args[1] if len(exc.args) > 1 else exc}")
    if isinstance(exc, pymysql.err.OperationalError | pymysql.err.InternalError | pymysql.err.ProgrammingError):
        return StoreError(f"mysql: {exc}")
    return None


class MySQLSession(Session):
    def _begin(self) -> None:
        self._call(self.conn.begin)

    def _commit(self) -> None:
        self._call(self.conn.commit)

    def _rollback(self) -> None:
        self._call(self.conn.rollback)

    def _call(self, fn: Any) -> None:
        try:
            fn()
        except pymysql.err.MySQLError as exc:
            mapped = _translate(exc)
            raise (mapped or StoreError(f"mysql: {exc}")) from exc


class MySQLStore(Store):
    kind = "mysql"
    parallel_status = True
    exact_string_keys = False

    def __init__(self, dsn: MySQLDSN, text: str, prefix: str = "") -> None:
        self.mysql = dsn
        self.dsn = text
        self._dialect = MySQLDialect(prefix)

    def dialect(self) -> Dialect:
        return self._dialect

    def connect(self) -> pymysql.connections.Connection[Any]:
        d = self.mysql
        try:
            return pymysql.connect(
                host=d.host,
                port=d.port,
                user=d.user,
                password=d.password,
                database=d.database,
                autocommit=True,
                charset="utf8mb4",
                connect_timeout=CONNECT_TIMEOUT,
                init_command=(
                    f"SET SESSION time_zone = '+00:00', innodb_lock_wait_timeout = {LOCK_WAIT_TIMEOUT}, "
                    "sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ENGINE_SUBSTITUTION'"
                ),
            )
        except pymysql.err.MySQLError as exc:
            raise StoreError(f"cannot connect to {self.mysql.describe()}: {exc}") from exc

    def session(self) -> Session:
        return MySQLSession(self._dialect, self.connect(), _translate)
