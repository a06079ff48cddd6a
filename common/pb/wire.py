"""Zero-copy readers of a pulled binlog (pure): the bytes of a 64 MiB transaction are held once.

Parsing a ``PullBinlogResp`` with protobuf copies its payload three times before any row is
decoded: the response message, ``entity.payload`` (a new ``bytes`` on every access), the parsed
``Binlog``, ``Binlog.prewrite_value`` (again a new ``bytes``) and the parsed ``PrewriteValue``.
These readers walk the protobuf wire format over a ``memoryview`` of the one received buffer
instead; only the small fields of a ``Binlog`` go through protobuf.

Wire format (protobuf; a tag is ``field_number << 3 | wire_type``, wire types 0 = varint,
1 = 64-bit, 2 = length-delimited ``uvarint(len) ‖ bytes``, 5 = 32-bit; int64 varints are two's
complement)::

    PullBinlogResp  entity(1) LEN
    Entity          pos(1) LEN, payload(2) LEN, checksum(3) LEN, meta(4) LEN
    Meta            startTs(1) VARINT, commitTs(2) VARINT
    Binlog          tp(1), start_ts(2), commit_ts(3) VARINT, prewrite_key(4) LEN,
                    prewrite_value(5) LEN (a marshaled PrewriteValue), ddl_query(6) LEN,
                    ddl_job_id(7), ddl_schema_state(8) VARINT
    PrewriteValue   schema_version(1) VARINT, mutations(2) LEN (TableMutation)
    TableMutation   table_id(1) VARINT, inserted_rows(2) LEN, updated_rows(3) LEN,
                    deleted_ids(4) VARINT, deleted_pks(5) LEN, deleted_rows(6) LEN,
                    sequence(7) VARINT, or packed: one LEN of varints

As protobuf does, unknown fields are skipped, a repeated field may be packed or not, and for a
singular field the last occurrence wins.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from common.errors import CodecError
from common.pb import binlog_pb2

__all__ = ["MutationView", "PrewriteView", "pull_entity", "read_prewrite_value", "split_binlog"]

Buffer = bytes | memoryview

_U64 = 1 << 64
_I64_MAX = (1 << 63) - 1
_PREWRITE_VALUE = 5


def _uvarint(buf: memoryview, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise CodecError("truncated varint", offset=pos)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise CodecError("varint longer than 10 bytes", offset=pos)


def _int64(u: int) -> int:
    u &= _U64 - 1
    return u - _U64 if u > _I64_MAX else u


def _fields(buf: memoryview, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(field number, wire type, value or start, end, tag offset)`` of each field in ``buf[pos:end]``;
    for a varint the value, for a length-delimited field ``start:end`` of its bytes."""
    while pos < end:
        at = pos
        if buf[pos] < 0x80:
            tag = buf[pos]
            pos += 1
        else:
            tag, pos = _uvarint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise CodecError("field number 0", offset=at)
        if wire == 0:
            if pos < end and buf[pos] < 0x80:
                value = buf[pos]
                pos += 1
            else:
                value, pos = _uvarint(buf, pos, end)
            yield number, wire, value, pos, at
        elif wire == 2:
            n, pos = _uvarint(buf, pos, end)
            if n > end - pos:
                raise CodecError(f"field {number}: {n} bytes, only {end - pos} left", offset=at)
            yield number, wire, pos, pos + n, at
            pos += n
        elif wire in {1, 5}:
            size = 8 if wire == 1 else 4
            if size > end - pos:
                raise CodecError(f"field {number}: truncated fixed{size * 8}", offset=at)
            yield number, wire, pos, pos + size, at
            pos += size
        else:
            raise CodecError(f"field {number}: unsupported wire type {wire}", offset=at)


def _view(data: Buffer) -> memoryview:
    view = data if isinstance(data, memoryview) else memoryview(data)
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


# ------------------------------------------------------------------------------------ pull response


def pull_entity(raw: Buffer) -> tuple[memoryview, int]:
    """``(payload, meta commit_ts)`` of a serialized ``PullBinlogResp``; the payload is a view of ``raw``."""
    buf = _view(raw)
    entity = (0, 0)
    for number, wire, start, end, _ in _fields(buf, 0, len(buf)):
        if number == 1 and wire == 2:
            entity = (start, end)
    payload = buf[0:0]
    commit_ts = 0
    for number, wire, start, end, _ in _fields(buf, *entity):
        if number == 2 and wire == 2:
            payload = buf[start:end]
        elif number == 4 and wire == 2:
            for n, w, value, _end, _ in _fields(buf, start, end):
                if n == 2 and w == 0:
                    commit_ts = _int64(value)
    return payload, commit_ts


