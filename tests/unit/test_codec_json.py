"""TiDB binary JSON: round trips, layout details, corrupt input, text rendering."""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import JsonOpaque, JsonTemporal, decode_one, encode_datum, json_datum, json_to_text, peek
from common.codec.json_binary import (
    MAX_DEPTH,
    TYPE_ARRAY,
    TYPE_OBJECT,
    TYPE_STRING,
    TYPE_UINT64,
    JsonValue,
    decode_json,
    encode_json,
    parse_json_text,
)
from common.errors import CodecError

FAST = settings(max_examples=150, deadline=None, database=None)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.text(max_size=8), inner, max_size=5),
    ),
    max_leaves=20,
)


def same(a: Any, b: Any) -> bool:
    """Equality that also tells bool from int and float from int."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def sort_keys(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: sort_keys(v[k]) for k in sorted(v, key=lambda k: k.encode())}
    if isinstance(v, list):
        return [sort_keys(x) for x in v]
    return v


@FAST
@given(json_values)
def test_round_trip(value: JsonValue) -> None:
    code, payload = encode_json(value)
    decoded = decode_json(payload, code, 0)
    assert same(decoded, sort_keys(value))
    raw = encode_datum(json_datum(value))
    assert peek(raw) == len(raw)
    assert decode_one(raw)[1] == len(raw)


@FAST
@given(json_values)
def test_text_rendering_parses_back(value: JsonValue) -> None:
    assert same(parse_json_text(json_to_text(value)), sort_keys(value))


def test_object_keys_sorted_bytewise() -> None:
    code, payload = encode_json({"b": 1, "ab": 2, "a": 3, "é": 4, "Z": 5})
    assert code == TYPE_OBJECT
    assert list(decode_json(payload, code, 0)) == ["Z", "a", "ab", "b", "é"]  # type: ignore[arg-type]


def test_literals_are_inlined() -> None:
    code, payload = encode_json([None, True, False])
    assert code == TYPE_ARRAY
    assert payload == struct.pack("<II", 3, 8 + 15) + bytes([4, 0, 0, 0, 0, 4, 1, 0, 0, 0, 4, 2, 0, 0, 0])


def test_empty_containers() -> None:
    assert encode_json({}) == (TYPE_OBJECT, struct.pack("<II", 0, 8))
    assert encode_json([]) == (TYPE_ARRAY, struct.pack("<II", 0, 8))


def test_string_length_is_plain_uvarint() -> None:
    code, payload = encode_json("y" * 200)
    assert code == TYPE_STRING
    assert payload[:2] == b"\xc8\x01"


def test_large_uint64_and_small_uint64_decode() -> None:
    assert encode_json(2**64 - 1) == (TYPE_UINT64, b"\xff" * 8)
    assert decode_json(struct.pack("<Q", 5), TYPE_UINT64, 0) == 5


def test_opaque_and_temporal_round_trip() -> None:
    for value in (JsonOpaque(0xFC, b"\x00\x01blob"), JsonTemporal(0x0F, b"\x01" * 8), JsonTemporal(0x11, b"\x02" * 12)):
        code, payload = encode_json([value])
        assert decode_json(payload, code, 0) == [value]
    assert json_to_text(JsonOpaque(15, b"ab")) == '"base64:type15:YWI="'


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), 2**64, -(2**63) - 1, {1: 2}, b"bytes", object(), JsonTemporal(0x0E, b"1")]
)
def test_unencodable(value: Any) -> None:
    with pytest.raises(CodecError):
        encode_json(value)


def test_depth_limit() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    code, payload = encode_json(deep)
    assert decode_json(payload, code, 0) == deep
    with pytest.raises(CodecError, match="deeper"):
        encode_json([deep])


def test_text_rendering() -> None:
    assert json_to_text({"a": 1}) == '{"a": 1}'
    assert json_to_text({"b": [1, 2.5, None, True, False], "a": 'x\n"y'}) == (
        '{"a": "x\\n\\"y", "b": [1, 2.5, null, true, false]}'
    )
    assert json_to_text(1e21) == "1e21"
    assert json_to_text(1.5e-7) == "1.5e-7"
    assert json_to_text(1.0) == "1.0"
    assert json_to_text("é") == '"é"'


def test_parse_json_text() -> None:
    assert parse_json_text('{"a": [1, 2.0, "x"]}') == {"a": [1, 2.0, "x"]}
    with pytest.raises(CodecError):
        parse_json_text("{nope")


def _container(count: int, size: int, entries: bytes) -> bytes:
    return struct.pack("<II", count, size) + entries


@pytest.mark.parametrize(
    "payload",
    [
        _container(1, 13, bytes([TYPE_ARRAY]) + struct.pack("<I", 0)),  # element points at its own container
        _container(1, 13, bytes([TYPE_ARRAY]) + struct.pack("<I", 13)),  # offset past the end
        _container(1, 200, bytes([9]) + struct.pack("<I", 13)),  # size beyond the data
        _container(1, 12, bytes([9, 0, 0, 0, 0])),  # size smaller than its entry table
        _container(1, 13, bytes([4, 7, 0, 0, 0])),  # bad literal
        _container(1, 21, bytes([0x42]) + struct.pack("<I", 13) + b"\x00" * 8),  # unknown type code
        _container(1, 15, bytes([TYPE_STRING]) + struct.pack("<I", 13) + b"\x05a"),  # string runs out
        _container(1, 15, bytes([TYPE_STRING]) + struct.pack("<I", 13) + b"\x01\xff"),  # not UTF-8
        b"\x01\x00\x00",  # header cut
    ],
)
def test_corrupt_arrays(payload: bytes) -> None:
    with pytest.raises(CodecError, match="offset"):
        decode_json(payload, TYPE_ARRAY, 0)


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack("<II", 1, 20) + struct.pack("<IH", 0, 1) + bytes([4, 0, 0, 0, 0]) + b"a",  # key in header
        struct.pack("<II", 1, 20) + struct.pack("<IH", 19, 2) + bytes([4, 0, 0, 0, 0]) + b"a",  # key past end
        struct.pack("<II", 1, 20) + struct.pack("<IH", 19, 1) + bytes([4, 0, 0, 0, 0]) + b"\xff",  # key not UTF-8
    ],
)
def test_corrupt_objects(payload: bytes) -> None:
    valid = struct.pack("<II", 1, 20) + struct.pack("<IH", 19, 1) + bytes([4, 0, 0, 0, 0]) + b"a"
    assert decode_json(valid, TYPE_OBJECT, 0) == {"a": None}
    with pytest.raises(CodecError, match="offset"):
        decode_json(payload, TYPE_OBJECT, 0)


@FAST
@given(json_values, st.data())
def test_truncated_or_flipped_json_datum_raises_only_codec_error(value: JsonValue, data: st.DataObject) -> None:
    raw = bytearray(encode_datum(json_datum(value)))
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(CodecError):
        decode_one(bytes(raw[:cut]))
    i = data.draw(st.integers(1, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    with contextlib.suppress(CodecError):
        decode_one(bytes(raw))
