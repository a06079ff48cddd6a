"""The relay record / secondary-binlog encoder (`drainer.relay_encoder`): byte for byte what protobuf's
`SerializeToString` gives for the same `slave.binlog.Binlog` built with message objects (the reference
below, the encoder this one replaced), for every column type, NULLs, integer and length boundaries,
every mutation type, several tables, DDLs and markers; values that do not fit fail alike, with errors
naming the column; random rows of the `types` table."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import tso
from common.codec.flatten import ColumnType, MySQLType
from common.codec.json_binary import json_to_text
from common.codec.mytime import format_duration
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb import secondary_binlog_pb2 as spb
from common.pbfile import time_text, type_name
from common.schema.infoschema import InfoSchema
from common.schema.model import IndexInfo, Job, JobType
from common.schema.types import check_value
from drainer import relay_encoder
from drainer.relay_codec import ShapeCache, decode_record
from drainer.relay_encoder import closing_marker, encode_txn, opening_marker
from tests.unit.test_drainer_relay import EVERY_SHAPE, EVERY_TYPE, T, every_row, ins, shape
from upstream.ddl import Planner
from upstream.workloads.gen import TYPES_COLUMNS, types_changes, types_row, types_table_columns

# --------------------------------------------------------------------------- the reference: message objects

_INT_TYPES = frozenset({MySQLType.TINY, MySQLType.SHORT, MySQLType.INT24, MySQLType.LONG, MySQLType.LONGLONG})
_TO_MUTATION = {DMLType.INSERT: spb.Insert, DMLType.UPDATE: spb.Update, DMLType.DELETE: spb.Delete}


def reference(txn: Txn) -> bytes | None:
    """The record built as `slave.binlog.Binlog` objects and serialized by protobuf."""
    ts = txn.commit_ts
    if txn.ddl is not None:
        if txn.ddl.skip:
            return None
        ddl = spb.DDLData(
            schema_name=relay_encoder.ddl_schema_name(txn.ddl),
            table_name=txn.ddl.table,
            ddl_query=txn.ddl.query.encode(),
        )
        return spb.Binlog(type=spb.DDL, commit_ts=ts, ddl_data=ddl).SerializeToString()
    if not txn.dmls:
        return None
    data = spb.DMLData()
    for _s, dmls in itertools.groupby(txn.dmls, key=lambda d: id(d.shape)):
        run = list(dmls)
        sh = run[0].shape
        table = data.tables.add(schema_name=sh.db, table_name=sh.table)
        _put_table_info(table, sh)
        for d in run:
            m = table.mutations.add(type=_TO_MUTATION[d.tp])
            if d.tp == DMLType.UPDATE:
                _put_row(m.row, sh, d.values)
                _put_row(m.change_row, sh, d.old_values)
            else:
                _put_row(m.row, sh, d.values if d.tp == DMLType.INSERT else d.old_values)
    return spb.Binlog(type=spb.DML, commit_ts=ts, dml_data=data, time_zone="UTC").SerializeToString()


def _put_table_info(table: spb.Table, sh: TableShape) -> None:
    pk = sh.info.primary_key
    keys = ([pk] if pk is not None else []) + [ix for ix in sh.info.unique_keys if not ix.primary]
    pk_cols = {c.lower() for c in keys[0].columns} if keys and keys[0].primary else set()
    for col in sh.columns:
        ct = col.ctype
        flen = ct.flen - (1 << 32) if ct.flen >= 1 << 31 else ct.flen  # protobuf refuses LONGBLOB's 2**32-1
        table.column_info.add(
            name=col.name, mysql_type=type_name(ct), is_primary_key=col.lname in pk_cols, flen=flen, decimal=ct.decimal
        )
    names = [c.name for c in sh.columns]
    for ix, positions in zip(keys, sh.unique_keys, strict=True):
        table.unique_keys.add(name="PRIMARY" if ix.primary else ix.name, column_names=[names[p] for p in positions])


def _put_row(row: spb.Row, sh: TableShape, values: Sequence[Any] | None) -> None:
    if values is None:
        raise CodecError("no row image")
    for col, v in zip(sh.columns, values, strict=True):
        c = row.columns.add()
        if v is None:
            c.is_null = True
        else:
            try:
                _put_value(c, v, col.ctype)
            except (TypeError, ValueError, AttributeError) as exc:
                raise CodecError(f"column {col.name}: {exc}") from None


def _put_value(c: spb.Column, v: Any, ct: ColumnType) -> None:
    tp = ct.tp
    if tp in _INT_TYPES:
        if ct.unsigned:
            c.uint64_value = v
        else:
            c.int64_value = v
    elif tp in (MySQLType.FLOAT, MySQLType.DOUBLE):
        c.double_value = float(v)
    elif tp in (MySQLType.DECIMAL, MySQLType.NEW_DECIMAL):
        c.string_value = format(v if isinstance(v, Decimal) else Decimal(str(v)), "f")
    elif tp == MySQLType.YEAR:
        c.string_value = str(int(v))
    elif tp in (MySQLType.DATE, MySQLType.DATETIME, MySQLType.TIMESTAMP):
        c.string_value = time_text(v, ct, dt.UTC)
    elif tp == MySQLType.DURATION:
        c.string_value = format_duration(v, ct.fsp)
    elif tp == MySQLType.JSON:
        c.bytes_value = json_to_text(v).encode()
    elif tp == MySQLType.ENUM:
        c.string_value = v
        c.uint64_value = next((i for i, e in enumerate(ct.elems, 1) if e.lower() == v.lower()), 0)
    elif tp == MySQLType.SET:
        c.string_value = v
        members = {m.lower() for m in v.split(",") if m}
        c.uint64_value = sum(1 << i for i, e in enumerate(ct.elems) if e.lower() in members)
    elif tp == MySQLType.BIT or ct.is_binary:
        c.bytes_value = bytes(v)
    else:
        c.string_value = v


def same(txn: Txn) -> bytes:
    """The record of `txn`, checked to be the reference's bytes."""
    got = encode_txn(txn)
    assert got is not None
    assert got == reference(txn)
    return got


