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
from common.sql.dialect import Dialect, MySQLDialect, StoreError
from upstream.store.base import DuplicateKeyError, LockConflictError, Session, Store

ER_DUP_ENTRY = 1062
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
CONNECT_TIMEOUT = 10.0
LOCK_WAIT_TIMEOUT = 50


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
