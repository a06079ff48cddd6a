"""The resynchronising record decoder shared by our two record framings (pure: no I/O).

Both the binlogfile framing (drainer file sink, relay log; `common/binlogfile/record.py`) and the
pump's value log (`common/vlog_record.py`) wrap a payload in 16 bytes:

    magic u32 LE ‖ length u64 LE ‖ CRC-32C(payload) u32 LE      (16 bytes of overhead)

They differ only in the magic and in where the CRC sits:

    binlogfile:  magic ‖ length ‖ payload ‖ crc        (header 12 bytes, CRC trails the payload)
    vlog:        magic ‖ length ‖ crc ‖ payload        (header 16 bytes)

`FrameDecoder` turns a byte stream into events.  Damage is reported as events, never raised, so a
reader can resynchronise: after a bad magic, a CRC mismatch or an impossible length it searches for
the next magic (`bytes.find`) and resumes there; the whole damaged span becomes one `Corruption`.
A record cut short by the end of the data is a `TornTail` (normal after a crash while appending)
unless a valid record follows it, in which case it is a `Corruption` too.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import crc32c

RECORD_OVERHEAD: Final = 16  # magic + length + crc, in both framings
MIN_HEADER: Final = 12  # magic + length: enough to know the record's extent

REASON_BAD_MAGIC: Final = "bad magic"
REASON_BAD_CRC: Final = "crc mismatch"
REASON_TRUNCATED: Final = "truncated record"

_CRC = struct.Struct("<I")


@dataclass(frozen=True)
class Framing:
    """One of the framings: its magic, where its CRC sits, and how it names an impossible length."""

    magic: int
    crc_in_header: bool
    bad_length_reason: str
    magic_bytes: bytes = field(init=False)
    header: struct.Struct = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "magic_bytes", struct.pack("<I", self.magic))
        object.__setattr__(self, "header", struct.Struct("<IQI" if self.crc_in_header else "<IQ"))

    @property
    def header_size(self) -> int:
        return self.header.size


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


class FrameDecoder:
    """Incremental record decoder for one `Framing`.

    Call `decode(buf)` with the not-yet-consumed bytes (the unconsumed tail of the previous call
    followed by new data); it returns the events found and how many bytes of `buf` it consumed.
    Keep `buf[consumed:]`, append more data (progress needs at least `want` bytes in the buffer)
    and call again; pass `final=True` once the data is complete, which flushes a torn tail or an
    open corruption.  Offsets in events are absolute: `start` plus the bytes consumed so far.

    `end`, when known (where the file's data ends), lets a length pointing past it be judged at
    once instead of buffering up to it, which keeps memory bounded by the largest real record.
    """

    def __init__(self, framing: Framing, start: int = 0, *, end: int | None, max_payload: int) -> None:
        self._framing = framing
        self._offset = start
        self._end = end
        self._max_payload = max_payload
        self._bad_start: int | None = None
        self._bad_reason = ""
        self.want = framing.header_size

    @property
    def offset(self) -> int:
        """Absolute offset of the first byte not consumed yet."""
        return self._offset

    def decode(self, buf: bytes | bytearray, final: bool = False) -> tuple[list[DecodeEvent], int]:
        """Events of the whole records (and damage) at the front of `buf`, and the bytes consumed."""
        if not isinstance(buf, bytes):
            buf = bytes(buf)  # payload slices of bytes are handed out: one copy here, none later
        fr = self._framing
        magic_expected, magic_bytes, header_size = fr.magic, fr.magic_bytes, fr.header_size
        crc_in_header = fr.crc_in_header
        events: list[DecodeEvent] = []
        emit = events.append
        unpack_header = fr.header.unpack_from
        unpack_crc = _CRC.unpack_from
        crc = crc32c.crc32c
        new_record = tuple.__new__
        base = self._offset
        end = self._end
        max_payload = self._max_payload
        n = len(buf)
        p = 0
        while True:
            if n - p >= header_size:
                fields = unpack_header(buf, p)
                magic, length = fields[0], fields[1]
                rec_end = p + RECORD_OVERHEAD + length
                if magic == magic_expected and length <= max_payload and rec_end <= n:
                    if crc_in_header:
                        payload, want_crc = buf[p + header_size : rec_end], fields[2]
                    else:
                        payload, want_crc = buf[p + header_size : rec_end - 4], unpack_crc(buf, rec_end - 4)[0]
                    if crc(payload) == want_crc:
                        if self._bad_start is not None:
                            emit(Corruption(self._bad_start, base + p - self._bad_start, self._bad_reason))
                            self._bad_start = None
                        emit(new_record(Record, (base + p, payload)))
                        p = rec_end
                        continue
                    reason = REASON_BAD_CRC
                elif magic != magic_expected:
                    reason = REASON_BAD_MAGIC
                elif length > max_payload:
                    reason = fr.bad_length_reason
                elif (end is not None and base + rec_end > end) or final:
                    reason = REASON_TRUNCATED
                else:
                    self.want = rec_end - p
                    break
            elif not final or p == n:
                self.want = header_size
                break
            else:
                # A few bytes remain at the very end: torn if they begin a magic, else garbage.
                reason = REASON_TRUNCATED if magic_bytes.startswith(buf[p : p + 4]) else REASON_BAD_MAGIC
            # Damage at p: remember where it began, then resynchronise on the next magic.
            if self._bad_start is None:
                self._bad_start = base + p
                self._bad_reason = reason
            q = buf.find(magic_bytes, p + 1)
            if q >= 0:
                p = q
                continue
            if final:
                p = n
                break
            # Keep the last 3 bytes: they may be the start of a magic split across calls.
            p = max(p + 1, n - (len(magic_bytes) - 1))
            self.want = header_size
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
