"""DML -> SQL statements for a downstream database (pure: values in, ``(sql, params)`` out).

Two dialects, ``mysql`` (pymysql ``%s`` placeholders; ``%`` in names doubled) and ``sqlite``
(``?``; tables named ``"db.table"`` as the upstream sqlite store lays them out).

=========  =======================================  ==============================================
DML        normal mode                              safe mode
=========  =======================================  ==============================================
insert     ``INSERT INTO t (cols) VALUES (..)``     ``REPLACE INTO t (cols) VALUES (..)``
update     ``UPDATE t SET c=?,.. WHERE <old key>``  ``DELETE FROM t WHERE <old key>`` then
                                                    ``REPLACE INTO t (cols) VALUES (<new row>)``
delete     ``DELETE FROM t WHERE <old key>``        same
=========  =======================================  ==============================================

* ``<key>`` is the first unique key of ``shape.unique_keys`` (primary key first) whose values
  are all non-NULL: ``k1 = ? AND k2 = ?``.  Without one, every column: ``c = ?`` or
  ``c IS NULL``; that WHERE may match several identical rows, so only one is touched: MySQL
  ``... LIMIT 1`` (on every UPDATE/DELETE, as the original); sqlite has no ``UPDATE/DELETE ...
  LIMIT``, so it uses ``WHERE rowid = (SELECT rowid FROM t WHERE ... LIMIT 1)``.
* Consecutive INSERTs (REPLACEs) into the same table become one multi-row statement, capped
  at ``max_rows`` rows, ``max_params`` parameters and about ``max_bytes`` of DML data.
* With ``delete_in`` (MySQL; the merge path, ``[syncer.to] merge``), consecutive DELETEs from the
  same table that find their row by its primary key become one ``DELETE FROM t WHERE pk IN
  (..)`` (``(a=? AND b=?) OR ..`` for a composite key), with the same caps.  The same rows go
  either way: a primary key names one row.
* Columns are ``shape.columns`` in order.  Parameters are converted per column with
  :func:`common.sql.values.to_mysql` / ``to_sqlite``.  For MySQL ``to_mysql`` changes only
  TIMESTAMP, TIME, JSON and BIT values (:data:`MYSQL_CONVERTED`); other columns skip the call.
  MySQL TIMESTAMP values are UTC wall clock (the session's ``time_zone = '+00:00'``), or with
  ``tz`` the wall clock of that zone (a downstream session in another time zone).

SQL text pieces are cached per shape object (a shape is one table at one schema version).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from common.codec.flatten import MySQLType
from common.events import DML, DMLType, Row, TableShape
from common.schema.model import ColumnInfo
from common.sql.values import to_mysql, to_sqlite

__all__ = ["MYSQL_CONVERTED", "Renderer", "Statement", "where_key"]

Statement = tuple[str, list[Any]]
"""SQL text with placeholders, and its parameters."""

Converter = Callable[[Any], Any]

MYSQL_CONVERTED = frozenset({MySQLType.TIMESTAMP, MySQLType.DURATION, MySQLType.JSON, MySQLType.BIT})
"""Column types whose values :func:`to_mysql` changes; it returns every other value as is."""

SQLITE_MAX_PARAMS = 32766
"""sqlite's default SQLITE_MAX_VARIABLE_NUMBER (3.32+)."""

DEFAULT_MAX_ROWS = 1000
DEFAULT_MAX_BYTES = 1 << 20
_CACHE_LIMIT = 4096


def where_key(shape: TableShape, row: Row) -> tuple[int, ...] | None:
    """The first unique key (column positions) whose values in ``row`` are all non-NULL, or None."""
    for key in shape.unique_keys:
        for i in key:
            if row[i] is None:
                break
        else:
            return key
    return None


@dataclass(slots=True)
class _ShapeSQL:
    """The cached SQL pieces of one shape."""

    shape: TableShape
    table: str
    insert: str
    """``INSERT INTO t (cols) VALUES `` (rows appended)."""
    replace: str
    row: str
    """``(?,?,..)``"""
    update: str
    """``UPDATE t SET a=?,.. WHERE `` (where appended)."""
    delete: str
    """``DELETE FROM t WHERE `` (where appended)."""
    key_where: dict[tuple[int, ...], str]
    null_where: dict[tuple[bool, ...], str]
    convs: tuple[Converter | None, ...]
    identity: bool
    """No column needs a conversion."""


