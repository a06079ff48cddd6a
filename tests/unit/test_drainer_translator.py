"""translate(): binlog rows -> DML events with the table valid at the binlog's schema version (pure)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from common.codec import encode_inserted_row, encode_updated_row, float_datum, int_datum
from common.events import DML, DMLType
from common.pb import binlog_pb2
from common.pb.gogo import marshal_prewrite_value
from common.schema.model import TableInfo
from drainer.schema import DrainerSchema, UnknownTableError
from drainer.translator import TranslateError, is_fake, translate
from tests.unit.test_drainer_schema import Writer, full_row
from upstream.ddl import Column
from upstream.mutation import MutationLog

ALL_TYPES: list[tuple[str, str, list[Any]]] = [
    ("i8", "TINYINT", [-128, 127]),
    ("u8", "TINYINT UNSIGNED", [0, 255]),
    ("i16", "SMALLINT", [-32768, 32767]),
    ("u16", "SMALLINT UNSIGNED", [65535, 1]),
    ("i24", "MEDIUMINT", [-8388608, 8388607]),
    ("u24", "MEDIUMINT UNSIGNED", [16777215, 0]),
    ("i32", "INT", [-(2**31), 2**31 - 1]),
    ("u32", "INT UNSIGNED", [2**32 - 1, 7]),
    ("i64", "BIGINT", [-(2**63), 2**63 - 1]),
    ("u64", "BIGINT UNSIGNED", [2**64 - 1, 2**63]),
    ("f32", "FLOAT", [1.5, -0.25]),
    ("f64", "DOUBLE", [1e300, -2.5e-300]),
    ("dec", "DECIMAL(30,10)", [Decimal("-12345678901234567890.0123456789"), Decimal("0.5")]),
    ("ch", "CHAR(5)", ["ab", "ñé"]),
    ("vc", "VARCHAR(40)", ["hello, 世界", ""]),
    ("tx", "TEXT", ["x" * 3000, "line\nbreak"]),
    ("bn", "BINARY(4)", [b"\x00\x01\x02\x03", b"ab\x00\x00"]),
    ("vb", "VARBINARY(10)", [b"\xff\x00", b""]),
    ("bl", "BLOB", [bytes(range(256)), b"z"]),
    ("d", "DATE", [dt.date(1000, 1, 1), dt.date(9999, 12, 31)]),
    ("dtm", "DATETIME(3)", [dt.datetime(2026, 11, 22, 1, 2, 3, 456000), dt.datetime(1970, 1, 1)]),
    (
        "ts",
        "TIMESTAMP(6)",
        [dt.datetime(2026, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC), dt.datetime(2000, 2, 29, tzinfo=dt.UTC)],
    ),
    ("tm", "TIME(2)", [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(seconds=1.25)]),
    ("yr", "YEAR", [1901, 2155]),
    ("js", "JSON", [{"a": [1, 2.5, None, True], "b": "ü"}, [1, "x"]]),
    ("en", "ENUM('small','big')", ["big", "small"]),
    ("st", "SET('r','g','b')", ["r,b", ""]),
    ("bt", "BIT(12)", [b"\x0f\xff", b"\x00\x01"]),
]


@pytest.fixture
def w() -> Writer:
    w = Writer()
    w.ddl(lambda p: p.create_database("d"))
    return w


def schema_of(w: Writer, upto: int | None = None) -> DrainerSchema:
    s = DrainerSchema(w.source)
    s.load(w.schema.version if upto is None else upto)
    return s


def rows(dmls: list[DML]) -> list[tuple[DMLType, dict[str, Any] | None, dict[str, Any] | None]]:
    """Each DML as (type, old row, new row) dicts by column name."""
    out = []
    for d in dmls:
        names = d.shape.names
        old = None if d.old_values is None else dict(zip(names, d.old_values, strict=True))
        new = None if d.values is None else dict(zip(names, d.values, strict=True))
        out.append((d.tp, old, new))
    return out


@pytest.mark.parametrize("keyed", [True, False])
def test_every_column_type_round_trips(w: Writer, keyed: bool) -> None:
    cols = [Column(name, tp) for name, tp, _ in ALL_TYPES]
    if keyed:
        t = w.create_table("d", "t", [Column("id", "INT"), *cols], primary_key=["id"])
    else:
        t = w.create_table("d", "t", cols)
    given = [{name: values[i] for name, _, values in ALL_TYPES} for i in range(2)] + [{}]
    written = []
    log = MutationLog()
    for i, g in enumerate(given):
        r = full_row(t, {**g, "id": i} if keyed else g)
        handle = i if keyed else w.rowid()
        log.insert(t, handle, r)
        written.append((handle, r))
    (h0, r0), (h1, r1), _ = written
    r0_new = {**r0, **{k: v for k, v in r1.items() if k != "id"}}
    log.update(t, h0, r0, r0_new)
    log.delete(t, h1, r1)
    b = w.commit(log)
    s = schema_of(w)
    version, dmls = translate(b, s, node_id="p1")
    assert version == w.schema.version
    assert rows(dmls) == [
        (DMLType.INSERT, None, written[0][1]),
        (DMLType.INSERT, None, written[1][1]),
        (DMLType.INSERT, None, written[2][1]),
        (DMLType.UPDATE, r0, r0_new),
        (DMLType.DELETE, r1, None),
    ]
    assert all(v is None for k, v in rows(dmls)[2][2].items() if k != "id")  # type: ignore[union-attr]
    assert all(d.commit_ts == b.commit_ts and d.shape is s.shape(t.id, version) for d in dmls)
    pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
    m = pv.mutations[0]
    assert [d.size for d in dmls] == [len(x) for x in [*m.inserted_rows, *m.updated_rows, *m.deleted_rows]]


def test_int_pk_is_filled_from_the_handle(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "BIGINT"), Column("v", "VARCHAR(5)")], primary_key=["id"])
    assert t.pk_is_handle
    log = MutationLog()
    log.insert(t, -5, full_row(t, {"id": -5, "v": "a"}))
    log.update(t, -5, full_row(t, {"id": -5, "v": "a"}), full_row(t, {"id": -5, "v": "b"}))
    _, dmls = translate(w.commit(log), schema_of(w))
    assert [(d.values, d.old_values) for d in dmls] == [((-5, "a"), None), ((-5, "b"), (-5, "a"))]
    assert dmls[0].shape.unique_keys == ((0,),)


@pytest.mark.parametrize("value", [0, 1, 2**63 - 1, 2**63, 2**64 - 1])
def test_unsigned_bigint_pk_handle_wraps_back(w: Writer, value: int) -> None:
    t = w.create_table("d", "t", [Column("id", "BIGINT UNSIGNED"), Column("v", "INT")], primary_key=["id"])
    log = MutationLog()
    log.insert(t, value, full_row(t, {"id": value, "v": 1}))
    log.delete(t, value, full_row(t, {"id": value, "v": 1}))
    _, dmls = translate(w.commit(log), schema_of(w))
    assert [dmls[0].values, dmls[1].old_values] == [(value, 1), (value, 1)]


def test_composite_pk_unique_key_and_no_key_use_the_hidden_handle(w: Writer) -> None:
    comp = w.create_table(
        "d", "c", [Column("a", "VARCHAR(5)"), Column("b", "INT"), Column("v", "INT")], primary_key=["a", "b"]
    )
    uk = w.create_table("d", "u", [Column("x", "INT"), Column("y", "INT", nullable=False)], unique_keys=[["y"]])
    nokey = w.create_table("d", "n", [Column("x", "INT")])
    assert [comp.pk_is_handle, uk.pk_is_handle, nokey.pk_is_handle] == [False, False, False]
    log = MutationLog()
    given: list[tuple[TableInfo, dict[str, Any], str]] = [
        (comp, {"a": "k", "b": 2, "v": 3}, "v"),
        (uk, {"x": None, "y": 4}, "x"),
        (nokey, {"x": 5}, "x"),
    ]
    for t, r, changed in given:
        h = w.rowid()
        log.insert(t, h, full_row(t, r))
        log.update(t, h, full_row(t, r), full_row(t, {**r, changed: 9}))
        log.delete(t, h, full_row(t, {**r, changed: 9}))
    _, dmls = translate(w.commit(log), schema_of(w))
    assert [d.values or d.old_values for d in dmls] == [
        ("k", 2, 3), ("k", 2, 9), ("k", 2, 9),
        (None, 4), (9, 4), (9, 4),
        (5,), (9,), (9,),
    ]  # fmt: skip
    assert [dmls[0].shape.unique_keys, dmls[3].shape.unique_keys, dmls[6].shape.unique_keys] == [((0, 1),), ((1,),), ()]
    assert dmls[1].old_values == ("k", 2, 3)


def test_mutations_of_several_tables_keep_mutation_then_sequence_order(w: Writer) -> None:
    a = w.create_table("d", "a", [Column("id", "INT")], primary_key=["id"])
    b = w.create_table("d", "b", [Column("id", "INT")], primary_key=["id"])
    log = MutationLog()
    log.insert(b, 1, {"id": 1})
    log.insert(a, 2, {"id": 2})
    log.delete(b, 1, {"id": 1})
    log.insert(b, 3, {"id": 3})
    _, dmls = translate(w.commit(log), schema_of(w))
    assert [(d.shape.table, d.tp, d.values or d.old_values) for d in dmls] == [
        ("b", DMLType.INSERT, (1,)),
        ("b", DMLType.DELETE, (1,)),
        ("b", DMLType.INSERT, (3,)),
        ("a", DMLType.INSERT, (2,)),
    ]


def test_old_rows_decode_after_add_column(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    old_log = MutationLog()
    old_log.insert(t, 1, {"id": 1, "v": 10})
    old_log.update(t, 1, {"id": 1, "v": 10}, {"id": 1, "v": 11})
    old_binlog = w.commit(old_log)
    w.ddl(lambda p: p.add_column("d", "t", Column("n", "INT", nullable=False, default=7)))
    w.ddl(lambda p: p.add_column("d", "t", Column("z", "VARCHAR(3)")))
    s = schema_of(w)
    # written before the DDL (at its schema version): read with the table of that version
    _, dmls = translate(old_binlog, s)
    assert [(d.shape.names, d.values) for d in dmls] == [(("id", "v"), (1, 10)), (("id", "v"), (1, 11))]
    # rows written with the old table but a newer schema version: the added columns take their defaults
    late = w.commit(old_log, schema_version=w.schema.version)
    _, dmls = translate(late, s)
    assert [(d.old_values, d.values) for d in dmls] == [(None, (1, 10, 7, None)), ((1, 10, 7, None), (1, 11, 7, None))]


def test_old_rows_decode_after_drop_column(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT"), Column("gone", "TEXT")], primary_key=["id"])
    log = MutationLog()
    log.insert(t, 1, {"id": 1, "v": 10, "gone": "x"})
    log.delete(t, 1, {"id": 1, "v": 10, "gone": "x"})
    old_binlog = w.commit(log)
    w.ddl(lambda p: p.drop_column("d", "t", "gone"))
    s = schema_of(w)
    _, dmls = translate(old_binlog, s)
    assert [(d.shape.names, d.values or d.old_values) for d in dmls] == [
        (("id", "v", "gone"), (1, 10, "x")),
        (("id", "v", "gone"), (1, 10, "x")),
    ]
    late = w.commit(log, schema_version=w.schema.version)  # the dropped column's id is ignored
    _, dmls = translate(late, s)
    assert [(d.shape.names, d.values or d.old_values) for d in dmls] == [(("id", "v"), (1, 10)), (("id", "v"), (1, 10))]


def test_dml_with_a_newer_schema_version_applies_pending_history_jobs(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT")], primary_key=["id"])
    s = schema_of(w)
    w.ddl(lambda p: p.add_column("d", "t", Column("n", "INT")))
    t2 = w.schema.table("d", "t")
    log = MutationLog()
    log.insert(t2, 1, {"id": 1, "n": 5})
    version, dmls = translate(w.commit(log), s)
    assert s.version() == version == w.schema.version
    assert dmls[0].values == (1, 5)
    assert t.id == t2.id


def test_truncated_table_mutations_after_the_truncate_are_dropped(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT")], primary_key=["id"])
    log = MutationLog()
    log.insert(t, 1, {"id": 1})
    before = w.commit(log)
    w.ddl(lambda p: p.truncate_table("d", "t"))
    s = schema_of(w)
    assert translate(before, s)[1][0].values == (1,)  # written before the truncate: kept
    late = w.commit(log, schema_version=w.schema.version)
    assert translate(late, s) == (w.schema.version, [])


def test_unknown_table_names_id_commit_ts_and_pump(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT")], primary_key=["id"])
    other = TableInfo(9999, "x", t.columns, t.indices, pk_is_handle=True)
    log = MutationLog()
    log.insert(other, 1, {"id": 1})
    b = w.commit(log)
    with pytest.raises(UnknownTableError, match=rf"unknown table id 9999 .* commit_ts={b.commit_ts} from pump p7"):
        translate(b, schema_of(w), node_id="p7")
    w.ddl(lambda p: p.drop_table("d", "t"))
    dropped = MutationLog()
    dropped.insert(t, 1, {"id": 1})
    with pytest.raises(UnknownTableError, match=rf"unknown table id {t.id}"):
        translate(w.commit(dropped), schema_of(w))  # a dropped (not truncated) table is not silently skipped


def commit_with(w: Writer, table_id: int, **fields: Any) -> binlog_pb2.Binlog:
    pv = binlog_pb2.PrewriteValue(schema_version=w.schema.version)
    m = pv.mutations.add(table_id=table_id)
    for k, v in fields.items():
        getattr(m, k).extend(v)
    return binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=1, commit_ts=2, prewrite_value=marshal_prewrite_value(pv))


def test_malformed_rows_raise_translate_error_naming_table_commit_ts_and_pump(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    s = schema_of(w)
    good = encode_inserted_row(1, [2], [int_datum(1)])
    cases = [
        ({"inserted_rows": [good[:-1]], "sequence": [binlog_pb2.Insert]}, "offset"),
        ({"inserted_rows": [good], "sequence": [binlog_pb2.Insert, binlog_pb2.Insert]}, "sequence names 2/0/0"),
        ({"inserted_rows": [good, good], "sequence": [binlog_pb2.Insert]}, "sequence names 1/0/0"),
        ({"deleted_ids": [1], "sequence": [binlog_pb2.DeleteID]}, "unsupported mutation type 2"),
        ({"updated_rows": [encode_updated_row([2], [int_datum(1)], [int_datum(2)])[:-2]],
          "sequence": [binlog_pb2.Update]}, ""),
        ({"inserted_rows": [encode_inserted_row(1, [2], [float_datum(1.0)])],
          "sequence": [binlog_pb2.Insert]}, "FLOAT datum does not fit"),
    ]  # fmt: skip
    for fields, why in cases:
        with pytest.raises(TranslateError, match=rf"table id {t.id} \(d\.t\) .*commit_ts=2 from pump p3: .*{why}"):
            translate(commit_with(w, t.id, **fields), s, node_id="p3")
    bad = binlog_pb2.Binlog(tp=binlog_pb2.Commit, commit_ts=5, prewrite_value=b"\xff\xff")
    with pytest.raises(TranslateError, match="commit_ts=5 from pump p3: bad prewrite value"):
        translate(bad, s, node_id="p3")


def test_fake_ddl_and_rollback_binlogs_carry_no_rows(w: Writer) -> None:
    s = schema_of(w)
    fake = binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=7, commit_ts=7)
    assert is_fake(fake)
    assert not is_fake(binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=7, commit_ts=7, ddl_job_id=1))
    assert not is_fake(binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=7, commit_ts=7))
    assert not is_fake(binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=7))
    assert not is_fake(binlog_pb2.Binlog(tp=binlog_pb2.Rollback))
    ddl = binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=1, commit_ts=2, ddl_job_id=5, ddl_query=b"x")
    for b in (fake, ddl, binlog_pb2.Binlog(tp=binlog_pb2.Commit, start_ts=1, commit_ts=2)):
        assert translate(b, s) == (0, [])
