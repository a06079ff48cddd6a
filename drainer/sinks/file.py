"""File sink (`db-type = "file"` / `"pb"`): every transaction as one `pb_binlog.Binlog` record, for reparo.

Files: binlogfile framing and names (docs/formats.md#binlogfile-framing, `common.binlogfile`) in
`[syncer.to] dir`, rotated after the record that takes a file to `max_file_size` (512 MiB);
`retention-time` days > 0 deletes the oldest files whose mtime is older than that (never the file being
written), at start and every hour.

Record payload (docs/formats.md#pb-binlog-files, the original's `translator/pb.go`):

    DML  Binlog{tp=DML, commit_ts, dml_data{events: one Event per row change, in order}}
         Event{schema_name, table_name, tp=Insert|Update|Delete, row: one marshaled `column` per column}
         column{name, tp=[MySQL type byte], mysql_type=TypeToStr, value, changed_value}
             Insert: value = new value; Delete: value = old value; Update: value = old, changed_value = new.
         A value is codec.EncodeValue of the "formatted" datum: NULL -> 00; date, datetime, timestamp (in the
         drainer host's time zone), time, decimal and JSON -> their text as a bytes datum (flag 02);
         enum, set, bit -> uint (09); integers -> varint (08) / uvarint (09); floats -> 05; strings -> 02.
    DDL  Binlog{tp=DDL, commit_ts, ddl_query="use `db`; <query>;"}  (backticks in db doubled); "<query>;" for
         CREATE DATABASE; the bare query when the DDL has no schema. A trailing ';' of the query is dropped first.

Nothing is written for an empty transaction (fake binlog, everything filtered) or a DDL with `skip` set;
they are still reported, in order. A transaction is reported once its record is written and fsynced:
one writer thread writes whatever has queued up, fsyncs once, then reports the whole batch.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any, Final

from google.protobuf.message import DecodeError

from common.binlogfile import BinlogFileWriter, ReadStats, iter_records, list_binlog_files
from common.binlogfile.writer import DEFAULT_MAX_FILE_SIZE
from common.codec import NULL, bytes_datum, encode_datum, flatten, format_duration, format_time, json_to_text
from common.codec.flatten import ColumnType, MySQLType
from common.codec.mytime import MysqlTime
from common.errors import BinlogError, CodecError
from common.pb import pb_binlog_pb2
from drainer.events import DDL, DML, DMLType, Txn
from drainer.filters import ddl_event
from drainer.sinks.base import OnSuccess, Sink, SinkError

__all__ = [
    "DEFAULT_GC_INTERVAL",
    "DEFAULT_MAX_INFLIGHT_BYTES",
    "FileSink",
    "ddl_query_text",
    "read_pb_binlogs",
    "time_text",
    "txn_to_pb",
    "type_name",
]

log = logging.getLogger(__name__)

DEFAULT_GC_INTERVAL: Final = 3600.0
DEFAULT_MAX_INFLIGHT_BYTES: Final = 64 * 1024**2
SECONDS_PER_DAY: Final = 86_400

_TYPE_NAMES: Final = {
    0: "decimal",
    1: "tinyint",
    2: "smallint",
    3: "int",
    4: "float",
    5: "double",
    6: "null",
    7: "timestamp",
    8: "bigint",
    9: "mediumint",
    10: "date",
    11: "time",
    12: "datetime",
    13: "year",
    15: "varchar",
    16: "bit",
    245: "json",
    246: "decimal",
    247: "enum",
    248: "set",
    249: "tinytext",
    250: "mediumtext",
    251: "longtext",
    252: "text",
    253: "var_string",
    254: "char",
    255: "geometry",
}
_BLOB_TYPES: Final = frozenset({249, 250, 251, 252})
_CHAR_TYPES: Final = frozenset({MySQLType.STRING, MySQLType.VARCHAR})
_EVENT_TYPES: Final = {
    DMLType.INSERT: pb_binlog_pb2.Insert,
    DMLType.UPDATE: pb_binlog_pb2.Update,
    DMLType.DELETE: pb_binlog_pb2.Delete,
}
_NULL_BYTES: Final = encode_datum(NULL)


# ----------------------------------------------------------------------------------------------- encoding


def type_name(ct: ColumnType) -> str:
    """TiDB's `types.TypeToStr`: "bigint", "varchar", and "varbinary" / "blob" for binary-charset columns."""
    name = _TYPE_NAMES.get(ct.tp, "")
    if ct.is_binary:
        if ct.tp in _BLOB_TYPES:
            return name.replace("text", "blob", 1)
        if ct.tp in _CHAR_TYPES:
            return name.replace("char", "binary", 1)
    return name