# ------------------------------------------------------------------------------------------ byte identity

OLD = every_row(vc="before", dec=Decimal("0.001"), js=[], en="small", st="", tm=dt.timedelta(0))
NULLS = (1,) + (None,) * (len(EVERY_TYPE) - 1)


def test_every_column_type_nulls_and_every_mutation_type() -> None:
    row = every_row()
    same(
        Txn(
            9,
            dmls=[
                DML(DMLType.INSERT, EVERY_SHAPE, values=row, commit_ts=9),
                DML(DMLType.UPDATE, EVERY_SHAPE, values=row, old_values=OLD, commit_ts=9),
                DML(DMLType.DELETE, EVERY_SHAPE, old_values=OLD, commit_ts=9),
                DML(DMLType.INSERT, EVERY_SHAPE, values=NULLS, commit_ts=9),
                DML(DMLType.UPDATE, EVERY_SHAPE, values=NULLS, old_values=row, commit_ts=9),
            ],
        )
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"en": "BIG", "st": "C,a,,c"},  # members matched case-insensitively, repeats counted once
        {"en": "", "st": "nope"},  # not a member: index / mask 0
        {"ts": dt.datetime(2021, 6, 7, 8, 9, 10)},  # a naive TIMESTAMP is UTC
        {"ts": dt.datetime(2021, 6, 7, 8, 9, 10, tzinfo=dt.timezone(dt.timedelta(hours=5)))},
        {"js": None, "bt": b"\x00\x00", "f": float("inf"), "d": -0.0},
        {"js": "x" * 300, "bl": b"", "vc": "", "tx": "ü" * 70_000},
        {"dec": Decimal("1E+5"), "yr": 1901, "tm": dt.timedelta(microseconds=1)},
    ],
)
def test_odd_values(changes: dict[str, Any]) -> None:
    row = tuple(changes.get(c.name, v) for c, v in zip(EVERY_SHAPE.columns, every_row(), strict=True))
    same(Txn(10, dmls=[DML(DMLType.INSERT, EVERY_SHAPE, values=row, commit_ts=10)]))


