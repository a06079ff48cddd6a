"""Byte-identical gogo (gofast) marshalling of the tipb binlog messages.

The original Go code marshals `binlog.Binlog`, `binlog.PrewriteValue`, `binlog.TableMutation`
(binlog.proto, proto2) and the pump.proto `PullBinlogResp`/`Entity` (proto3) with gogo's generated
`MarshalTo`.  Python protobuf produces wire-compatible but not byte-identical output, so this module
writes the bytes directly.  Parsing needs nothing special: use the generated classes
(`binlog_pb2.Binlog.FromString`), which accept everything written here and the packed form too.

Byte rules (docs/formats.md#gogo-encoding):

* Every tag here is one byte, ``(field_number << 3) | wire_type``: varint = 0, length-delimited = 2.
  A length-delimited field is ``tag ‖ uvarint(len) ‖ bytes``.
* Fields are written in ascending field-number order; unknown fields of a parsed message
  (gogo's ``XXX_unrecognized``) are re-emitted verbatim at the end.
* ``nullable=false`` scalars are ALWAYS written, even when 0:
    Binlog         tp(1) 08, start_ts(2) 10, commit_ts(3) 18, ddl_job_id(7) 38, ddl_schema_state(8) 40
    TableMutation  table_id(1) 08
    PrewriteValue  schema_version(1) 08
  so a zero Binlog is ``08 00 10 00 18 00 38 00 40 00``.
* Nullable bytes — Binlog prewrite_key(4) 22, prewrite_value(5) 2a, ddl_query(6) 32 — are written iff
  set (Go: non-nil slice; Python: ``HasField``); an empty set value is ``tag 00``.
* Repeated scalars — TableMutation deleted_ids(4) 20, sequence(7) 38 — are NOT packed: one tag per
  element, e.g. sequence [0,1,4] = ``38 00 38 01 38 04``.  Repeated bytes: inserted_rows(2) 12,
  updated_rows(3) 1a, deleted_pks(5) 2a, deleted_rows(6) 32; PrewriteValue.mutations(2) 12 holds
  marshaled TableMutations.
* int64/int32/enum varints are two's complement: a negative value (int32 sign-extended) is a 10-byte
  varint, e.g. ddl_schema_state=-1 -> ``40 ff ff ff ff ff ff ff ff ff 01``.
* pump.proto (proto3): PullBinlogResp{entity(1) 0a} and Entity{pos(1) 0a, meta(4) 22} are
  ``nullable=false`` sub-messages, always written even when empty (``0a 00``); proto3 scalars and bytes
  (Entity.payload(2) 12, checksum(3) 1a, Pos.suffix 08 / offset 10, Meta.startTs 08 / commitTs 10)
  are written only when non-zero / non-empty.  Entity{payload "p", meta{1,2}} =
  ``0a 00 12 01 70 22 04 08 01 10 02``.
"""

from __future__ import annotations

from google.protobuf import unknown_fields
from google.protobuf.message import Message

from common.errors import CodecError
from common.pb import binlog_pb2, pump_pb2

__all__ = [
    "encode_binlog",
    "fake_binlog",
    "marshal_binlog",
    "marshal_entity",
    "marshal_entity_message",
    "marshal_prewrite_value",
    "marshal_pull_resp",
    "marshal_pull_resp_message",
    "marshal_table_mutation",
    "uvarint",
    "varint",
]

_U64 = 1 << 64
_VARINT = 0
_LEN = 2

# The single-byte varints 0..127.
_SMALL: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(0x80))


def _tag(field_number: int, wire_type: int) -> bytes:
    return _SMALL[(field_number << 3) | wire_type]


# Tag byte table: _TAGS[field_number][wire_type] for the field numbers used here (all < 16).
_TAGS: tuple[tuple[bytes, ...], ...] = tuple(tuple(_tag(f, wt) for wt in range(6)) for f in range(16))