def time_text(value: Any, ct: ColumnType, tz: _dt.tzinfo | None) -> str:
    """DATE / DATETIME / TIMESTAMP as text; TIMESTAMP in `tz` (None: this host's zone), naive ones taken as UTC."""
    if isinstance(value, MysqlTime):
        if ct.tp == MySQLType.DATE:
            return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"
        return format_time(value, ct.fsp)
    if isinstance(value, _dt.datetime):
        if ct.tp == MySQLType.TIMESTAMP:
            aware = value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
            value = aware.astimezone(tz).replace(tzinfo=None)
        if ct.tp == MySQLType.DATE:
            return format_time(value.date())
        return format_time(value, ct.fsp)
    if isinstance(value, _dt.date):
        return format_time(value)
    raise CodecError(f"{type(value).__name__} value {value!r} does not fit column type {type_name(ct)}")


def encode_value(value: Any, ct: ColumnType, tz: _dt.tzinfo | None = None) -> bytes:
    """The `column.value` bytes of one column value (`tz`: for TIMESTAMP text; None = the host's zone)."""
    if value is None:
        return _NULL_BYTES
    tp = ct.tp
    if tp in (MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP):
        return encode_datum(bytes_datum(time_text(value, ct, tz)))
    if tp == MySQLType.DURATION:
        if not isinstance(value, _dt.timedelta):
            raise CodecError(f"{type(value).__name__} value {value!r} does not fit column type time")
        return encode_datum(bytes_datum(format_duration(value, ct.fsp)))
    if tp in (MySQLType.DECIMAL, MySQLType.NEW_DECIMAL):
        number = value if isinstance(value, Decimal) else Decimal(str(value))
        return encode_datum(bytes_datum(format(number, "f")))
    if tp == MySQLType.JSON:
        return encode_datum(bytes_datum(json_to_text(value)))
    return encode_datum(flatten(value, ct))


def _event(dml: DML, tz: _dt.tzinfo | None) -> pb_binlog_pb2.Event:
    shape = dml.shape
    tp = dml.tp
    new = dml.values
    old = dml.old_values
    if tp in (DMLType.INSERT, DMLType.UPDATE) and new is None:
        raise CodecError(f"{tp.name} of {shape.db}.{shape.table} has no new row")
    if tp in (DMLType.UPDATE, DMLType.DELETE) and old is None:
        raise CodecError(f"{tp.name} of {shape.db}.{shape.table} has no old row")
    rows: list[bytes] = []
    for i, col in enumerate(shape.columns):
        ct = col.ctype
        column = pb_binlog_pb2.column(name=col.name, tp=bytes((ct.tp,)), mysql_type=type_name(ct))
        if tp == DMLType.INSERT:
            assert new is not None
            column.value = encode_value(new[i], ct, tz)
        elif tp == DMLType.DELETE:
            assert old is not None
            column.value = encode_value(old[i], ct, tz)
        else:
            assert new is not None
            assert old is not None
            column.value = encode_value(old[i], ct, tz)
            column.changed_value = encode_value(new[i], ct, tz)
        rows.append(column.SerializeToString())
    return pb_binlog_pb2.Event(schema_name=shape.db, table_name=shape.table, tp=_EVENT_TYPES[tp], row=rows)


