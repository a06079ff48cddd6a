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

`RecordDecoder` turns a byte stream into events.  Damage is reported, never raised, so a reader can
resynchronise: after a bad magic, an absurd length or a CRC mismatch it searches the next magic
(`bytes.find`) and resumes there; the whole damaged span becomes one `Corruption`.  A record cut
short by the end of the data is a `TornTail` (normal after a crash while appending) unless a
good record follows it, in which case it is a `Corruption` too.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

import crc32c

from common.binlogfile.record import Corruption, TornTail  # the same damage events as binlogfile
from common.errors import CorruptRecordError

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

REASON_BAD_MAGIC: Final = "bad magic"
REASON_BAD_CRC: Final = "crc mismatch"
REASON_BAD_LENGTH: Final = "absurd length"
REASON_TRUNCATED: Final = "truncated record"


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


class Record(NamedTuple):
    """A whole record with a good checksum; `offset` is where its magic starts."""

    offset: int
    payload: bytes

    @property
    def end(self) -> int:
        return self.offset + HEADER_SIZE + len(self.payload)


DecodeEvent = Record | Corruption | TornTail


class RecordDecoder:
    """Incremental record decoder.

    Call `decode(buf)` with the not-yet-consumed bytes (the unconsumed tail of the previous call
    followed by new data); it returns the events found and how many bytes of `buf` it consumed.
    Keep `buf[consumed:]`, append more data (progress needs at least `want` bytes in the buffer)
    and call again; pass `final=True` once the data is complete, which flushes a torn tail or an
    open corruption.  Offsets in events are absolute: `start` plus the bytes consumed so far.

    `end`, when known (where the file's data ends), lets a length pointing past it be judged at
    once instead of buffering up to it, which keeps memory bounded by the largest real record.
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
            buf = bytes(buf)  # payload slices of bytes are handed out: one copy here, none later
        events: list[DecodeEvent] = []
        emit = events.append
        unpack_header = _HEADER.unpack_from
        crc = crc32c.crc32c
        base = self._offset
        end = self._end
        max_payload = self._max_payload
        n = len(buf)
        p = 0
        while True:
            if n - p >= HEADER_SIZE:
                magic, length, want_crc = unpack_header(buf, p)
                rec_end = p + HEADER_SIZE + length
                if magic == MAGIC and length <= max_payload and rec_end <= n:
                    payload = buf[p + HEADER_SIZE : rec_end]
                    if crc(payload) == want_crc:
                        if self._bad_start is not None:
                            emit(Corruption(self._bad_start, base + p - self._bad_start, self._bad_reason))
                            self._bad_start = None
                        emit(Record(base + p, payload))
                        p = rec_end
                        continue
                    reason = REASON_BAD_CRC
                elif magic != MAGIC:
                    reason = REASON_BAD_MAGIC
                elif length > max_payload:
                    reason = REASON_BAD_LENGTH
                elif (end is not None and base + rec_end > end) or final:
                    reason = REASON_TRUNCATED
                else:
                    self.want = rec_end - p
                    break
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