# Varint fields: tag + one-byte value precomputed for values 0..127 (tp, sequence, small ids, zeros).
_V1 = tuple(_TAGS[1][_VARINT] + v for v in _SMALL)  # 08 xx
_V2 = tuple(_TAGS[2][_VARINT] + v for v in _SMALL)  # 10 xx
_V3 = tuple(_TAGS[3][_VARINT] + v for v in _SMALL)  # 18 xx
_V4 = tuple(_TAGS[4][_VARINT] + v for v in _SMALL)  # 20 xx
_V7 = tuple(_TAGS[7][_VARINT] + v for v in _SMALL)  # 38 xx
_V8 = tuple(_TAGS[8][_VARINT] + v for v in _SMALL)  # 40 xx
# Varint tags as ints, for `_tagged`.
_K1, _K2, _K3, _K4, _K7, _K8 = (f << 3 | _VARINT for f in (1, 2, 3, 4, 7, 8))
_L1 = _TAGS[1][_LEN]  # 0a
_L2 = _TAGS[2][_LEN]  # 12
_L3 = _TAGS[3][_LEN]  # 1a
_L4 = _TAGS[4][_LEN]  # 22
_L5 = _TAGS[5][_LEN]  # 2a
_L6 = _TAGS[6][_LEN]  # 32

# Encoded varints of `v >> 21` (the high part of a TSO changes every 8 ms): a TSO then costs three
# computed low bytes plus one dict lookup instead of a nine-step loop.
_HIGH_CACHE: dict[int, bytes] = {}
_HIGH_CACHE_MAX = 4096


def _uvarint_loop(v: int) -> bytes:
    out: list[int] = []
    append = out.append
    while v >= 0x80:
        append((v & 0x7F) | 0x80)
        v >>= 7
    append(v)
    return bytes(out)


def _high(v: int) -> bytes:
    """Encoded varint of `v >> 21` for 0x200000 <= v < 2**64, cached."""
    high = v >> 21
    tail = _HIGH_CACHE.get(high)
    if tail is None:
        if v >= _U64:
            raise CodecError(f"varint value {v} does not fit in 64 bits")
        tail = _uvarint_loop(high)
        if len(_HIGH_CACHE) >= _HIGH_CACHE_MAX:
            _HIGH_CACHE.clear()
        _HIGH_CACHE[high] = tail
    return tail


def _tagged(tag: int, v: int) -> bytes:
    """One-byte `tag` followed by the varint of the signed value `v` (negatives: 10 bytes)."""
    if 0 <= v < 0x4000:
        return bytes((tag, v)) if v < 0x80 else bytes((tag, (v & 0x7F) | 0x80, v >> 7))
    if v < 0:
        if v < -(1 << 63):
            raise CodecError(f"varint value {v} does not fit in int64")
        v += _U64
    elif v < 0x200000:
        return bytes((tag, (v & 0x7F) | 0x80, ((v >> 7) & 0x7F) | 0x80, v >> 14))
    low = v & 0x1FFFFF
    return bytes((tag, (low & 0x7F) | 0x80, ((low >> 7) & 0x7F) | 0x80, (low >> 14) | 0x80)) + _high(v)


def uvarint(v: int) -> bytes:
    """Base-128 varint of an unsigned 64-bit value (protobuf uint64 / length encoding)."""
    if v < 0x80:
        if v < 0:
            raise CodecError(f"uvarint of negative value {v}")
        return _SMALL[v]
    if v < 0x4000:
        return bytes(((v & 0x7F) | 0x80, v >> 7))
    if v < 0x200000:
        return bytes(((v & 0x7F) | 0x80, ((v >> 7) & 0x7F) | 0x80, v >> 14))
    low = v & 0x1FFFFF
    return bytes(((low & 0x7F) | 0x80, ((low >> 7) & 0x7F) | 0x80, (low >> 14) | 0x80)) + _high(v)


def varint(v: int) -> bytes:
    """Varint of a signed int64/int32/enum value: negatives are 10-byte two's complement."""
    if v < 0:
        if v < -(1 << 63):
            raise CodecError(f"varint value {v} does not fit in int64")
        v += _U64
    return uvarint(v)


