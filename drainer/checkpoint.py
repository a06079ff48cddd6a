"""Drainer checkpoint: all binlogs with commit_ts <= commitTS are applied downstream (docs/formats.md#checkpoint).

Stores (`make_checkpoint` picks one from `[syncer] db-type` and `[syncer.to.checkpoint] type`):

    MySQL / TiDB   table `<schema>`.`<table>` (default tidb_binlog.checkpoint), one row per cluster:
                       CREATE TABLE IF NOT EXISTS ... (clusterID bigint unsigned primary key, checkPoint MEDIUMTEXT)
                       REPLACE INTO ... VALUES (<clusterID>, '<json>')            (retried 5x, 1 s apart)
                   checkPoint is Go encoding/json text, keys in this order, no spaces:
                       {"consistent":false,"commitTS":417455000000000000,"ts-map":{},"schema-version":123}
                   ts-map is kept as loaded (we never write an applied downstream ts), `{}` when new.
    sqlite (ours)  the same row and JSON in table "tidb_binlog.checkpoint" (one quoted name) of the sqlite
                   sink's database file; a cluster id >= 2**63 is stored as its two's-complement int64.
    file           `<data-dir>/savepoint`, TOML, written atomically (temp file, fsync, chmod 0644, rename):
                       consistent = false
                       commitTS = 417455000000000000
                       schema-version = 0

Rules every store follows: `save` never moves commitTS backwards (CheckpointError: the caller has a bug)
and keeps the higher schema-version (it never decreases, as in the original). `load` returns None when
nothing is stored, or commitTS is 0: start at initial-commit-ts. With cluster id 0 (no PD), the MySQL and
sqlite stores adopt the cluster id of the single row in the table (error if there is not exactly one).
"""

from __future__ import annotations

import abc
import contextlib
import json
import logging
import os
import sqlite3
import tempfile
import threading
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import pymysql

from common.errors import BinlogError, ConfigError
from common.mysql_tls import MySQLTLS
from drainer.config import DrainerConfig

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointState",
    "FileCheckpoint",
    "MySQLCheckpoint",
    "SqliteCheckpoint",
    "decode_json",
    "encode_json",
    "make_checkpoint",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

SAVEPOINT_NAME: Final = "savepoint"
SAVE_RETRIES: Final = 5
RETRY_INTERVAL: Final = 1.0
DEFAULT_TIMEOUT: Final = 10.0
_UINT64: Final = 1 << 64
_INT64_MAX: Final = (1 << 63) - 1
# pymysql error codes after which a new connection may succeed: server gone, lost connection,
# cannot connect, too many connections, lock wait timeout, deadlock.
_RETRIABLE_CODES: Final = frozenset({1040, 1205, 1213, 2003, 2006, 2013, 2055})


class CheckpointError(BinlogError):
    """The checkpoint cannot be read or written, or a save would move it backwards."""


@dataclass(frozen=True, slots=True)
class CheckpointState:
    commit_ts: int
    schema_version: int
    consistent: bool


# ----------------------------------------------------------------------------------------------- JSON


def encode_json(state: CheckpointState, ts_map: Mapping[str, int] | None = None) -> str:
    """The checkPoint column text, byte for byte as the original's Go encoding/json writes it."""
    doc = {
        "consistent": state.consistent,
        "commitTS": state.commit_ts,
        "ts-map": dict(sorted((ts_map or {}).items())),
        "schema-version": state.schema_version,
    }
    return json.dumps(doc, separators=(",", ":"))