class Renderer:
    """Renders DMLs for one dialect, ``"mysql"`` or ``"sqlite"`` (one instance per thread)."""

    def __init__(
        self,
        dialect: str,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_params: int | None = None,
        tz: dt.tzinfo | None = None,
        delete_in: bool = False,
    ) -> None:
        if dialect not in ("mysql", "sqlite"):
            raise ValueError(f"unknown SQL dialect {dialect!r} (mysql, sqlite)")
        self.dialect = dialect
        self.mysql = dialect == "mysql"
        self.ph = "%s" if self.mysql else "?"
        self.max_rows = max(1, max_rows)
        self.max_bytes = max_bytes
        self.max_params = max_params if max_params is not None else (1 << 30 if self.mysql else SQLITE_MAX_PARAMS)
        self.tz = tz
        self.delete_in = delete_in and self.mysql
        self._cache: dict[int, _ShapeSQL] = {}

    # ------------------------------------------------------------------ names
    def quote(self, name: str) -> str:
        if self.mysql:
            return "`" + name.replace("`", "``").replace("%", "%%") + "`"
        return '"' + name.replace('"', '""') + '"'

    def table(self, db: str, table: str) -> str:
        if self.mysql:
            return f"{self.quote(db)}.{self.quote(table)}"
        return self.quote(f"{db}.{table}")

    # ------------------------------------------------------------------ cache
    def _sql(self, shape: TableShape) -> _ShapeSQL:
        s = self._cache.get(id(shape))
        if s is not None and s.shape is shape:
            return s
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        s = self._build(shape)
        self._cache[id(shape)] = s  # the entry holds the shape, so its id is not reused meanwhile
        return s

    def _build(self, shape: TableShape) -> _ShapeSQL:
        ph = self.ph
        table = self.table(shape.db, shape.table)
        names = [self.quote(c.name) for c in shape.columns]
        cols = "(" + ",".join(names) + ")"
        convs = tuple(self._converter(c) for c in shape.columns)
        return _ShapeSQL(
            shape=shape,
            table=table,
            insert=f"INSERT INTO {table} {cols} VALUES ",
            replace=f"REPLACE INTO {table} {cols} VALUES ",
            row="(" + ",".join([ph] * len(names)) + ")",
            update=f"UPDATE {table} SET " + ",".join(f"{n}={ph}" for n in names) + " WHERE ",
            delete=f"DELETE FROM {table} WHERE ",
            key_where={},
            null_where={},
            convs=convs,
            identity=all(c is None for c in convs),
        )

    def _converter(self, col: ColumnInfo) -> Converter | None:
        if self.mysql:
            if col.ctype.tp == MySQLType.TIMESTAMP and self.tz is not None:
                return partial(_wall_clock, self.tz)
            return partial(to_mysql, col) if col.ctype.tp in MYSQL_CONVERTED else None
        return partial(to_sqlite, col)

    # ------------------------------------------------------------------ pieces
    def _params(self, s: _ShapeSQL, row: Row) -> list[Any]:
        if s.identity:
            return list(row)
        return [v if c is None or v is None else c(v) for v, c in zip(row, s.convs, strict=True)]

    def _where(self, s: _ShapeSQL, row: Row) -> tuple[str, list[Any]]:
        """What follows ``WHERE`` to find ``row``: the key condition, with ``LIMIT 1`` for MySQL."""
        key = where_key(s.shape, row)
        convs = s.convs
        if key is not None:
            text = s.key_where.get(key)
            if text is None:
                cols = s.shape.columns
                text = " AND ".join(f"{self.quote(cols[i].name)}={self.ph}" for i in key)
                if self.mysql:
                    text += " LIMIT 1"
                s.key_where[key] = text
            params = []
            for i in key:
                c = convs[i]
                params.append(row[i] if c is None else c(row[i]))
            return text, params
        mask = tuple(v is None for v in row)
        text = s.null_where.get(mask)
        if text is None:
            parts = []
            for col, null in zip(s.shape.columns, mask, strict=True):
                q = self.quote(col.name)
                parts.append(f"{q} IS NULL" if null else f"{q}={self.ph}")
            text = " AND ".join(parts)
            if len(s.null_where) < _CACHE_LIMIT:
                s.null_where[mask] = text
        params = [v if c is None else c(v) for v, c in zip(row, convs, strict=True) if v is not None]
        if self.mysql:
            return text + " LIMIT 1", params
        return f"rowid = (SELECT rowid FROM {s.table} WHERE {text} LIMIT 1)", params

    # ------------------------------------------------------------------ statements
    def render(self, dmls: Sequence[DML], safe_mode: bool = False) -> list[Statement]:
        """The statements that apply ``dmls`` in order (one downstream transaction's worth)."""
        out: list[Statement] = []
        n = len(dmls)
        i = 0
        while i < n:
            dml = dmls[i]
            tp = dml.tp
            if tp == DMLType.INSERT:
                i = self._rows(dmls, i, safe_mode, out)
                continue
            s = self._sql(dml.shape)
            old = dml.old_values
            if old is None:
                raise ValueError(f"{tp.name.lower()} of {dml.shape.db}.{dml.shape.table} has no old values")
            where, wparams = self._where(s, old)
            if tp == DMLType.DELETE:
                if self.delete_in and _by_primary_key(s.shape, old):
                    i = self._deletes(dmls, i, out)
                    continue
                out.append((s.delete + where, wparams))
            elif safe_mode:
                out.append((s.delete + where, wparams))
                out.append((s.replace + s.row, self._params(s, _new(dml))))
            else:
                params = self._params(s, _new(dml))
                params.extend(wparams)
                out.append((s.update + where, params))
            i += 1
        return out

    def _rows(self, dmls: Sequence[DML], i: int, safe_mode: bool, out: list[Statement]) -> int:
        """One multi-row INSERT/REPLACE from dmls[i] on; returns the index after the last row taken."""
        first = dmls[i]
        shape = first.shape
        s = self._sql(shape)
        ncols = max(1, len(shape.columns))
        limit = max(1, min(self.max_rows, self.max_params // ncols))
        params = self._params(s, _new(first))
        nbytes = first.size
        rows = 1
        j = i + 1
        n = len(dmls)
        while j < n and rows < limit:
            d = dmls[j]
            if d.tp != DMLType.INSERT or d.shape is not shape or nbytes + d.size > self.max_bytes:
                break
            params.extend(self._params(s, _new(d)))
            nbytes += d.size
            rows += 1
            j += 1
        head = s.replace if safe_mode else s.insert
        out.append((head + ",".join([s.row] * rows), params))
        return j

    def _deletes(self, dmls: Sequence[DML], i: int, out: list[Statement]) -> int:
        """One DELETE .. IN of the rows of dmls[i] on found by primary key; returns the index after the last."""
        shape = dmls[i].shape
        s = self._sql(shape)
        key = shape.unique_keys[0]
        convs = [s.convs[k] for k in key]
        limit = max(1, min(self.max_rows, self.max_params // len(key)))
        params: list[Any] = []
        nbytes = rows = 0
        j, n = i, len(dmls)
        while j < n and rows < limit:
            d = dmls[j]
            old = d.old_values
            if d.tp != DMLType.DELETE or d.shape is not shape or old is None or not _by_primary_key(shape, old):
                break
            if rows and nbytes + d.size > self.max_bytes:
                break
            params.extend(old[k] if c is None else c(old[k]) for k, c in zip(key, convs, strict=True))
            nbytes += d.size
            rows += 1
            j += 1
        names = [self.quote(shape.columns[k].name) for k in key]
        if len(key) == 1:
            where = f"{names[0]} IN (" + ",".join([self.ph] * rows) + ")"
        else:
            one = "(" + " AND ".join(f"{q}={self.ph}" for q in names) + ")"
            where = " OR ".join([one] * rows)
        out.append((s.delete + where, params))
        return j


def _by_primary_key(shape: TableShape, row: Row) -> bool:
    """The row is found by the table's primary key (it has one, and :func:`where_key` picks it)."""
    if shape.info.primary_key is None or not shape.unique_keys:
        return False
    return where_key(shape, row) == shape.unique_keys[0]


def _wall_clock(tz: dt.tzinfo, value: dt.datetime) -> dt.datetime:
    """A TIMESTAMP value (aware, or naive = UTC) as the naive wall clock of the session time zone ``tz``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value.astimezone(tz).replace(tzinfo=None)


def _new(dml: DML) -> Row:
    if dml.values is None:
        raise ValueError(f"{dml.tp.name.lower()} of {dml.shape.db}.{dml.shape.table} has no new values")
    return dml.values
