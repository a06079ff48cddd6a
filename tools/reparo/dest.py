"""Where reparo's binlogs go: `print` (stdout) or `mysql` (the drainer's loader and MySQL sink).

`mysql` applies through `drainer.sinks.mysql.MySQLSink`, the drainer's own path: its session
settings (`time_zone = '+00:00'`, utf8mb4), the loader's `worker-count` workers with causality,
chunks of `txn-batch` rows, safe mode, retries, and DDL errors "exists / does not exist" ignored.
A DDL is a barrier: it runs alone and reparo waits for it before decoding the next binlog, so the
table keys it asks the downstream for (below) are those after the DDL.

Table keys: pb binlogs carry no key information (docs/formats.md#pb-binlog-files), so, as the original loader did,
the primary and unique keys of each table are read from the downstream's information_schema
(`key_lookup`), once per table until the next DDL. Without a key, rows are found by all their
columns (`... LIMIT 1`).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, TextIO

import pymysql

from common.events import DDL, Txn
from common.mysql_tls import MySQLTLS
from common.pb import pb_binlog_pb2
from common.pbfile import Shapes, event_to_dml
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobType
from drainer import MySQLSink, SinkError
from tools.reparo.config import ReparoConfig
from tools.reparo.printer import selected_lines
from tools.reparo.select import Selected

if TYPE_CHECKING:
    Connection = pymysql.connections.Connection[Any]

__all__ = ["KEYS_SQL", "Dest", "MySQLDest", "PrintDest", "make_dest"]

log = logging.getLogger(__name__)

KEYS_SQL: Final = (
    "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND NON_UNIQUE = 0 "
    "ORDER BY INDEX_NAME = 'PRIMARY' DESC, INDEX_NAME, SEQ_IN_INDEX"
)
_EMPTY_SCHEMA: Final = InfoSchema()
_ROW_KINDS: Final = {pb_binlog_pb2.Insert: "insert", pb_binlog_pb2.Update: "update", pb_binlog_pb2.Delete: "delete"}


class Dest(Protocol):
    rows: Counter[str]
    """Rows handed on, by kind: insert, update, delete, and "ddl" for DDLs."""

    def start(self) -> None:
        """Connect (raises SinkError with one clear line when it cannot)."""

    def apply(self, sel: Selected) -> None:
        """Hand one selected binlog on (may return before it is applied; raises SinkError / CodecError)."""

    def finish(self) -> int:
        """Wait until everything handed on is applied; returns how many binlogs were applied."""

    def close(self) -> None: ...


def _count(rows: Counter[str], sel: Selected) -> None:
    if sel.ddl is not None:
        rows["ddl"] += 1
        return
    for e in sel.events:
        rows[_ROW_KINDS.get(e.tp, "other")] += 1


class PrintDest:
    """Writes each binlog's lines to `out` (see `tools.reparo.printer`)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._applied = 0
        self.rows: Counter[str] = Counter()

    def start(self) -> None:
        pass

    def apply(self, sel: Selected) -> None:
        self._out.write("".join(line + "\n" for line in selected_lines(sel)))
        self._applied += 1
        _count(self.rows, sel)

    def finish(self) -> int:
        self._out.flush()
        return self._applied

    def close(self) -> None:
        pass


class MySQLDest:
    """Applies binlogs to `[dest-db]` through the drainer's MySQL sink (see the module doc)."""

    def __init__(self, cfg: ReparoConfig, *, tz: dt.tzinfo | None = None, tls: MySQLTLS | None = None) -> None:
        d = cfg.dest_db
        self.sink = MySQLSink(
            host=d.host,
            port=d.port,
            user=d.user,
            password=d.password,
            worker_count=cfg.worker_count,
            txn_batch=cfg.txn_batch,
            safe_mode=cfg.safe_mode,
            tls=cfg.dest_tls() if tls is None else tls,
        )
        self._tz = tz
        self._conn: Connection | None = None
        self._lock = threading.Lock()
        self._applied = 0
        self._added = 0
        self.shapes = Shapes(self.key_lookup)
        self.rows: Counter[str] = Counter()

    @property
    def where(self) -> str:
        return self.sink.where

    def start(self) -> None:
        try:
            self._conn = self.sink.connect()
        except pymysql.MySQLError as exc:
            raise SinkError(f"cannot connect to [dest-db] {self.where}: {_describe(exc)}") from None
        self.sink.start(self._on_success)

    def _on_success(self, commit_ts: int) -> None:
        with self._lock:
            self._applied += 1

    @property
    def applied(self) -> int:
        with self._lock:
            return self._applied

    def key_lookup(self, db: str, table: str) -> Sequence[Sequence[str]]:
        """The primary key (first) and unique keys of `db`.`table` downstream, as column names."""
        conn = self._conn
        if conn is None:
            raise SinkError("mysql dest: key lookup before start()")
        try:
            with conn.cursor() as cur:
                cur.execute(KEYS_SQL, (db, table))
                found: list[tuple[Any, ...]] = list(cur.fetchall())
            conn.commit()
        except pymysql.MySQLError as exc:
            raise SinkError(f"cannot read the keys of {db}.{table} from {self.where}: {_describe(exc)}") from None
        keys: dict[str, list[str]] = {}
        skip: set[str] = set()
        for index, column in found:
            if column is None:  # an expression index: no column to compare
                skip.add(str(index))
                continue
            keys.setdefault(str(index), []).append(str(column))
        result = [cols for name, cols in keys.items() if name not in skip]
        log.debug("keys of %s.%s downstream: %s", db, table, result)
        return result

    def apply(self, sel: Selected) -> None:
        if sel.ddl is not None:
            p = sel.ddl
            job = Job(
                id=0,
                type=p.job_type or JobType.ADD_COLUMN,
                schema_id=0,
                schema_name=p.schema,
                table_id=0,
                table_name=p.table,
                schema_version=0,
                query=p.query,
            )
            ddl = DDL(db=p.db, table=p.table, query=p.query, job=job, before=_EMPTY_SCHEMA)
            self.sink.add(Txn(sel.commit_ts, ddl=ddl, size=len(p.query)))
            self._added += 1
            self.sink.flush()  # later rows are decoded with the keys this DDL leaves
            self.shapes.clear()
        else:
            dmls = [event_to_dml(e, self.shapes, sel.commit_ts, self._tz) for e in sel.events]
            self.sink.add(Txn(sel.commit_ts, dmls=dmls, size=sum(d.size for d in dmls)))
            self._added += 1
        _count(self.rows, sel)

    def finish(self) -> int:
        self.sink.flush()
        return self.applied

    def close(self) -> None:
        self.sink.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except pymysql.MySQLError:
                log.debug("closing the key lookup connection failed", exc_info=True)


def _describe(exc: BaseException) -> str:
    args: tuple[Any, ...] = exc.args
    if len(args) >= 2 and isinstance(args[0], int):
        return f"MySQL error {args[0]}: {args[1]}"
    return f"{type(exc).__name__}: {exc}"


def make_dest(cfg: ReparoConfig, out: TextIO, tls: MySQLTLS | None = None) -> PrintDest | MySQLDest:
    """The destination of `dest-type`; `tls`: `cfg.dest_tls()` already loaded (None: load it here)."""
    if cfg.dest_type == "mysql":
        return MySQLDest(cfg, tls=tls)
    return PrintDest(out)
