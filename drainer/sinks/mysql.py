"""The MySQL sink: transactions -> a MySQL/MariaDB/TiDB downstream through the :class:`Loader` (pymysql).

Sessions (docs/architecture.md#sinks): ``charset utf8mb4``, autocommit off, multi-statements on,
``read_timeout``, ``time_zone = '+00:00'`` unless ``params`` sets ``time_zone`` (an offset or a
zone name; TIMESTAMP values are then sent as that zone's wall clock; ``SYSTEM`` is refused), the optional
``sql_mode``, then every ``params`` entry as ``SET SESSION name = value`` (a number or a quoted
value is used as written, anything else becomes a string literal).  On TiDB also
``allow_auto_random_explicit_insert = 1``, ``tidb_txn_mode = 'optimistic'`` and
``tidb_placement_mode = 'ignore'``.

A chunk of DMLs goes out in as few round trips as the packet size allows: the rendered
statements, interpolated by pymysql, joined with ``;`` and ended by ``COMMIT``, in queries of up
to :data:`MAX_QUERY_CHARS` (or a quarter of ``max_allowed_packet`` when smaller; one statement
larger than that goes alone).  Statements are interpolated as their query is built, so a worker
holds the text of one query at a time, not of its whole chunk.

``sync_mode = 2`` (partial columns, :mod:`drainer.sinks.partial`): each chunk's DMLs are cut down to
the columns the downstream table has (read from ``information_schema``, cached for the sink, dropped
after every DDL and on an "unknown column" error, after which the chunk is tried once more), and
``STRICT_TRANS_TABLES`` is removed from the session's ``sql_mode``.  ``merge = True``: the loader
merges by primary key (:mod:`drainer.merge`) and deletes by primary key go as one ``DELETE .. IN``.

A DDL runs as ``USE `db```; ``<query>`` (CREATE DATABASE without USE), after its ``DDL.prelude``
statements (table routing's ``CREATE DATABASE IF NOT EXISTS``); a CREATE TABLE whose text
names no character set or collation gets the table's, mapped to the server's collations
(:mod:`common.sql.collation`; the server's list is read once per sink); the errors of
:data:`IGNORABLE_DDL_ERRORS` (exists / does not exist) are logged and ignored.  Lost
connections, deadlocks and lock wait timeouts are retriable (:data:`RETRIABLE_ERRORS`); the
connection is re-opened on the next try.  ``DDL.skip`` is not executed.

TLS: every session goes through ``tls`` (:mod:`common.mysql_tls`): verified TLS when the caller's
security table has ssl-ca, plaintext otherwise; a failed handshake is error 2026, which is not retried.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import re
import threading
import time
import zoneinfo
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pymysql
from pymysql.constants import CLIENT

from common.errors import ConfigError
from common.events import DDL, DML
from common.mysql_tls import MySQLTLS
from common.schema.model import JobType
from common.sql.collation import downstream_collation, with_table_options
from common.sql.render import Renderer
from drainer.loader import (
    DEFAULT_MAX_INFLIGHT_BYTES,
    DEFAULT_TXN_BATCH,
    DEFAULT_WORKER_COUNT,
    ExecError,
    Executor,
    Loader,
    LoaderSink,
)
from drainer.sinks.base import SinkError, SinkObserver
from drainer.sinks.partial import COLUMNS_QUERY, PartialColumnError, PartialColumns, relaxed_sql_mode, writable_columns

log = logging.getLogger(__name__)

__all__ = ["IGNORABLE_DDL_ERRORS", "RETRIABLE_ERRORS", "MySQLSink"]

if TYPE_CHECKING:
    Connection = pymysql.connections.Connection[Any]

IGNORABLE_DDL_ERRORS = frozenset({1007, 1008, 1049, 1050, 1051, 1054, 1060, 1061, 1091, 1146, 1176})
"""Database/table/column/key exists or does not exist (original ``pkg/sql IgnoreDDLError``)."""
CONNECTION_ERRORS = frozenset({2003, 2006, 2013, 2055, 1053, 1927, 1040})
"""Can't connect, server gone, lost connection, shutdown, connection killed, too many connections."""
RETRIABLE_ERRORS = CONNECTION_ERRORS | {1205, 1213}
"""Plus lock wait timeout and deadlock."""
UNKNOWN_COLUMN = 1054
SYNC_FULL_COLUMNS = 1
SYNC_PARTIAL_COLUMNS = 2
CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0
STATEMENT_IN_ERROR = 300
MAX_QUERY_CHARS = 1 << 20
"""Characters of one multi-statement query (its text, encoded copy and packet are transient memory
per worker; a megabyte already makes round trips a small part of the time)."""
"""Characters of a failing statement quoted in an error."""
_OFFSET = re.compile(r"^([+-]?)(\d{1,2}):(\d{2})$")
_LITERAL = re.compile(r"^(-?\d+(\.\d+)?|'.*'|\".*\")$", re.DOTALL)


