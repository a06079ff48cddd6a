"""Streaming reader of a binlog directory: yields `(Position, payload)` in file and offset order.

Memory stays bounded: each file is read in chunks of `chunk_size` bytes (a record longer than a
chunk is completed with one extra read of exactly the missing bytes).  Damage never stops the
reader: a bad magic, a CRC mismatch, an impossible length or a torn record inside a non-last file is
skipped up to the next magic, counted in `ReadStats` and `binlog_binlogfile_corruption_binlog_count`
(`metrics.py`), and logged.  A torn record at the end of the last file is where a crashed writer
stopped: it is EOF, not an error.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Final

from common.binlogfile.metrics import METRICS
from common.binlogfile.names import Position, list_binlog_files
from common.binlogfile.record import DEFAULT_MAX_PAYLOAD, Corruption, DecodeEvent, Record, RecordDecoder, TornTail
from common.errors import StorageError

__all__ = ["DEFAULT_CHUNK_SIZE", "ReadStats", "iter_records", "scan_file"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE: Final = 2 << 20  # 2 MiB


@dataclass(slots=True)
class ReadStats:
    """Counters of one read; pass an instance to `iter_records` and read it as you go."""

    files: int = 0
    records: int = 0
    payload_bytes: int = 0
    skipped_records: int = 0  # damaged spans skipped (each resynchronisation counts once)
    skipped_bytes: int = 0
    torn_tail_bytes: int = 0  # torn record at the end of the last file (EOF, not an error)


def scan_file(
    f: BinaryIO,
    start: int,
    size: int,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> Iterator[list[DecodeEvent]]:
    """Decode the open file `f` from `start` up to `size` in chunks; yield the events of each chunk."""
    decoder = RecordDecoder(start, end=size, max_payload=max_payload)
    f.seek(start)
    remaining = size - start
    pending = b""
    while True:
        want = min(max(chunk_size, decoder.want - len(pending)), remaining)
        data = f.read(want) if want > 0 else b""
        remaining -= len(data)
        final = remaining <= 0 or not data  # a short read: the file shrank under us
        buf = pending + data if pending else data
        events, consumed = decoder.decode(buf, final)
        if events:
            yield events
        if final:
            return
        pending = buf[consumed:]


def iter_records(
    directory: str | os.PathLike[str],
    start: tuple[int, int] | None = None,
    *,
    stats: ReadStats | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> Iterator[tuple[Position, bytes]]:
    """Yield `(position of the record, payload)` for every good record of `directory`, in order.

    `start=(index, offset)` begins at that offset of file `index` (a record boundary, e.g. a
    position yielded earlier, or the end of one); default: the beginning of the first file.
    The file list is taken when iteration starts; bytes appended later are not seen.
    """
    st = stats if stats is not None else ReadStats()
    files = list_binlog_files(directory)
    if not files:
        if start is not None and start != (0, 0):
            raise StorageError(f"binlog directory {os.fspath(directory)!r} is empty, cannot start at {start}")
        return
    first = 0
    offset = 0
    if start is not None:
        start_index, offset = start
        ids = [f.index for f in files]
        if start_index not in ids:
            raise StorageError(
                f"binlog file index {start_index} not found in {os.fspath(directory)!r} (available {ids[0]}..{ids[-1]})"
            )
        first = ids.index(start_index)
    last = len(files) - 1
    new_tuple = tuple.__new__
    read_duration, clock = METRICS.read_duration, time.perf_counter
    for i in range(first, len(files)):
        entry = files[i]
        fid = entry.index
        path = os.path.join(directory, entry.name)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the with block below
        except OSError as e:
            raise StorageError(f"cannot open binlog file {path!r}: {e}") from e
        with f:
            size = os.fstat(f.fileno()).st_size
            begin = offset if i == first else 0
            if begin > size:
                raise StorageError(f"start offset {begin} is beyond the end ({size}) of binlog file {path!r}")
            st.files += 1
            log.debug("reading binlog file fid=%d offset=%d size=%d file=%s", fid, begin, size, path)
            began = clock()
            for events in scan_file(f, begin, size, chunk_size=chunk_size, max_payload=max_payload):
                read_duration.observe(clock() - began)  # the chunk's read and decode, not the consumer
                for ev in events:
                    if isinstance(ev, Record):
                        st.records += 1
                        st.payload_bytes += len(ev[1])
                        yield new_tuple(Position, (fid, ev[0])), ev[1]
                    else:
                        _report_damage(ev, st, fid, path, is_last_file=i == last)
                began = clock()


def _report_damage(ev: Corruption | TornTail, st: ReadStats, fid: int, path: str, *, is_last_file: bool) -> None:
    if isinstance(ev, TornTail) and is_last_file:
        st.torn_tail_bytes += ev.length
        log.info(
            "torn record at the end of the last binlog file treated as EOF fid=%d offset=%d length=%d file=%s",
            fid,
            ev.offset,
            ev.length,
            path,
        )
        return
    st.skipped_records += 1
    st.skipped_bytes += ev.length
    METRICS.corruption.inc()
    log.warning(
        "skipped corrupt binlog data fid=%d offset=%d length=%d reason=%s file=%s",
        fid,
        ev.offset,
        ev.length,
        ev.reason if isinstance(ev, Corruption) else "torn record before the end of the binlog",
        path,
    )