INTS = shape("d", "ints", ("i", "bigint"), ("u", "bigint unsigned"), ("t", "tinyint"), ("mu", "int unsigned"))
BOUNDS = [0, 1, 127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**35 - 1, 2**35, 2**42, 2**56, 2**63 - 1]


def test_integer_varint_boundaries() -> None:
    dmls = [ins(1, v, v, 0, 0, s=INTS) for v in BOUNDS]
    dmls += [ins(1, -v, 2**64 - 1 - v, -128, 2**32 - 1, s=INTS) for v in BOUNDS]
    dmls += [ins(1, -(2**63), 2**63, 127, 2**31, s=INTS)]
    same(Txn(1, dmls=dmls))


@pytest.mark.parametrize("ts", [0, 1, 127, 128, 2**21, tso.compose(1_700_000_000_000, 5), 2**63 - 1, -1])
def test_commit_ts_and_markers(ts: int) -> None:
    same(Txn(ts, dmls=[ins(ts, 1, "a")]))
    assert opening_marker(ts) == spb.Binlog(type=spb.DML, commit_ts=ts).SerializeToString()
    closing = spb.Binlog(type=spb.DML, commit_ts=ts, dml_data=spb.DMLData())
    assert closing_marker(ts) == closing.SerializeToString()


LENGTHS = [
    0,
    1,
    115,
    116,
    117,
    119,
    120,
    121,
    125,
    126,
    127,
    128,
    16_368,
    16_369,
    16_370,
    16_374,
    16_380,
    16_384,
    2**21,
]


