"""Splitting framed record files into byte ranges that Spark tasks scan independently.

Both framings of this project (pump value logs, `common/vlog_record.py`; binlog files of the
drainer's file sink, `common/binlogfile/record.py`) put a 4-byte magic in front of every record and a
CRC over its payload, and both decoders resynchronise on the magic after damage
(`common/framing.py`).  That is what lets a 500 MB file be read by several tasks without one task
reading it all:

    file  |----- range 0 -----|----- range 1 -----|----- range 2 --|
          s0=0                s1                  s2               size
    task i owns the records whose magic starts in [s_i, s_{i+1}).

Task i (i > 0) starts decoding at s_i in resync mode: the bytes before its first good record are
the tail of a record owned by task i-1 (or damage that task i-1 reports), so they are skipped
silently.  Every task reads past its end until the first good record at or after it: the records it
owns may straddle the boundary, and so may damage.  Writing f_i for the first good record at or after
s_i, task i reports exactly what lies in [f_i, f_{i+1}): every record once, every damaged span once.
(A resync can only land on a false record if a magic, a plausible length and a matching CRC-32C
all occur by chance inside a payload: the same bet the pump's own recovery makes.)

Memory per task is one read chunk plus the largest record.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from common.framing import Corruption, DecodeEvent, FrameDecoder, Record, TornTail

__all__ = ["DEFAULT_CHUNK_SIZE", "DEFAULT_SPLIT_SIZE", "Damage", "FileRange", "plan_ranges", "scan_range"]

DEFAULT_SPLIT_SIZE: Final = 64 << 20
"""Bytes of file per task (the brief: ~64 MiB, Spark's own default split size for files)."""
DEFAULT_CHUNK_SIZE: Final = 4 << 20
"""Bytes read per `pread`."""

DecoderFactory = Callable[[int, int], FrameDecoder]
"""(start, file end) -> a decoder of the file's framing."""


@dataclass(frozen=True, slots=True)
class FileRange:
    """One task's share of one file: records whose magic starts in [start, end)."""

    source: str
    """Who wrote the file (the pump data directory's name, the file-sink directory)."""
    path: str
    start: int
    end: int
    size: int
    """The file's size when the ranges were planned (bytes appended later are not read)."""


@dataclass(frozen=True, slots=True)
class Damage:
    """A damaged span a task skipped (`torn`: a record cut short by the end of the file)."""

    source: str
    path: str
    offset: int
    length: int
    reason: str
    torn: bool = False


def plan_ranges(source: str, path: str, size: int, split_size: int = DEFAULT_SPLIT_SIZE) -> list[FileRange]:
    """The ranges of one file of `size` bytes, each `split_size` bytes long (the last one shorter)."""
    if split_size <= 0:
        raise ValueError(f"split size must be positive, got {split_size}")
    if size == 0:
        return []
    return [FileRange(source, path, start, min(start + split_size, size), size) for start in range(0, size, split_size)]


def scan_range(
    rng: FileRange,
    make_decoder: DecoderFactory,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    ignore_tail: Callable[[int, bytes], bool] | None = None,
) -> Iterator[Record | Damage]:
    """The records `rng` owns and the damage between them, in file order.

    `ignore_tail(offset, bytes)`: called for damage that runs to the end of the file; True drops it
    (a value log's footer is 12 bytes that are not a record).
    """
    with open(rng.path, "rb", buffering=0) as f:
        fd = f.fileno()
        yield from _scan(fd, rng, make_decoder, chunk_size, ignore_tail)


def _scan(
    fd: int,
    rng: FileRange,
    make_decoder: DecoderFactory,
    chunk_size: int,
    ignore_tail: Callable[[int, bytes], bool] | None,
) -> Iterator[Record | Damage]:
    size = rng.size
    decoder = make_decoder(rng.start, size)
    synced = rng.start == 0
    pos = rng.start
    pending = b""
    while True:
        want = min(max(chunk_size, decoder.want - len(pending)), size - pos)
        data = os.pread(fd, want, pos) if want > 0 else b""
        pos += len(data)
        final = pos >= size or not data
        buf = pending + data if pending else data
        events, consumed = decoder.decode(buf, final)
        for ev in events:
            out = _event(ev, rng, synced, fd, ignore_tail)
            if isinstance(ev, Record):
                if ev.offset >= rng.end:
                    return  # the next range's first record: everything before it was ours
                synced = True
            if out is not None:
                yield out
        if final:
            return
        pending = buf[consumed:]


def _event(
    ev: DecodeEvent,
    rng: FileRange,
    synced: bool,
    fd: int,
    ignore_tail: Callable[[int, bytes], bool] | None,
) -> Record | Damage | None:
    if isinstance(ev, Record):
        return ev if ev.offset < rng.end else None
    if not synced:
        return None  # the previous range's tail (a record, or damage that range reports)
    at_end = ev.offset + ev.length >= rng.size
    if at_end and ignore_tail is not None and ignore_tail(ev.offset, os.pread(fd, ev.length, ev.offset)):
        return None
    if isinstance(ev, TornTail):
        return Damage(rng.source, rng.path, ev.offset, ev.length, "torn record", torn=True)
    assert isinstance(ev, Corruption)
    return Damage(rng.source, rng.path, ev.offset, ev.length, ev.reason)