# ------------------------------------------------------------------------------------------- binlog


def split_binlog(payload: Buffer) -> tuple[binlog_pb2.Binlog, memoryview | None]:
    """The ``Binlog`` in ``payload`` parsed without its ``prewrite_value``, and that value as a view of
    ``payload`` (None when the binlog has none).  Raises ``DecodeError`` for bytes that are no Binlog."""
    buf = _view(payload)
    try:
        spans = [(number, wire, start, end, at) for number, wire, start, end, at in _fields(buf, 0, len(buf))]
    except CodecError as exc:
        raise DecodeError(f"not a binlog: {exc}") from None
    value: memoryview | None = None
    rest: list[bytes] = []
    keep_from = 0
    for number, wire, start, end, at in spans:
        if number == _PREWRITE_VALUE and wire == 2:
            rest.append(bytes(buf[keep_from:at]))
            keep_from = end
            value = buf[start:end]
    if value is None:
        return binlog_pb2.Binlog.FromString(buf.tobytes()), None
    rest.append(bytes(buf[keep_from:]))
    return binlog_pb2.Binlog.FromString(b"".join(rest)), value


# ------------------------------------------------------------------------------------ prewrite value


@dataclass(slots=True)
class MutationView:
    """One ``TableMutation``: the table id, its rows as ``(start, end)`` offsets into ``buf``, its sequence."""

    buf: memoryview
    table_id: int = 0
    inserted: array[int] = field(default_factory=lambda: array("q"))
    updated: array[int] = field(default_factory=lambda: array("q"))
    deleted: array[int] = field(default_factory=lambda: array("q"))
    other_deletes: int = 0
    """Obsolete ``deleted_ids`` and ``deleted_pks`` entries (counted, never decoded)."""
    sequence: bytearray = field(default_factory=bytearray)

    def row(self, rows: array[int], i: int) -> bytes:
        """Row ``i`` of ``rows`` (``inserted``, ``updated`` or ``deleted``): a copy of just that row."""
        return bytes(self.buf[rows[2 * i] : rows[2 * i + 1]])


@dataclass(slots=True)
class PrewriteView:
    schema_version: int
    mutations: list[MutationView]


def read_prewrite_value(data: Buffer) -> PrewriteView:
    """A ``PrewriteValue``'s schema version and mutations; rows stay in ``data`` (read by offset).

    Raises ``CodecError`` for bytes that are not a PrewriteValue."""
    buf = _view(data)
    version = 0
    mutations: list[MutationView] = []
    for number, wire, start, end, at in _fields(buf, 0, len(buf)):
        if number == 1:
            _expect(wire, 0, "PrewriteValue.schema_version", at)
            version = _int64(start)
        elif number == 2:
            _expect(wire, 2, "PrewriteValue.mutations", at)
            mutations.append(_mutation(buf, start, end))
    return PrewriteView(version, mutations)


def _expect(wire: int, want: int, what: str, at: int) -> None:
    if wire != want:
        raise CodecError(f"{what}: wire type {wire}, expected {want}", offset=at)


def _mutation(buf: memoryview, pos: int, end: int) -> MutationView:
    m = MutationView(buf)
    rows = {2: m.inserted, 3: m.updated, 6: m.deleted}
    for number, wire, start, stop, at in _fields(buf, pos, end):
        if number == 1:
            _expect(wire, 0, "TableMutation.table_id", at)
            m.table_id = _int64(start)
        elif number in rows:
            _expect(wire, 2, "TableMutation rows", at)
            rows[number].extend((start, stop))
        elif number == 7:
            if wire == 0:
                _sequence_item(m.sequence, start, at)
            else:
                _expect(wire, 2, "TableMutation.sequence", at)
                p = start
                while p < stop:
                    kind, p = _uvarint(buf, p, stop)
                    _sequence_item(m.sequence, kind, at)
        elif (number == 4 and wire == 0) or (number == 5 and wire == 2):
            m.other_deletes += 1
        elif number == 4 and wire == 2:  # packed deleted_ids
            p = start
            while p < stop:
                _, p = _uvarint(buf, p, stop)
                m.other_deletes += 1
    return m


def _sequence_item(seq: bytearray, kind: int, at: int) -> None:
    if kind > 0xFF:
        raise CodecError(f"unsupported mutation type {_int64(kind)}", offset=at)
    seq.append(kind)
