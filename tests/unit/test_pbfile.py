"""reparo's pb -> DML decoding: every column type through `txn_to_pb` and back, DDL query parsing, shapes."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from common.codec import MysqlTime
from common.codec.flatten import ColumnType, MySQLType
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb import pb_binlog_pb2
from common.pbfile import Shapes, event_to_dml, parse_columns, txn_to_pb
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import check_value, parse_type
from common.sql.render import Renderer
from tools.reparo.ddl import parse_ddl, split_use
from upstream.workloads.gen import TYPES_COLUMNS, types_row

IST = dt.timezone(dt.timedelta(hours=5, minutes=30))


def types_shape() -> TableShape:
    cols = [("id", "bigint"), *((c.name, c.type) for c, _ in TYPES_COLUMNS)]
    columns = []
    for i, (name, text) in enumerate(cols):
        ct, canonical = parse_type(text)
        columns.append(ColumnInfo(id=i + 1, name=name, offset=i, type_text=canonical, ctype=ct))
    columns.append(  # not in the writer's types table, but the file sink writes it as bytes
        ColumnInfo(id=99, name="c_geometry", offset=len(columns), type_text="geometry", ctype=ColumnType(tp=255))
    )
    info = TableInfo(
        id=7, name="types", columns=tuple(columns), indices=(IndexInfo(1, "PRIMARY", ("id",), True, True),)
    )
    return TableShape.of("db", info)


SHAPE = types_shape()


def typed_row(rng: random.Random, row_id: int) -> tuple[Any, ...]:
    values = types_row(rng, row_id) | {"c_geometry": rng.choice([None, rng.randbytes(25)])}
    values.setdefault("c_required", "dflt")
    return tuple(  # GEOMETRY is bytes as it is: check_value does not know the type
        values[c.name] if c.ctype.tp == MySQLType.GEOMETRY else check_value(c, values[c.name]) for c in SHAPE.columns
    )


def reparo_form(col: ColumnInfo, value: Any) -> Any:
    """What reparo gives the loader for a canonical `value`: ENUM / SET / BIT become the numbers MySQL takes."""
    ct = col.ctype
    if value is None:
        return None
    if ct.tp == MySQLType.ENUM:
        return ct.elems.index(value) + 1 if value else 0
    if ct.tp == MySQLType.SET:
        return sum(1 << ct.elems.index(name) for name in value.split(",")) if value else 0
    if ct.tp == MySQLType.BIT:
        return int.from_bytes(value, "big")
    return value


def round_trip(txn: Txn, tz: dt.tzinfo | None, lookup: Any = None) -> list[DML]:
    binlog = txn_to_pb(txn, tz)
    assert binlog is not None
    parsed = pb_binlog_pb2.Binlog()
    parsed.ParseFromString(binlog.SerializeToString())
    shapes = Shapes(lookup)
    return [event_to_dml(e, shapes, parsed.commit_ts, tz) for e in parsed.dml_data.events]


@pytest.mark.parametrize("tz", [None, dt.UTC, IST], ids=["host-zone", "utc", "+05:30"])
def test_every_column_type_round_trips_through_the_file_sink_encoding(tz: dt.tzinfo | None) -> None:
    rng = random.Random(5)
    dmls = []
    for i in range(60):
        new = typed_row(rng, i)
        kind = (DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE)[i % 3]
        old = typed_row(rng, i) if kind != DMLType.INSERT else None
        dmls.append(DML(kind, SHAPE, values=None if kind == DMLType.DELETE else new, old_values=old, commit_ts=9))
    got = round_trip(Txn(9, dmls=dmls), tz)
    assert len(got) == len(dmls)
    nulls = 0
    for want, have in zip(dmls, got, strict=True):
        assert have.tp == want.tp
        assert have.commit_ts == 9
        assert have.shape.names == SHAPE.names
        for image in ("values", "old_values"):
            w, h = getattr(want, image), getattr(have, image)
            if w is None:
                assert h is None
                continue
            for col, wv, hv in zip(SHAPE.columns, w, h, strict=True):
                assert hv == reparo_form(col, wv), (col.name, wv, hv)
                if col.ctype.tp == MySQLType.TIMESTAMP and hv is not None:
                    assert hv.utcoffset() == dt.timedelta(0)  # aware, in UTC: the loader sends UTC wall clock
                nulls += hv is None
    assert nulls > 0  # NULLs were part of the test


def test_values_reach_the_sql_layer_as_the_drainer_sends_them() -> None:
    rng = random.Random(8)
    rows = [typed_row(rng, i) for i in range(20)]
    dmls = [DML(DMLType.INSERT, SHAPE, values=r, commit_ts=3) for r in rows]
    got = round_trip(Txn(3, dmls=dmls), IST)
    renderer = Renderer("mysql")
    (want_sql, want_params), *_ = renderer.render(dmls)
    (have_sql, have_params), *_ = Renderer("mysql").render(got)
    assert have_sql == want_sql
    ncols = len(SHAPE.columns)
    for i, (w, h) in enumerate(zip(want_params, have_params, strict=True)):
        col = SHAPE.columns[i % ncols]
        if col.ctype.tp in (MySQLType.ENUM, MySQLType.SET):  # a member's number instead of its name
            assert h == reparo_form(col, w)
        else:  # BIT included: to_mysql sends the drainer's bytes as the number reparo has
            assert h == w, (col.name, w, h)


def test_text_python_cannot_hold_stays_text() -> None:
    s = TableShape.of(
        "db",
        TableInfo(
            id=1,
            name="z",
            columns=tuple(
                ColumnInfo(id=i + 1, name=n, offset=i, type_text=t, ctype=parse_type(t)[0])
                for i, (n, t) in enumerate([("d", "date"), ("dt", "datetime"), ("ts", "timestamp")])
            ),
        ),
    )
    zero = (MysqlTime(0, 0, 0), MysqlTime(0, 0, 0), MysqlTime(2020, 0, 0))
    (got,) = round_trip(Txn(1, dmls=[DML(DMLType.INSERT, s, values=zero)]), dt.UTC)
    assert got.values == ("0000-00-00", "0000-00-00 00:00:00", "2020-00-00 00:00:00")


def test_keys_come_from_the_lookup_and_build_the_where_clause() -> None:
    asked: list[tuple[str, str]] = []

    def lookup(db: str, table: str) -> list[list[str]]:
        asked.append((db, table))
        return [["ID"], ["c_int", "c_missing"], ["c_varchar"]]  # a key on a column the row lacks is dropped

    rng = random.Random(1)
    old, new = typed_row(rng, 1), typed_row(rng, 1)
    dml = DML(DMLType.UPDATE, SHAPE, values=new, old_values=old)
    got = round_trip(Txn(4, dmls=[dml, dml]), dt.UTC, lookup)
    assert asked == [("db", "types")]  # once per table
    assert got[0].shape is got[1].shape
    assert got[0].shape.unique_keys == ((0,), (SHAPE.names.index("c_varchar"),))
    ((sql, params),) = Renderer("mysql").render(got[:1])
    assert sql.endswith("WHERE `id`=%s LIMIT 1")
    assert params[-1] == old[0]


def test_no_keys_means_whole_row_where() -> None:
    rng = random.Random(2)
    old = typed_row(rng, 1)
    (got,) = round_trip(Txn(4, dmls=[DML(DMLType.DELETE, SHAPE, old_values=old)]), dt.UTC)
    assert got.shape.unique_keys == ()
    ((sql, _),) = Renderer("mysql").render([got])
    assert "`c_json`" in sql.split("WHERE", 1)[1]


def test_malformed_rows_are_codec_errors() -> None:
    event = pb_binlog_pb2.Event(schema_name="d", table_name="t", tp=pb_binlog_pb2.Insert, row=[b"\xff\xff"])
    with pytest.raises(CodecError, match=r"d\.t"):
        parse_columns(event)
    col = pb_binlog_pb2.column(name="a", tp=bytes([8]), mysql_type="bigint", value=b"\x08")  # truncated varint
    event = pb_binlog_pb2.Event(schema_name="d", table_name="t", tp=pb_binlog_pb2.Insert, row=[col.SerializeToString()])
    with pytest.raises(CodecError, match="column 'a'"):
        event_to_dml(event, Shapes(), 1)
    col = pb_binlog_pb2.column(name="a", tp=bytes([8]), mysql_type="bigint", value=b"\x08\x02")
    event = pb_binlog_pb2.Event(schema_name="d", table_name="t", tp=pb_binlog_pb2.Update, row=[col.SerializeToString()])
    with pytest.raises(CodecError, match="update without a new value"):
        event_to_dml(event, Shapes(), 1)
    col = pb_binlog_pb2.column(name="n", tp=bytes([246]), mysql_type="decimal", value=b"\x02\x06abc")
    event = pb_binlog_pb2.Event(schema_name="d", table_name="t", tp=pb_binlog_pb2.Insert, row=[col.SerializeToString()])
    with pytest.raises(CodecError, match="not a decimal"):
        event_to_dml(event, Shapes(), 1)


def test_decimal_text_keeps_its_digits() -> None:
    s = TableShape.of(
        "db",
        TableInfo(
            id=1,
            name="n",
            columns=(
                ColumnInfo(id=1, name="n", offset=0, type_text="decimal(20,6)", ctype=parse_type("decimal(20,6)")[0]),
            ),
        ),
    )
    (got,) = round_trip(Txn(1, dmls=[DML(DMLType.INSERT, s, values=(Decimal("-12345678901234.500000"),))]), None)
    assert got.values is not None
    assert str(got.values[0]) == "-12345678901234.500000"


# ----------------------------------------------------------------------------------------------- DDL


def _ddl_text(db: str, query: str) -> str:
    job = Job(1, JobType.CREATE_TABLE, 1, db, 2, "t", 3, query)
    binlog = txn_to_pb(Txn(5, ddl=DDL(db=db, table="t", query=query, job=job, before=InfoSchema())))
    assert binlog is not None
    return binlog.ddl_query.decode()


@pytest.mark.parametrize(
    ("db", "query", "want"),
    [
        ("", "CREATE DATABASE `a`", ("", "CREATE DATABASE `a`", "a", "", JobType.CREATE_SCHEMA)),
        ("a", "DROP DATABASE IF EXISTS `a`", ("a", "DROP DATABASE IF EXISTS `a`", "a", "", JobType.DROP_SCHEMA)),
        ("a`b", "CREATE TABLE `t` (id int)", ("a`b", "CREATE TABLE `t` (id int)", "a`b", "t", JobType.CREATE_TABLE)),
        ("d", "create table if not exists e.t2 (a int)", ("d", None, "e", "t2", JobType.CREATE_TABLE)),
        ("d", "DROP TABLE IF EXISTS `x`, `y`", ("d", None, "d", "x", JobType.DROP_TABLE)),
        ("d", "TRUNCATE TABLE `t`", ("d", None, "d", "t", JobType.TRUNCATE_TABLE)),
        ("d", "truncate t1", ("d", None, "d", "t1", JobType.TRUNCATE_TABLE)),
        ("d", "RENAME TABLE `d`.`t` TO `e`.`u`", ("d", None, "d", "t", JobType.RENAME_TABLE)),
        ("d", "ALTER TABLE `t` ADD COLUMN `x` INT", ("d", None, "d", "t", JobType.ADD_COLUMN)),
        ("d", "CREATE UNIQUE INDEX `i` ON `t` (`a`)", ("d", None, "d", "t", JobType.ADD_INDEX)),
        ("d", "DROP INDEX `i` ON `o`.`t`", ("d", None, "o", "t", JobType.DROP_INDEX)),
        ("d", "/* hint */ CREATE VIEW v AS SELECT 1", ("d", None, "d", "v", None)),
    ],
)
def test_parse_ddl_of_the_file_sink_text(db: str, query: str, want: tuple[Any, ...]) -> None:
    text = _ddl_text(db, query)
    p = parse_ddl(text)
    w_db, w_query, w_schema, w_table, w_job = want
    assert (p.db, p.schema, p.table, p.job_type) == (w_db, w_schema, w_table, w_job)
    assert p.query == (w_query or query)
    assert p.raw == text


def test_split_use_without_prefix_and_bare_names() -> None:
    assert split_use("use d; create table t (a int);") == ("d", "create table t (a int)")
    assert split_use("  USE `x`;drop table t") == ("x", "drop table t")
    assert split_use("set @a = 1") == ("", "set @a = 1")
