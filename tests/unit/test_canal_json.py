"""Canal-JSON messages: golden JSON per column type family, UPDATE/DELETE/DDL layout, grouping and
splitting by size, the too-large row, bad values, and the transactions that have no message."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from common.codec.flatten import to_float32
from common.codec.mytime import MysqlTime
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import parse_type
from drainer.canal_json import encode_txn

TS = (1_700_000_000_123 << 18) | 7
"""A commit_ts whose physical part is 1700000000123 ms."""
ES = 1_700_000_000_123
NOW = 1_700_000_001.5
NOW_MS = 1_700_000_001_500


def clock() -> float:
    return NOW


def shape(db: str, table: str, *cols: tuple[str, str], pk: tuple[str, ...] | None = None) -> TableShape:
    columns = []
    for i, (name, text) in enumerate(cols):
        ct, canonical = parse_type(text)
        columns.append(ColumnInfo(id=i + 1, name=name, offset=i, type_text=canonical, ctype=ct))
    keys = (IndexInfo(1, "PRIMARY", pk, True, True),) if pk else ()
    return TableShape.of(db, TableInfo(id=100, name=table, columns=tuple(columns), indices=keys))


def ins(s: TableShape, *values: Any, ts: int = TS) -> DML:
    return DML(DMLType.INSERT, s, values=tuple(values), commit_ts=ts)


def upd(s: TableShape, new: tuple[Any, ...], old: tuple[Any, ...], ts: int = TS) -> DML:
    return DML(DMLType.UPDATE, s, values=new, old_values=old, commit_ts=ts)


def dele(s: TableShape, *values: Any, ts: int = TS) -> DML:
    return DML(DMLType.DELETE, s, old_values=tuple(values), commit_ts=ts)


def encode(txn: Txn, limit: int | None = None) -> list[dict[str, Any]]:
    """The messages, each checked to parse and to carry the extension with a consistent seq/count."""
    raw = encode_txn(txn, max_message_size=limit, clock=clock)
    msgs = [json.loads(m) for m in raw]
    for i, (m, b) in enumerate(zip(msgs, raw, strict=True)):
        assert list(m) == KEYS
        assert m["_tidb"] == {"commitTs": txn.commit_ts, "seq": i, "count": len(raw)}
        assert m["es"] == txn.commit_ts >> 18
        assert m["ts"] == NOW_MS
        if limit is not None:
            assert len(b) <= limit
    return msgs


KEYS = [
    "id",
    "database",
    "table",
    "pkNames",
    "isDdl",
    "type",
    "es",
    "ts",
    "sql",
    "sqlType",
    "mysqlType",
    "data",
    "old",
    "_tidb",
]

# ------------------------------------------------------------------------------------------- golden bytes

INTS = shape(
    "test",
    "tp_int",
    ("id", "int"),
    ("c_tinyint", "tinyint"),
    ("c_smallint", "smallint"),
    ("c_mediumint", "mediumint"),
    ("c_bigint", "bigint"),
    pk=("id",),
)


def test_golden_insert_bytes() -> None:
    txn = Txn(TS, dmls=[ins(INTS, 2, 127, 32767, 8388607, 9223372036854775807)])
    assert encode_txn(txn, clock=clock) == [
        b'{"id":0,"database":"test","table":"tp_int","pkNames":["id"],"isDdl":false,"type":"INSERT",'
        b'"es":1700000000123,"ts":1700000001500,"sql":"",'
        b'"sqlType":{"id":4,"c_tinyint":-6,"c_smallint":5,"c_mediumint":4,"c_bigint":-5},'
        b'"mysqlType":{"id":"int(11)","c_tinyint":"tinyint(4)","c_smallint":"smallint(6)",'
        b'"c_mediumint":"mediumint(9)","c_bigint":"bigint(20)"},'
        b'"data":[{"id":"2","c_tinyint":"127","c_smallint":"32767","c_mediumint":"8388607",'
        b'"c_bigint":"9223372036854775807"}],'
        b'"old":null,"_tidb":{"commitTs":445644800032243719,"seq":0,"count":1}}'
    ]
    assert TS == 445644800032243719


def test_golden_ddl_bytes() -> None:
    query = "ALTER TABLE t ADD COLUMN c int"
    job = Job(3, JobType.ADD_COLUMN, 1, "test", 2, "t", 9, query)
    txn = Txn(TS, ddl=DDL("test", "t", query, job, InfoSchema()))
    assert encode_txn(txn, clock=clock) == [
        b'{"id":0,"database":"test","table":"t","pkNames":null,"isDdl":true,"type":"ALTER",'
        b'"es":1700000000123,"ts":1700000001500,"sql":"ALTER TABLE t ADD COLUMN c int",'
        b'"sqlType":null,"mysqlType":null,"data":null,"old":null,'
        b'"_tidb":{"commitTs":445644800032243719,"seq":0,"count":1}}'
    ]


# ------------------------------------------------------------------------------------------- one family per txn


def one(type_text: str, *values: Any) -> dict[str, Any]:
    """The only message of a txn inserting `values` into (id int PRIMARY KEY, c <type_text>)."""
    s = shape("db", "t", ("id", "int"), ("c", type_text), pk=("id",))
    msgs = encode(Txn(TS, dmls=[ins(s, i + 1, v) for i, v in enumerate(values)]))
    assert len(msgs) == 1
    return msgs[0]


def golden(type_text: str, sql_type: int, *texts: str | None) -> dict[str, Any]:
    return {
        "id": 0,
        "database": "db",
        "table": "t",
        "pkNames": ["id"],
        "isDdl": False,
        "type": "INSERT",
        "es": ES,
        "ts": NOW_MS,
        "sql": "",
        "sqlType": {"id": 4, "c": sql_type},
        "mysqlType": {"id": "int(11)", "c": type_text},
        "data": [{"id": str(i + 1), "c": t} for i, t in enumerate(texts)],
        "old": None,
        "_tidb": {"commitTs": TS, "seq": 0, "count": 1},
    }


FAMILIES: list[tuple[str, tuple[Any, ...], str, int, tuple[str | None, ...]]] = [
    # type text, values, canonical type text, sqlType, value texts
    ("tinyint", (-128, 127), "tinyint(4)", -6, ("-128", "127")),
    ("smallint", (-32768,), "smallint(6)", 5, ("-32768",)),
    ("mediumint", (-8388608,), "mediumint(9)", 4, ("-8388608",)),
    ("int", (-2147483648,), "int(11)", 4, ("-2147483648",)),
    ("bigint", (-9223372036854775808,), "bigint(20)", -5, ("-9223372036854775808",)),
    ("tinyint unsigned", (127,), "tinyint(3) unsigned", -6, ("127",)),
    ("tinyint unsigned", (0, 255), "tinyint(3) unsigned", 5, ("0", "255")),
    ("smallint unsigned", (32767,), "smallint(5) unsigned", 5, ("32767",)),
    ("smallint unsigned", (65535,), "smallint(5) unsigned", 4, ("65535",)),
    ("mediumint unsigned", (16777215,), "mediumint(8) unsigned", 4, ("16777215",)),
    ("int unsigned", (2147483647,), "int(10) unsigned", 4, ("2147483647",)),
    ("int unsigned", (4294967295,), "int(10) unsigned", -5, ("4294967295",)),
    ("bigint unsigned", (9223372036854775807,), "bigint(20) unsigned", -5, ("9223372036854775807",)),
    ("bigint unsigned", (18446744073709551615,), "bigint(20) unsigned", 3, ("18446744073709551615",)),
    ("float", (to_float32(3.14), to_float32(-0.1), 1e20), "float", 7, ("3.14", "-0.1", "100000000000000000000")),
    ("double", (0.1, 1e-7, 2.5e20, -0.0), "double", 8, ("0.1", "0.0000001", "250000000000000000000", "-0")),
    ("decimal(10,2)", (Decimal("1.50"), Decimal("-12345678.90")), "decimal(10,2)", 3, ("1.50", "-12345678.90")),
    ("date", (dt.date(2024, 2, 29), MysqlTime(0, 0, 0)), "date", 91, ("2024-02-29", "0000-00-00")),
    (
        "datetime(3)",
        (dt.datetime(2024, 1, 2, 3, 4, 5, 123000),),
        "datetime(3)",
        93,
        ("2024-01-02 03:04:05.123",),
    ),
    (
        "timestamp",  # in UTC whatever zone the value carries
        (dt.datetime(2024, 1, 2, 8, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=8))),),
        "timestamp",
        93,
        ("2024-01-02 00:00:00",),
    ),
    ("time(2)", (dt.timedelta(hours=-838, minutes=-59, seconds=-59),), "time(2)", 92, ("-838:59:59.00",)),
    ("year", (2024, 0), "year(4)", 12, ("2024", "0")),
    ("char(5)", ("ab",), "char(5)", 1, ("ab",)),
    ("varchar(20)", ('héllo "q" <&>',), "varchar(20)", 12, ('héllo "q" <&>',)),
    ("text", ("t\n",), "text", 2005, ("t\n",)),
    ("binary(4)", (b"\x00\x7f\x80\xff",), "binary(4)", 2004, ("\x00\x7f\x80\xff",)),
    (
        "varbinary(16)",
        (bytes([5, 7, 10, 15, 36, 50, 43, 99, 120, 60, 38, 255, 254, 45, 55, 70]),),
        "varbinary(16)",
        2004,
        ("\x05\x07\n\x0f$2+cx<&ÿþ-7F",),
    ),
    ("blob", (b"",), "blob", 2004, ("",)),
    ("enum('a','b','c')", ("a", "c", ""), "enum('a','b','c')", 4, ("1", "3", "0")),
    ("set('a','b','c')", ("a,c", ""), "set('a','b','c')", -7, ("5", "0")),
    ("bit(9)", (b"\x01\x01", b"\x00\x00"), "bit(9)", -7, ("257", "0")),
    ("json", ({"b": [1, None, True], "a": "x"},), "json", 12, ('{"a": "x", "b": [1, null, true]}',)),
    ("varchar(3)", (None,), "varchar(3)", 12, (None,)),
]


@pytest.mark.parametrize(("type_text", "values", "canonical", "sql_type", "texts"), FAMILIES)
def test_column_type_family(
    type_text: str, values: tuple[Any, ...], canonical: str, sql_type: int, texts: tuple[str | None, ...]
) -> None:
    assert one(type_text, *values) == golden(canonical, sql_type, *texts)


def test_binary_bytes_come_back_through_latin1() -> None:
    every = bytes(range(256))
    msg = one("varbinary(300)", every)
    assert msg["data"][0]["c"].encode("latin-1") == every


def test_no_primary_key_is_null_and_composite_keys_in_table_order() -> None:
    s = shape("db", "t", ("a", "int"), ("b", "int"))
    assert encode(Txn(TS, dmls=[ins(s, 1, 2)]))[0]["pkNames"] is None
    s2 = shape("db", "t", ("a", "int"), ("b", "int"), pk=("b", "a"))
    assert encode(Txn(TS, dmls=[ins(s2, 1, 2)]))[0]["pkNames"] == ["a", "b"]


# ------------------------------------------------------------------------------------------- update / delete

T = shape("test", "t", ("id", "bigint"), ("name", "varchar(20)"), ("n", "int"), pk=("id",))


def test_update_old_holds_every_old_column() -> None:
    (msg,) = encode(Txn(TS, dmls=[upd(T, (1, "new", 5), (1, "old", 5)), upd(T, (2, None, 6), (2, "x", None))]))
    assert msg["type"] == "UPDATE"
    assert msg["data"] == [{"id": "1", "name": "new", "n": "5"}, {"id": "2", "name": None, "n": "6"}]
    assert msg["old"] == [{"id": "1", "name": "old", "n": "5"}, {"id": "2", "name": "x", "n": None}]


def test_delete_puts_the_row_in_data_and_old_is_null() -> None:
    (msg,) = encode(Txn(TS, dmls=[dele(T, 1, "a", 3)]))
    assert (msg["type"], msg["data"], msg["old"]) == ("DELETE", [{"id": "1", "name": "a", "n": "3"}], None)


def test_unsigned_widening_looks_at_old_rows_too() -> None:
    s = shape("db", "t", ("id", "int"), ("u", "tinyint unsigned"), pk=("id",))
    (msg,) = encode(Txn(TS, dmls=[upd(s, (1, 1), (1, 200))]))
    assert msg["sqlType"]["u"] == 5


# ------------------------------------------------------------------------------------------- DDL


@pytest.mark.parametrize(
    ("jtype", "db", "table", "canal_type", "database"),
    [
        (JobType.CREATE_SCHEMA, "", "", "QUERY", "newdb"),
        (JobType.DROP_SCHEMA, "newdb", "", "QUERY", "newdb"),
        (JobType.CREATE_TABLE, "newdb", "t", "CREATE", "newdb"),
        (JobType.DROP_TABLE, "newdb", "t", "ERASE", "newdb"),
        (JobType.TRUNCATE_TABLE, "newdb", "t", "TRUNCATE", "newdb"),
        (JobType.RENAME_TABLE, "newdb", "t2", "RENAME", "newdb"),
        (JobType.ADD_COLUMN, "newdb", "t", "ALTER", "newdb"),
        (JobType.DROP_COLUMN, "newdb", "t", "ALTER", "newdb"),
        (JobType.ADD_INDEX, "newdb", "t", "CINDEX", "newdb"),
        (JobType.DROP_INDEX, "newdb", "t", "DINDEX", "newdb"),
    ],
)
def test_ddl_types(jtype: JobType, db: str, table: str, canal_type: str, database: str) -> None:
    query = f'-- {jtype.value} "quoted" ünicode'
    job = Job(3, jtype, 1, "newdb", 2, table, 9, query)
    (msg,) = encode(Txn(TS, ddl=DDL(db, table, query, job, InfoSchema())))
    assert msg["isDdl"] is True
    assert (msg["type"], msg["database"], msg["table"], msg["sql"]) == (canal_type, database, table, query)
    assert [msg[k] for k in ("pkNames", "sqlType", "mysqlType", "data", "old")] == [None] * 5


def test_skipped_ddl_and_empty_txn_have_no_message() -> None:
    job = Job(3, JobType.ADD_COLUMN, 1, "d", 2, "t", 9, "ALTER TABLE t ADD c int")
    assert encode_txn(Txn(TS, ddl=DDL("d", "t", job.query, job, InfoSchema(), skip=True))) == []
    assert encode_txn(Txn(TS)) == []


def test_ddl_over_the_limit_is_refused() -> None:
    query = "CREATE TABLE t (" + "c int, " * 100 + "d int)"
    job = Job(3, JobType.CREATE_TABLE, 1, "d", 2, "t", 9, query)
    with pytest.raises(CodecError, match=rf"DDL of d\.t at commit_ts={TS} .* bytes, over the limit of 300 bytes"):
        encode_txn(Txn(TS, ddl=DDL("d", "t", query, job, InfoSchema())), max_message_size=300)


# ------------------------------------------------------------------------------------------- grouping


U = shape("test", "u", ("k", "int"), pk=("k",))


def test_consecutive_dmls_of_one_table_and_type_share_a_message() -> None:
    dmls = [
        ins(T, 1, "a", 1),
        ins(T, 2, "b", 2),
        ins(U, 1),
        ins(T, 3, "c", 3),
        upd(T, (3, "d", 3), (3, "c", 3)),
        upd(T, (2, "e", 2), (2, "b", 2)),
        dele(T, 1, "a", 1),
        ins(U, 2),
        ins(U, 3),
    ]
    msgs = encode(Txn(TS, dmls=dmls))
    assert [(m["table"], m["type"], len(m["data"])) for m in msgs] == [
        ("t", "INSERT", 2),
        ("u", "INSERT", 1),
        ("t", "INSERT", 1),
        ("t", "UPDATE", 2),
        ("t", "DELETE", 1),
        ("u", "INSERT", 2),
    ]
    assert [r["id"] for r in msgs[0]["data"]] == ["1", "2"]


def test_split_by_size_keeps_order_and_every_message_fits() -> None:
    dmls = [ins(T, i, "x" * (i % 17), i) for i in range(200)] + [
        upd(T, (i, "y" * 10, i), (i, "z", i)) for i in range(100)
    ]
    whole = encode(Txn(TS, dmls=dmls))
    assert len(whole) == 2
    for limit in (400, 1000, 4096):
        msgs = encode(Txn(TS, dmls=dmls), limit)
        assert len(msgs) > 2
        ins_rows = [r for m in msgs if m["type"] == "INSERT" for r in m["data"]]
        upd_rows = [(r, o) for m in msgs if m["type"] == "UPDATE" for r, o in zip(m["data"], m["old"], strict=True)]
        assert ins_rows == whole[0]["data"]
        assert upd_rows == list(zip(whole[1]["data"], whole[1]["old"], strict=True))


def test_split_packs_up_to_the_limit() -> None:
    dmls = [ins(T, i, "abcdefgh", i) for i in range(10, 60)]
    sizes = [len(m) for m in encode_txn(Txn(TS, dmls=dmls), clock=clock)]
    (size,) = sizes
    row = len(b',{"id":"10","name":"abcdefgh","n":"10"}')
    msgs = encode_txn(Txn(TS, dmls=dmls), max_message_size=size - 1, clock=clock)
    assert len(msgs) == 2
    # the first message is full: one more row would not have fit under the bound
    assert len(msgs[0]) + row > size - 1 - (len("50") - 1) * 2


def test_a_row_alone_over_the_limit_names_table_commit_ts_size_and_limit() -> None:
    dmls = [ins(T, 1, "small", 1), ins(T, 2, "x" * 1000, 2)]
    with pytest.raises(CodecError) as info:
        encode_txn(Txn(TS, dmls=dmls), max_message_size=800, clock=clock)
    text = str(info.value)
    assert f"test.t at commit_ts={TS}" in text
    assert "over the limit of 800 bytes" in text
    size = len(encode_txn(Txn(TS, dmls=dmls[1:]), clock=clock)[0])
    assert f"message of {size} bytes" in text


def test_a_limit_exactly_the_size_of_a_one_row_message_is_enough() -> None:
    (msg,) = encode_txn(Txn(TS, dmls=[ins(T, 1, "a", 1)]), clock=clock)
    assert len(encode_txn(Txn(TS, dmls=[ins(T, 1, "a", 1)]), max_message_size=len(msg), clock=clock)) == 1


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("type_text", "value"),
    [
        ("int", "7"),
        ("int", True),
        ("varchar(5)", b"bytes"),
        ("varbinary(5)", "text"),
        ("double", float("nan")),
        ("time", "12:00:00"),
        ("enum('a')", "zz"),
        ("date", "2024-01-01"),
    ],
)
def test_a_value_that_does_not_fit_its_column_is_a_clear_error(type_text: str, value: Any) -> None:
    s = shape("db", "t", ("id", "int"), ("c", type_text), pk=("id",))
    with pytest.raises(CodecError, match=rf"db\.t at commit_ts={TS}: column c: "):
        encode_txn(Txn(TS, dmls=[ins(s, 1, value)]))


def test_missing_row_image_and_wrong_width_are_errors() -> None:
    with pytest.raises(CodecError, match="has no row image"):
        encode_txn(Txn(TS, dmls=[DML(DMLType.UPDATE, T, values=(1, "a", 1), commit_ts=TS)]))
    with pytest.raises(CodecError, match="a row of 2 values, the table has 3 columns"):
        encode_txn(Txn(TS, dmls=[ins(T, 1, "a")]))


def test_parts_and_bad_limits_are_refused() -> None:
    with pytest.raises(CodecError, match="whole transactions"):
        encode_txn(Txn(TS, dmls=[ins(U, 1)], partial=True))
    with pytest.raises(ValueError, match="max_message_size must be positive"):
        encode_txn(Txn(TS, dmls=[ins(U, 1)]), max_message_size=0)
