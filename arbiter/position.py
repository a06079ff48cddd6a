"""Where the arbiter starts reading and which messages it applies (pure, no I/O).

A message of the topic is one transaction of the drainer's kafka sink: a `slave.binlog.Binlog`
(docs/formats.md#relay-records, the same record as the relay log's) with, from our sink, a header
`commit_ts` holding the binlog's commit_ts in decimal ASCII.  A message without the header (the
original drainer's) is decoded to find it.

* **Start offset.**  The first offset in ``[low, high)`` whose message has ``commit_ts`` > the
  checkpoint, found by binary search reading one message per probe (`first_offset_after`).  The
  drainer writes transactions in ascending commit_ts; after a restart it re-sends from its own
  checkpoint, so a run of messages may repeat earlier ones.  Every transaction re-sent after such a
  step back comes again after it, so the offset the search lands on never skips a transaction
  that is not also found after it, as in the original (the duplicates are dropped below).
* **Duplicates.**  A message whose commit_ts is not above the last one taken is dropped (`Dedup`):
  the same transaction produced twice is applied once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from common.errors import CodecError
from common.pb import secondary_binlog_pb2 as spb

__all__ = ["COMMIT_TS_HEADER", "Dedup", "first_offset_after", "header_commit_ts", "message_commit_ts", "parse_binlog"]

COMMIT_TS_HEADER: Final = "commit_ts"
"""The message header our kafka sink writes: the commit_ts in decimal ASCII."""
_MAX_TS_DIGITS: Final = 20

Headers = Sequence[tuple[str, bytes | None]] | None
"""confluent_kafka's `Message.headers()`: a list of (key, value) pairs, or None."""


def first_offset_after(low: int, high: int, after_ts: int, commit_ts_at: Callable[[int], int]) -> int:
    """The first offset in ``[low, high)`` whose message's commit_ts is above `after_ts`, else `high`.

    `commit_ts_at(offset)` reads the message at `offset` (the first one at or after it when offsets
    have gaps).  With `after_ts` 0 nothing is read: everything is after it."""
    if after_ts <= 0 or low >= high:
        return low
    lo, hi = low, high
    while lo < hi:
        mid = (lo + hi) // 2
        if commit_ts_at(mid) > after_ts:
            hi = mid
        else:
            lo = mid + 1
    return lo


def header_commit_ts(headers: Headers) -> int | None:
    """The `commit_ts` header's value, None without one; CodecError when it is not a decimal number."""
    for key, value in headers or ():
        if key != COMMIT_TS_HEADER:
            continue
        text = (value or b"").strip()
        if not text.isdigit() or len(text) > _MAX_TS_DIGITS:
            raise CodecError(f"header {COMMIT_TS_HEADER} is not a decimal commit_ts: {bytes(value or b'')[:40]!r}")
        return int(text)
    return None


def parse_binlog(value: bytes | None) -> spb.Binlog:
    """The `slave.binlog.Binlog` of a message value; CodecError when it does not parse."""
    b = spb.Binlog()
    try:
        b.ParseFromString(value or b"")
    except Exception as exc:  # protobuf's DecodeError (and RuntimeWarning-free subclasses of it)
        raise CodecError(f"not a slave.binlog.Binlog ({len(value or b'')} bytes): {exc}") from None
    if not b.HasField("commit_ts"):
        raise CodecError(f"not a slave.binlog.Binlog ({len(value or b'')} bytes): no commit_ts")
    return b


def message_commit_ts(headers: Headers, value: bytes | None) -> int:
    """The commit_ts of a message: its header, else its decoded binlog's (CodecError when neither)."""
    found = header_commit_ts(headers)
    return found if found is not None else int(parse_binlog(value).commit_ts)


class Dedup:
    """Drops what is not above the last commit_ts taken (the checkpoint at first)."""

    __slots__ = ("last", "skipped")

    def __init__(self, last: int) -> None:
        self.last = last
        self.skipped = 0

    def accept(self, commit_ts: int) -> bool:
        if commit_ts <= self.last:
            self.skipped += 1
            return False
        self.last = commit_ts
        return True
