"""Record framing of binlog files (pure: bytes in, bytes / events out; no I/O).

Layout of one record (docs/formats.md#binlogfile-framing, the original's `pkg/binlogfile`), 16 bytes of overhead:

    offset  size  field
    0       4     magic    u32 little-endian 0x1C1B0504  -> bytes 04 05 1b 1c
    4       8     length   u64 little-endian = len(payload)
    12      n     payload  (pb syncer: pb_binlog.Binlog; relay log: slave.binlog.Binlog)
    12+n    4     crc      u32 little-endian CRC-32C (Castagnoli) of payload

    "hello" -> 04 05 1b 1c | 05 00 00 00 00 00 00 00 | 68 65 6c 6c 6f | 4c bb 71 9a

A file is a plain concatenation of records; there is no file header.  Records never span files.

`RecordDecoder` turns a byte stream into events with the resynchronising decoder shared with the
pump's value log (`common/framing.py`): damage is reported as events, never raised.
"""

from __future__ import annotations

import struct
from typing import Final

import crc32c

from common.framing import (
    REASON_BAD_CRC,
    REASON_BAD_MAGIC,
    REASON_TRUNCATED,
    Corruption,
    DecodeEvent,
    FrameDecoder,
    Framing,
    Record,
    TornTail,
)

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "HEADER_SIZE",
    "MAGIC",
    "MAGIC_BYTES",
    "REASON_BAD_CRC",
    "REASON_BAD_MAGIC",
    "REASON_TRUNCATED",
    "RECORD_OVERHEAD",
    "Corruption",
    "DecodeEvent",
    "Record",
    "RecordDecoder",
    "TornTail",
    "checksum",
    "encode_record",
]

MAGIC: Final = 0x1C1B0504
MAGIC_BYTES: Final = b"\x04\x05\x1b\x1c"
HEADER_SIZE: Final = 12  # magic + length
RECORD_OVERHEAD: Final = 16  # header + crc
# Longest payload believed without looking further; a longer length field is corruption.  Upstream
# has no bound (a Go reader would try to allocate it); 1 GiB is far above any real binlog record.
DEFAULT_MAX_PAYLOAD: Final = 1 << 30

_HEADER = struct.Struct("<IQ")
_CRC = struct.Struct("<I")


def checksum(payload: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of `payload`, as stored in a record."""
    return int(crc32c.crc32c(payload))


def encode_record(payload: bytes | bytearray | memoryview) -> bytes:
    """One framed record: magic ‖ length ‖ payload ‖ crc32c(payload)."""
    return b"".join((_HEADER.pack(MAGIC, len(payload)), payload, _CRC.pack(checksum(payload))))


BINLOGFILE_FRAMING: Final = Framing(MAGIC, crc_in_header=False, bad_length_reason="impossible length")


class RecordDecoder(FrameDecoder):
    """Incremental decoder of binlogfile records (see `common.framing.FrameDecoder`)."""

    def __init__(self, start: int = 0, *, end: int | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        super().__init__(BINLOGFILE_FRAMING, start, end=end, max_payload=max_payload)