def _code(exc: BaseException) -> int:
    args: tuple[Any, ...] = exc.args
    return args[0] if args and isinstance(args[0], int) else 0


def _describe(exc: BaseException) -> str:
    code = _code(exc)
    args: tuple[Any, ...] = exc.args
    msg = args[1] if len(args) > 1 else str(exc)
    return f"MySQL error {code}: {msg}" if code else f"{type(exc).__name__}: {exc}"


def session_time_zone(params: Mapping[str, str]) -> dt.tzinfo | None:
    """The tzinfo of a ``time_zone`` in ``params`` (an offset ``+08:00`` or a zone name), None without one."""
    text = next((str(v).strip().strip("'\"") for k, v in params.items() if k.strip().lower() == "time_zone"), None)
    if text is None:
        return None
    m = _OFFSET.match(text)
    if m:
        sign = -1 if m.group(1) == "-" else 1
        return dt.timezone(sign * dt.timedelta(hours=int(m.group(2)), minutes=int(m.group(3))))
    if text.upper() in ("SYSTEM", "LOCAL"):
        raise ConfigError(f"time_zone {text!r} is not supported downstream: give an offset (+08:00) or a zone name")
    try:
        return zoneinfo.ZoneInfo(text)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError) as exc:
        raise ConfigError(f"time_zone {text!r}: unknown time zone ({exc})") from None


def _session_value(conn: Connection, value: str) -> str:
    """A ``params`` value as SQL: numbers and quoted text as written, anything else quoted."""
    text = str(value).strip()
    return text if _LITERAL.match(text) else str(conn.escape(text))


def _close(cur: pymysql.cursors.Cursor) -> None:
    """Close a cursor; on a broken connection that may fail, which must not hide the real error."""
    with contextlib.suppress(Exception):
        cur.close()


class Collations:
    """The downstream's collations (name -> charset), read once; each warning logged once."""

    def __init__(self) -> None:
        self._available: dict[str, str] | None = None
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def available(self, cur: pymysql.cursors.Cursor) -> dict[str, str]:
        with self._lock:
            if self._available is None:
                cur.execute("SHOW COLLATION")
                self._available = {str(r[0]): str(r[1]) for r in cur.fetchall()}
            return self._available

    def create_table_query(self, cur: pymysql.cursors.Cursor, ddl: DDL) -> str:
        """The CREATE TABLE of `ddl` with the table's charset and collation (see the module doc)."""
        info = ddl.job.table
        choice = downstream_collation(info.charset if info else "", info.collate if info else "", self.available(cur))
        query = with_table_options(ddl.query, choice.charset, choice.collate)
        if choice.warning and query != ddl.query:
            with self._lock:
                first = choice.warning not in self._warned
                self._warned.add(choice.warning)
            if first:
                log.warning("%s (first seen creating %s.%s)", choice.warning, ddl.db, ddl.table)
        return query


