"""vlog record framing: golden bytes, footer, pointers, decoder damage handling."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CorruptRecordError
from common.vlog_record import (
    HEADER_SIZE,
    Corruption,
    DecodeEvent,
    Record,
    RecordDecoder,
    TornTail,
    ValuePointer,
    decode_footer,
    decode_pointer,
    encode_footer,
    encode_record,
    parse_header,
)

# Written by hand from the layout: magic e8563a82 | length 5 (u64 LE) | crc32c("hello") 0x9a71bb4c LE | "hello"
HELLO = bytes.fromhex("e8 56 3a 82  05 00 00 00 00 00 00 00  4c bb 71 9a  68 65 6c 6c 6f")
EMPTY = bytes.fromhex("e8 56 3a 82  00 00 00 00 00 00 00 00  00 00 00 00")


def decode_all(data: bytes, step: int | None = None, **kw: int) -> list[DecodeEvent]:
    dec = RecordDecoder(**kw)
    events: list[DecodeEvent] = []
    if step is None:
        ev, _ = dec.decode(data, final=True)
        return ev
    pending = b""
    for i in range(0, len(data), step):
        buf = pending + data[i : i + step]
        final = i + step >= len(data)
        ev, used = dec.decode(buf, final)
        events.extend(ev)
        pending = buf[used:]
    return events


def records(events: list[DecodeEvent]) -> list[bytes]:
    return [e.payload for e in events if isinstance(e, Record)]


def test_golden_record() -> None:
    assert encode_record(b"hello") == HELLO
    assert encode_record(b"") == EMPTY
    assert len(HELLO) == HEADER_SIZE + 5
    assert parse_header(HELLO) == (5, 0x9A71BB4C)


def test_golden_footer_and_pointer() -> None:
    assert encode_footer(0x0102030405060708) == bytes.fromhex("08 07 06 05 04 03 02 01  22 b9 3a 12")
    assert decode_footer(bytes.fromhex("08 07 06 05 04 03 02 01  22 b9 3a 12")) == 0x0102030405060708
    assert decode_footer(HELLO[-12:]) is None
    assert decode_footer(b"short") is None
    ptr = ValuePointer(3, 0x10)
    assert ptr.encode() == bytes.fromhex("03 00 00 00  10 00 00 00 00 00 00 00")
    assert decode_pointer(ptr.encode()) == ptr
    assert ValuePointer(1, 900) < ValuePointer(2, 0) < ValuePointer(2, 1)
    assert ptr.advance(5) == ValuePointer(3, 0x10 + 21)
    with pytest.raises(CorruptRecordError):
        decode_pointer(b"\x00" * 11)


def test_parse_header_errors() -> None:
    with pytest.raises(CorruptRecordError, match="magic"):
        parse_header(b"\x00" * 16)
    with pytest.raises(CorruptRecordError, match="absurd"):
        parse_header(HELLO[:4] + (1 << 40).to_bytes(8, "little") + b"\x00" * 4, max_payload=1 << 20)
    with pytest.raises(CorruptRecordError, match="needs"):
        parse_header(HELLO[:10])


@pytest.mark.parametrize("step", [None, 1, 3, 7, 64])
def test_decode_stream_any_chunking(step: int | None) -> None:
    data = b"".join(encode_record(b"rec-%d" % i * (i + 1)) for i in range(20))
    events = decode_all(data, step)
    assert records(events) == [b"rec-%d" % i * (i + 1) for i in range(20)]
    assert all(isinstance(e, Record) for e in events)
    offsets = [e.offset for e in events if isinstance(e, Record)]
    assert offsets[0] == 0
    assert offsets == sorted(offsets)


def test_torn_tail_is_reported_not_raised() -> None:
    good = encode_record(b"a" * 10) + encode_record(b"b" * 10)
    torn = encode_record(b"c" * 50)[:30]
    events = decode_all(good + torn)
    assert records(events) == [b"a" * 10, b"b" * 10]
    assert events[-1] == TornTail(len(good), 30)
    # a torn header (less than 16 bytes, starting with the magic)
    events = decode_all(good + torn[:6])
    assert events[-1] == TornTail(len(good), 6)


def test_flipped_byte_resyncs_with_counts() -> None:
    recs = [encode_record(b"payload-%02d" % i * 4) for i in range(5)]
    data = bytearray(b"".join(recs))
    bad_start = len(recs[0]) + len(recs[1])
    data[bad_start + HEADER_SIZE + 3] ^= 0xFF  # payload byte of record 2 -> crc mismatch
    for step in (None, 5):
        events = decode_all(bytes(data), step)
        assert records(events) == [b"payload-%02d" % i * 4 for i in (0, 1, 3, 4)]
        damage = [e for e in events if not isinstance(e, Record)]
        assert damage == [Corruption(bad_start, len(recs[2]), "crc mismatch")]


def test_garbage_between_records_and_bad_length() -> None:
    a, b = encode_record(b"first"), encode_record(b"second")
    events = decode_all(a + b"\x00" * 37 + b)
    assert records(events) == [b"first", b"second"]
    assert [e for e in events if isinstance(e, Corruption)] == [Corruption(len(a), 37, "bad magic")]
    absurd = bytearray(encode_record(b"x" * 8))
    absurd[4:12] = (1 << 50).to_bytes(8, "little")
    events = decode_all(a + bytes(absurd) + b, max_payload=1 << 20)
    assert records(events) == [b"first", b"second"]
    assert [e.reason for e in events if isinstance(e, Corruption)] == ["absurd length"]


def test_length_past_known_end_is_judged_without_buffering() -> None:
    data = encode_record(b"ok") + encode_record(b"z" * 100)[:40]
    dec = RecordDecoder(end=len(data))
    events, used = dec.decode(data, final=False)
    assert records(events) == [b"ok"]
    events2, _ = dec.decode(data[used:], final=True)
    assert events2 == [TornTail(len(encode_record(b"ok")), 40)]


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=8),
    cut=st.integers(min_value=0, max_value=400),
    step=st.integers(min_value=1, max_value=50),
)
def test_any_truncation_yields_a_prefix(payloads: list[bytes], cut: int, step: int) -> None:
    data = b"".join(encode_record(p) for p in payloads)
    cut = min(cut, len(data))
    events = decode_all(data[:cut], step)
    got = records(events)
    assert got == payloads[: len(got)]
    ends = [e for e in events if not isinstance(e, Record)]
    assert all(isinstance(e, TornTail) for e in ends)
