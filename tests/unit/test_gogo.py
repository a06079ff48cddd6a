"""Golden vectors (docs/formats.md#gogo-encoding) and properties of the gogo marshaller."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import CodecError
from common.pb import binlog_pb2, gogo, pump_pb2

INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
INT32 = st.integers(min_value=-(1 << 31), max_value=(1 << 31) - 1)
UINT64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
BLOBS = st.binary(max_size=300)

MUTATION_TYPES = [binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteID, binlog_pb2.DeletePK, binlog_pb2.DeleteRow]
TM_17 = "08 2d 12 01 01 1a 01 02 32 01 03 38 00 38 01 38 04"


def h(s: str) -> bytes:
    return bytes.fromhex(s)


def table_mutation_45() -> binlog_pb2.TableMutation:
    return binlog_pb2.TableMutation(
        table_id=45,
        inserted_rows=[b"\x01"],
        updated_rows=[b"\x02"],
        deleted_rows=[b"\x03"],
        sequence=[binlog_pb2.Insert, binlog_pb2.Update, binlog_pb2.DeleteRow],
    )


# ------------------------------------------------------------------------------------------ golden vectors


def test_zero_binlog() -> None:
    out = gogo.marshal_binlog(binlog_pb2.Binlog())
    assert out == h("08 00 10 00 18 00 38 00 40 00")
    assert binlog_pb2.Binlog().SerializeToString() == b""  # what python alone would write
    assert binlog_pb2.Binlog.FromString(out) == binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite, start_ts=0, commit_ts=0, ddl_job_id=0, ddl_schema_state=0
    )


def test_commit_binlog() -> None:
    msg = binlog_pb2.Binlog(
        tp=binlog_pb2.Commit, start_ts=400000000000000001, commit_ts=400000000000000002, prewrite_key=b"k"
    )
    want = h("08 01 10 81 80 a0 b1 97 bc c5 c6 05 18 82 80 a0 b1 97 bc c5 c6 05 22 01 6b 38 00 40 00")
    assert gogo.marshal_binlog(msg) == want
    assert gogo.encode_binlog(1, 400000000000000001, 400000000000000002, prewrite_key=b"k") == want
    parsed = binlog_pb2.Binlog.FromString(want)
    assert parsed.start_ts == 400000000000000001
    assert parsed.commit_ts == 400000000000000002
    assert parsed.prewrite_key == b"k"
    assert not parsed.HasField("prewrite_value")


def test_fake_binlog() -> None:
    out = gogo.fake_binlog(123)
    assert out == h("08 02 10 7b 18 7b 38 00 40 00")
    parsed = binlog_pb2.Binlog.FromString(out)
    assert (parsed.tp, parsed.start_ts, parsed.commit_ts) == (binlog_pb2.Rollback, 123, 123)


def test_table_mutation_and_prewrite_value() -> None:
    tm = table_mutation_45()
    assert gogo.marshal_table_mutation(tm) == h(TM_17)
    assert binlog_pb2.TableMutation.FromString(h(TM_17)) == tm
    pv = binlog_pb2.PrewriteValue(schema_version=7, mutations=[tm])
    want = h("08 07 12 11 " + TM_17)
    assert gogo.marshal_prewrite_value(pv) == want
    assert binlog_pb2.PrewriteValue.FromString(want) == pv


def test_packed_sequence_input_is_reemitted_unpacked() -> None:
    # sequence (field 7) packed: 3a 03 00 01 04
    packed = h("08 2d 12 01 01 1a 01 02 32 01 03 3a 03 00 01 04")
    parsed = binlog_pb2.TableMutation.FromString(packed)
    assert parsed == table_mutation_45()
    assert gogo.marshal_table_mutation(parsed) == h(TM_17)


def test_negative_schema_state_is_ten_bytes() -> None:
    out = gogo.marshal_binlog(binlog_pb2.Binlog(ddl_schema_state=-1))
    assert out.endswith(h("40 ff ff ff ff ff ff ff ff ff 01"))
    assert out == h("08 00 10 00 18 00 38 00 40 ff ff ff ff ff ff ff ff ff 01")
    assert binlog_pb2.Binlog.FromString(out).ddl_schema_state == -1


def test_empty_set_prewrite_key() -> None:
    msg = binlog_pb2.Binlog(prewrite_key=b"")
    assert msg.HasField("prewrite_key")
    out = gogo.marshal_binlog(msg)
    assert out == h("08 00 10 00 18 00 22 00 38 00 40 00")
    assert h("22 00") in out
    assert binlog_pb2.Binlog.FromString(out).HasField("prewrite_key")
    assert gogo.encode_binlog(0, 0, prewrite_key=b"") == out
    assert gogo.encode_binlog(0, 0) == h("08 00 10 00 18 00 38 00 40 00")


def test_ddl_binlog_matches_python_when_fields_set() -> None:
    msg = binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite,
        start_ts=5,
        commit_ts=0,
        prewrite_key=b"pk",
        ddl_query=b"create database a;",
        ddl_job_id=77,
        ddl_schema_state=5,
    )
    assert gogo.marshal_binlog(msg) == msg.SerializeToString()


def test_entity_example() -> None:
    want = h("0a 00 12 01 70 22 04 08 01 10 02")
    assert gogo.marshal_entity(b"p", 1, 2) == want
    entity = pump_pb2.Entity(pos=pump_pb2.Pos(), payload=b"p", meta=pump_pb2.Meta(startTs=1, commitTs=2))
    assert gogo.marshal_entity_message(entity) == want
    assert pump_pb2.Entity.FromString(want) == entity
    resp = gogo.marshal_pull_resp(b"p", 1, 2)
    assert resp == h("0a 0b") + want
    assert gogo.marshal_pull_resp_message(pump_pb2.PullBinlogResp(entity=entity)) == resp
    assert pump_pb2.PullBinlogResp.FromString(resp).entity == entity


def test_empty_entity_always_has_pos_and_meta() -> None:
    assert gogo.marshal_entity(b"") == h("0a 00 22 00")
    assert gogo.marshal_pull_resp(b"") == h("0a 04 0a 00 22 00")
    assert gogo.marshal_entity_message(pump_pb2.Entity()) == h("0a 00 22 00")


def test_entity_with_pos_checksum_and_big_payload() -> None:
    payload = gogo.fake_binlog(400000000000000001) * 20  # > 127 bytes: two-byte length
    out = gogo.marshal_pull_resp(payload, 3, 4, checksum=b"\x01\x02", suffix=9, offset=-2)
    resp = pump_pb2.PullBinlogResp.FromString(out)
    e = resp.entity
    assert (e.payload, e.checksum, e.pos.suffix, e.pos.offset, e.meta.startTs, e.meta.commitTs) == (
        payload,
        b"\x01\x02",
        9,
        -2,
        3,
        4,
    )
    assert gogo.marshal_pull_resp_message(resp) == out


# ------------------------------------------------------------------------------------------ unknown fields


def test_unknown_fields_reemitted_at_end() -> None:
    # tp=1, field 9 varint 5, start_ts=2, field 10 bytes "z"
    msg = binlog_pb2.Binlog.FromString(h("08 01 48 05 10 02 52 01 7a"))
    assert gogo.marshal_binlog(msg) == h("08 01 10 02 18 00 38 00 40 00 48 05 52 01 7a")


def test_unknown_fields_nested_and_entity() -> None:
    tm = binlog_pb2.TableMutation.FromString(h("08 01 78 03"))  # field 15 varint 3
    pv = binlog_pb2.PrewriteValue(schema_version=1, mutations=[tm])
    assert gogo.marshal_table_mutation(tm) == h("08 01 78 03")
    assert gogo.marshal_prewrite_value(pv) == h("08 01 12 04 08 01 78 03")
    pv2 = binlog_pb2.PrewriteValue.FromString(h("08 01 12 04 08 01 78 03 28 09"))
    assert gogo.marshal_prewrite_value(pv2) == h("08 01 12 04 08 01 78 03 28 09")
    # Entity whose pos, meta and itself carry unknown fields (field 5 varint 1).
    raw = h("0a 02 28 01 12 01 70 22 04 08 01 28 01 28 01")
    entity = pump_pb2.Entity.FromString(raw)
    assert gogo.marshal_entity_message(entity) == raw


# ------------------------------------------------------------------------------------------ varints


def reference_uvarint(v: int) -> bytes:
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@pytest.mark.parametrize(
    "value",
    [0, 1, 127, 128, 300, 0x3FFF, 0x4000, 0x1FFFFF, 0x200000, 400000000000000001, (1 << 63) - 1, (1 << 64) - 1],
)
def test_uvarint_boundaries(value: int) -> None:
    assert gogo.uvarint(value) == reference_uvarint(value)


def test_varint_negative_and_errors() -> None:
    assert gogo.varint(-1) == h("ff ff ff ff ff ff ff ff ff 01")
    assert gogo.varint(-(1 << 63)) == reference_uvarint(1 << 63)
    with pytest.raises(CodecError):
        gogo.uvarint(-1)
    with pytest.raises(CodecError):
        gogo.uvarint(1 << 64)
    with pytest.raises(CodecError):
        gogo.varint(-(1 << 63) - 1)
    with pytest.raises(CodecError):
        gogo.encode_binlog(0, 1 << 64)
    with pytest.raises(CodecError):
        gogo.encode_binlog(0, -(1 << 63) - 1)


def test_high_part_cache_wraps() -> None:
    values = [(i << 21) | 0x1ABCD for i in range(1, 5000)]  # more distinct high parts than the cache holds
    for v in values + values[:10]:
        assert gogo.uvarint(v) == reference_uvarint(v)


@given(UINT64)
def test_uvarint_property(value: int) -> None:
    assert gogo.uvarint(value) == reference_uvarint(value)


# ------------------------------------------------------------------------------------------ properties


@st.composite
def table_mutations(draw: st.DrawFn) -> binlog_pb2.TableMutation:
    m = binlog_pb2.TableMutation(
        inserted_rows=draw(st.lists(BLOBS, max_size=3)),
        updated_rows=draw(st.lists(BLOBS, max_size=3)),
        deleted_ids=draw(st.lists(INT64, max_size=3)),
        deleted_pks=draw(st.lists(BLOBS, max_size=2)),
        deleted_rows=draw(st.lists(BLOBS, max_size=3)),
        sequence=draw(st.lists(st.sampled_from(MUTATION_TYPES), max_size=8)),
    )
    if draw(st.booleans()):
        m.table_id = draw(INT64)
    return m


@st.composite
def prewrite_values(draw: st.DrawFn) -> binlog_pb2.PrewriteValue:
    pv = binlog_pb2.PrewriteValue(mutations=draw(st.lists(table_mutations(), max_size=3)))
    if draw(st.booleans()):
        pv.schema_version = draw(INT64)
    return pv


@st.composite
def binlogs(draw: st.DrawFn) -> binlog_pb2.Binlog:
    b = binlog_pb2.Binlog()
    for name, values in (
        ("tp", st.sampled_from([0, 1, 2, 3, 4])),
        ("start_ts", INT64),
        ("commit_ts", INT64),
        ("prewrite_key", BLOBS),
        ("prewrite_value", BLOBS),
        ("ddl_query", BLOBS),
        ("ddl_job_id", INT64),
        ("ddl_schema_state", INT32),
    ):
        if draw(st.booleans()):
            setattr(b, name, draw(values))
    return b


def with_non_nullable_set(msg: binlog_pb2.Binlog) -> binlog_pb2.Binlog:
    out = binlog_pb2.Binlog()
    out.CopyFrom(msg)
    out.tp = msg.tp
    out.start_ts = msg.start_ts
    out.commit_ts = msg.commit_ts
    out.ddl_job_id = msg.ddl_job_id
    out.ddl_schema_state = msg.ddl_schema_state
    return out


def tm_with_non_nullable_set(msg: binlog_pb2.TableMutation) -> binlog_pb2.TableMutation:
    out = binlog_pb2.TableMutation()
    out.CopyFrom(msg)
    out.table_id = msg.table_id
    return out


def pv_with_non_nullable_set(msg: binlog_pb2.PrewriteValue) -> binlog_pb2.PrewriteValue:
    return binlog_pb2.PrewriteValue(
        schema_version=msg.schema_version, mutations=[tm_with_non_nullable_set(m) for m in msg.mutations]
    )


@settings(max_examples=150)
@given(binlogs())
def test_binlog_roundtrip_and_python_equality(msg: binlog_pb2.Binlog) -> None:
    out = gogo.marshal_binlog(msg)
    want = with_non_nullable_set(msg)
    assert binlog_pb2.Binlog.FromString(out) == want
    assert out == want.SerializeToString()
    assert gogo.marshal_binlog(want) == out


@settings(max_examples=100)
@given(table_mutations())
def test_table_mutation_roundtrip_and_python_equality(msg: binlog_pb2.TableMutation) -> None:
    out = gogo.marshal_table_mutation(msg)
    want = tm_with_non_nullable_set(msg)
    assert binlog_pb2.TableMutation.FromString(out) == want
    assert out == want.SerializeToString()


@settings(max_examples=100)
@given(prewrite_values())
def test_prewrite_value_roundtrip_and_python_equality(msg: binlog_pb2.PrewriteValue) -> None:
    out = gogo.marshal_prewrite_value(msg)
    want = pv_with_non_nullable_set(msg)
    assert binlog_pb2.PrewriteValue.FromString(out) == want
    assert out == want.SerializeToString()


@settings(max_examples=100)
@given(st.tuples(BLOBS, INT64, INT64, BLOBS, UINT64, INT64))
def test_entity_matches_python_with_present_submessages(fields: tuple[bytes, int, int, bytes, int, int]) -> None:
    payload, start_ts, commit_ts, checksum, suffix, offset = fields
    out = gogo.marshal_pull_resp(payload, start_ts, commit_ts, checksum=checksum, suffix=suffix, offset=offset)
    resp = pump_pb2.PullBinlogResp()
    e = resp.entity
    e.SetInParent()
    e.pos.SetInParent()
    e.meta.SetInParent()
    e.payload, e.checksum = payload, checksum
    e.pos.suffix, e.pos.offset = suffix, offset
    e.meta.startTs, e.meta.commitTs = start_ts, commit_ts
    assert out == resp.SerializeToString()
    assert pump_pb2.PullBinlogResp.FromString(out) == resp
    assert gogo.marshal_entity(payload, start_ts, commit_ts, checksum=checksum, suffix=suffix, offset=offset) == (
        e.SerializeToString()
    )
