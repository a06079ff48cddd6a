"""Value-log record framing, file footer and value pointers (pure: bytes in, values / events out).

Layout of one record (upstream `pump/storage/log.go`), 16 bytes of header:

    offset  size  field
    0       4     magic    u32 little-endian 0x823a56e8  -> bytes e8 56 3a 82
    4       8     length   u64 little-endian = len(payload)
    12      4     crc      u32 little-endian CRC-32C (Castagnoli) of payload
    16      n     payload  a marshaled binlog.Binlog

    "hello" -> e8 56 3a 82 | 05 00 00 00 00 00 00 00 | 4c bb 71 9a | 68 65 6c 6c 6f

Footer of a finalized ("ended") file, the last 12 bytes of the file:

    0       8     maxTS      i64 little-endian: largest max(start_ts, commit_ts) of the file's records
    8       4     end magic  u32 little-endian 0x123ab922 -> bytes 22 b9 3a 12

Value pointer (the index value, 12 bytes): fid u32 little-endian ‖ offset i64 little-endian, the
offset being where the record's magic starts in `%06d.vlog` file number `fid`.

`RecordDecoder` turns a byte stream into events with the resynchronising decoder shared with the
binlogfile framing (`common/framing.py`): damage is reported as events, never raised.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

import crc32c

from common.errors import CorruptRecordError
from common.framing import Corruption, DecodeEvent, FrameDecoder, Framing, Record, TornTail

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "END_MAGIC",
    "FOOTER_SIZE",
    "HEADER_SIZE",
    "MAGIC",
    "MAGIC_BYTES",
    "POINTER_SIZE",
    "Corruption",
    "DecodeEvent",
    "Record",
    "RecordDecoder",
    "TornTail",
    "ValuePointer",
    "checksum",
    "decode_footer",
    "decode_pointer",
    "encode_footer",
    "encode_header",
    "encode_record",
    "parse_header",
]

MAGIC: Final = 0x823A56E8
MAGIC_BYTES: Final = struct.pack("<I", MAGIC)
END_MAGIC: Final = 0x123AB922
HEADER_SIZE: Final = 16
FOOTER_SIZE: Final = 12
POINTER_SIZE: Final = 12
# Longest payload believed without looking further; a longer length field is corruption.  The
# original has no bound; gRPC caps a binlog near 2 GiB, so 4 GiB is far above any real record.
DEFAULT_MAX_PAYLOAD: Final = 1 << 32

_HEADER = struct.Struct("<IQI")
_FOOTER = struct.Struct("<qI")
_POINTER = struct.Struct("<Iq")


class ValuePointer(NamedTuple):
    """Where a record starts: file number and byte offset (ordered like the log)."""

    fid: int
    offset: int

    def encode(self) -> bytes:
        return _POINTER.pack(self.fid, self.offset)

    def advance(self, payload_len: int) -> ValuePointer:
        """The position just after a record of `payload_len` bytes starting here."""
        return ValuePointer(self.fid, self.offset + HEADER_SIZE + payload_len)


ZERO_POINTER: Final = ValuePointer(0, 0)


def decode_pointer(data: bytes) -> ValuePointer:
    if len(data) != POINTER_SIZE:
        raise CorruptRecordError(f"value pointer must be {POINTER_SIZE} bytes, got {len(data)}")
    fid, offset = _POINTER.unpack(data)
    return ValuePointer(fid, offset)


def checksum(payload: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of `payload`, as stored in a record header."""
    return int(crc32c.crc32c(payload))


def encode_header(payload: bytes | bytearray | memoryview) -> bytes:
    """The 16-byte header of the record holding `payload`."""
    return _HEADER.pack(MAGIC, len(payload), checksum(payload))


def encode_record(payload: bytes | bytearray | memoryview) -> bytes:
    """One framed record: magic ‖ length ‖ crc32c(payload) ‖ payload."""
    return encode_header(payload) + bytes(payload)


def parse_header(header: bytes | bytearray | memoryview, *, max_payload: int = DEFAULT_MAX_PAYLOAD) -> tuple[int, int]:
    """(length, crc) of a record header; CorruptRecordError when the magic or length is wrong."""
    if len(header) < HEADER_SIZE:
        raise CorruptRecordError(f"record header needs {HEADER_SIZE} bytes, got {len(header)}")
    magic, length, crc = _HEADER.unpack_from(header)
    if magic != MAGIC:
        raise CorruptRecordError(f"bad record magic {magic:#010x}")
    if length > max_payload:
        raise CorruptRecordError(f"absurd record length {length}")
    return length, crc


def encode_footer(max_ts: int) -> bytes:
    """The 12-byte footer that ends a finalized file."""
    return _FOOTER.pack(max_ts, END_MAGIC)


def decode_footer(tail: bytes) -> int | None:
    """maxTS of a file whose last 12 bytes are `tail`, or None when it carries no end magic."""
    if len(tail) != FOOTER_SIZE:
        return None
    max_ts, magic = _FOOTER.unpack(tail)
    return int(max_ts) if magic == END_MAGIC else None


VLOG_FRAMING: Final = Framing(MAGIC, crc_in_header=True, bad_length_reason="absurd length")


class RecordDecoder(FrameDecoder):
    """Incremental decoder of value-log records (see `common.framing.FrameDecoder`)."""

    def __init__(self, start: int = 0, *, end: int | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        super().__init__(VLOG_FRAMING, start, end=end, max_payload=max_payload)
