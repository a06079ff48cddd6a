"""Record framing of binlog files (pure: bytes in, bytes / events out; no I/O).

Layout of one record (wire-formats.md §4c, upstream `pkg/binlogfile`), 16 bytes of overhead:

    offset  size  field
    0       4     magic    u32 little-endian 0x1C1B0504  -> bytes 04 05 1b 1c
    4       8     length   u64 little-endian = len(payload)
    12      n     payload  (pb syncer: pb_binlog.Binlog; relay log: slave.binlog.Binlog)
    12+n    4     crc      u32 little-endian CRC-32C (Castagnoli) of payload

    "hello" -> 04 05 1b 1c | 05 00 00 00 00 00 00 00 | 68 65 6c 6c 6f | 4c bb 71 9a

A file is a plain concatenation of records; there is no file header.  Records never span files.

`RecordDecoder` turns a byte stream into events.  Damage is reported as events, never raised, so a
reader can resynchronise: after a bad magic, a CRC mismatch or an impossible length it searches for
the next magic (`bytes.find`) and resumes there; the whole damaged span becomes one `Corruption`.
A record cut short by the end of the data is a `TornTail` (normal after a crash while appending)
unless a valid record follows it, in which case it is a `Corruption` too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

import crc32c

__all__ = [
    "DEFAULT_MAX_PAYLOAD",
    "HEADER_SIZE",
    "MAGIC",
    "MAGIC_BYTES",
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

REASON_BAD_MAGIC: Final = "bad magic"
REASON_BAD_CRC: Final = "crc mismatch"
REASON_BAD_LENGTH: Final = "impossible length"
REASON_TRUNCATED: Final = "truncated record"


def checksum(payload: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli) of `payload`, as stored in a record."""
    return int(crc32c.crc32c(payload))


def encode_record(payload: bytes | bytearray | memoryview) -> bytes:
    """One framed record: magic ‖ length ‖ payload ‖ crc32c(payload)."""
    return b"".join((_HEADER.pack(MAGIC, len(payload)), payload, _CRC.pack(checksum(payload))))


class Record(NamedTuple):
    """A whole record with a good checksum; `offset` is where its magic starts."""

    offset: int
    payload: bytes

    @property
    def end(self) -> int:
        return self.offset + RECORD_OVERHEAD + len(self.payload)


@dataclass(frozen=True, slots=True)
class Corruption:
    """`length` damaged bytes from `offset` were skipped; `reason` says what was wrong first."""

    offset: int
    length: int
    reason: str


@dataclass(frozen=True, slots=True)
class TornTail:
    """The data ends with `length` bytes of a record that was never completely written."""

    offset: int
    length: int


DecodeEvent = Record | Corruption | TornTail


class RecordDecoder:
    """Incremental record decoder.

    Call `decode(buf)` with the not-yet-consumed bytes (the unconsumed tail of the previous call
    followed by new data); it returns the events found and how many bytes of `buf` it consumed.
    Keep `buf[consumed:]`, append more data (the next call can progress once the buffer holds at
    least `want` bytes) and call again; pass `final=True` once the data is complete, which flushes a torn tail or an
    open corruption.  Offsets in events are absolute: `start` plus bytes consumed so far.

    `end`, when known (the file size), lets a length field pointing past it be judged at once
    instead of buffering up to it, which keeps memory bounded by the largest real record.
    """

    def __init__(self, start: int = 0, *, end: int | None = None, max_payload: int = DEFAULT_MAX_PAYLOAD) -> None:
        self._offset = start
        self._end = end
        self._max_payload = max_payload
        self._bad_start: int | None = None
        self._bad_reason = ""
        self.want = HEADER_SIZE

    @property
    def offset(self) -> int:
        """Absolute offset of the first byte not consumed yet."""
        return self._offset

    def decode(self, buf: bytes | bytearray, final: bool = False) -> tuple[list[DecodeEvent], int]:
        """Events of the whole records (and damage) at the front of `buf`, and the bytes consumed."""
        if not isinstance(buf, bytes):
            buf = bytes(buf)  # slices of bytes are the payloads handed out: one copy here, none later
        events: list[DecodeEvent] = []
        emit = events.append
        unpack_header = _HEADER.unpack_from
        unpack_crc = _CRC.unpack_from
        crc = crc32c.crc32c
        new_tuple = tuple.__new__
        base = self._offset
        end = self._end
        max_payload = self._max_payload
        n = len(buf)
        p = 0
        while True:
            if n - p >= HEADER_SIZE:
                magic, length = unpack_header(buf, p)
                rec_end = p + RECORD_OVERHEAD + length
                if magic == MAGIC and rec_end <= n and length <= max_payload:
                    payload = buf[p + HEADER_SIZE : rec_end - 4]
                    if crc(payload) == unpack_crc(buf, rec_end - 4)[0]:
                        if self._bad_start is not None:
                            emit(Corruption(self._bad_start, base + p - self._bad_start, self._bad_reason))
                            self._bad_start = None
                        emit(new_tuple(Record, (base + p, payload)))
                        p = rec_end
                        continue
                    reason = REASON_BAD_CRC
                elif magic != MAGIC:
                    reason = REASON_BAD_MAGIC
                elif length > max_payload:
                    reason = REASON_BAD_LENGTH
                elif end is not None and base + rec_end > end:
                    reason = REASON_TRUNCATED
                elif not final:
                    self.want = rec_end - p
                    break
                else:
                    reason = REASON_TRUNCATED
            elif not final or p == n:
                self.want = HEADER_SIZE
                break
            else:
                # A few bytes remain at the very end: torn if they begin a magic, else garbage.
                reason = REASON_TRUNCATED if MAGIC_BYTES.startswith(buf[p : p + 4]) else REASON_BAD_MAGIC
            # Damage at p: remember where it began, then resynchronise on the next magic.
            if self._bad_start is None:
                self._bad_start = base + p
                self._bad_reason = reason
            q = buf.find(MAGIC_BYTES, p + 1)
            if q >= 0:
                p = q
                continue
            if final:
                p = n
                break
            # Keep the last 3 bytes: they may be the start of a magic split across calls.
            p = max(p + 1, n - (len(MAGIC_BYTES) - 1))
            self.want = HEADER_SIZE
            break
        if final and self._bad_start is not None:
            length = base + n - self._bad_start
            if self._bad_reason == REASON_TRUNCATED:
                emit(TornTail(self._bad_start, length))
            else:
                emit(Corruption(self._bad_start, length, self._bad_reason))
            self._bad_start = None
        self._offset = base + p
        return events, p
