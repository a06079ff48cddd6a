"""common/pb/wire.py: reading pulled binlogs in place agrees with protobuf, and copies nothing large."""

from __future__ import annotations

import random

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CodecError
from common.pb import binlog_pb2, gogo, pump_pb2
from common.pb.wire import pull_entity, read_prewrite_value, split_binlog

MUTATION_TYPES = [binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteRow]
rows = st.lists(st.binary(max_size=40), max_size=6)


@st.composite
def prewrite_values(draw: st.DrawFn) -> binlog_pb2.PrewriteValue:
    pv = binlog_pb2.PrewriteValue(schema_version=draw(st.integers(-(2**63), 2**63 - 1)))
    for _ in range(draw(st.integers(0, 4))):
        m = pv.mutations.add(table_id=draw(st.integers(-(2**63), 2**63 - 1)))
        m.inserted_rows.extend(draw(rows))
        m.updated_rows.extend(draw(rows))
        m.deleted_rows.extend(draw(rows))
        m.sequence.extend(draw(st.lists(st.sampled_from(MUTATION_TYPES), max_size=12)))
    return pv


def spans(buf: memoryview, offsets: object) -> list[bytes]:
    o = list(offsets)  # type: ignore[call-overload]
    return [bytes(buf[o[i] : o[i + 1]]) for i in range(0, len(o), 2)]


@settings(max_examples=200, deadline=None)
@given(prewrite_values(), st.booleans())
def test_read_prewrite_value_agrees_with_protobuf(pv: binlog_pb2.PrewriteValue, gogo_bytes: bool) -> None:
    data = gogo.marshal_prewrite_value(pv) if gogo_bytes else pv.SerializeToString()  # unpacked / packed
    view = read_prewrite_value(data)
    assert view.schema_version == pv.schema_version
    assert len(view.mutations) == len(pv.mutations)
    for got, want in zip(view.mutations, pv.mutations, strict=True):
        assert got.table_id == want.table_id
        assert spans(got.buf, got.inserted) == list(want.inserted_rows)
        assert spans(got.buf, got.updated) == list(want.updated_rows)
        assert spans(got.buf, got.deleted) == list(want.deleted_rows)
        assert list(got.sequence) == list(want.sequence)
        assert [got.row(got.inserted, i) for i in range(len(want.inserted_rows))] == list(want.inserted_rows)


def test_packed_sequence_and_obsolete_deletes_are_read() -> None:
    pv = binlog_pb2.PrewriteValue(schema_version=3)
    m = pv.mutations.add(table_id=9, deleted_ids=[1, 2], deleted_pks=[b"k"], sequence=[0, 2, 3])
    m.inserted_rows.append(b"r")
    view = read_prewrite_value(pv.SerializeToString())  # python packs repeated enums and ints
    assert list(view.mutations[0].sequence) == [0, 2, 3]
    assert view.mutations[0].other_deletes == 3


@pytest.mark.parametrize(
    "data",
    [b"\x08", b"\x12\x05ab", b"\x12\x02\x08", b"\x0b", b"\x00\x01", b"\x12\x04\x3a\x02\x80\x80"],
    ids=["truncated varint", "short field", "bad mutation", "group wire type", "field 0", "bad packed"],
)
def test_malformed_prewrite_values_raise_codec_error(data: bytes) -> None:
    with pytest.raises(CodecError):
        read_prewrite_value(data)


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([binlog_pb2.Prewrite, binlog_pb2.Commit, binlog_pb2.Rollback]),
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=20),
    st.integers(0, 2**40),
    st.integers(-(2**31), 2**31 - 1),
)
def test_split_binlog_keeps_every_field_and_views_the_value(
    tp: int,
    start_ts: int,
    commit_ts: int,
    key: bytes | None,
    value: bytes | None,
    query: bytes | None,
    job: int,
    state: int,
) -> None:
    payload = gogo.encode_binlog(
        tp,
        start_ts,
        commit_ts,
        prewrite_key=key,
        prewrite_value=value,
        ddl_query=query,
        ddl_job_id=job,
        ddl_schema_state=state,
    )
    want = binlog_pb2.Binlog.FromString(payload)
    got, view = split_binlog(payload)
    assert (view is None) == (value is None)
    if view is not None:
        assert view.obj is payload  # a view of the received bytes, not a copy
        assert bytes(view) == value
    assert not got.HasField("prewrite_value")
    want.ClearField("prewrite_value")
    assert got == want


def test_split_binlog_keeps_unknown_fields_and_the_last_value() -> None:
    payload = gogo.encode_binlog(binlog_pb2.Commit, 1, 2, prewrite_value=b"old") + b"\x2a\x03new" + b"\x98\x01\x07"
    got, view = split_binlog(payload)
    assert view is not None
    assert bytes(view) == b"new"
    assert got.SerializeToString().endswith(b"\x98\x01\x07")


def test_split_binlog_rejects_what_protobuf_rejects() -> None:
    for bad in (b"\xff\xff\xff", b"\x2a\x10short"):
        with pytest.raises(DecodeError):
            split_binlog(bad)


def test_pull_entity_is_a_view_of_the_response() -> None:
    payload = random.Random(1).randbytes(5000)
    raw = gogo.marshal_pull_resp(payload, 7, 9, checksum=b"c", suffix=1, offset=2)
    got, commit_ts = pull_entity(raw)
    assert got.obj is raw
    assert bytes(got) == payload
    assert commit_ts == 9
    assert pump_pb2.PullBinlogResp.FromString(raw).entity.payload == payload
    empty, ts = pull_entity(gogo.marshal_pull_resp(b"", 0, 0))
    assert (bytes(empty), ts) == (b"", 0)
