"""FileSink: pb_binlog records (golden bytes, every value kind), ordering, rotation, retention GC, failures."""

from __future__ import annotations

import datetime as dt
import os
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common.binlogfile import list_binlog_files
from common.codec import Datum, Kind, decode_one
from common.errors import StorageError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb import pb_binlog_pb2
from common.pbfile import ddl_query_text, encode_value, read_pb_binlogs, txn_to_pb, type_name
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import parse_type
from drainer.sinks.base import SinkError
from drainer.sinks.file import FileSink

DAY = 86_400.0


def shape(db: str, table: str, *cols: tuple[str, str]) -> TableShape:
    columns = []
    for i, (name, text) in enumerate(cols):
        ct, canonical = parse_type(text)
        columns.append(ColumnInfo(id=i + 1, name=name, offset=i, type_text=canonical, ctype=ct))
    info = TableInfo(
        id=100, name=table, columns=tuple(columns), indices=(IndexInfo(1, "PRIMARY", (cols[0][0],), True, True),)
    )
    return TableShape.of(db, info)


T = shape("test", "t", ("id", "bigint"), ("name", "varchar(20)"))


def ins(ts: int, *values: Any, s: TableShape = T) -> DML:
    return DML(DMLType.INSERT, s, values=tuple(values), commit_ts=ts)


def ddl(db: str, query: str, *, skip: bool = False) -> DDL:
    job = Job(1, JobType.CREATE_TABLE, 1, db, 2, "t", 3, query)
    return DDL(db=db, table="t", query=query, job=job, before=InfoSchema(), skip=skip)


def decode(value: bytes) -> Datum:
    datum, end = decode_one(value)
    assert end == len(value)
    return datum


def columns(event: pb_binlog_pb2.Event) -> list[pb_binlog_pb2.column]:
    out = []
    for raw in event.row:
        col = pb_binlog_pb2.column()
        col.ParseFromString(raw)
        out.append(col)
    return out


# ----------------------------------------------------------------------------------------------- encoding


def test_golden_ddl_record() -> None:
    binlog = txn_to_pb(Txn(5, ddl=ddl("", "create database a")))
    assert binlog is not None
    assert binlog.SerializeToString() == bytes.fromhex("08011005221263726561746520646174616261736520613b")


def test_golden_column_and_dml_record() -> None:
    s = shape("test", "t", ("id", "bigint"))
    binlog = txn_to_pb(Txn(10, dmls=[ins(10, 1, s=s)]))
    assert binlog is not None
    (event,) = binlog.dml_data.events
    column = "0a0269641201081a06626967696e7422020802"  # docs/formats.md#pb-binlog-files example
    assert event.row[0] == bytes.fromhex(column)
    event_bytes = "0a047465737412017418002213" + column  # schema, table, tp=Insert, row
    assert binlog.SerializeToString() == bytes.fromhex("0800100a1a220a20" + event_bytes)


@pytest.mark.parametrize(
    ("db", "query", "text"),
    [
        ("test", "create table t (id int)", "use `test`; create table t (id int);"),
        ("a`b", "drop table x;  ", "use `a``b`; drop table x;"),
        ("", "create database a", "create database a;"),
        ("a", "CREATE SCHEMA a", "CREATE SCHEMA a;"),
        ("", "drop table x", "drop table x"),
    ],
)
def test_ddl_query_text(db: str, query: str, text: str) -> None:
    assert ddl_query_text(db, query) == text


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("bigint unsigned", "bigint"),
        ("varchar(3)", "varchar"),
        ("varbinary(3)", "varbinary"),
        ("char(3)", "char"),
        ("binary(3)", "binary"),
        ("text", "text"),
        ("blob", "blob"),
        ("mediumblob", "mediumblob"),
        ("decimal(5,2)", "decimal"),
        ("time", "time"),
        ("year", "year"),
        ("json", "json"),
        ("bit(3)", "bit"),
        ("enum('a')", "enum"),
    ],
)
def test_type_name(text: str, name: str) -> None:
    assert type_name(parse_type(text)[0]) == name


UTC_PLUS_2 = dt.timezone(dt.timedelta(hours=2))