def ddl_query_text(db: str, query: str) -> str:
    """The pb `ddl_query` of a DDL: "use `db`; <query>;", "<query>;" for CREATE DATABASE, bare without db."""
    text = query.strip().rstrip(";").rstrip()
    if ddl_event(text) == "create database":
        return text + ";"
    if not db:
        return text
    return "use `" + db.replace("`", "``") + "`; " + text + ";"


def _ddl_binlog(commit_ts: int, ddl: DDL) -> pb_binlog_pb2.Binlog:
    return pb_binlog_pb2.Binlog(
        tp=pb_binlog_pb2.DDL, commit_ts=commit_ts, ddl_query=ddl_query_text(ddl.db, ddl.query).encode("utf-8")
    )


def txn_to_pb(txn: Txn, tz: _dt.tzinfo | None = None) -> pb_binlog_pb2.Binlog | None:
    """The record of one transaction, or None when nothing is written (empty txn, skipped DDL).

    Raises CodecError for a value that does not fit its column.
    """
    if txn.ddl is not None:
        return None if txn.ddl.skip else _ddl_binlog(txn.commit_ts, txn.ddl)
    if not txn.dmls:
        return None
    data = pb_binlog_pb2.DMLData(events=[_event(dml, tz) for dml in txn.dmls])
    return pb_binlog_pb2.Binlog(tp=pb_binlog_pb2.DML, commit_ts=txn.commit_ts, dml_data=data)


def read_pb_binlogs(
    directory: str | os.PathLike[str], *, stats: ReadStats | None = None
) -> Iterator[pb_binlog_pb2.Binlog]:
    """Every `pb_binlog.Binlog` of a file sink directory, in write order (damaged records are skipped).

    Raises CodecError for a good record that is not a pb_binlog.Binlog.
    """
    for pos, payload in iter_records(directory, stats=stats):
        binlog = pb_binlog_pb2.Binlog()
        try:
            binlog.ParseFromString(payload)
        except DecodeError as exc:
            raise CodecError(
                f"record at file {pos.file_index} offset {pos.offset} of {os.fspath(directory)!r} "
                f"is not a pb_binlog.Binlog: {exc}"
            ) from None
        yield binlog


# ----------------------------------------------------------------------------------------------- sink


