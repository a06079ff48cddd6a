"""Integer, float and memcomparable-bytes primitives of the TiDB datum codec.

Byte layouts (TiDB ``util/codec/number.go``, ``float.go``, ``bytes.go``):

* uvarint (Go ``binary.PutUvarint``): unsigned LEB128, 7 bits per byte, least significant
  group first, high bit set on every byte but the last; at most 10 bytes for a uint64,
  the 10th byte may only be ``00`` or ``01``.  300 -> ``ac 02``.
* varint (Go ``binary.PutVarint``): uvarint of the zigzag transform
  ``(v << 1) ^ (v >> 63)``: 0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...   1 -> ``02``, -1 -> ``01``.
* comparable int (intFlag 3, durationFlag 7): 8 bytes big-endian of
  ``uint64(v) ^ 0x8000_0000_0000_0000`` (sign bit flipped, so bytes sort like the numbers).
* comparable uint (uintFlag 4): 8 bytes big-endian.
* comparable float (floatFlag 5): ``u = bits(f)``; ``f >= 0 ? u | 1<<63 : ^u``; 8 bytes big-endian.
  -0.0 compares ``>= 0`` and encodes like 0.0 (``80 00 .. 00``); NaN is refused (MySQL has none).
* memcomparable bytes (bytesFlag 1): the data cut into 8-byte groups, the last one padded with
  ``00``; every group is followed by a marker ``0xff - pad``; a final all-padding group
  (marker ``f7``) is written when the length is a multiple of 8.  ``"abc"`` ->
  ``61 62 63 00 00 00 00 00 fa``; ``""`` -> ``00 * 8, f7``.

Every decoder takes ``(data, pos)`` and returns ``(value, next_pos)``; a short or malformed
input raises :class:`CodecError` naming the absolute offset.
"""

from __future__ import annotations

import math
import struct

from common.errors import CodecError

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
_SIGN_BIT = 1 << 63
_U64_MASK = UINT64_MAX

_U64_BE = struct.Struct(">Q")
_F64_BE = struct.Struct(">d")

# Single-byte encodings, shared so small numbers allocate nothing.
_SMALL_UVARINT: tuple[bytes, ...] = tuple(bytes((i,)) for i in range(0x80))
_MAX_UVARINT_LEN = 10

MEM_GROUP_SIZE = 8
_MEM_MARKER = 0xFF
_MEM_PAD = b"\x00" * MEM_GROUP_SIZE