@pytest.mark.parametrize("n", LENGTHS)
def test_length_boundaries(n: int) -> None:
    """String lengths and row sizes around the one-, two- and three-byte length prefixes: a row of T
    inserting (1, "x" * n) is n + 8 bytes for n < 126, n + 10 from 128 (rows of 123 / 124 bytes, of 127 /
    128, and 16378 / 16379, where the mutation's size takes a third byte)."""
    s = shape("d", "b", ("id", "bigint"), ("b", "longblob"), ("t", "longtext"))
    same(Txn(2, dmls=[ins(2, 1, "x" * n), ins(2, 2**40, "é" * (n // 2))]))
    same(Txn(2, dmls=[ins(2, 1, b"\x01" * n, None, s=s), ins(2, 1, None, "y" * n, s=s)]))
    same(Txn(2, dmls=[DML(DMLType.UPDATE, T, values=(1, "n" * n), old_values=(1, "o" * (n + 1)), commit_ts=2)]))
    same(Txn(2, dmls=[DML(DMLType.DELETE, T, old_values=(1, "d" * n), commit_ts=2)]))


def test_a_longtext_column_has_flen_minus_one_and_reads_back() -> None:
    """LONGTEXT / LONGBLOB have flen 2**32-1, which does not fit ColumnInfo's int32: written as -1, what Go's
    int32() conversion gives (the message-object encoder refused the whole table)."""
    s = shape("d", "long", ("id", "int"), ("t", "longtext"), ("b", "longblob"))
    with pytest.raises(ValueError, match="out of range"):
        spb.ColumnInfo(flen=s.columns[1].ctype.flen)
    record = same(Txn(3, dmls=[ins(3, 1, "x", b"y", s=s)]))
    b = spb.Binlog.FromString(record)
    assert [ci.flen for ci in b.dml_data.tables[0].column_info] == [11, -1, -1]
    back = decode_record(b, ShapeCache())
    assert back.dmls[0].values == (1, "x", b"y")
    assert [c.ctype.tp for c in back.dmls[0].shape.columns] == [c.ctype.tp for c in s.columns]


def test_several_tables_in_one_txn_and_keys() -> None:
    keyed = shape(
        "d",
        "k",
        ("a", "int"),
        ("b", "varchar(10)"),
        ("c", "int"),
        keys=(IndexInfo(1, "uk_bc", ("b", "c"), unique=True), IndexInfo(2, "ix", ("a",))),
    )
    no_key = shape("d", "n", ("a", "int"), keys=())
    composite = shape("d", "c", ("a", "int"), ("b", "int"), keys=(IndexInfo(1, "PRIMARY", ("b", "a"), True, True),))
    dmls = [
        ins(4, 1, "x", 2, s=keyed),
        ins(4, 5, "n5"),
        ins(4, 3, "y", 4, s=keyed),
        ins(4, 3, "z", 5, s=keyed),
        ins(4, 7, s=no_key),
        ins(4, 1, 2, s=composite),
        DML(DMLType.DELETE, T, old_values=(5, "n5"), commit_ts=4),
    ]
    same(Txn(4, dmls=dmls))


def test_an_equal_shape_object_and_odd_names() -> None:
    twin = shape("test", "t", ("id", "bigint"), ("name", "varchar(20)"))
    assert twin == T
    assert twin is not T
    odd = shape("dö", "tbl ✓", ("ä`b", "int"), ("", "varchar(3)"))
    first = same(Txn(3, dmls=[ins(3, 1, "a")]))
    assert same(Txn(3, dmls=[ins(3, 1, "a", s=twin)])) == first
    same(Txn(3, dmls=[ins(3, 1, "a", s=odd)]))


def test_ddl_records() -> None:
    job = Job(1, JobType.ADD_COLUMN, 1, "db1", 2, "t", 12, "alter table t add column x int")
    same(Txn(7, ddl=DDL("db1", "t", job.query, job, InfoSchema())))
    create = Job(2, JobType.CREATE_SCHEMA, 3, "nd", 0, "", 1, "CREATE DATABASE nd")
    assert (
        spb.Binlog.FromString(same(Txn(8, ddl=DDL("", "", create.query, create, InfoSchema())))).ddl_data.schema_name
        == "nd"
    )
    long_query = "create table t (" + ", ".join(f"c{i} varchar(10) comment 'ü'" for i in range(500)) + ")"
    same(Txn(9, ddl=DDL("", "", long_query, job, InfoSchema())))
    assert encode_txn(Txn(9, ddl=DDL("d", "t", "drop table t", job, InfoSchema(), skip=True))) is None
    assert encode_txn(Txn(9)) is None


def test_the_shape_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(relay_encoder, "SHAPE_CACHE_LIMIT", 3)
    relay_encoder._ENCODERS.clear()
    shapes = [shape("d", f"t{i}", ("id", "int")) for i in range(7)]
    for i, s in enumerate(shapes):
        same(Txn(1, dmls=[ins(1, i, s=s)]))
        assert len(relay_encoder._ENCODERS) <= 3
    same(Txn(1, dmls=[ins(1, 0, s=shapes[0])]))  # rebuilt after being dropped


# -------------------------------------------------------------------------------------------- bad values

BAD = [
    ("i", True),  # protobuf refuses a bool for an integer
    ("i", 1.0),
    ("i", "1"),
    ("i", Decimal(1)),
    ("i", 2**63),
    ("i", -(2**63) - 1),
    ("u", -1),
    ("u", 2**64),
    ("t", False),
    ("mu", 1.5),
]


@pytest.mark.parametrize(("column", "value"), BAD)
def test_an_integer_that_does_not_fit_fails_as_the_reference(column: str, value: Any) -> None:
    row = {"i": 1, "u": 2, "t": 3, "mu": 4, column: value}
    t = Txn(5, dmls=[ins(5, 1, 2, 3, 4, s=INTS), ins(5, *row.values(), s=INTS)])
    with pytest.raises(CodecError):
        reference(t)
    with pytest.raises(CodecError, match=rf"^INSERT of d\.ints at commit_ts=5: column {column}: "):
        encode_txn(t)


TEXTS = shape("d", "s", ("vc", "varchar(10)"), ("bl", "blob"), ("en", "enum('a','b')"), ("st", "set('a','b')"))


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("vc", b"\xff"),  # bytes that are no UTF-8 for a text column
        ("vc", "\ud800"),  # a str that has no UTF-8
        ("vc", 5),
        ("bl", "text"),
        ("en", 1),
        ("st", 3),
        ("st", b"a"),
        ("en", "\udc80"),
    ],
)
def test_a_text_value_that_does_not_fit_fails_as_the_reference(column: str, value: Any) -> None:
    row = {"vc": "v", "bl": b"b", "en": "a", "st": "a,b", column: value}
    t = Txn(6, dmls=[ins(6, *row.values(), s=TEXTS)])
    with pytest.raises(CodecError):
        reference(t)
    with pytest.raises(CodecError, match=rf"column {column}: {type(value).__name__} value"):
        encode_txn(t)


def test_text_given_as_utf8_bytes_is_written_as_the_reference() -> None:
    same(Txn(6, dmls=[ins(6, "ü".encode(), bytearray(b"x"), b"b", "a", s=TEXTS)]))


def test_a_row_without_an_image_or_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(CodecError, match=r"^UPDATE of test\.t at commit_ts=7 has no row image"):
        encode_txn(Txn(7, dmls=[DML(DMLType.UPDATE, T, values=(1, "a"), commit_ts=7)]))
    with pytest.raises(CodecError, match=r"^DELETE of test\.t at commit_ts=7 has no row image"):
        encode_txn(Txn(7, dmls=[DML(DMLType.DELETE, T, values=(1, "a"), commit_ts=7)]))
    with pytest.raises(CodecError, match="a row of 3 values, the table has 2 columns"):
        encode_txn(Txn(7, dmls=[ins(7, 1, "a"), ins(7, 1, "a", "b")]))
    with pytest.raises(CodecError, match="a row of 1 values, the table has 2 columns"):
        encode_txn(Txn(7, dmls=[ins(7, 1)]))


def test_a_long_bad_value_is_shortened_in_the_error() -> None:
    with pytest.raises(CodecError) as err:
        encode_txn(Txn(8, dmls=[ins(8, 1, b"\xff" * 10_000)]))
    assert "column name: bytes value b'\\xff" in str(err.value)
    assert len(str(err.value)) < 300


# ------------------------------------------------------------------------------- random rows of `types`


def _types_shape() -> TableShape:
    schema = InfoSchema()
    ids = itertools.count(1)
    schema.apply(Planner(schema, lambda n: next(ids), start_ts=1).create_database("db"))
    plan = Planner(schema, lambda n: next(ids), start_ts=1)
    schema.apply(plan.create_table("db", "types", types_table_columns(), primary_key=["id"]))
    return TableShape.of("db", schema.table("db", "types"))


TYPES = _types_shape()
TYPES_DEFAULTS = {c.name: None for c, _ in TYPES_COLUMNS} | {"c_required": "dflt"}


def _types_values(row: dict[str, Any]) -> tuple[Any, ...]:
    full = TYPES_DEFAULTS | row
    return tuple(check_value(c, full[c.name]) for c in TYPES.columns)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6))
def test_random_rows_of_the_types_table(seed: int, rows: int) -> None:
    rng = random.Random(seed)
    ts = tso.compose(1_700_000_000_000 + seed % 10**6, 0)
    dmls = []
    for i in range(rows):
        row = types_row(rng, rng.randint(-(2**63), 2**63 - 1))
        values = _types_values(row)
        kind = rng.choice(list(DMLType))
        if kind == DMLType.INSERT:
            dmls.append(DML(kind, TYPES, values=values, commit_ts=ts))
        elif kind == DMLType.DELETE:
            dmls.append(DML(kind, TYPES, old_values=values, commit_ts=ts))
        else:
            new = _types_values(row | types_changes(rng))
            dmls.append(DML(kind, TYPES, values=new, old_values=values, commit_ts=ts))
        if rng.random() < 0.2:
            dmls.append(ins(ts, i, "other"))  # another table in between
    same(Txn(ts, dmls=dmls))