@pytest.mark.parametrize(
    ("text", "value", "datum"),
    [
        ("bigint", -5, Datum(Kind.INT, -5)),
        ("bigint unsigned", 2**64 - 1, Datum(Kind.UINT, 2**64 - 1)),
        ("year", 2024, Datum(Kind.INT, 2024)),
        ("double", 1.5, Datum(Kind.FLOAT, 1.5)),
        ("varchar(10)", "héllo", Datum(Kind.BYTES, "héllo".encode())),
        ("varbinary(10)", b"\x00\xff", Datum(Kind.BYTES, b"\x00\xff")),
        ("decimal(10,2)", Decimal("1.50"), Datum(Kind.BYTES, b"1.50")),
        ("decimal(20,10)", Decimal("0E-10"), Datum(Kind.BYTES, b"0.0000000000")),
        ("date", dt.date(2019, 1, 2), Datum(Kind.BYTES, b"2019-01-02")),
        ("datetime(3)", dt.datetime(2019, 1, 2, 3, 4, 5, 123000), Datum(Kind.BYTES, b"2019-01-02 03:04:05.123")),
        (
            "timestamp",
            dt.datetime(2019, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
            Datum(Kind.BYTES, b"2019-01-02 05:04:05"),
        ),
        ("time(2)", -dt.timedelta(hours=1, seconds=1, microseconds=500000), Datum(Kind.BYTES, b"-01:00:01.50")),
        ("json", {"b": [1, None], "a": True}, Datum(Kind.BYTES, b'{"a": true, "b": [1, null]}')),
        ("enum('x','y')", "y", Datum(Kind.UINT, 2)),
        ("set('x','y','z')", "x,z", Datum(Kind.UINT, 5)),
        ("bit(12)", b"\x01\x02", Datum(Kind.UINT, 0x102)),
        ("int", None, Datum(Kind.NULL, None)),
    ],
)
def test_value_encoding(text: str, value: Any, datum: Datum) -> None:
    assert decode(encode_value(value, parse_type(text)[0], UTC_PLUS_2)) == datum


def test_rows_of_insert_update_delete() -> None:
    s = shape("db", "tbl", ("id", "int"), ("v", "varchar(5)"))
    txn = Txn(
        7,
        dmls=[
            DML(DMLType.INSERT, s, values=(1, "a")),
            DML(DMLType.UPDATE, s, values=(1, "b"), old_values=(1, "a")),
            DML(DMLType.DELETE, s, old_values=(1, None)),
        ],
    )
    binlog = txn_to_pb(txn)
    assert binlog is not None
    assert (binlog.tp, binlog.commit_ts, binlog.HasField("ddl_query")) == (pb_binlog_pb2.DML, 7, False)
    ins_ev, upd_ev, del_ev = binlog.dml_data.events
    assert [(e.schema_name, e.table_name, e.tp) for e in (ins_ev, upd_ev, del_ev)] == [
        ("db", "tbl", pb_binlog_pb2.Insert),
        ("db", "tbl", pb_binlog_pb2.Update),
        ("db", "tbl", pb_binlog_pb2.Delete),
    ]
    cols = columns(ins_ev)
    assert [(c.name, c.tp, c.mysql_type) for c in cols] == [("id", b"\x03", "int"), ("v", b"\x0f", "varchar")]
    assert [decode(c.value).value for c in cols] == [1, b"a"]
    assert not any(c.HasField("changed_value") for c in cols)
    cols = columns(upd_ev)
    assert [(decode(c.value).value, decode(c.changed_value).value) for c in cols] == [(1, 1), (b"a", b"b")]
    cols = columns(del_ev)
    assert [decode(c.value) for c in cols] == [Datum(Kind.INT, 1), Datum(Kind.NULL, None)]


def test_nothing_to_write() -> None:
    assert txn_to_pb(Txn(1)) is None
    assert txn_to_pb(Txn(2, ddl=ddl("test", "drop table t", skip=True))) is None


# ----------------------------------------------------------------------------------------------- sink


class Reports:
    def __init__(self) -> None:
        self.seen: list[int] = []
        self.mu = threading.Lock()

    def __call__(self, commit_ts: int) -> None:
        with self.mu:
            self.seen.append(commit_ts)


def make_txns(n: int, start: int = 100) -> list[Txn]:
    txns: list[Txn] = []
    for i in range(n):
        ts = start + i
        if i % 5 == 3:
            txns.append(Txn(ts))  # fake binlog: reported, not written
        elif i % 7 == 6:
            txns.append(Txn(ts, ddl=ddl("test", f"alter table t add column c{i} int")))
        else:
            txns.append(Txn(ts, dmls=[ins(ts, ts, f"row{ts}"), ins(ts, ts + 10_000, "x" * 50)]))
    return txns


def written(txns: list[Txn]) -> list[pb_binlog_pb2.Binlog]:
    out = [txn_to_pb(t) for t in txns]
    return [b for b in out if b is not None]


def test_records_read_back_match_the_txns(tmp_path: Path) -> None:
    reports = Reports()
    sink = FileSink(tmp_path)
    sink.start(reports)
    txns = make_txns(40)
    for txn in txns:
        sink.add(txn)
    sink.flush(timeout=30)
    assert reports.seen == [t.commit_ts for t in txns]
    sink.close()
    sink.close()
    assert sink.error() is None
    got = list(read_pb_binlogs(tmp_path))
    assert got == written(txns)
    assert [b.tp for b in got].count(pb_binlog_pb2.DDL) == sum(1 for t in txns if t.ddl is not None)


def test_reopen_appends(tmp_path: Path) -> None:
    first, second = make_txns(10), make_txns(10, start=200)
    for batch in (first, second):
        sink = FileSink(tmp_path)
        sink.start(Reports())
        for txn in batch:
            sink.add(txn)
        sink.flush(timeout=30)
        sink.close()
    assert list(read_pb_binlogs(tmp_path)) == written(first + second)
    assert len(list_binlog_files(tmp_path)) == 1


def test_rotation(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, max_file_size=1024)
    sink.start(Reports())
    txns = make_txns(60)
    for txn in txns:
        sink.add(txn)
    sink.flush(timeout=30)
    sink.close()
    files = list_binlog_files(tmp_path)
    assert len(files) > 5
    sizes = [os.path.getsize(tmp_path / f.name) for f in files]
    biggest_record = max(len(b.SerializeToString()) for b in written(txns)) + 16
    assert all(size < 1024 + biggest_record for size in sizes)
    assert list(read_pb_binlogs(tmp_path)) == written(txns)


def test_retention_gc(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, max_file_size=512)
    sink.start(Reports())
    for txn in make_txns(40):
        sink.add(txn)
    sink.flush(timeout=30)
    sink.close()
    files = [f.name for f in list_binlog_files(tmp_path)]
    assert len(files) >= 5
    now = 1_700_000_000.0
    for i, name in enumerate(files):  # files 0..2 are 10, 9, 8 days old; the rest 1 day
        age = (10 - i) * DAY if i < 3 else DAY
        os.utime(tmp_path / name, (now - age, now - age))
    # An old file after a recent one stays: only a prefix of the files is deleted.
    os.utime(tmp_path / files[4], (now - 30 * DAY, now - 30 * DAY))

    sink = FileSink(tmp_path, max_file_size=512, retention_days=7, clock=lambda: now)
    assert sink.purge_expired() == files[:3]
    assert [f.name for f in list_binlog_files(tmp_path)] == files[3:]
    assert sink.purge_expired(now + 100 * DAY) == files[3:-1]  # never the file being written
    sink.close()


def test_retention_gc_runs_when_the_sink_starts(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, max_file_size=512)
    sink.start(Reports())
    for txn in make_txns(20):
        sink.add(txn)
    sink.flush(timeout=30)
    sink.close()
    files = [f.name for f in list_binlog_files(tmp_path)]
    old = dt.datetime.now().timestamp() - 3 * DAY
    for name in files[:2]:
        os.utime(tmp_path / name, (old, old))
    sink = FileSink(tmp_path, max_file_size=512, retention_days=2)
    sink.start(Reports())
    sink.add(Txn(10_000))
    sink.flush(timeout=30)  # the first GC runs before the first batch is written
    assert [f.name for f in list_binlog_files(tmp_path)] == files[2:]
    sink.close()


def test_no_retention_keeps_everything(tmp_path: Path) -> None:
    sink = FileSink(tmp_path, max_file_size=512)
    assert sink.purge_expired(1e12) == []
    sink.close()


def test_add_waits_for_the_byte_budget(tmp_path: Path) -> None:
    release = threading.Event()
    reports = Reports()

    def slow(commit_ts: int) -> None:
        release.wait(30)
        reports(commit_ts)

    sink = FileSink(tmp_path, max_inflight_bytes=100)
    sink.start(slow)
    sink.add(Txn(1, dmls=[ins(1, 1, "a" * 150)]))  # over the budget alone: admitted
    done = threading.Event()

    def second() -> None:
        sink.add(Txn(2, dmls=[ins(2, 2, "b")]))
        done.set()

    adder = threading.Thread(target=second)
    adder.start()
    assert not done.wait(0.2)  # held back while the first record is in flight
    release.set()
    adder.join(30)
    assert done.is_set()
    sink.flush(timeout=30)
    assert reports.seen == [1, 2]
    sink.close()


def test_encoding_failure_stops_the_sink(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    sink.start(Reports())
    with pytest.raises(SinkError, match="commit_ts=5"):
        sink.add(Txn(5, dmls=[ins(5, "not an int", "x")]))
    assert isinstance(sink.error(), SinkError)
    with pytest.raises(SinkError):
        sink.add(Txn(6))
    with pytest.raises(SinkError):
        sink.flush(timeout=5)
    sink.close()


def test_callback_failure_is_reported(tmp_path: Path) -> None:
    def broken(commit_ts: int) -> None:
        raise RuntimeError("checkpoint down")

    sink = FileSink(tmp_path)
    sink.start(broken)
    sink.add(Txn(1))
    with pytest.raises(SinkError, match="checkpoint down"):
        sink.flush(timeout=30)
    sink.close()


def test_closed_sink_refuses_adds_and_unlocks_the_directory(tmp_path: Path) -> None:
    sink = FileSink(tmp_path)
    with pytest.raises(StorageError, match="locked"):
        FileSink(tmp_path)
    sink.start(Reports())
    sink.close()
    with pytest.raises(SinkError, match="closed"):
        sink.add(Txn(1))
    FileSink(tmp_path).close()
