"""Row changes captured into TableMutation exactly as TiDB does (wire-formats §1, §7.2)."""

from __future__ import annotations

from collections.abc import Mapping

from common.codec import EXTRA_HANDLE_ID, Datum, decode_deleted_row, decode_inserted_row, decode_updated_row, unflatten
from common.codec.flatten import ColumnType, MySQLType
from common.pb import binlog_pb2
from common.pb.gogo import marshal_prewrite_value
from common.schema.model import ColumnInfo, IndexInfo, TableInfo
from upstream.commit import prewrite_key
from upstream.mutation import MutationLog, handle_datum_value

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