def decode_json(text: str | bytes, where: str) -> tuple[CheckpointState, dict[str, int]]:
    """Parse a checkPoint value (older versions lack consistent / schema-version: false / 0)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{where}: checkpoint is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise CheckpointError(f"{where}: checkpoint JSON is not an object: {str(text)[:80]!r}")
    return _state_from(doc, where, "commitTS", "schema-version"), _ts_map(doc.get("ts-map"), where)


def _template(state: CheckpointState, ts_map: Mapping[str, int]) -> str:
    """The checkPoint text for a fix: `consistent` false (safe mode at start), `<ts>` to fill in."""
    text = encode_json(CheckpointState(0, state.schema_version, consistent=False), ts_map)
    return text.replace('"commitTS":0', '"commitTS":<ts>', 1)


def _state_from(doc: Mapping[str, Any], where: str, ts_key: str, version_key: str) -> CheckpointState:
    commit_ts = doc.get(ts_key)
    version = doc.get(version_key, 0)
    consistent = doc.get("consistent", False)
    if not isinstance(commit_ts, int) or isinstance(commit_ts, bool):
        raise CheckpointError(f"{where}: checkpoint has no integer {ts_key!r}")
    if not isinstance(version, int) or isinstance(version, bool):
        raise CheckpointError(f"{where}: checkpoint {version_key!r} is not an integer")
    if not isinstance(consistent, bool):
        raise CheckpointError(f"{where}: checkpoint 'consistent' is not a boolean")
    return CheckpointState(commit_ts, version, consistent)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ts_map(value: object, where: str) -> dict[str, int]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and _is_int(v) for k, v in value.items()):
        raise CheckpointError(f"{where}: checkpoint 'ts-map' is not an object of integers")
    return dict(value)


# ----------------------------------------------------------------------------------------------- base


class Checkpoint(abc.ABC):
    """A checkpoint store. Thread-safe; `close()` is idempotent."""

    kind = "checkpoint"

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._last: CheckpointState | None = None
        self._read_once = False
        self._closed = False
        self._stop = threading.Event()

    @abc.abstractmethod
    def _read(self) -> CheckpointState | None: ...

    @abc.abstractmethod
    def _write(self, state: CheckpointState) -> None: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    @property
    def where(self) -> str:
        """The store, its location and row, for messages: `mysql, `db`.`t` clusterID=1 on root@h:3306`."""
        return self.kind

    def fix_hint(self, state: CheckpointState) -> str:
        """How to set a wrong commitTS right in this store, or remove it to start from initial-commit-ts."""
        return "set its commitTS to the last commit_ts applied downstream, or remove it to start from initial-commit-ts"

    @property
    def last(self) -> CheckpointState | None:
        """The state last loaded or saved (what the store holds, as far as this instance knows)."""
        return self._last

    def load(self) -> CheckpointState | None:
        """The stored checkpoint, or None (nothing stored, or commitTS 0): start at initial-commit-ts."""
        with self._mu:
            self._check_open()
            state = self._read()
            self._last, self._read_once = state, True
        log.info("checkpoint loaded store=%s state=%s", self.kind, state)
        if state is None or state.commit_ts == 0:
            return None
        return state

    def save(self, commit_ts: int, schema_version: int, *, consistent: bool = False) -> None:
        """Store the checkpoint durably; raises CheckpointError (also when commit_ts would go backwards)."""
        with self._mu:
            self._check_open()
            if not self._read_once:
                self._last, self._read_once = self._read(), True
            last = self._last
            if last is not None and commit_ts < last.commit_ts:
                raise CheckpointError(
                    f"checkpoint would move backwards: commit_ts {commit_ts} < saved {last.commit_ts} ({self.kind})"
                )
            if last is not None and schema_version < last.schema_version:
                schema_version = last.schema_version
            state = CheckpointState(commit_ts, schema_version, consistent)
            self._write(state)
            self._last = state
        log.debug(
            "checkpoint saved store=%s commit_ts=%d schema_version=%d consistent=%s",
            self.kind,
            commit_ts,
            schema_version,
            consistent,
        )

    def close(self) -> None:
        """Close the store; a save still retrying in another thread gives up at its next attempt."""
        self._stop.set()
        with self._mu:
            if self._closed:
                return
            self._closed = True
            self._close()
        log.info("checkpoint closed store=%s", self.kind)

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"{self.kind} checkpoint is closed")


# ----------------------------------------------------------------------------------------------- MySQL


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class MySQLCheckpoint(Checkpoint):
    """The checkpoint row in a MySQL / TiDB table; writes are retried `retries` times `retry_interval` apart."""

    kind = "mysql"

    def __init__(  # noqa: PLR0917 - the original's connection parameters, in its order
        self,
        host: str,
        port: int,
        user: str,
        password: str,
        cluster_id: int,
        schema: str = "tidb_binlog",
        table: str = "checkpoint",
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = SAVE_RETRIES,
        retry_interval: float = RETRY_INTERVAL,
        tls: MySQLTLS | None = None,
    ) -> None:
        super().__init__()
        self._tls = tls if tls is not None else MySQLTLS()
        self._params: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": user,
            "password": password,
            "charset": "utf8mb4",
            "autocommit": True,
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "write_timeout": timeout,
        }
        self._where = f"checkpoint database {user}@{host}:{port}"
        self._server = f"{user}@{host}:{port}"
        self._name = f"{_quote(schema)}.{_quote(table)}"
        self._retries = max(1, retries)
        self._retry_interval = retry_interval
        self._conn: pymysql.connections.Connection[Any] | None = None
        self._ts_map: dict[str, int] = {}
        self._run("create the checkpoint table", self._create_table, schema)
        self.cluster_id = cluster_id or self._run("find the cluster id", self._single_cluster_id)
        log.info("mysql checkpoint ready %s table=%s cluster_id=%d", self._where, self._name, self.cluster_id)

    @property
    def where(self) -> str:
        return f"mysql, {self._name} clusterID={self.cluster_id} on {self._server}"

    def fix_hint(self, state: CheckpointState) -> str:
        return (
            f"set commitTS to the last commit_ts applied downstream: UPDATE {self._name} SET checkPoint = "
            f"'{_template(state, self._ts_map)}' WHERE clusterID = {self.cluster_id} (on {self._server}), "
            f"or delete that row to start from initial-commit-ts"
        )

    def _connection(self) -> pymysql.connections.Connection[Any]:
        if self._conn is None:
            self._conn = self._tls.connect(**self._params)
        return self._conn

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(pymysql.Error):
                conn.close()

    def _run(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(cursor, *args)`, retried on connection-level errors; CheckpointError naming `what`."""
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._connection().cursor() as cur:
                    return fn(cur, *args)
            except pymysql.Error as exc:
                self._drop_connection()
                code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
                retriable = isinstance(exc, pymysql.InterfaceError) or code in _RETRIABLE_CODES
                if not retriable or attempt >= self._retries or self._stop.is_set():
                    tries = f" after {attempt} attempts" if attempt > 1 else ""
                    raise CheckpointError(f"{self._where}: cannot {what}{tries}: {exc}") from exc
                log.warning("checkpoint: cannot %s (attempt %d/%d): %s", what, attempt, self._retries, exc)
                self._stop.wait(self._retry_interval)

    def _create_table(self, cur: pymysql.cursors.Cursor, schema: str) -> None:
        cur.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
        cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self._name}(clusterID bigint unsigned primary key, checkPoint MEDIUMTEXT)"
        )

    def _single_cluster_id(self, cur: pymysql.cursors.Cursor) -> int:
        cur.execute(f"SELECT clusterID FROM {self._name}")
        rows = cur.fetchall()
        if len(rows) != 1:
            what = "no any checkpoint item" if not rows else f"{len(rows)} checkpoint rows"
            raise CheckpointError(f"{self._where}: cluster id is 0 and {self._name} has {what}; expected one row")
        return int(rows[0][0])

    def _read(self) -> CheckpointState | None:
        row = self._run("load the checkpoint", self._select)
        if row is None:
            return None
        state, self._ts_map = decode_json(row, f"{self._where} {self._name}")
        return state

    def _select(self, cur: pymysql.cursors.Cursor) -> str | bytes | None:
        cur.execute(f"SELECT checkPoint FROM {self._name} WHERE clusterID = %s", (self.cluster_id,))
        row = cur.fetchone()
        return None if row is None else row[0]

    def _write(self, state: CheckpointState) -> None:
        text = encode_json(state, self._ts_map)
        self._run("save the checkpoint", self._replace, text)

    def _replace(self, cur: pymysql.cursors.Cursor, text: str) -> None:
        cur.execute(f"REPLACE INTO {self._name} VALUES (%s, %s)", (self.cluster_id, text))

    def _close(self) -> None:
        self._drop_connection()


