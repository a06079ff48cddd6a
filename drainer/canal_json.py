"""Canal-JSON messages of one transaction (docs/formats.md#canal-json-messages), pure: values in, bytes out.

The Kafka sink's ``protocol = "canal-json"`` writes Alibaba Canal's *FlatMessage* as TiCDC's canal-json
encoder emits it, plus a TiDB extension object.  One message is one JSON object (UTF-8, compact, keys in
this order)::

    {"id":0, "database":str, "table":str, "pkNames":[str...]|null, "isDdl":bool, "type":str,
     "es":int, "ts":int, "sql":str, "sqlType":{col:int}|null, "mysqlType":{col:str}|null,
     "data":[{col:str|null}...]|null, "old":[{col:str|null}...]|null,
     "_tidb":{"commitTs":int, "seq":int, "count":int}}

* ``es`` is the commit time in ms (the physical part of commit_ts, ``commit_ts >> 18``); ``ts`` the time
  the message was encoded, in ms (one clock reading per transaction, injectable).
* DML: ``type`` INSERT / UPDATE / DELETE, ``isDdl`` false, ``sql`` "".  ``data`` holds the rows (INSERT:
  the new row, UPDATE: the new row, DELETE: the deleted row); ``old`` is null except for UPDATE, where it
  holds the *whole* old row of each entry of ``data``, in the same order (TiCDC's default; Canal itself
  puts only the changed columns there).  Columns appear in table order.  ``pkNames`` are the primary key
  columns in table order, null for a table without a primary key.  ``mysqlType`` is the column's type
  text as the schema records it (``int(10) unsigned``, ``varchar(255)``, ``decimal(10,2)``,
  ``enum('a','b')``), as TiCDC's ``content-compatible`` mode and Canal write it.
* DDL: one message, ``isDdl`` true, ``type`` by the job (create table CREATE, drop table ERASE, truncate
  TRUNCATE, rename RENAME, add/drop column ALTER, add index CINDEX, drop index DINDEX, create/drop
  database and anything else QUERY), ``sql`` the DDL text as upstream ran it, ``database`` / ``table``
  those of the DDL (``database`` is the new database's name for CREATE DATABASE, ``table`` "" for
  database DDL); ``pkNames``, ``sqlType``, ``mysqlType``, ``data`` and ``old`` are null.
* ``_tidb``: ``commitTs`` the transaction's commit_ts (TiCDC's extension); *ours*: ``seq`` is the
  message's 0-based index within the transaction and ``count`` the number of its messages.  A consumer
  keeps the first message of each (commitTs, seq) and knows a transaction is complete when it holds
  ``count`` of them (Kafka delivery is at-least-once: a drainer restart re-sends from its checkpoint).

Values are strings (NULL is JSON null), as TiCDC writes them:

=====================================  ================================================  ===============
column type                            value text                                        sqlType
=====================================  ================================================  ===============
tinyint / smallint / mediumint / int    decimal digits                                    -6 / 5 / 4 / 4
bigint                                  decimal digits                                    -5
unsigned tinyint/smallint/int/bigint    decimal digits (sqlType widened to 5 / 4 / -5 / 3  -6 / 5 / 4 / -5
                                        when a value of the message, data or old, is
                                        > 127 / 32767 / 2^31-1 / 2^63-1)
unsigned mediumint                      decimal digits                                    4
float / double                          shortest text that reads back as the float32 /    7 / 8
                                        double, never an exponent (``0.1``, ``1e20`` as
                                        ``100000000000000000000``)
decimal                                 plain text with the column's scale (``1.50``)     3
date / datetime / timestamp             ``2024-01-02`` / ``2024-01-02 03:04:05[.fff]``;   91 / 93 / 93
                                        timestamp in UTC
time                                    ``-12:30:00[.fff]``                               92
year                                    ``2024``                                          12
char / varchar / *text                  the text                                          1 / 12 / 2005
binary / varbinary / *blob              bytes as ISO-8859-1 text (byte n = U+00nn)        2004
enum                                    1-based index (``0`` for the '' value)            4
set                                     member bitmask (bit i = i-th member)              -7
bit                                     the bits as an unsigned integer                   -7
json                                    MySQL-style JSON text (``{"a": 1}``)              12
geometry                                bytes as ISO-8859-1 text                          -2
=====================================  ================================================  ===============

Grouping: consecutive DMLs of one table and one type form one message (Canal's shape for one row event),
so a transaction is a sequence of messages in its own order.  With ``max_message_size`` a group is split
so that no message exceeds it (bytes of the encoded JSON); a single row whose message alone would exceed
it raises CodecError naming the table, commit_ts, size and limit, as does a DDL message that does.
A fake binlog, an empty transaction and a skipped DDL have no messages.  A transaction handed over in
parts (``Txn.partial``) is refused: ``seq``/``count`` need the whole transaction.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final

from common.codec.flatten import STRING_TYPES, ColumnType, MySQLType, flatten, to_float32
from common.codec.json_binary import json_to_text
from common.codec.mytime import format_duration
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pbfile import time_text, type_name
from common.schema.model import JobType

__all__ = ["DDL_EVENT_TYPES", "encode_txn"]

Clock = Callable[[], float]
"""Seconds since the epoch (``time.time``)."""

TSO_PHYSICAL_SHIFT: Final = 18
"""commit_ts >> 18 is its physical time in ms (docs/formats.md#tso)."""

DDL_EVENT_TYPES: Final[dict[JobType, str]] = {
    JobType.CREATE_SCHEMA: "QUERY",
    JobType.DROP_SCHEMA: "QUERY",
    JobType.CREATE_TABLE: "CREATE",
    JobType.DROP_TABLE: "ERASE",
    JobType.TRUNCATE_TABLE: "TRUNCATE",
    JobType.RENAME_TABLE: "RENAME",
    JobType.ADD_COLUMN: "ALTER",
    JobType.DROP_COLUMN: "ALTER",
    JobType.ADD_INDEX: "CINDEX",
    JobType.DROP_INDEX: "DINDEX",
}
"""Canal's event type of a DDL, by job type (TiCDC's mapping); any other job is QUERY."""
DEFAULT_DDL_EVENT_TYPE: Final = "QUERY"

_DML_EVENT_TYPES: Final = {DMLType.INSERT: "INSERT", DMLType.UPDATE: "UPDATE", DMLType.DELETE: "DELETE"}

# java.sql.Types codes
_BIT, _TINYINT, _SMALLINT, _INTEGER, _BIGINT = -7, -6, 5, 4, -5
_REAL, _DOUBLE, _DECIMAL, _CHAR, _VARCHAR = 7, 8, 3, 1, 12
_DATE, _TIME, _TIMESTAMP, _BINARY, _BLOB, _CLOB = 91, 92, 93, -2, 2004, 2005

_SQL_TYPES: Final[dict[int, int]] = {
    MySQLType.TINY: _TINYINT,
    MySQLType.SHORT: _SMALLINT,
    MySQLType.INT24: _INTEGER,
    MySQLType.LONG: _INTEGER,
    MySQLType.LONGLONG: _BIGINT,
    MySQLType.FLOAT: _REAL,
    MySQLType.DOUBLE: _DOUBLE,
    MySQLType.DECIMAL: _DECIMAL,
    MySQLType.NEW_DECIMAL: _DECIMAL,
    MySQLType.DATE: _DATE,
    MySQLType.DATETIME: _TIMESTAMP,
    MySQLType.TIMESTAMP: _TIMESTAMP,
    MySQLType.DURATION: _TIME,
    MySQLType.YEAR: _VARCHAR,
    MySQLType.ENUM: _INTEGER,
    MySQLType.SET: _BIT,
    MySQLType.BIT: _BIT,
    MySQLType.JSON: _VARCHAR,
    MySQLType.GEOMETRY: _BINARY,
    MySQLType.STRING: _CHAR,
    MySQLType.VARCHAR: _VARCHAR,
    MySQLType.VAR_STRING: _VARCHAR,
    MySQLType.TINY_BLOB: _CLOB,
    MySQLType.BLOB: _CLOB,
    MySQLType.MEDIUM_BLOB: _CLOB,
    MySQLType.LONG_BLOB: _CLOB,
}
# unsigned integer type -> (largest value of the base java type, the wider java type above it)
_UNSIGNED_WIDENING: Final[dict[int, tuple[int, int]]] = {
    MySQLType.TINY: (127, _SMALLINT),
    MySQLType.SHORT: (32767, _INTEGER),
    MySQLType.LONG: (2**31 - 1, _BIGINT),
    MySQLType.LONGLONG: (2**63 - 1, _DECIMAL),
}
_INT_TYPES: Final = frozenset({MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG})
_TIME_TYPES: Final = frozenset({MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP})
_FLOAT32_MAX_DIGITS: Final = 9
"""Significant digits that always read back as the same float32."""


_dumps: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""Compact JSON text, non-ASCII as is (one encoder: json.dumps with options builds one per call)."""
_quote: Final = json.encoder.encode_basestring
"""A str as a JSON string literal, non-ASCII as is (what _dumps writes for a str)."""
SHAPE_CACHE_LIMIT: Final = 1024
"""Table shapes whose shared message parts are kept; the cache is emptied when it holds this many."""


# ------------------------------------------------------------------------------------------ values

Formatter = Callable[[Any], str]


def _int_text(v: Any) -> str:
    if not isinstance(v, int) or isinstance(v, bool):
        raise TypeError("not an integer")
    return str(v)


def _plain(d: Decimal) -> str:
    """Decimal text without exponent and without trailing fraction zeros (Go's 'f' with shortest digits)."""
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _check_finite(v: Any) -> float:
    if not isinstance(v, float | int) or isinstance(v, bool):
        raise TypeError("not a number")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError("not a finite number")
    return f


def _double_text(v: Any) -> str:
    return _plain(Decimal(repr(_check_finite(v))))


def _float32_text(v: Any) -> str:
    f = to_float32(_check_finite(v))
    for digits in range(1, _FLOAT32_MAX_DIGITS + 1):
        text = f"{f:.{digits}g}"
        if to_float32(float(text)) == f:
            return _plain(Decimal(text))
    return _plain(Decimal(f"{f:.{_FLOAT32_MAX_DIGITS}g}"))  # pragma: no cover - 9 digits always suffice


def _decimal_text(v: Any) -> str:
    return format(v if isinstance(v, Decimal) else Decimal(str(v)), "f")


def _duration_text(ct: ColumnType) -> Formatter:
    def fmt(v: Any) -> str:
        if not isinstance(v, _dt.timedelta):
            raise TypeError("not a timedelta")
        return format_duration(v, ct.fsp)

    return fmt


def _str_text(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError("not a str")
    return v


def _latin1_text(v: Any) -> str:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise TypeError("not bytes")
    return bytes(v).decode("latin-1")


def _int_literal(v: Any) -> str:
    """An integer's JSON string literal (digits need no escaping)."""
    if type(v) is int:
        return f'"{v}"'
    return _quote(_int_text(v))


def _literal(ct: ColumnType) -> Formatter:
    """How a non-null value of a column of type `ct` is written: its JSON string literal."""
    fmt = _formatter(ct)
    if fmt is _int_text:
        return _int_literal
    if fmt is _str_text:
        return _quote  # a str; anything else is a TypeError, as _str_text raises
    return lambda v: _quote(fmt(v))


def _formatter(ct: ColumnType) -> Formatter:
    tp = ct.tp
    if tp in _INT_TYPES:
        return _int_text
    if tp == MySQLType.YEAR:
        return _int_text
    if tp == MySQLType.FLOAT:
        return _float32_text
    if tp == MySQLType.DOUBLE:
        return _double_text
    if tp in (MySQLType.DECIMAL, MySQLType.NEW_DECIMAL):
        return _decimal_text
    if tp in _TIME_TYPES:
        return lambda v: time_text(v, ct, _dt.UTC)
    if tp == MySQLType.DURATION:
        return _duration_text(ct)
    if tp == MySQLType.JSON:
        return json_to_text
    if tp in (MySQLType.ENUM, MySQLType.SET, MySQLType.BIT):
        return lambda v: str(flatten(v, ct)[1])
    if tp == MySQLType.GEOMETRY or (tp in STRING_TYPES and ct.is_binary):
        return _latin1_text
    if tp in STRING_TYPES:
        return _str_text
    raise CodecError(f"column type {tp} has no canal-json form")


def _sql_type(ct: ColumnType) -> int:
    if ct.is_binary and ct.tp in STRING_TYPES:
        return _BLOB
    return _SQL_TYPES.get(ct.tp, _VARCHAR)


# ------------------------------------------------------------------------------------------ tables


@dataclass(frozen=True, slots=True)
class _Table:
    """What every message of one table shape shares."""

    shape: TableShape
    formatters: tuple[Formatter, ...]
    literals: tuple[Formatter, ...]
    """Each column's value writer: the JSON string literal of its text."""
    keys: tuple[str, ...]
    """Each column's ``"name":`` as it starts its member of a row object."""
    sql_types: tuple[int, ...]
    widening: tuple[tuple[int, int, int], ...]
    """(column position, largest value of its base java type, wider java type) of unsigned integers."""
    database: str
    table: str
    pk_names: str
    mysql_types: str
    """JSON texts of the shared fields."""
    sql_types_bound: int
    """Length of the longest sqlType object any message of this table can have."""

    @staticmethod
    def of(shape: TableShape) -> _Table:
        cols = shape.columns
        names = [c.name for c in cols]
        sql_types = tuple(_sql_type(c.ctype) for c in cols)
        widening = tuple(
            (i, *_UNSIGNED_WIDENING[c.ctype.tp])
            for i, c in enumerate(cols)
            if c.ctype.unsigned and c.ctype.tp in _UNSIGNED_WIDENING
        )
        widest = list(sql_types)
        for i, _limit, wider in widening:
            if len(str(wider)) > len(str(widest[i])):
                widest[i] = wider
        pk = shape.info.primary_key
        pk_cols = {c.lower() for c in pk.columns} if pk is not None else set()
        mysql_types = {c.name: c.type_text or _type_label(c.ctype) for c in cols}
        return _Table(
            shape=shape,
            formatters=tuple(_formatter(c.ctype) for c in cols),
            literals=tuple(_literal(c.ctype) for c in cols),
            keys=tuple(_quote(n) + ":" for n in names),
            sql_types=sql_types,
            widening=widening,
            database=_dumps(shape.db),
            table=_dumps(shape.table),
            pk_names=_dumps([c.name for c in cols if c.lname in pk_cols] or None),
            mysql_types=_dumps(mysql_types),
            sql_types_bound=len(_dumps(dict(zip(names, widest, strict=True))).encode()),
        )

    def sql_types_json(self, widen: set[int]) -> str:
        codes = list(self.sql_types)
        for i, _limit, wider in self.widening:
            if i in widen:
                codes[i] = wider
        return _dumps({c.name: code for c, code in zip(self.shape.columns, codes, strict=True)})


def _type_label(ct: ColumnType) -> str:
    """The type name when a column has no recorded type text (shapes built without a schema)."""
    name = type_name(ct)
    return f"{name} unsigned" if ct.unsigned and ct.tp in _INT_TYPES else name


# ------------------------------------------------------------------------------------------ rows


class _Row:
    """One DML's encoded row objects."""

    __slots__ = ("data", "old", "size", "widen")

    def __init__(self, data: bytes, old: bytes | None, widen: frozenset[int]) -> None:
        self.data = data
        self.old = old
        self.widen = widen
        """Positions of unsigned columns with a value above their base java type."""
        self.size = len(data) + (0 if old is None else len(old))


_NO_WIDENING: Final[frozenset[int]] = frozenset()


def _row_image(t: _Table, values: Sequence[Any] | None, d: DML, widen: set[int]) -> bytes:
    shape = t.shape
    if values is None:
        raise CodecError(f"{d.tp.name} of {shape.db}.{shape.table} at commit_ts={d.commit_ts} has no row image")
    if len(values) != len(shape.columns):
        raise CodecError(
            f"{d.tp.name} of {shape.db}.{shape.table} at commit_ts={d.commit_ts}: "
            f"a row of {len(values)} values, the table has {len(shape.columns)} columns"
        )
    try:
        text = "{" + ",".join(
            [k + ("null" if v is None else w(v)) for k, w, v in zip(t.keys, t.literals, values, strict=True)]
        )
    except (TypeError, ValueError, AttributeError, ArithmeticError):
        _explain(t, values, d)
        raise
    for i, limit, _wider in t.widening:
        v = values[i]
        if v is not None and v > limit:
            widen.add(i)
    return (text + "}").encode()


def _explain(t: _Table, values: Sequence[Any], d: DML) -> None:
    """Raises the CodecError naming the first column whose value does not format; returns if none fails."""
    shape = t.shape
    for col, fmt, v in zip(shape.columns, t.formatters, values, strict=True):
        if v is None:
            continue
        try:
            _quote(fmt(v))
        except (TypeError, ValueError, AttributeError, ArithmeticError) as exc:
            raise CodecError(
                f"{shape.db}.{shape.table} at commit_ts={d.commit_ts}: column {col.name}: "
                f"{type(v).__name__} value {v!r} does not fit {col.type_text or _type_label(col.ctype)}: {exc}"
            ) from None


_TABLES: dict[int, _Table] = {}


def _table(shape: TableShape) -> _Table:
    """The shape's shared parts, cached by identity (the cache holds the shape, so its id is not reused)."""
    t = _TABLES.get(id(shape))
    if t is None or t.shape is not shape:
        t = _Table.of(shape)
        if len(_TABLES) >= SHAPE_CACHE_LIMIT:
            _TABLES.clear()
        _TABLES[id(shape)] = t
    return t


def _row(t: _Table, d: DML) -> _Row:
    widen: set[int] = set()
    if d.tp == DMLType.UPDATE:
        data = _row_image(t, d.values, d, widen)
        old: bytes | None = _row_image(t, d.old_values, d, widen)
    elif d.tp == DMLType.DELETE:
        data, old = _row_image(t, d.old_values, d, widen), None
    else:
        data, old = _row_image(t, d.values, d, widen), None
    return _Row(data, old, frozenset(widen) if widen else _NO_WIDENING)


# ------------------------------------------------------------------------------------------ messages


@dataclass(slots=True)
class _Group:
    """Rows of one table and one DML type that go into one message."""

    table: _Table
    tp: DMLType
    rows: list[_Row]


def _head(t: _Table, tp: DMLType, es: int, ts: int) -> str:
    return (
        f'{{"id":0,"database":{t.database},"table":{t.table},"pkNames":{t.pk_names},"isDdl":false,'
        f'"type":"{_DML_EVENT_TYPES[tp]}","es":{es},"ts":{ts},"sql":"","sqlType":'
    )


def _tail(commit_ts: int, seq: int, count: int) -> str:
    return f',"_tidb":{{"commitTs":{commit_ts},"seq":{seq},"count":{count}}}}}'


def _dml_message(g: _Group, es: int, ts: int, commit_ts: int, *, seq: int, count: int) -> bytes:
    widen: set[int] = set()
    for r in g.rows:
        widen |= r.widen
    t = g.table
    parts = [
        _head(t, g.tp, es, ts).encode(),
        t.sql_types_json(widen).encode(),
        b',"mysqlType":',
        t.mysql_types.encode(),
        b',"data":[',
        b",".join(r.data for r in g.rows),
        b"]",
    ]
    if g.tp == DMLType.UPDATE:
        parts += [b',"old":[', b",".join(r.old or b"" for r in g.rows), b"]"]
    else:
        parts.append(b',"old":null')
    parts.append(_tail(commit_ts, seq, count).encode())
    return b"".join(parts)


def _runs(dmls: Sequence[DML]) -> Iterator[list[DML]]:
    """Consecutive DMLs of one table shape and one type, in order."""
    run: list[DML] = []
    for d in dmls:
        if run and (d.tp != run[0].tp or (d.shape is not run[0].shape and d.shape != run[0].shape)):
            yield run
            run = []
        run.append(d)
    if run:
        yield run


def _groups(txn: Txn, es: int, ts: int, limit: int | None) -> list[_Group]:
    groups: list[_Group] = []
    # seq and count have at most as many digits as the number of rows: reserve that much
    digits = len(str(len(txn.dmls)))
    tail_bound = len(_tail(txn.commit_ts, 0, 0)) + 2 * (digits - 1)
    for run in _runs(txn.dmls):
        shape = run[0].shape
        t = _table(shape)
        tp = run[0].tp
        fixed = (
            len(_head(t, tp, es, ts).encode())
            + t.sql_types_bound
            + len(',"mysqlType":')
            + len(t.mysql_types.encode())
            + len(',"data":[]')
            + (len(',"old":[]') if tp == DMLType.UPDATE else len(',"old":null'))
            + tail_bound
        )
        commas = 2 if tp == DMLType.UPDATE else 1
        group = _Group(t, tp, [])
        size = fixed
        for d in run:
            row = _row(t, d)
            if limit is not None:
                if fixed + row.size > limit:
                    one = _dml_message(_Group(t, tp, [row]), es, ts, txn.commit_ts, seq=0, count=1)
                    raise CodecError(
                        f"a {tp.name} row of {shape.db}.{shape.table} at commit_ts={txn.commit_ts} makes a "
                        f"canal-json message of {len(one)} bytes, over the limit of {limit} bytes"
                    )
                if group.rows and size + commas + row.size > limit:
                    groups.append(group)
                    group, size = _Group(t, tp, []), fixed
            size += row.size + (commas if group.rows else 0)
            group.rows.append(row)
        groups.append(group)
    return groups


def _ddl_message(txn: Txn, ddl: DDL, es: int, ts: int) -> bytes:
    msg = {
        "id": 0,
        "database": ddl.db or ddl.job.schema_name,
        "table": ddl.table,
        "pkNames": None,
        "isDdl": True,
        "type": DDL_EVENT_TYPES.get(ddl.job.type, DEFAULT_DDL_EVENT_TYPE),
        "es": es,
        "ts": ts,
        "sql": ddl.query,
        "sqlType": None,
        "mysqlType": None,
        "data": None,
        "old": None,
        "_tidb": {"commitTs": txn.commit_ts, "seq": 0, "count": 1},
    }
    return _dumps(msg).encode()


def encode_txn(txn: Txn, *, max_message_size: int | None = None, clock: Clock = time.time) -> list[bytes]:
    """The canal-json messages of one whole transaction, in order; [] when it has nothing to write.

    ``max_message_size`` (bytes) bounds every message; ``clock`` gives the ``ts`` field.  Raises
    CodecError for a value that does not fit its column, a row or DDL too large for the limit, or a
    transaction given in parts."""
    if max_message_size is not None and max_message_size <= 0:
        raise ValueError(f"max_message_size must be positive, got {max_message_size}")
    if txn.partial:
        raise CodecError(f"canal-json needs whole transactions: commit_ts={txn.commit_ts} came in parts")
    es = txn.commit_ts >> TSO_PHYSICAL_SHIFT
    if txn.ddl is not None:
        if txn.ddl.skip:
            return []
        ts = int(clock() * 1000)
        msg = _ddl_message(txn, txn.ddl, es, ts)
        if max_message_size is not None and len(msg) > max_message_size:
            raise CodecError(
                f"DDL of {txn.ddl.db}.{txn.ddl.table} at commit_ts={txn.commit_ts} makes a canal-json message "
                f"of {len(msg)} bytes, over the limit of {max_message_size} bytes"
            )
        return [msg]
    if not txn.dmls:
        return []
    ts = int(clock() * 1000)
    groups = _groups(txn, es, ts, max_message_size)
    return [_dml_message(g, es, ts, txn.commit_ts, seq=i, count=len(groups)) for i, g in enumerate(groups)]
