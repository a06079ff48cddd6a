"""Binlog -> row events (reference §3.4 "DML", wire-formats §1 and §7.2), pure: no I/O.

A Commit binlog carries a marshaled ``PrewriteValue``: the transaction's schema version and one
``TableMutation`` per table, whose ``sequence`` orders its rows::

    sequence[k] = Insert     next inserted_rows: handle datum ‖ row   -> DML INSERT values
                  Update     next updated_rows:  old row ‖ new row    -> DML UPDATE old_values, values
                  DeleteRow  next deleted_rows:  old row              -> DML DELETE old_values

Rows are ``{column id: datum}``; each is read with the table valid at the binlog's schema version
(:meth:`DrainerSchema.shape`) and becomes a tuple aligned with the shape's columns:

* a column in the row: :func:`common.codec.unflatten` of its datum;
* the integer primary key of a PK-is-handle table, left out of inserted rows: the handle datum
  (an int64; an UNSIGNED column gets its bit pattern back as an unsigned value);
* any other column missing from the row: its default, else NULL.  Inserted rows leave out NULL
  values of columns without a default, and a row written before a column was added lacks it;
* column ids not in the table (the hidden handle -1, a column dropped later) are ignored.

Mutations on the old id of a truncated table are dropped (the original ``rewriteForOldVersion``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from common.codec import Datum, Kind, decode_deleted_row, decode_inserted_row, decode_updated_row, unflatten
from common.codec.row import Row as DatumRow
from common.errors import BinlogError, CodecError
from common.pb import binlog_pb2
from common.schema.defaults import default_value
from common.schema.model import ColumnInfo
from drainer.events import DML, DMLType, Row, TableShape
from drainer.schema import DrainerSchema

log = logging.getLogger(__name__)

_INSERT = binlog_pb2.Insert
_UPDATE = binlog_pb2.Update
_DELETE = binlog_pb2.DeleteRow


class TranslateError(BinlogError):
    """A binlog whose rows do not decode with the table they name."""


def is_fake(b: binlog_pb2.Binlog) -> bool:
    """A pump's fake binlog (``tp=Rollback, start_ts=commit_ts``): it only moves time forward."""
    return b.tp == binlog_pb2.Rollback and b.start_ts == b.commit_ts > 0 and not b.ddl_job_id


def translate(
    b: binlog_pb2.Binlog,
    schema: DrainerSchema,
    *,
    node_id: str = "",
    skip_table: Callable[[TableShape], bool] | None = None,
) -> tuple[int, list[DML]]:
    """The schema version and row events of a DML commit binlog (``(0, [])`` for any other binlog).

    Applies history jobs up to the binlog's schema version first.  Rows of a table for which
    `skip_table` says so are not decoded at all (a filtered table costs no decoding).  Raises
    :class:`~drainer.schema.UnknownTableError` for a table the schema does not know at that version
    and :class:`TranslateError` for rows that do not decode.
    """
    if b.tp != binlog_pb2.Commit or b.ddl_job_id or not b.prewrite_value:
        return 0, []
    try:
        pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
    except DecodeError as exc:
        raise TranslateError(f"binlog commit_ts={b.commit_ts}{_from(node_id)}: bad prewrite value: {exc}") from None
    version = pv.schema_version
    schema.apply_upto(version)
    dmls: list[DML] = []
    for m in pv.mutations:
        if schema.was_truncated(m.table_id, version):
            log.info(
                "commit_ts=%s table_id=%s truncated at or before schema version %s: %s row(s) dropped",
                b.commit_ts,
                m.table_id,
                version,
                len(m.sequence),
            )
            continue
        shape = schema.shape(m.table_id, version, commit_ts=b.commit_ts, node_id=node_id)
        if skip_table is not None and skip_table(shape):
            continue
        try:
            _mutation(m, _Decoder(shape), b.commit_ts, dmls)
        except CodecError as exc:
            raise TranslateError(
                f"table id {m.table_id} ({shape.db}.{shape.table}) at schema version {version}, "
                f"commit_ts={b.commit_ts}{_from(node_id)}: {exc}"
            ) from exc
    return version, dmls


def _from(node_id: str) -> str:
    return f" from pump {node_id}" if node_id else ""


def _mutation(m: binlog_pb2.TableMutation, dec: _Decoder, commit_ts: int, out: list[DML]) -> None:
    shape = dec.shape
    ins = upd = dele = 0
    for kind in m.sequence:
        if kind == _INSERT:
            data = _nth(m.inserted_rows, ins, "inserted")
            ins += 1
            handle, row = decode_inserted_row(data)
            out.append(
                DML(DMLType.INSERT, shape, values=dec.values(row, handle[0]), commit_ts=commit_ts, size=len(data))
            )
        elif kind == _UPDATE:
            data = _nth(m.updated_rows, upd, "updated")
            upd += 1
            old, new = decode_updated_row(data)
            out.append(
                DML(
                    DMLType.UPDATE,
                    shape,
                    values=dec.values(new),
                    old_values=dec.values(old),
                    commit_ts=commit_ts,
                    size=len(data),
                )
            )
        elif kind == _DELETE:
            data = _nth(m.deleted_rows, dele, "deleted")
            dele += 1
            out.append(
                DML(
                    DMLType.DELETE,
                    shape,
                    old_values=dec.values(decode_deleted_row(data)),
                    commit_ts=commit_ts,
                    size=len(data),
                )
            )
        else:
            raise CodecError(f"unsupported mutation type {kind} (obsolete DeleteID/DeletePK)")
    if (ins, upd, dele) != (len(m.inserted_rows), len(m.updated_rows), len(m.deleted_rows)):
        raise CodecError(
            f"sequence names {ins}/{upd}/{dele} inserted/updated/deleted rows, the mutation holds "
            f"{len(m.inserted_rows)}/{len(m.updated_rows)}/{len(m.deleted_rows)}"
        )


def _nth(rows: Any, i: int, what: str) -> bytes:
    if i >= len(rows):
        raise CodecError(f"sequence names more {what} rows than the mutation holds ({len(rows)})")
    data: bytes = rows[i]
    return data


class _Decoder:
    """Row dicts -> value tuples aligned with one shape's columns."""

    __slots__ = ("handle_col", "plan", "shape")

    def __init__(self, shape: TableShape) -> None:
        self.shape = shape
        self.handle_col = shape.info.handle_column
        self.plan = [(c.id, c.ctype, c) for c in shape.columns]

    def values(self, row: DatumRow, handle: Datum | None = None) -> Row:
        out: list[Any] = []
        get = row.get
        for cid, ctype, c in self.plan:
            d = get(cid)
            if d is not None:
                out.append(unflatten(d, ctype))
            elif c is self.handle_col and handle is not None:
                out.append(self._handle_value(c, handle))
            else:
                out.append(_missing(c))
        return tuple(out)

    @staticmethod
    def _handle_value(c: ColumnInfo, handle: Datum) -> Any:
        if handle.kind not in (Kind.INT, Kind.UINT):
            raise CodecError(f"the handle of column {c.name} is a {Kind(handle.kind).name} datum, not an int")
        return unflatten(handle, c.ctype)


def _missing(c: ColumnInfo) -> Any:
    if c.default is None:
        return None
    try:
        return default_value(c)
    except BinlogError as exc:
        raise CodecError(f"column {c.name} is missing from the row and its default does not parse: {exc}") from None