# ----------------------------------------------------------------------------------------------- sqlite


def _to_int64(cluster_id: int) -> int:
    return cluster_id - _UINT64 if cluster_id > _INT64_MAX else cluster_id


class SqliteCheckpoint(Checkpoint):
    """The checkpoint row in table "tidb_binlog.checkpoint" of the sqlite sink's database file."""

    kind = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        cluster_id: int,
        schema: str = "tidb_binlog",
        table: str = "checkpoint",
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        super().__init__()
        self._path = os.fspath(path)
        self._name = '"' + f"{schema}.{table}".replace('"', '""') + '"'
        self._ts_map: dict[str, int] = {}
        try:
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self._path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._name} (clusterID INTEGER PRIMARY KEY, checkPoint TEXT NOT NULL)"
            )
            if cluster_id == 0:
                rows = self._conn.execute(f"SELECT clusterID FROM {self._name}").fetchall()
                if len(rows) != 1:
                    what = "no any checkpoint item" if not rows else f"{len(rows)} checkpoint rows"
                    raise CheckpointError(
                        f"{self._path}: cluster id is 0 and {self._name} has {what}; expected one row"
                    )
                cluster_id = int(rows[0][0]) % _UINT64
        except (sqlite3.Error, OSError) as exc:
            raise CheckpointError(f"cannot open the sqlite checkpoint in {self._path}: {exc}") from exc
        self.cluster_id = cluster_id
        log.info("sqlite checkpoint ready path=%s table=%s cluster_id=%d", self._path, self._name, cluster_id)

    @property
    def where(self) -> str:
        return f"sqlite, {self._name} clusterID={self.cluster_id} in {self._path}"

    def fix_hint(self, state: CheckpointState) -> str:
        return (
            f"set commitTS to the last commit_ts applied downstream: UPDATE {self._name} SET checkPoint = "
            f"'{_template(state, self._ts_map)}' WHERE clusterID = {_to_int64(self.cluster_id)} (sqlite3 "
            f"{self._path}), or delete that row to start from initial-commit-ts"
        )

    def _read(self) -> CheckpointState | None:
        try:
            row = self._conn.execute(
                f"SELECT checkPoint FROM {self._name} WHERE clusterID = ?", (_to_int64(self.cluster_id),)
            ).fetchone()
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot load the checkpoint from {self._path}: {exc}") from exc
        if row is None:
            return None
        state, self._ts_map = decode_json(row[0], f"{self._path} {self._name}")
        return state

    def _write(self, state: CheckpointState) -> None:
        try:
            self._conn.execute(
                f"REPLACE INTO {self._name} VALUES (?, ?)",
                (_to_int64(self.cluster_id), encode_json(state, self._ts_map)),
            )
        except sqlite3.Error as exc:
            raise CheckpointError(f"cannot save the checkpoint to {self._path}: {exc}") from exc

    def _close(self) -> None:
        self._conn.close()