def _len_field(tag: bytes, data: bytes) -> bytes:
    n = len(data)
    return tag + (_SMALL[n] if n < 0x80 else uvarint(n)) + data


def _unknown(msg: Message) -> bytes:
    """The raw unknown fields of a parsed message ('' when none, the common case)."""
    if not len(unknown_fields.UnknownFieldSet(msg)):
        return b""
    # Serialising a copy with every known field cleared leaves exactly the unknown bytes, verbatim.
    rest = type(msg)()
    rest.CopyFrom(msg)
    for field in msg.DESCRIPTOR.fields:
        rest.ClearField(field.name)
    return rest.SerializeToString()


# ---------------------------------------------------------------------------------------------- Binlog


def encode_binlog(
    tp: int,
    start_ts: int,
    commit_ts: int = 0,
    *,
    prewrite_key: bytes | None = None,
    prewrite_value: bytes | None = None,
    ddl_query: bytes | None = None,
    ddl_job_id: int = 0,
    ddl_schema_state: int = 0,
    unknown: bytes = b"",
) -> bytes:
    """gogo bytes of a `binlog.Binlog` given by its field values (no message object needed).

    `None` means "not set" for the nullable bytes fields; `b""` is set-and-empty (`tag 00`).
    """
    parts = [
        _V1[tp] if 0 <= tp < 0x80 else _tagged(_K1, tp),
        _tagged(_K2, start_ts),
        _tagged(_K3, commit_ts),
    ]
    if prewrite_key is not None:
        parts.append(_len_field(_L4, prewrite_key))
    if prewrite_value is not None:
        parts.append(_len_field(_L5, prewrite_value))
    if ddl_query is not None:
        parts.append(_len_field(_L6, ddl_query))
    parts.append(_V7[ddl_job_id] if 0 <= ddl_job_id < 0x80 else _tagged(_K7, ddl_job_id))
    parts.append(_V8[ddl_schema_state] if 0 <= ddl_schema_state < 0x80 else _tagged(_K8, ddl_schema_state))
    if unknown:
        parts.append(unknown)
    return b"".join(parts)


def marshal_binlog(b: binlog_pb2.Binlog) -> bytes:
    """gogo bytes of a `binlog.Binlog` message, identical to Go's `Binlog.Marshal()`.

    A closed-enum value python could not store (`tp` outside BinlogType) sits among the unknown
    fields and is re-emitted after the known ones, so it still wins on the Go side (last value wins).
    """
    has = b.HasField
    return encode_binlog(
        b.tp,
        b.start_ts,
        b.commit_ts,
        prewrite_key=b.prewrite_key if has("prewrite_key") else None,
        prewrite_value=b.prewrite_value if has("prewrite_value") else None,
        ddl_query=b.ddl_query if has("ddl_query") else None,
        ddl_job_id=b.ddl_job_id,
        ddl_schema_state=b.ddl_schema_state,
        unknown=_unknown(b),
    )


def fake_binlog(ts: int) -> bytes:
    """The pump's fake binlog: `Binlog{tp: Rollback, start_ts: ts, commit_ts: ts}`."""
    return encode_binlog(binlog_pb2.Rollback, ts, ts)


# ------------------------------------------------------------------------------ TableMutation, PrewriteValue


def marshal_table_mutation(m: binlog_pb2.TableMutation) -> bytes:
    """gogo bytes of a `binlog.TableMutation` (table_id always written, repeated scalars unpacked)."""
    table_id = m.table_id
    parts = [_V1[table_id] if 0 <= table_id < 0x80 else _tagged(_K1, table_id)]
    append = parts.append
    for row in m.inserted_rows:
        append(_len_field(_L2, row))
    for row in m.updated_rows:
        append(_len_field(_L3, row))
    for i in m.deleted_ids:
        append(_V4[i] if 0 <= i < 0x80 else _tagged(_K4, i))
    for pk in m.deleted_pks:
        append(_len_field(_L5, pk))
    for row in m.deleted_rows:
        append(_len_field(_L6, row))
    for s in m.sequence:
        append(_V7[s] if 0 <= s < 0x80 else _tagged(_K7, s))
    unknown = _unknown(m)
    if unknown:
        append(unknown)
    return b"".join(parts)


