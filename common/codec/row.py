"""Binlog row bytes: TiDB's "old row format" (``tablecodec.EncodeOldRow``) and its binlog wrappers.

Old row::

    row      = (colID datum ‖ value datum)*        colID: int64 varint datum ``08 zigzag(id)``
    no cols  = 00                                  (a single NilFlag)

Binlog slots of a ``TableMutation``:

* ``inserted_rows[i]`` = handle datums ‖ row.  Int handle: one ``08 zigzag(handle)`` datum;
  clustered (common) handle: one value datum per primary-key column.
  ``08 02 | 08 04 02 06 61 62 63 | 08 06 06 0a 02 80 00 00 0c 22`` = handle 1, col 2 "abc",
  col 3 12.34 as DECIMAL(10,2).
* ``updated_rows[i]`` = old row ‖ new row, both halves with the same column ids in the same order
  (tables without an int/clustered PK add ``(-1, rowid)``, ``EXTRA_HANDLE_ID``):
  ``08 04 02 02 61 08 01 08 0e | 08 04 02 02 62 08 01 08 0e``.
* ``deleted_rows[i]`` = old row.

Decoding rules (strict, every error a :class:`CodecError` naming the absolute offset):
a row must be non-empty, column ids must be flag-8 datums and unique, every id must be
followed by a value.  The format carries no column count, so a row cut exactly between two
columns still decodes -- as the row of its leading columns.  An updated row must split into two
halves with the same id set, so a cut one never decodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from common.codec.datum import Datum, Kind, decode_one, encode_datum
from common.codec.number import decode_uvarint, encode_varint
from common.errors import CodecError

EXTRA_HANDLE_ID = -1
"""Column id of ``_tidb_rowid``, the hidden handle of tables without an int or clustered primary key."""

EMPTY_ROW = b"\x00"

Row = dict[int, Datum]

_ID_CACHE: dict[int, bytes] = {}


def _col_id_bytes(cid: int) -> bytes:
    b = _ID_CACHE.get(cid)
    if b is None:
        b = b"\x08" + encode_varint(cid)
        if len(_ID_CACHE) < 65536:
            _ID_CACHE[cid] = b
    return b


def encode_row(col_ids: Sequence[int], values: Sequence[Datum]) -> bytes:
    """``EncodeOldRow``: ``colID, value`` datum pairs; ``00`` for zero columns."""
    if len(col_ids) != len(values):
        raise CodecError(f"{len(col_ids)} column ids for {len(values)} values")
    if not col_ids:
        return EMPTY_ROW
    parts: list[bytes] = []
    for cid, d in zip(col_ids, values, strict=True):
        parts.append(_col_id_bytes(cid))
        parts.append(encode_datum(d))
    return b"".join(parts)


def _decode_pairs(data: bytes, pos: int) -> tuple[list[int], list[Datum], list[int]]:
    """Column ids, values and the offset of each id, from ``pos`` to the end."""
    cids: list[int] = []
    values: list[Datum] = []
    starts: list[int] = []
    end = len(data)
    while pos < end:
        if data[pos] != 8:
            raise CodecError(f"column id must be a varint datum (flag 8), found flag {data[pos]}", offset=pos)
        starts.append(pos)
        if pos + 1 < end and data[pos + 1] < 0x80:
            u = data[pos + 1]
            p = pos + 2
        else:
            u, p = decode_uvarint(data, pos + 1)
        cid = (u >> 1) if not u & 1 else -((u + 1) >> 1)
        if p >= end:
            raise CodecError(f"column {cid} has no value", offset=p)
        d, pos = decode_one(data, p)
        cids.append(cid)
        values.append(d)
    return cids, values, starts


def decode_row(data: bytes, pos: int = 0) -> Row:
    """Decode an old-format row (from ``pos``) into ``{column id: datum}``."""
    end = len(data)
    if pos >= end:
        raise CodecError("empty row", offset=pos)
    if pos + 1 == end and data[pos] == 0:
        return {}
    cids, values, starts = _decode_pairs(data, pos)
    row = dict(zip(cids, values, strict=True))
    if len(row) != len(cids):
        _raise_duplicate(cids, starts)
    return row


def _raise_duplicate(cids: list[int], starts: list[int]) -> None:
    seen: set[int] = set()
    for cid, start in zip(cids, starts, strict=True):
        if cid in seen:
            raise CodecError(f"duplicate column id {cid}", offset=start)
        seen.add(cid)


def encode_inserted_row(handle: int | Sequence[Datum], col_ids: Sequence[int], values: Sequence[Datum]) -> bytes:
    """``inserted_rows`` entry: an int handle, or the datums of a clustered handle, then the row."""
    if isinstance(handle, int):
        prefix = b"\x08" + encode_varint(handle)
    else:
        if not handle:
            raise CodecError("a common handle needs at least one datum")
        prefix = b"".join([encode_datum(d) for d in handle])
    return prefix + encode_row(col_ids, values)


def decode_inserted_row(data: bytes, handle_datums: int = 1) -> tuple[tuple[Datum, ...], Row]:
    """Split an ``inserted_rows`` entry into its handle datums and row.

    ``handle_datums`` is 1 for an int handle (an INT datum), else the number of primary-key
    columns of the clustered index.
    """
    if handle_datums < 1:
        raise CodecError(f"handle_datums must be >= 1, got {handle_datums}")
    pos = 0
    handle: list[Datum] = []
    for _ in range(handle_datums):
        d, pos = decode_one(data, pos)
        handle.append(d)
    return tuple(handle), decode_row(data, pos)


def decode_int_handle(handle: Sequence[Datum], unsigned: bool = False) -> int:
    """The int handle of a PK-is-handle row (an unsigned PK comes back from its int64 bit pattern)."""
    if len(handle) != 1 or handle[0].kind not in (Kind.INT, Kind.UINT):
        raise CodecError(f"not an int handle: {handle!r}")
    v: int = handle[0].value
    return v & 0xFFFF_FFFF_FFFF_FFFF if unsigned else v


def encode_updated_row(col_ids: Sequence[int], old: Sequence[Datum], new: Sequence[Datum]) -> bytes:
    """``updated_rows`` entry: old row ‖ new row with the same column ids."""
    return encode_row(col_ids, old) + encode_row(col_ids, new)


def decode_updated_row(data: bytes) -> tuple[Row, Row]:
    """Split an ``updated_rows`` entry into ``(old, new)``."""
    if data == b"\x00\x00":
        return {}, {}
    if not data:
        raise CodecError("empty updated row", offset=0)
    cids, values, starts = _decode_pairs(data, 0)
    n = len(cids)
    half = n // 2
    if n & 1:
        raise CodecError(f"updated row has an odd number of columns ({n})", offset=starts[half])
    old = dict(zip(cids[:half], values[:half], strict=True))
    new = dict(zip(cids[half:], values[half:], strict=True))
    if len(old) != half:
        _raise_duplicate(cids[:half], starts[:half])
    if len(new) != half:
        _raise_duplicate(cids[half:], starts[half:])
    if old.keys() != new.keys():
        raise CodecError("old and new halves of an updated row have different column ids", offset=starts[half])
    return old, new


def encode_deleted_row(col_ids: Sequence[int], values: Sequence[Datum]) -> bytes:
    """``deleted_rows`` entry: the old row."""
    return encode_row(col_ids, values)


def decode_deleted_row(data: bytes) -> Row:
    """Decode a ``deleted_rows`` entry."""
    return decode_row(data)