class FileSink(Sink):
    """Writes pb binlog files; see the module doc. `purge_expired()` runs the retention GC now."""

    name = "file"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_file_size: int = DEFAULT_MAX_FILE_SIZE,
        retention_days: float = 0,
        gc_interval: float = DEFAULT_GC_INTERVAL,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        sync: bool = True,
        time_zone: _dt.tzinfo | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = os.fspath(directory)
        self._retention = retention_days * SECONDS_PER_DAY
        self._gc_interval = gc_interval
        self._budget = max(1, max_inflight_bytes)
        self._sync = sync
        self._tz = time_zone
        self._clock = clock
        self._writer = BinlogFileWriter(self._dir, max_file_size, sync=False)
        self._cv = threading.Condition()
        self._queue: deque[tuple[int, bytes | None]] = deque()
        self._inflight = 0
        self._added = 0
        self._reported = 0
        self._error: BaseException | None = None
        self._closing = False
        self._closed = False
        self._on_success: OnSuccess | None = None
        self._thread: threading.Thread | None = None

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def inflight_bytes(self) -> int:
        """Bytes of encoded records queued and not yet written and fsynced."""
        return self._inflight

    def start(self, on_success: OnSuccess) -> None:
        with self._cv:
            if self._thread is not None or self._closing:
                raise SinkError("file sink: start() called twice or after close()")
            self._on_success = on_success
            self._thread = threading.Thread(target=self._run, name="file-sink", daemon=True)
            self._thread.start()
        log.info("file sink started dir=%s retention_days=%s", self._dir, self._retention / SECONDS_PER_DAY)

    def add(self, txn: Txn) -> None:
        self._raise_if_failed()
        try:
            binlog = txn_to_pb(txn, self._tz)
            payload = None if binlog is None else binlog.SerializeToString()
        except (CodecError, ValueError, TypeError) as exc:
            error = SinkError(f"file sink: cannot encode commit_ts={txn.commit_ts}: {exc}")
            self._fail(error)
            raise error from exc
        size = 0 if payload is None else len(payload)
        with self._cv:
            while self._error is None and not self._closing and self._inflight and self._inflight + size > self._budget:
                self._cv.wait()
            self._raise_if_failed()
            if self._closing:
                raise SinkError(f"file sink is closed; commit_ts={txn.commit_ts} not written")
            self._queue.append((txn.commit_ts, payload))
            self._inflight += size
            self._added += 1
            self._cv.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            target = self._added
            while self._reported < target:
                self._raise_if_failed()
                if self._closing:
                    raise SinkError("file sink closed before everything was written")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"file sink: {target - self._reported} transactions not written in {timeout}s")
                self._cv.wait(remaining)
            self._raise_if_failed()

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cv.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        try:
            self._writer.close()
        except BinlogError as exc:
            log.error("file sink: closing the binlog files failed: %s", exc)
        log.info("file sink closed dir=%s reported=%d", self._dir, self._reported)

    def error(self) -> BaseException | None:
        return self._error

    # ------------------------------------------------------------------------------------------ gc

    def purge_expired(self, now: float | None = None) -> list[str]:
        """Delete the oldest files last modified more than retention-time days ago; return their names.

        Files go in index order, stopping at the first one that is recent enough or is being written.
        """
        if self._retention <= 0:
            return []
        cutoff = (self._clock() if now is None else now) - self._retention
        current = self._writer.position.file_index
        stop = current
        for f in list_binlog_files(self._dir, include_archived=True):
            if f.index >= current:
                break
            try:
                mtime = os.stat(os.path.join(self._dir, f.name)).st_mtime
            except FileNotFoundError:
                continue
            if mtime >= cutoff:
                stop = f.index
                break
        removed = self._writer.delete_before(stop)
        if removed:
            log.info("file sink: deleted %d binlog files older than the retention time", len(removed))
        return removed

    # ------------------------------------------------------------------------------------------ worker

    def _run(self) -> None:
        next_gc = time.monotonic()
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._closing:
                        if self._retention > 0 and time.monotonic() >= next_gc:
                            break
                        wait = None if self._retention <= 0 else max(0.0, next_gc - time.monotonic())
                        self._cv.wait(wait)
                    if self._closing:
                        return
                    batch = list(self._queue)
                    self._queue.clear()
                if self._retention > 0 and time.monotonic() >= next_gc:
                    next_gc = time.monotonic() + self._gc_interval
                    self._gc_quietly()
                if batch:
                    self._write_batch(batch)
        except BaseException as exc:
            self._fail(exc if isinstance(exc, SinkError) else SinkError(f"file sink failed: {exc}"))
            if not isinstance(exc, Exception):
                raise

    def _gc_quietly(self) -> None:
        try:
            self.purge_expired()
        except (BinlogError, OSError) as exc:
            log.warning("file sink: retention GC failed: %s", exc)

    def _write_batch(self, batch: list[tuple[int, bytes | None]]) -> None:
        size = 0
        for commit_ts, payload in batch:
            if payload is None:
                continue
            try:
                self._writer.write(payload)
            except BinlogError as exc:
                raise SinkError(f"file sink: cannot write commit_ts={commit_ts}: {exc}") from exc
            size += len(payload)
        if size and self._sync:
            try:
                self._writer.fsync()
            except BinlogError as exc:
                raise SinkError(f"file sink: cannot fsync up to commit_ts={batch[-1][0]}: {exc}") from exc
        on_success = self._on_success
        assert on_success is not None
        for commit_ts, _ in batch:
            on_success(commit_ts)
        with self._cv:
            self._inflight -= size
            self._reported += len(batch)
            self._cv.notify_all()

    # ------------------------------------------------------------------------------------------ errors

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            if self._error is None:
                self._error = exc
                log.error("%s", exc)
            self._cv.notify_all()

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            raise error if isinstance(error, SinkError) else SinkError(str(error))