def marshal_prewrite_value(pv: binlog_pb2.PrewriteValue) -> bytes:
    """gogo bytes of a `binlog.PrewriteValue` (schema_version always written)."""
    version = pv.schema_version
    parts = [_V1[version] if 0 <= version < 0x80 else _tagged(_K1, version)]
    for m in pv.mutations:
        parts.append(_len_field(_L2, marshal_table_mutation(m)))
    unknown = _unknown(pv)
    if unknown:
        parts.append(unknown)
    return b"".join(parts)


# ----------------------------------------------------------------------------- pump.proto Entity / PullBinlogResp


def _entity_parts(
    payload: bytes,
    start_ts: int,
    commit_ts: int,
    *,
    checksum: bytes,
    suffix: int,
    offset: int,
    unknown: tuple[bytes, bytes, bytes] = (b"", b"", b""),
) -> list[bytes]:
    """Pieces of a gogo Entity; `unknown` = raw unknown fields of (pos, meta, entity)."""
    pos = (_tagged(_K1, suffix) if suffix else b"") + (_tagged(_K2, offset) if offset else b"") + unknown[0]
    meta = (_tagged(_K1, start_ts) if start_ts else b"") + (_tagged(_K2, commit_ts) if commit_ts else b"") + unknown[1]
    parts = [_len_field(_L1, pos)]
    if payload:
        n = len(payload)
        parts.append(_L2 + (_SMALL[n] if n < 0x80 else uvarint(n)))
        parts.append(payload)  # kept apart: joined once, never copied twice
    if checksum:
        parts.append(_len_field(_L3, checksum))
    parts.append(_len_field(_L4, meta))
    if unknown[2]:
        parts.append(unknown[2])
    return parts


def marshal_entity(
    payload: bytes,
    start_ts: int = 0,
    commit_ts: int = 0,
    *,
    checksum: bytes = b"",
    suffix: int = 0,
    offset: int = 0,
) -> bytes:
    """gogo bytes of `binlog.Entity{pos{suffix, offset}, payload, checksum, meta{start_ts, commit_ts}}`."""
    return b"".join(_entity_parts(payload, start_ts, commit_ts, checksum=checksum, suffix=suffix, offset=offset))


def marshal_pull_resp(
    payload: bytes,
    start_ts: int = 0,
    commit_ts: int = 0,
    *,
    checksum: bytes = b"",
    suffix: int = 0,
    offset: int = 0,
) -> bytes:
    """gogo bytes of `binlog.PullBinlogResp{entity: Entity{...}}` (see `marshal_entity`)."""
    parts = _entity_parts(payload, start_ts, commit_ts, checksum=checksum, suffix=suffix, offset=offset)
    return b"".join([_L1, uvarint(sum(map(len, parts))), *parts])


def marshal_entity_message(e: pump_pb2.Entity) -> bytes:
    """gogo bytes of a `binlog.Entity` message (pos and meta always written, unknown fields kept)."""
    pos, meta = e.pos, e.meta
    parts = _entity_parts(
        e.payload,
        meta.startTs,
        meta.commitTs,
        checksum=e.checksum,
        suffix=pos.suffix,
        offset=pos.offset,
        unknown=(_unknown(pos), _unknown(meta), _unknown(e)),
    )
    return b"".join(parts)


def marshal_pull_resp_message(resp: pump_pb2.PullBinlogResp) -> bytes:
    """gogo bytes of a `binlog.PullBinlogResp` message (entity always written, unknown fields kept)."""
    return _len_field(_L1, marshal_entity_message(resp.entity)) + _unknown(resp)