# ----------------------------------------------------------------------------------------------- file


class FileCheckpoint(Checkpoint):
    """`<data-dir>/savepoint` (TOML), for the file sink."""

    kind = "file"

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        super().__init__()
        self._dir = Path(data_dir)
        self.path = self._dir / SAVEPOINT_NAME
        try:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create the checkpoint directory {self._dir}: {exc}") from exc

    @property
    def where(self) -> str:
        return f"file, {self.path}"

    def fix_hint(self, state: CheckpointState) -> str:
        return (
            f"set commitTS in {self.path} to the last commit_ts applied downstream, "
            f"or delete the file to start from initial-commit-ts"
        )

    def _read(self) -> CheckpointState | None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read the checkpoint file {self.path}: {exc}") from exc
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise CheckpointError(f"checkpoint file {self.path} is not valid TOML: {exc}") from None
        return _state_from(doc, str(self.path), "commitTS", "schema-version")

    def _write(self, state: CheckpointState) -> None:
        text = (
            f"consistent = {'true' if state.consistent else 'false'}\n"
            f"commitTS = {state.commit_ts}\n"
            f"schema-version = {state.schema_version}\n"
        )
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{SAVEPOINT_NAME}.", suffix=".tmp", dir=self._dir)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
                    os.fchmod(f.fileno(), 0o644)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise CheckpointError(f"cannot write the checkpoint file {self.path}: {exc}") from exc

    def _close(self) -> None:
        pass


# ----------------------------------------------------------------------------------------------- factory

_STORE_OF_DB_TYPE: Final = {
    "mysql": "mysql",
    "tidb": "tidb",
    "sqlite": "sqlite",
    "file": "file",
    "pb": "file",
    "kafka": "file",
    "oracle": "oracle",
}


def make_checkpoint(cfg: DrainerConfig, cluster_id: int) -> Checkpoint:
    """The checkpoint store of `cfg`: `[syncer.to.checkpoint] type`, else the one that goes with db-type.

    mysql / tidb against `[syncer.to]` (or `[syncer.to.checkpoint]` host... when its type is set; TLS from the
    same section's security table, `DrainerConfig.checkpoint_tls`), sqlite in
    the sqlite sink's file, file in data-dir. Raises ConfigError for oracle, CheckpointError if the store
    cannot be opened.
    """
    s = cfg.syncer
    cp = s.to.checkpoint
    kind = cp.type or _STORE_OF_DB_TYPE.get(s.db_type, "")
    if kind in ("mysql", "tidb"):
        if cp.type:
            host, port, user = cp.host or "127.0.0.1", cp.port or 3306, cp.user or "root"
            password = cfg.checkpoint_password
        else:
            host, port, user, password = s.to.host, s.to.port, s.to.user, cfg.to_password
        return MySQLCheckpoint(
            host,
            port,
            user,
            password,
            cluster_id,
            cp.schema,
            cp.table,
            timeout=max(s.to.read_timeout, 1.0),
            tls=cfg.checkpoint_tls(),
        )
    if kind == "sqlite":
        return SqliteCheckpoint(cfg.sqlite_path, cluster_id, cp.schema, cp.table)
    if kind == "file":
        return FileCheckpoint(cfg.data_dir)
    raise ConfigError(f"checkpoint type {kind or s.db_type!r} is not supported; use mysql, tidb, sqlite or file")
