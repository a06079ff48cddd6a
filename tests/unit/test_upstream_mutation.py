"""Row changes captured into TableMutation exactly as TiDB does (docs/formats.md#row-format)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from common.codec import (
    EXTRA_HANDLE_ID,
    Datum,
    decode_deleted_row,
    decode_inserted_row,
    decode_updated_row,
    encode_deleted_row,
    encode_inserted_row,
    encode_updated_row,
    flatten,
    unflatten,
)
from common.codec.datum import encode_datum, int_datum
from common.codec.flatten import ColumnType, MySQLType
from common.pb import binlog_pb2
from common.pb.gogo import marshal_binlog, marshal_prewrite_value
from common.schema.model import ColumnInfo, IndexInfo, TableInfo
from upstream.commit import encode_prewrite, prewrite_key
from upstream.mutation import BIG_VALUE, MutationLog, handle_datum_value, row_pieces

BIGINT = ColumnType(MySQLType.LONGLONG, 20, 0)
UBIGINT = ColumnType(MySQLType.LONGLONG, 20, 0, unsigned=True)
VARCHAR = ColumnType(MySQLType.VARCHAR, 10)


def pk_table(pk_type: ColumnType = BIGINT) -> TableInfo:
    return TableInfo(
        45,
        "t",
        (
            ColumnInfo(1, "id", 0, "bigint(20)", pk_type, nullable=False),
            ColumnInfo(2, "name", 1, "varchar(10)", VARCHAR),
            ColumnInfo(3, "note", 2, "varchar(10)", VARCHAR, default="'x'"),
        ),
        (IndexInfo(1, "PRIMARY", ("id",), unique=True, primary=True),),
        pk_is_handle=True,
        max_column_id=3,
        max_index_id=1,
    )


def rowid_table() -> TableInfo:
    return TableInfo(46, "u", (ColumnInfo(1, "name", 0, "varchar(10)", VARCHAR),), max_column_id=1)


def values(t: TableInfo, row: Mapping[int, Datum]) -> dict[str, object]:
    by_id = {c.id: c for c in t.columns}
    return {by_id[cid].lname: unflatten(d, by_id[cid].ctype) for cid, d in row.items() if cid in by_id}


def test_seed_sequence_insert_insert_update_update_delete_insert() -> None:
    t = pk_table()
    m = MutationLog()
    r = {1: {"id": 1, "name": "a", "note": "x"}, 2: {"id": 2, "name": "b", "note": None}}
    m.insert(t, 1, r[1])
    m.insert(t, 2, r[2])
    m.update(t, 1, r[1], {**r[1], "name": "a2"})
    m.update(t, 2, r[2], {**r[2], "name": "b2"})
    m.delete(t, 1, {**r[1], "name": "a2"})
    m.insert(t, 3, {"id": 3, "name": None, "note": "z"})
    pv = m.prewrite_value(7)
    assert pv.schema_version == 7
    (tm,) = pv.mutations
    assert tm.table_id == 45
    assert list(tm.sequence) == [
        binlog_pb2.Insert,
        binlog_pb2.Insert,
        binlog_pb2.Update,
        binlog_pb2.Update,
        binlog_pb2.DeleteRow,
        binlog_pb2.Insert,
    ]
    assert (len(tm.inserted_rows), len(tm.updated_rows), len(tm.deleted_rows)) == (3, 2, 1)
    # inserted: handle datum, then every column but the handle column; NULL with NULL default left out,
    # NULL of a column with a non-NULL default kept
    handle, row = decode_inserted_row(tm.inserted_rows[0])
    assert handle[0].value == 1
    assert values(t, row) == {"name": "a", "note": "x"}
    _, row2 = decode_inserted_row(tm.inserted_rows[1])
    assert values(t, row2) == {"name": "b", "note": None}
    _, row3 = decode_inserted_row(tm.inserted_rows[2])
    assert values(t, row3) == {"note": "z"}
    old, new = decode_updated_row(tm.updated_rows[0])
    assert values(t, old) == r[1]
    assert values(t, new) == {**r[1], "name": "a2"}
    assert values(t, decode_deleted_row(tm.deleted_rows[0])) == {**r[1], "name": "a2"}
    assert binlog_pb2.PrewriteValue.FromString(marshal_prewrite_value(pv)) == pv
    assert m.size > 0
    assert bool(m)


def test_rowid_table_carries_extra_handle_in_updates_and_deletes() -> None:
    t = rowid_table()
    m = MutationLog()
    m.insert(t, 9, {"name": "a"})
    m.update(t, 9, {"name": "a"}, {"name": "b"})
    m.delete(t, 9, {"name": "b"})
    (tm,) = m.prewrite_value(1).mutations
    handle, row = decode_inserted_row(tm.inserted_rows[0])
    assert handle[0].value == 9
    assert values(t, row) == {"name": "a"}
    old, new = decode_updated_row(tm.updated_rows[0])
    assert old[EXTRA_HANDLE_ID].value == 9
    assert new[EXTRA_HANDLE_ID].value == 9
    assert decode_deleted_row(tm.deleted_rows[0])[EXTRA_HANDLE_ID].value == 9


def test_unsigned_handle_is_its_int64_bit_pattern() -> None:
    assert handle_datum_value(2**64 - 1) == -1
    assert handle_datum_value(5) == 5
    m = MutationLog()
    m.insert(pk_table(UBIGINT), 2**64 - 1, {"id": 2**64 - 1, "name": None, "note": None})
    handle, _ = decode_inserted_row(m.prewrite_value(1).mutations[0].inserted_rows[0])
    assert handle[0].value == -1


def test_prewrite_key_shape() -> None:
    k = prewrite_key(45, 7)
    assert k[:1] == b"t"
    assert k[9:11] == b"_r"
    assert len(k) == 19
    assert prewrite_key(45, 7) < prewrite_key(45, 8) < prewrite_key(46, -5)


BLOB = ColumnType(MySQLType.LONG_BLOB, 4294967295)


def blob_table() -> TableInfo:
    return TableInfo(
        47,
        "b",
        (
            ColumnInfo(1, "id", 0, "bigint(20)", BIGINT, nullable=False),
            ColumnInfo(2, "a", 1, "longblob", BLOB),
            ColumnInfo(3, "name", 2, "varchar(10)", VARCHAR),
            ColumnInfo(4, "b", 3, "longblob", BLOB),
        ),
        (IndexInfo(1, "PRIMARY", ("id",), unique=True, primary=True),),
        pk_is_handle=True,
        max_column_id=4,
        max_index_id=1,
    )


@pytest.mark.parametrize("size", [0, 63, BIG_VALUE - 1, BIG_VALUE, BIG_VALUE + 1, 1 << 20])
@pytest.mark.parametrize("handle", [0, 63, 64, -65, 2**40])
def test_row_pieces_are_the_codec_bytes_and_keep_big_values(size: int, handle: int) -> None:
    t = blob_table()
    blob, other = b"\x07" * size, b"\x09" * (size // 2)
    row = {"id": handle, "a": blob, "name": "x", "b": other}
    ids = [2, 3, 4]
    values = [flatten(row[c], BLOB if c != "name" else VARCHAR) for c in ("a", "name", "b")]
    hd = encode_datum(int_datum(handle))
    inserted = row_pieces(hd, [(ids, values)])
    assert b"".join(inserted) == encode_inserted_row(handle, ids, values)
    new_values = [values[0], flatten("y", VARCHAR), values[2]]
    updated = row_pieces(b"", [(ids, values), (ids, new_values)])
    assert b"".join(updated) == encode_updated_row(ids, values, new_values)
    assert b"".join(row_pieces(b"", [(ids, values)])) == encode_deleted_row(ids, values)
    kept = [p for p in inserted if p is blob or p is other]
    assert len(kept) == (size >= BIG_VALUE) + (size // 2 >= BIG_VALUE)
    m = MutationLog()
    m.insert(t, handle, row)
    (tm,) = m.prewrite_value(1).mutations
    assert tm.inserted_rows[0] == encode_inserted_row(handle, [2, 3, 4], values)


def test_prewrite_binlog_pieces_are_gogo_bytes() -> None:
    t, u, b = pk_table(), rowid_table(), blob_table()
    m = MutationLog()
    big = b"\x01" * (BIG_VALUE + 5)
    m.insert(t, 1, {"id": 1, "name": "a", "note": "x"})
    m.insert(b, 300, {"id": 300, "a": big, "name": None, "b": b"small"})
    m.insert(u, 9, {"name": "a"})
    m.update(t, 1, {"id": 1, "name": "a", "note": "x"}, {"id": 1, "name": "a2", "note": "x"})
    m.update(b, 300, {"id": 300, "a": big, "name": None, "b": b"small"}, {"id": 300, "a": b"", "name": "n", "b": big})
    m.delete(u, 9, {"name": "a"})
    m.delete(b, 300, {"id": 300, "a": b"", "name": "n", "b": big})
    pv_parts = m.prewrite_value_parts(300)
    assert b"".join(pv_parts) == marshal_prewrite_value(m.prewrite_value(300))
    assert sum(p is big for p in pv_parts) == 4  # insert, update (old a, new b), delete: referenced, not copied
    assert 0 < sum(len(p) for p in pv_parts) - m.size <= 32  # size misses only the per-table headers
    key = prewrite_key(47, 300)
    encoded = encode_prewrite(2**60 + 7, key, pv_parts)
    want = marshal_binlog(
        binlog_pb2.Binlog(
            tp=binlog_pb2.Prewrite, start_ts=2**60 + 7, prewrite_key=key, prewrite_value=b"".join(pv_parts)
        )
    )
    assert encoded.size == len(want)
    assert encoded.join() == want
    m.clear()
    assert not m
    assert m.prewrite_value_parts(1) == [b"\x08\x01"]


def test_golden_prewrite_binlog() -> None:
    m = MutationLog()
    m.insert(pk_table(), 1, {"id": 1, "name": "a", "note": None})
    encoded = encode_prewrite(5, b"k", m.prewrite_value_parts(7))
    # Binlog{tp 0, start_ts 5, commit_ts 0, key "k", value PrewriteValue{7, [TableMutation{45,
    # inserted [08 02 | 08 04 02 02 61 | 08 06 00], sequence [Insert]}]}, ddl_job_id 0, ddl_schema_state 0}
    assert encoded.join().hex() == (
        "0800" "1005" "1800" "22016b" "2a14" "0807" "1210" "082d" "120a" "0802" "08040202" "61" "080600" "3800" "3800"
        "4000"
    )  # fmt: skip