class _MySQLExecutor:
    """One worker's connection: renders, sends and commits chunks; runs DDL."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        tz: dt.tzinfo | None,
        observer: SinkObserver,
        collations: Collations | None = None,
        *,
        partial: PartialColumns | None = None,
        delete_in: bool = False,
    ) -> None:
        self._connect = connect
        self._observer = observer
        self._collations = collations or Collations()
        self._partial = partial
        self._conn: Connection | None = None
        self._renderer = Renderer("mysql", tz=tz, delete_in=delete_in)
        self._max_query = 1 << 20
        self._packet = 4 << 20
        self._sent = 0
        self._conn = self._connection()

    def _connection(self) -> Connection:
        if self._conn is None:
            conn = self._connect()
            cur = conn.cursor()
            try:
                cur.execute("SELECT @@max_allowed_packet")
                row = cur.fetchone()
            finally:
                cur.close()
            packet = int(row[0]) if row else 4 << 20
            self._max_query = max(64 << 10, min(MAX_QUERY_CHARS, packet // 4))  # a character: up to 4 bytes
            self._packet = packet
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def _rollback(self) -> None:
        if self._conn is None:
            return
        try:
            self._conn.rollback()
        except pymysql.err.Error:
            self._drop()

    def _error(self, exc: pymysql.err.Error, what: str) -> ExecError:
        code = _code(exc)
        if code in CONNECTION_ERRORS or isinstance(exc, pymysql.err.InterfaceError):
            self._drop()
            return ExecError(f"{what}: {_describe(exc)}", retriable=True)
        self._rollback()
        return ExecError(f"{what}: {_describe(exc)}", retriable=code in RETRIABLE_ERRORS, code=code)

    def _read_columns(self, db: str, table: str) -> frozenset[str] | None:
        """The downstream table's writable columns (lower case), None when it does not exist."""
        try:
            cur = self._connection().cursor()
            try:
                cur.execute(COLUMNS_QUERY, (db, table))
                rows = cur.fetchall()
            finally:
                _close(cur)
        except pymysql.err.Error as exc:
            raise self._error(exc, f"reading the columns of `{db}`.`{table}`") from exc
        return writable_columns(rows)

    def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        partial = self._partial
        if partial is None:
            self._execute(dmls, safe_mode)
            return
        for attempt in (1, 2):
            try:
                projected = partial.project(dmls, self._read_columns)
            except PartialColumnError as exc:
                raise ExecError(str(exc)) from None
            try:
                self._execute(projected, safe_mode)
                return
            except ExecError as exc:
                if exc.code != UNKNOWN_COLUMN or attempt == 2:
                    raise
                log.info("sync-mode 2: %s; reading the downstream columns again", exc)
                partial.evict()

    def _execute(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        started = time.perf_counter()
        stmts = self._renderer.render(dmls, safe_mode)
        try:
            conn = self._connection()
        except pymysql.err.Error as exc:
            raise self._error(exc, "connect") from exc
        cur = conn.cursor()
        total = len(stmts) + 1  # and COMMIT
        texts: list[str] = []  # the statements of the query being built, from statement `first` on
        first = 0
        try:
            limit = self._max_query
            size = 0
            for k in range(total):
                text = cur.mogrify(*stmts[k]) if k < len(stmts) else "COMMIT"
                if texts and size + len(text) + 1 > limit:
                    self._send(cur, texts, first, total)
                    first += len(texts)
                    texts, size = [], 0
                texts.append(text)
                size += len(text) + (size > 0)
                del text
                if size >= limit or k == total - 1:  # full (a large row: alone), or the end
                    self._send(cur, texts, first, total)
                    first += len(texts)
                    texts, size = [], 0
        except ExecError:
            self._rollback()
            raise
        except pymysql.err.Error as exc:
            done = first + self._sent
            bad = texts[done - first] if 0 <= done - first < len(texts) else "?"
            if len(bad) > STATEMENT_IN_ERROR:
                bad = bad[:STATEMENT_IN_ERROR] + "..."
            raise self._error(exc, f"statement {done + 1} of {total} {bad!r}") from exc
        finally:
            _close(cur)
        self._observer.executed(time.perf_counter() - started)

    def _send(self, cur: pymysql.cursors.Cursor, texts: list[str], first: int, total: int) -> None:
        """Run ``texts`` (statements ``first``.. of the chunk) as one query; ``_sent`` counts the ones done.

        The query is encoded here, as pymysql would, so the text is dropped before pymysql copies the
        bytes into its packet (a 1 MB BLOB is a 2 MB hex literal: each copy counts, on every worker)."""
        query = ";".join(texts) if len(texts) > 1 else texts[0]
        data = query.encode(cur.connection.encoding)
        del query
        if len(data) > self._packet:
            raise ExecError(
                f"statement {first + 1} of {total} makes a query of {len(data)} bytes, more than the "
                f"downstream's max_allowed_packet ({self._packet}): raise max_allowed_packet",
                retriable=False,
            )
        self._sent = 0
        started = time.perf_counter()
        cur.execute(data)  # type: ignore[call-overload]  # bytes go out as they are
        del data
        self._sent += 1
        while cur.nextset():
            self._sent += 1
        self._observer.query_exec(time.perf_counter() - started)

    def execute_ddl(self, ddl: DDL, commit_ts: int) -> None:
        try:
            conn = self._connection()
        except pymysql.err.Error as exc:
            raise self._error(exc, "connect") from exc
        cur = conn.cursor()
        observer, clock = self._observer, time.perf_counter
        started = clock()
        try:
            query = ddl.query
            if ddl.job.type == JobType.CREATE_TABLE:
                query = self._collations.create_table_query(cur, ddl)
            for statement in ddl.prelude:
                cur.execute(statement)
            if ddl.db and ddl.job.type != JobType.CREATE_SCHEMA:
                cur.execute("USE " + "`" + ddl.db.replace("`", "``") + "`")
            cur.execute(query)
            while cur.nextset():
                pass
            executed = clock()
            observer.query_exec(executed - started)
            conn.commit()
            observer.query_commit(clock() - executed)
            observer.executed(clock() - started)
            log.info("executed DDL commit_ts=%d db=%s query=%r", commit_ts, ddl.db, query)
        except pymysql.err.Error as exc:
            if _code(exc) in IGNORABLE_DDL_ERRORS:
                self._rollback()
                log.warning("ignored DDL error commit_ts=%d query=%r: %s", commit_ts, ddl.query, _describe(exc))
                return
            raise self._error(exc, f"{ddl.query!r} failed") from exc
        finally:
            _close(cur)
            if self._partial is not None:
                self._partial.evict()  # the DDL may have changed a table's columns

    def close(self) -> None:
        self._drop()


class MySQLSink(LoaderSink):
    """Replicates into MySQL-compatible databases (database names as upstream)."""

    name = "mysql"

    def __init__(
        self,
        *,
        host: str,
        port: int,
        user: str,
        password: str,
        params: Mapping[str, str] | None = None,
        worker_count: int = DEFAULT_WORKER_COUNT,
        txn_batch: int = DEFAULT_TXN_BATCH,
        safe_mode: bool = False,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        sql_mode: str | None = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        enable_detect: bool = True,
        enable_dispatch: bool = True,
        tls: MySQLTLS | None = None,
        sync_mode: int = SYNC_FULL_COLUMNS,
        merge: bool = False,
    ) -> None:
        if sync_mode not in (SYNC_FULL_COLUMNS, SYNC_PARTIAL_COLUMNS):
            raise ConfigError(f"sync-mode {sync_mode} is not known: use 1 (full columns) or 2 (partial columns)")
        self.host = host
        self.port = port
        self.user = user
        self._password = password
        self.params = dict(params or {})
        self.tz = session_time_zone(self.params)
        self.sql_mode = sql_mode
        self.read_timeout = read_timeout
        self.tls = tls if tls is not None else MySQLTLS()
        """Every connection of the sink (workers, DDL, `connect()` callers) uses it (common/mysql_tls.py)."""
        self.collations = Collations()
        self.merge = merge
        self.partial = PartialColumns() if sync_mode == SYNC_PARTIAL_COLUMNS else None
        """sync-mode 2's downstream columns; None in sync-mode 1."""
        self.loader = Loader(
            self._executor,
            worker_count=worker_count,
            txn_batch=txn_batch,
            max_inflight_bytes=max_inflight_bytes,
            safe_mode=safe_mode,
            enable_detect=enable_detect,
            enable_dispatch=enable_dispatch,
            name=f"mysql-sink {self.where}",
            merge=merge,
        )

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def _session_sql(self, conn: Connection) -> list[str]:
        params = {k.strip(): v for k, v in self.params.items()}
        lowered = {k.lower() for k in params}
        sets: list[str] = []
        if "time_zone" not in lowered:
            sets.append("time_zone = '+00:00'")
        if self.sql_mode is not None:
            sets.append(f"sql_mode = {conn.escape(self.sql_mode)}")
        sets += [f"{k} = {_session_value(conn, v)}" for k, v in params.items()]
        stmts = ["SET SESSION " + ", ".join(sets)] if sets else []
        if "tidb" in str(getattr(conn, "server_version", "")).lower():
            stmts.append(
                "SET SESSION allow_auto_random_explicit_insert = 1, tidb_txn_mode = 'optimistic', "
                "tidb_placement_mode = 'ignore'"
            )
        return stmts

    def connect(self) -> Connection:
        """A new downstream session with the settings above (autocommit off), over `tls`."""
        conn = self.tls.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self._password,
            charset="utf8mb4",
            autocommit=False,
            client_flag=CLIENT.MULTI_STATEMENTS,
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=self.read_timeout,
            write_timeout=self.read_timeout,
        )
        try:
            cur = conn.cursor()
            try:
                for sql in self._session_sql(conn):
                    cur.execute(sql)
                if self.partial is not None:
                    self._relax_sql_mode(cur)
            finally:
                cur.close()
            conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _relax_sql_mode(cur: pymysql.cursors.Cursor) -> None:
        """sync-mode 2: no STRICT_TRANS_TABLES, so a column the rows do not carry gets its implicit default."""
        cur.execute("SELECT @@SESSION.sql_mode")
        row = cur.fetchone()
        mode = str(row[0]) if row and row[0] is not None else ""
        relaxed = relaxed_sql_mode(mode)
        if relaxed != mode:
            cur.execute("SET SESSION sql_mode = %s", (relaxed,))

    def _executor(self, index: int) -> Executor:
        try:
            return _MySQLExecutor(
                self.connect, self.tz, self.observer, self.collations, partial=self.partial, delete_in=self.merge
            )
        except pymysql.err.Error as exc:
            raise SinkError(f"mysql sink: cannot connect to {self.where}: {_describe(exc)}") from exc

    # ------------------------------------------------------------------ Sink
