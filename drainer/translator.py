"""Binlog -> row events (docs/formats.md#prewritevalue-and-tablemutation, docs/formats.md#row-format), pure: no I/O.

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

The prewrite value is read in place (:mod:`common.pb.wire`): a row is copied out of the binlog's
bytes only to be decoded, and :func:`translate_iter` decodes rows as they are taken, so a
transaction of a million rows costs its bytes plus the rows in hand, not a million decoded rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from common.codec import Datum, Kind, decode_deleted_row, decode_inserted_row, decode_updated_row, unflatten
from common.codec.row import Row as DatumRow
from common.errors import BinlogError, CodecError
from common.events import DML, DMLType, Row, TableShape
from common.pb import binlog_pb2
from common.pb.wire import MutationView, read_prewrite_value
from common.schema.defaults import default_value
from common.schema.model import ColumnInfo
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
    prewrite_value: bytes | memoryview | None = None,
) -> tuple[int, list[DML]]:
    """The schema version and row events of a DML commit binlog (``(0, [])`` for any other binlog).

    Applies history jobs up to the binlog's schema version first.  Rows of a table for which
    `skip_table` says so are not decoded at all (a filtered table costs no decoding).  Raises
    :class:`~drainer.schema.UnknownTableError` for a table the schema does not know at that version
    and :class:`TranslateError` for rows that do not decode.  `prewrite_value`: the binlog's
    prewrite value when `b` was parsed without it (:func:`common.pb.wire.split_binlog`).
    """
    version, dmls = translate_iter(b, schema, node_id=node_id, skip_table=skip_table, prewrite_value=prewrite_value)
    return version, list(dmls)


def translate_iter(
    b: binlog_pb2.Binlog,
    schema: DrainerSchema,
    *,
    node_id: str = "",
    skip_table: Callable[[TableShape], bool] | None = None,
    prewrite_value: bytes | memoryview | None = None,
) -> tuple[int, Iterator[DML]]:
    """As :func:`translate`, but the row events come one at a time, decoded as they are taken, so a
    transaction of millions of rows is never decoded all at once.

    Everything that does not depend on row contents is checked before this returns: the prewrite
    value's framing, every table at the binlog's version (unknown tables raise here), and each
    mutation's row counts against its sequence.  Only a row that does not decode raises later,
    from the iterator.
    """
    data = b.prewrite_value if prewrite_value is None else prewrite_value
    if b.tp != binlog_pb2.Commit or b.ddl_job_id or not data:
        return 0, iter(())
    try:
        pv = read_prewrite_value(data)
    except CodecError as exc:
        raise TranslateError(f"binlog commit_ts={b.commit_ts}{_from(node_id)}: bad prewrite value: {exc}") from None
    del data
    version = pv.schema_version
    schema.apply_upto(version)
    work: list[tuple[MutationView, TableShape]] = []
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
            _check_counts(m)
        except CodecError as exc:
            raise _decode_error(m, shape, _where(version, b.commit_ts, node_id), exc) from exc
        work.append((m, shape))
    return version, _dmls(work, b.commit_ts, _where(version, b.commit_ts, node_id))


def _decode_error(m: MutationView, shape: TableShape, where: str, exc: CodecError) -> TranslateError:
    return TranslateError(f"table id {m.table_id} ({shape.db}.{shape.table}) at {where}: {exc}")


def _dmls(work: list[tuple[MutationView, TableShape]], commit_ts: int, where: str) -> Iterator[DML]:
    while work:
        m, shape = work.pop(0)  # a mutation's rows are released once it is done
        try:
            yield from _mutation(m, _Decoder(shape), commit_ts)
        except CodecError as exc:
            raise _decode_error(m, shape, where, exc) from exc


def _where(version: int, commit_ts: int, node_id: str) -> str:
    return f"schema version {version}, commit_ts={commit_ts}{_from(node_id)}"


def _from(node_id: str) -> str:
    return f" from pump {node_id}" if node_id else ""


def _check_counts(m: MutationView) -> None:
    seq = m.sequence
    counts = (seq.count(_INSERT), seq.count(_UPDATE), seq.count(_DELETE))
    held = (len(m.inserted) // 2, len(m.updated) // 2, len(m.deleted) // 2)
    if counts != held or m.other_deletes:
        bad = next((k for k in seq if k not in (_INSERT, _UPDATE, _DELETE)), None)
        if bad is not None:
            raise CodecError(f"unsupported mutation type {bad} (obsolete DeleteID/DeletePK)")
        raise CodecError(
            f"sequence names {counts[0]}/{counts[1]}/{counts[2]} inserted/updated/deleted rows, the mutation holds "
            f"{held[0]}/{held[1]}/{held[2]}"
        )


def _mutation(m: MutationView, dec: _Decoder, commit_ts: int) -> Iterator[DML]:
    shape = dec.shape
    ins = upd = dele = 0
    row = m.row
    for kind in m.sequence:
        if kind == _INSERT:
            data = row(m.inserted, ins)
            ins += 1
            handle, r = decode_inserted_row(data)
            yield DML(DMLType.INSERT, shape, values=dec.values(r, handle[0]), commit_ts=commit_ts, size=len(data))
        elif kind == _UPDATE:
            data = row(m.updated, upd)
            upd += 1
            old, new = decode_updated_row(data)
            yield DML(
                DMLType.UPDATE,
                shape,
                values=dec.values(new),
                old_values=dec.values(old),
                commit_ts=commit_ts,
                size=len(data),
            )
        else:  # _check_counts let only the three kinds through
            data = row(m.deleted, dele)
            dele += 1
            yield DML(
                DMLType.DELETE,
                shape,
                old_values=dec.values(decode_deleted_row(data)),
                commit_ts=commit_ts,
                size=len(data),
            )


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
