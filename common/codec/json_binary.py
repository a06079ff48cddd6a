"""TiDB binary JSON (``types/json.BinaryJSON``, MySQL's JSON binary layout, little-endian).

A value is ``typeCode u8 ‖ payload``; in a row datum it follows jsonFlag: ``0a ‖ typeCode ‖ payload``.

=========  ===================  ==============================================================
code       type                 payload
=========  ===================  ==============================================================
0x01       object               container (below), keys sorted byte-wise (UTF-8 bytes)
0x03       array                container (below), no key entries
0x04       literal              1 byte: 00 null, 01 true, 02 false
0x09       int64                8 B little-endian
0x0a       uint64               8 B little-endian
0x0b       float64              8 B little-endian IEEE-754
0x0c       string               uvarint length (plain LEB128, not zigzag) ‖ UTF-8 bytes
0x0d       opaque               mysql type u8 ‖ uvarint length ‖ bytes
0x0e-0x10  date/datetime/ts     8 B (newer TiDB only; kept as raw bytes, see :class:`JsonTemporal`)
0x11       duration             12 B (newer TiDB only; raw bytes)
=========  ===================  ==============================================================

Container (object or array)::

    count u32 ‖ totalSize u32                       totalSize counts from the count field
    object only: count × (keyOffset u32, keyLen u16)
    count × (typeCode u8, offset-or-inline u32)     literal: 1 byte inline + 3 zero bytes
    key bytes …  then element values …              offsets from the container's first byte

``{"a":1}`` -> ``01 | 01000000 1c000000 | 13000000 0100 | 09 14000000 | 61 | 0100000000000000``.

Python model: ``None``/``True``/``False``, ``int`` (int64, or uint64 when >= 2**63; on decode a
uint64 of any size becomes a plain ``int``, so a small uint64 re-encodes as int64), ``float``,
``str``, ``list``, ``dict[str, …]``, :class:`JsonOpaque` and :class:`JsonTemporal`.
Decoding checks every offset lies inside its container and after its entry tables, so corrupt
input can neither read out of bounds nor recurse forever.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias

from common.codec.number import decode_uvarint, encode_uvarint
from common.errors import CodecError

TYPE_OBJECT = 0x01
TYPE_ARRAY = 0x03
TYPE_LITERAL = 0x04
TYPE_INT64 = 0x09
TYPE_UINT64 = 0x0A
TYPE_FLOAT64 = 0x0B
TYPE_STRING = 0x0C
TYPE_OPAQUE = 0x0D
TYPE_DATE = 0x0E
TYPE_DATETIME = 0x0F
TYPE_TIMESTAMP = 0x10
TYPE_DURATION = 0x11

LITERAL_NULL = 0x00
LITERAL_TRUE = 0x01
LITERAL_FALSE = 0x02

MAX_DEPTH = 100
"""Deepest container nesting accepted on encode and decode (MySQL's limit)."""

_HEADER = 8
_KEY_ENTRY = 6
_VALUE_ENTRY = 5
_TEMPORAL_SIZE = {TYPE_DATE: 8, TYPE_DATETIME: 8, TYPE_TIMESTAMP: 8, TYPE_DURATION: 12}

_U32x2 = struct.Struct("<II")
_I64 = struct.Struct("<q")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct("<d")
_SMALL_LEN = tuple(bytes((i,)) for i in range(0x80))
_LITERALS: dict[int, tuple[JsonValue]] = {LITERAL_NULL: (None,), LITERAL_TRUE: (True,), LITERAL_FALSE: (False,)}
_NUMBER_STRUCTS = {TYPE_INT64: _I64, TYPE_UINT64: _U64, TYPE_FLOAT64: _F64}


@dataclass(frozen=True, slots=True)
class JsonOpaque:
    """An opaque JSON scalar: a MySQL column type byte and raw bytes."""

    mysql_type: int
    data: bytes


@dataclass(frozen=True, slots=True)
class JsonTemporal:
    """A date/datetime/timestamp/duration JSON scalar of newer TiDB, kept as its raw payload."""

    type_code: int
    raw: bytes


JsonValue: TypeAlias = (
    "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | JsonOpaque | JsonTemporal | None"
)


# --------------------------------------------------------------------------- encode


def encode_json(value: JsonValue) -> tuple[int, bytes]:
    """Binary JSON of a Python value as ``(typeCode, payload)``."""
    return _encode(value, 0)


def _encode(value: JsonValue, depth: int) -> tuple[int, bytes]:
    if isinstance(value, str):
        raw = value.encode("utf-8")
        n = len(raw)
        return TYPE_STRING, (_SMALL_LEN[n] if n < 0x80 else encode_uvarint(n)) + raw
    if value is None:
        return TYPE_LITERAL, b"\x00"
    if value is True:
        return TYPE_LITERAL, b"\x01"
    if value is False:
        return TYPE_LITERAL, b"\x02"
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return TYPE_INT64, _I64.pack(value)
        if 0 <= value < (1 << 64):
            return TYPE_UINT64, _U64.pack(value)
        raise CodecError(f"JSON integer out of 64-bit range: {value}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CodecError(f"JSON cannot hold {value}")
        return TYPE_FLOAT64, _F64.pack(value)
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise CodecError(f"JSON nested deeper than {MAX_DEPTH}")
        try:
            # str order is code point order, which is the byte order of the UTF-8 encodings
            keys = sorted(value)
        except TypeError:
            raise CodecError("JSON object keys must be str") from None
        for k in keys:
            if not isinstance(k, str):
                raise CodecError(f"JSON object key must be str, not {type(k).__name__}")
        return TYPE_OBJECT, _encode_container(keys, [value[k] for k in keys], depth + 1)
    if isinstance(value, list):
        if depth >= MAX_DEPTH:
            raise CodecError(f"JSON nested deeper than {MAX_DEPTH}")
        return TYPE_ARRAY, _encode_container(None, value, depth + 1)
    if isinstance(value, JsonOpaque):
        return TYPE_OPAQUE, bytes((value.mysql_type,)) + encode_uvarint(len(value.data)) + value.data
    if isinstance(value, JsonTemporal):
        want = _TEMPORAL_SIZE.get(value.type_code)
        if want is None or len(value.raw) != want:
            raise CodecError(f"bad JSON temporal value {value!r}")
        return value.type_code, value.raw
    raise CodecError(f"unsupported JSON value type {type(value).__name__}")


def _encode_container(keys: list[str] | None, values: list[JsonValue], depth: int) -> bytes:
    count = len(values)
    is_object = keys is not None
    offset = _HEADER + _VALUE_ENTRY * count + (_KEY_ENTRY * count if is_object else 0)
    fields: list[int] = []
    key_bytes: list[bytes] = []
    if keys is not None:
        for k in keys:
            kb = k.encode("utf-8")
            n = len(kb)
            if n > 0xFFFF:
                raise CodecError("JSON object key longer than 65535 bytes")
            fields.append(offset)
            fields.append(n)
            offset += n
            key_bytes.append(kb)
    body: list[bytes] = []
    for v in values:
        code, payload = _encode(v, depth)
        fields.append(code)
        if code == TYPE_LITERAL:
            fields.append(payload[0])  # inlined: 1 byte + 3 zero bytes, the same as a little-endian u32
        else:
            fields.append(offset)
            offset += len(payload)
            body.append(payload)
    return b"".join([_container_struct(count, is_object).pack(count, offset, *fields), *key_bytes, *body])


# --------------------------------------------------------------------------- decode


def json_size(data: bytes, type_code: int, pos: int) -> int:
    """Bytes of the payload of a ``type_code`` value starting at ``pos`` (bounds checked)."""
    end = len(data)
    if type_code in (TYPE_OBJECT, TYPE_ARRAY):
        if pos + _HEADER > end:
            raise CodecError("truncated JSON container header", offset=pos)
        size: int = _U32x2.unpack_from(data, pos)[1]
        if size < _HEADER:
            raise CodecError(f"JSON container size {size} smaller than its header", offset=pos)
    elif type_code == TYPE_LITERAL:
        size = 1
    elif type_code in (TYPE_INT64, TYPE_UINT64, TYPE_FLOAT64):
        size = 8
    elif type_code == TYPE_STRING:
        n, after = decode_uvarint(data, pos)
        size = after - pos + n
    elif type_code == TYPE_OPAQUE:
        n, after = decode_uvarint(data, pos + 1)
        size = after - pos + n
    elif type_code in _TEMPORAL_SIZE:
        size = _TEMPORAL_SIZE[type_code]
    else:
        raise CodecError(f"unknown JSON type code 0x{type_code:02x}", offset=pos - 1)
    if pos + size > end:
        raise CodecError(f"truncated JSON value of type 0x{type_code:02x} ({size} bytes)", offset=pos)
    return size


def decode_json(data: bytes, type_code: int, pos: int, end: int | None = None) -> JsonValue:
    """Decode the payload of a ``type_code`` value at ``pos``; ``end`` bounds it (default: all data).

    Error offsets are absolute positions in ``data``.
    """
    if end is None:
        end = len(data)
    return _decode(data, type_code, pos, end, 0)


def _decode(data: bytes, code: int, pos: int, end: int, depth: int) -> JsonValue:
    if code == TYPE_STRING:
        n, start = decode_uvarint(data, pos)
        if start + n > end:
            raise CodecError("truncated JSON string", offset=pos)
        try:
            return data[start : start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise CodecError("JSON string is not valid UTF-8", offset=start) from None
    if code in _NUMBER_STRUCTS:
        if pos + 8 > end:
            raise CodecError("truncated JSON number", offset=pos)
        number: int | float = _NUMBER_STRUCTS[code].unpack_from(data, pos)[0]
        return number
    if code == TYPE_LITERAL:
        if pos >= end:
            raise CodecError("truncated JSON literal", offset=pos)
        return _literal(data[pos], pos)
    if code in (TYPE_OBJECT, TYPE_ARRAY):
        return _decode_container(data, code == TYPE_OBJECT, pos, end, depth + 1)
    if code == TYPE_OPAQUE:
        if pos >= end:
            raise CodecError("truncated JSON opaque", offset=pos)
        n, start = decode_uvarint(data, pos + 1)
        if start + n > end:
            raise CodecError("truncated JSON opaque", offset=pos)
        return JsonOpaque(data[pos], data[start : start + n])
    size = _TEMPORAL_SIZE.get(code)
    if size is None:
        raise CodecError(f"unknown JSON type code 0x{code:02x}", offset=pos - 1)
    if pos + size > end:
        raise CodecError("truncated JSON temporal", offset=pos)
    return JsonTemporal(code, data[pos : pos + size])


def _literal(b: int, pos: int) -> JsonValue:
    if b == LITERAL_NULL:
        return None
    if b == LITERAL_TRUE:
        return True
    if b == LITERAL_FALSE:
        return False
    raise CodecError(f"bad JSON literal 0x{b:02x}", offset=pos)


@lru_cache(maxsize=128)
def _entries_struct(count: int, is_object: bool) -> struct.Struct:
    return struct.Struct("<" + ("IH" * count if is_object else "") + "BI" * count)


@lru_cache(maxsize=128)
def _container_struct(count: int, is_object: bool) -> struct.Struct:
    return struct.Struct("<II" + ("IH" * count if is_object else "") + "BI" * count)


def _decode_container(data: bytes, is_object: bool, base: int, end: int, depth: int) -> JsonValue:
    if depth > MAX_DEPTH:
        raise CodecError(f"JSON nested deeper than {MAX_DEPTH}", offset=base)
    if base + _HEADER > end:
        raise CodecError("truncated JSON container header", offset=base)
    count, size = _U32x2.unpack_from(data, base)
    header_end = _HEADER + count * (_VALUE_ENTRY + (_KEY_ENTRY if is_object else 0))
    if size < header_end or base + size > end:
        raise CodecError(f"bad JSON container size {size} for {count} elements", offset=base)
    limit = base + size
    fields = _entries_struct(count, is_object).unpack_from(data, base + _HEADER)
    vstart = 2 * count if is_object else 0
    values: list[JsonValue] = []
    for code, off in zip(fields[vstart::2], fields[vstart + 1 :: 2], strict=True):
        if code == TYPE_LITERAL:
            lit = _LITERALS.get(off)
            if lit is None:
                raise CodecError(f"bad JSON literal entry 0x{off:08x}", offset=base + _HEADER + vstart * 3)
            values.append(lit[0])
        elif header_end <= off < size:
            values.append(_decode(data, code, base + off, limit, depth))
        else:
            raise CodecError(f"JSON element offset {off} outside its container", offset=base)
    if not is_object:
        return values
    keys: list[str] = []
    for koff, klen in zip(fields[0:vstart:2], fields[1:vstart:2], strict=True):
        if koff < header_end or koff + klen > size:
            raise CodecError(f"JSON key offset {koff} outside its container", offset=base)
        try:
            keys.append(data[base + koff : base + koff + klen].decode("utf-8"))
        except UnicodeDecodeError:
            raise CodecError("JSON object key is not valid UTF-8", offset=base + koff) from None
    return dict(zip(keys, values, strict=True))


# --------------------------------------------------------------------------- text


def parse_json_text(text: str | bytes) -> JsonValue:
    """Parse JSON text into the Python model (integers stay ``int``, others ``float``)."""
    try:
        value: JsonValue = json.loads(text)
    except ValueError as exc:
        raise CodecError(f"invalid JSON text: {exc}") from None
    return value


def json_to_text(value: JsonValue) -> str:
    """MySQL-style JSON text: ``{"a": 1, "b": [true, null]}``, object keys in byte-wise order."""
    parts: list[str] = []
    _render(value, parts)
    return "".join(parts)


def _render(value: JsonValue, out: list[str]) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_float_text(value))
    elif isinstance(value, dict):
        out.append("{")
        for i, key in enumerate(sorted(value, key=lambda k: k.encode("utf-8", "surrogatepass"))):
            if i:
                out.append(", ")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(": ")
            _render(value[key], out)
        out.append("}")
    elif isinstance(value, list):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(", ")
            _render(item, out)
        out.append("]")
    elif isinstance(value, JsonOpaque):
        out.append(f'"base64:type{value.mysql_type}:{base64.b64encode(value.data).decode("ascii")}"')
    elif isinstance(value, JsonTemporal):
        out.append(f'"base64:json{value.type_code}:{base64.b64encode(value.raw).decode("ascii")}"')
    else:
        raise CodecError(f"unsupported JSON value type {type(value).__name__}")


def _float_text(f: float) -> str:
    """Shortest round-trip text, exponent without ``+`` or leading zeros (``1e21``, ``1.5e-7``)."""
    text = repr(f)
    if "e" in text:
        mant, exp = text.split("e")
        sign = "-" if exp.startswith("-") else ""
        return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return text