def encode_uvarint(n: int) -> bytes:
    """Unsigned LEB128 of a uint64."""
    if 0 <= n < 0x80:
        return _SMALL_UVARINT[n]
    if 0 < n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0 or n > UINT64_MAX:
        raise CodecError(f"uvarint out of uint64 range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Read a uvarint at ``pos``; returns ``(value, next_pos)``."""
    i = pos
    try:
        b = data[i]
        if b < 0x80:
            return b, i + 1
        result = b & 0x7F
        shift = 7
        while True:
            i += 1
            b = data[i]
            if b < 0x80:
                result |= b << shift
                break
            result |= (b & 0x7F) << shift
            shift += 7
    except IndexError:
        raise CodecError("truncated uvarint", offset=pos) from None
    i += 1
    if i - pos >= _MAX_UVARINT_LEN and (i - pos > _MAX_UVARINT_LEN or b > 1):
        raise CodecError("uvarint overflows uint64", offset=pos)
    return result, i


def zigzag_encode(v: int) -> int:
    """Map an int64 onto a uint64 so small magnitudes stay small."""
    return (v << 1) if v >= 0 else ((-v) << 1) - 1


def zigzag_decode(u: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (u >> 1) if not u & 1 else -((u + 1) >> 1)


def encode_varint(v: int) -> bytes:
    """Zigzag varint of an int64 (Go ``binary.PutVarint``)."""
    if v < INT64_MIN or v > INT64_MAX:
        raise CodecError(f"varint out of int64 range: {v}")
    return encode_uvarint((v << 1) if v >= 0 else ((-v) << 1) - 1)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; returns ``(value, next_pos)``."""
    u, pos = decode_uvarint(data, pos)
    return ((u >> 1) if not u & 1 else -((u + 1) >> 1)), pos


def encode_cmp_int(v: int) -> bytes:
    """8-byte comparable int64 (sign bit flipped, big-endian)."""
    if v < INT64_MIN or v > INT64_MAX:
        raise CodecError(f"int out of int64 range: {v}")
    return _U64_BE.pack(v + _SIGN_BIT)


def decode_cmp_int(data: bytes, pos: int) -> tuple[int, int]:
    """Inverse of :func:`encode_cmp_int`."""
    if pos + 8 > len(data):
        raise CodecError("truncated 8-byte comparable int", offset=pos)
    return _U64_BE.unpack_from(data, pos)[0] - _SIGN_BIT, pos + 8


def encode_cmp_uint(v: int) -> bytes:
    """8-byte big-endian uint64."""
    if v < 0 or v > UINT64_MAX:
        raise CodecError(f"uint out of uint64 range: {v}")
    return _U64_BE.pack(v)


def decode_cmp_uint(data: bytes, pos: int) -> tuple[int, int]:
    """Inverse of :func:`encode_cmp_uint`."""
    if pos + 8 > len(data):
        raise CodecError("truncated 8-byte uint", offset=pos)
    return _U64_BE.unpack_from(data, pos)[0], pos + 8


def encode_cmp_float(f: float) -> bytes:
    """8-byte comparable float64 (floatFlag payload, used in row values too)."""
    if math.isnan(f):
        raise CodecError("NaN cannot be encoded as a float datum")
    u = _U64_BE.unpack(_F64_BE.pack(f))[0]
    u = (u | _SIGN_BIT) if f >= 0 else (~u & _U64_MASK)
    return _U64_BE.pack(u)


def decode_cmp_float(data: bytes, pos: int) -> tuple[float, int]:
    """Inverse of :func:`encode_cmp_float`."""
    if pos + 8 > len(data):
        raise CodecError("truncated 8-byte float", offset=pos)
    u = _U64_BE.unpack_from(data, pos)[0]
    u = (u & ~_SIGN_BIT) if u & _SIGN_BIT else (~u & _U64_MASK)
    return _F64_BE.unpack(_U64_BE.pack(u))[0], pos + 8


def encode_mem_bytes(b: bytes) -> bytes:
    """Memcomparable bytes: 8-byte groups each followed by ``0xff - pad``."""
    out = bytearray()
    n = len(b)
    for i in range(0, n + 1, MEM_GROUP_SIZE):
        chunk = b[i : i + MEM_GROUP_SIZE]
        pad = MEM_GROUP_SIZE - len(chunk)
        out += chunk
        if pad:
            out += _MEM_PAD[:pad]
        out.append(_MEM_MARKER - pad)
    return bytes(out)


def decode_mem_bytes(data: bytes, pos: int) -> tuple[bytes, int]:
    """Read memcomparable bytes at ``pos``; returns ``(bytes, next_pos)``."""
    parts: list[bytes] = []
    end = len(data)
    while True:
        if pos + MEM_GROUP_SIZE + 1 > end:
            raise CodecError("truncated memcomparable bytes group", offset=pos)
        marker = data[pos + MEM_GROUP_SIZE]
        pad = _MEM_MARKER - marker
        if pad > MEM_GROUP_SIZE:
            raise CodecError(f"bad memcomparable group marker 0x{marker:02x}", offset=pos + MEM_GROUP_SIZE)
        real = MEM_GROUP_SIZE - pad
        parts.append(data[pos : pos + real])
        if pad:
            if data[pos + real : pos + MEM_GROUP_SIZE] != _MEM_PAD[:pad]:
                raise CodecError("memcomparable padding bytes are not zero", offset=pos + real)
            return b"".join(parts), pos + MEM_GROUP_SIZE + 1
        pos += MEM_GROUP_SIZE + 1


def peek_mem_bytes(data: bytes, pos: int) -> int:
    """Offset just past the memcomparable bytes starting at ``pos``."""
    end = len(data)
    while True:
        if pos + MEM_GROUP_SIZE + 1 > end:
            raise CodecError("truncated memcomparable bytes group", offset=pos)
        marker = data[pos + MEM_GROUP_SIZE]
        pos += MEM_GROUP_SIZE + 1
        if marker != _MEM_MARKER:
            if _MEM_MARKER - marker > MEM_GROUP_SIZE:
                raise CodecError(f"bad memcomparable group marker 0x{marker:02x}", offset=pos - 1)
            return pos
