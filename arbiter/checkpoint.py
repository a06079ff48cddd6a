"""The arbiter's checkpoint: one row per topic in the downstream MySQL.

    CREATE TABLE IF NOT EXISTS `tidb_binlog`.`arbiter_checkpoint`(
        topic_name VARCHAR(255) PRIMARY KEY, ts BIGINT NOT NULL, status INT NOT NULL)
    REPLACE INTO `tidb_binlog`.`arbiter_checkpoint`(topic_name, ts, status) VALUES (%s, %s, %s)

(the schema is `[down] checkpoint-schema`, `tidb_binlog` by default; layout and statements as the
original's).  `ts`: every transaction of the topic with commit_ts ≤ ts is applied downstream.
`status`: 1 (`STATUS_RUNNING`) while the arbiter runs, so a row left with 1 means it stopped
without saying so and transactions above `ts` may be partly applied (the next start runs in safe
mode); 0 (`STATUS_NORMAL`) after a clean stop.  The schema and table are created when missing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import pymysql

from common.errors import BinlogError

if TYPE_CHECKING:
    Connection = pymysql.connections.Connection[Any]

__all__ = ["STATUS_NORMAL", "STATUS_RUNNING", "CheckpointError", "CheckpointRow", "MySQLCheckpoint"]

log = logging.getLogger(__name__)

STATUS_NORMAL: Final = 0
STATUS_RUNNING: Final = 1
TABLE: Final = "arbiter_checkpoint"


class CheckpointError(BinlogError):
    """The checkpoint cannot be read or written; the message names the table and the MySQL error."""

    retriable = True


class CheckpointRow(NamedTuple):
    ts: int
    status: int


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def describe_mysql_error(exc: BaseException) -> str:
    args: tuple[Any, ...] = exc.args
    if len(args) >= 2 and isinstance(args[0], int):
        return f"MySQL error {args[0]}: {args[1]}"
    return f"{type(exc).__name__}: {exc}"


class MySQLCheckpoint:
    """Reads and writes the topic's row; one connection, re-opened after a failure."""

    def __init__(self, connect: Callable[[], Connection], topic: str, *, schema: str, where: str) -> None:
        self._connect = connect
        self.topic = topic
        self.table = f"{_quote(schema)}.{_quote(TABLE)}"
        self.where = where
        self._conn: Connection | None = None
        self._schema = schema

    def _run(self, what: str, sql: str, args: tuple[object, ...] = ()) -> tuple[tuple[Any, ...], ...]:
        if self._conn is None:
            try:
                self._conn = self._connect()
            except pymysql.MySQLError as exc:
                raise CheckpointError(
                    f"cannot connect to [down] {self.where} (for checkpoint {self.table}): {describe_mysql_error(exc)}"
                ) from None
        try:
            with self._conn.cursor() as cur:
                cur.execute(sql, args)
                rows: tuple[tuple[Any, ...], ...] = tuple(cur.fetchall())
            self._conn.commit()
            return rows
        except pymysql.MySQLError as exc:
            self._drop()
            raise CheckpointError(
                f"cannot {what} checkpoint {self.table} on {self.where}: {describe_mysql_error(exc)}"
            ) from None

    def ensure(self) -> None:
        """Create the schema and table when missing."""
        self._run("create the", f"CREATE DATABASE IF NOT EXISTS {_quote(self._schema)}")
        self._run(
            "create the",
            f"CREATE TABLE IF NOT EXISTS {self.table}("
            "topic_name VARCHAR(255) PRIMARY KEY, ts BIGINT NOT NULL, status INT NOT NULL)",
        )

    def load(self) -> CheckpointRow | None:
        """The topic's row, None when there is none."""
        rows = self._run("read the", f"SELECT ts, status FROM {self.table} WHERE topic_name = %s", (self.topic,))
        if not rows:
            return None
        ts, status = rows[0]
        return CheckpointRow(int(ts), int(status))

    def save(self, ts: int, status: int) -> None:
        self._run(
            "save the",
            f"REPLACE INTO {self.table}(topic_name, ts, status) VALUES (%s, %s, %s)",
            (self.topic, ts, status),
        )
        log.debug("checkpoint saved topic=%s ts=%d status=%d", self.topic, ts, status)

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Idempotent."""
        self._drop()
