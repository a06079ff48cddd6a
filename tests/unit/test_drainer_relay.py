"""Relay log: records (every column type round trip, golden DML bytes), whole-transaction reading (parts,
torn tail, corruption, replays), RelaySink (durable before applied, GC, cluster id), recovery."""

from __future__ import annotations

import datetime as dt
import os
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common.binlogfile import BinlogFileWriter, list_binlog_files
from common.binlogfile.record import encode_record
from common.errors import CodecError
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.pb import secondary_binlog_pb2 as spb
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import check_value, parse_type
from drainer.relay import RecoveryResult, RelayError, RelayMeta, RelaySink, RelayStats, read_relay, recover
from drainer.relay_codec import ShapeCache, decode_record, encode_txn
from drainer.sinks.base import OnSuccess, Sink, SinkError

JOIN = 10.0


def shape(db: str, table: str, *cols: tuple[str, str], keys: tuple[IndexInfo, ...] | None = None) -> TableShape:
    columns = []
    for i, (name, text) in enumerate(cols):
        ct, canonical = parse_type(text)
        columns.append(ColumnInfo(id=i + 1, name=name, offset=i, type_text=canonical, ctype=ct))
    if keys is None:
        keys = (IndexInfo(1, "PRIMARY", (cols[0][0],), True, True),)
    return TableShape.of(db, TableInfo(id=100, name=table, columns=tuple(columns), indices=keys))


T = shape("test", "t", ("id", "bigint"), ("name", "varchar(20)"))


def ins(ts: int, *values: Any, s: TableShape = T) -> DML:
    return DML(DMLType.INSERT, s, values=tuple(values), commit_ts=ts)


def txn(ts: int, *rows: int, partial: bool = False) -> Txn:
    return Txn(ts, dmls=[ins(ts, r, f"n{r}") for r in rows], partial=partial)


def ddl_txn(ts: int, db: str, query: str, version: int = 0) -> Txn:
    job = Job(1, JobType.ADD_COLUMN, 1, db, 2, "t", version, query)
    return Txn(ts, ddl=DDL(db, "t", query, job, InfoSchema()), schema_version=version)


def roundtrip(t: Txn) -> Txn:
    payload = encode_txn(t)
    assert payload is not None
    b = spb.Binlog()
    b.ParseFromString(payload)
    return decode_record(b, ShapeCache())


def rows_of(t: Txn) -> list[tuple[str, Any, Any]]:
    return [(d.tp.name, d.values, d.old_values) for d in t.dmls]


# ------------------------------------------------------------------------------------------- records

EVERY_TYPE = (
    ("id", "bigint"),
    ("ti", "tinyint"),
    ("tu", "tinyint unsigned"),
    ("si", "smallint"),
    ("mi", "mediumint unsigned"),
    ("i", "int"),
    ("bu", "bigint unsigned"),
    ("f", "float"),
    ("d", "double"),
    ("dec", "decimal(12,3)"),
    ("c", "char(5)"),
    ("vc", "varchar(30)"),
    ("tx", "mediumtext"),
    ("bn", "binary(4)"),
    ("vb", "varbinary(10)"),
    ("bl", "blob"),
    ("dt", "date"),
    ("dtm", "datetime(3)"),
    ("ts", "timestamp(6)"),
    ("tm", "time(2)"),
    ("yr", "year"),
    ("js", "json"),
    ("en", "enum('small','Big')"),
    ("st", "set('a','b','c')"),
    ("bt", "bit(12)"),
)
EVERY_SHAPE = shape("db", "every", *EVERY_TYPE)
EVERY_VALUES = {
    "id": -(2**63),
    "ti": -128,
    "tu": 255,
    "si": 32767,
    "mi": 16777215,
    "i": -7,
    "bu": 2**64 - 1,
    "f": 1.5,
    "d": -2.25e300,
    "dec": Decimal("-123456789.125"),
    "c": "ab",
    "vc": "héllo ✓",
    "tx": "x" * 1000,
    "bn": b"\x00\x01",
    "vb": b"\xff\x00",
    "bl": bytes(range(256)),
    "dt": dt.date(2024, 2, 29),
    "dtm": dt.datetime(2020, 1, 2, 3, 4, 5, 123000),
    "ts": dt.datetime(2021, 6, 7, 8, 9, 10, 654321, tzinfo=dt.UTC),
    "tm": dt.timedelta(hours=-838, minutes=-59, seconds=-58, microseconds=-990000),
    "yr": 2155,
    "js": {"a": [1, 2.5, None, True, "s"], "b": {"c": 18446744073709551615}},
    "en": "Big",
    "st": "a,c",
    "bt": 0xABC,
}


def every_row(**changes: Any) -> tuple[Any, ...]:
    values = {**EVERY_VALUES, **changes}
    return tuple(check_value(c, values[c.name]) for c in EVERY_SHAPE.columns)


def test_every_column_type_round_trips() -> None:
    row = every_row()
    old = every_row(vc="before", dec=Decimal("0.001"), js=[], en="small", st="", tm=dt.timedelta(0))
    nulls = (1,) + (None,) * (len(EVERY_TYPE) - 1)
    t = Txn(
        9,
        dmls=[
            DML(DMLType.INSERT, EVERY_SHAPE, values=row, commit_ts=9),
            DML(DMLType.UPDATE, EVERY_SHAPE, values=row, old_values=old, commit_ts=9),
            DML(DMLType.DELETE, EVERY_SHAPE, old_values=old, commit_ts=9),
            DML(DMLType.INSERT, EVERY_SHAPE, values=nulls, commit_ts=9),
        ],
    )
    back = roundtrip(t)
    assert back.commit_ts == 9
    assert rows_of(back) == rows_of(t)
    s = back.dmls[0].shape
    assert [c.name for c in s.columns] == [c.name for c in EVERY_SHAPE.columns]
    assert [c.ctype.tp for c in s.columns] == [c.ctype.tp for c in EVERY_SHAPE.columns]
    assert s.unique_keys == ((0,),)
    assert {s.columns[i].name for i in range(len(s.columns)) if s.columns[i].ctype.unsigned} >= {"tu", "mi", "bu"}
    assert back.dmls[1].shape is s  # one shape object per table definition (SQL text caches per shape)


def test_record_follows_the_original_layout() -> None:
    """docs/formats.md#relay-records: a DML record of test.t(id bigint PRIMARY) inserting 1, plus our time_zone."""
    s = shape("test", "t", ("id", "bigint"))
    payload = encode_txn(Txn(10, dmls=[ins(10, 1, s=s)]))
    assert payload is not None
    b = spb.Binlog()
    b.ParseFromString(payload)
    assert b.time_zone == "UTC"
    b.ClearField("time_zone")
    (table,) = b.dml_data.tables
    assert (table.schema_name, table.table_name) == ("test", "t")
    ci = table.column_info[0]
    assert (ci.name, ci.mysql_type, ci.is_primary_key, ci.flen, ci.decimal) == ("id", "bigint", True, 20, 0)
    assert [(k.name, list(k.column_names)) for k in table.unique_keys] == [("PRIMARY", ["id"])]
    table.ClearField("unique_keys")
    expected = "08 00 10 0a 1a 29 0a 27 0a 04 74 65 73 74 12 01 74 1a 12 0a 02 69 64 12 06 62 69 67 69 6e 74 18 01 20"
    expected += " 14 28 00 22 08 08 00 12 04 0a 02 10 01"
    assert b.SerializeToString() == bytes.fromhex(expected)


def test_enum_and_set_carry_index_and_text() -> None:
    s = shape("d", "e", ("id", "int"), ("en", "enum('x','y')"), ("st", "set('a','b','c')"))
    payload = encode_txn(Txn(3, dmls=[ins(3, 1, "y", "a,c", s=s)]))
    assert payload is not None
    b = spb.Binlog()
    b.ParseFromString(payload)
    cols = b.dml_data.tables[0].mutations[0].row.columns
    assert (cols[1].uint64_value, cols[1].string_value) == (2, "y")
    assert (cols[2].uint64_value, cols[2].string_value) == (0b101, "a,c")


def _record(t: Txn) -> spb.Binlog:
    payload = encode_txn(t)
    assert payload is not None
    b = spb.Binlog()
    b.ParseFromString(payload)
    return b


def test_a_value_that_does_not_decode_names_its_column_and_commit_ts() -> None:
    s = shape("d", "v", ("id", "int"), ("price", "decimal(10,2)"), ("en", "enum('x','y')"))
    b = _record(Txn(7, dmls=[ins(7, 1, Decimal("1.25"), "x", s=s), ins(7, 2, Decimal("2.50"), "y", s=s)]))
    b.dml_data.tables[0].mutations[1].row.columns[1].string_value = "not a number"
    with pytest.raises(CodecError, match=r"d\.v at commit_ts=7: column price: "):
        decode_record(b, ShapeCache())
    b = _record(Txn(8, dmls=[ins(8, 1, Decimal("1.25"), "x", s=s)]))
    b.dml_data.tables[0].mutations[0].row.columns[2].ClearField("string_value")
    with pytest.raises(CodecError, match="column en: an ENUM/SET value without its text"):
        decode_record(b, ShapeCache())
    b = _record(Txn(9, dmls=[ins(9, 1, None, None, s=s)]))  # NULLs are not read
    assert decode_record(b, ShapeCache()).dmls[0].values == (1, None, None)
    del b.dml_data.tables[0].mutations[0].row.columns[2]
    with pytest.raises(CodecError, match="a row of 2 columns, the table has 3"):
        decode_record(b, ShapeCache())


def test_only_integer_columns_written_as_uint64_are_unsigned() -> None:
    s = shape("d", "u", ("id", "bigint unsigned"), ("n", "int"), ("st", "set('a','b')"), ("name", "varchar(5)"))
    back = roundtrip(Txn(3, dmls=[ins(3, 2**64 - 1, -5, "a,b", "z", s=s), ins(3, 7, 6, "b", "y", s=s)]))
    cols = back.dmls[0].shape.columns
    assert [c.ctype.unsigned for c in cols[:2]] == [True, False]
    assert [d.values for d in back.dmls] == [(2**64 - 1, -5, "a,b", "z"), (7, 6, "b", "y")]
    # a row shorter than the table does not trip the scan for uint64 columns; the decoder then refuses it
    b = _record(Txn(4, dmls=[ins(4, 1, 2, "a", "x", s=s)]))
    del b.dml_data.tables[0].mutations[0].row.columns[1:]
    with pytest.raises(CodecError, match="a row of 1 columns, the table has 4"):
        decode_record(b, ShapeCache())


def test_unique_keys_and_consecutive_tables() -> None:
    keyed = shape(
        "d",
        "k",
        ("a", "int"),
        ("b", "varchar(10)"),
        ("c", "int"),
        keys=(IndexInfo(1, "uk_bc", ("b", "c"), unique=True), IndexInfo(2, "ix", ("a",))),
    )
    t = Txn(4, dmls=[ins(4, 1, "x", 2, s=keyed), ins(4, 5, "n5"), ins(4, 3, "y", 4, s=keyed)])
    back = roundtrip(t)
    assert [d.shape.table for d in back.dmls] == ["k", "t", "k"]  # the order across tables is kept
    assert back.dmls[0].shape.unique_keys == ((1, 2),)  # not-unique indexes are not keys
    assert back.dmls[0].shape is back.dmls[2].shape
    assert rows_of(back) == rows_of(t)


def test_ddl_record() -> None:
    back = roundtrip(ddl_txn(7, "db1", "alter table t add column x int", version=12))
    assert back.ddl is not None
    assert (back.ddl.db, back.ddl.table, back.ddl.query) == ("db1", "t", "alter table t add column x int")
    assert back.ddl.job.type != JobType.CREATE_SCHEMA
    job = Job(2, JobType.CREATE_SCHEMA, 3, "nd", 0, "", 1, "CREATE DATABASE nd")
    create = roundtrip(Txn(8, ddl=DDL("nd", "", "CREATE DATABASE nd", job, InfoSchema())))
    assert create.ddl is not None
    assert create.ddl.job.type == JobType.CREATE_SCHEMA  # the MySQL sink does not `USE` it first


def test_create_database_names_the_new_database_in_schema_name() -> None:
    """As the original: `schema_name` of CREATE DATABASE is the new database (the drainer's DDL has db "")."""
    job = Job(2, JobType.CREATE_SCHEMA, 3, "nd", 0, "", 1, "CREATE DATABASE nd")
    payload = encode_txn(Txn(8, ddl=DDL("", "", "CREATE DATABASE nd", job, InfoSchema())))
    assert payload is not None
    b = spb.Binlog.FromString(payload)
    assert (b.ddl_data.schema_name, b.ddl_data.table_name) == ("nd", "")
    back = decode_record(b, ShapeCache())
    assert back.ddl is not None
    assert (back.ddl.db, back.ddl.job.schema_name, back.ddl.job.type) == ("", "nd", JobType.CREATE_SCHEMA)
    drop = Job(3, JobType.DROP_SCHEMA, 3, "nd", 0, "", 2, "DROP DATABASE nd")
    payload = encode_txn(Txn(9, ddl=DDL("nd", "", "DROP DATABASE nd", drop, InfoSchema())))
    assert payload is not None
    assert spb.Binlog.FromString(payload).ddl_data.schema_name == "nd"


def test_empty_txn_and_skipped_ddl_have_no_record() -> None:
    assert encode_txn(Txn(5)) is None
    t = ddl_txn(6, "d", "drop table t")
    assert t.ddl is not None
    skipped = Txn(6, ddl=DDL(t.ddl.db, t.ddl.table, t.ddl.query, t.ddl.job, t.ddl.before, skip=True))
    assert encode_txn(skipped) is None


# -------------------------------------------------------------------------------------------- a fake sink


class FakeSink(Sink):
    """Applies txns at once (or holds them while `gate` is clear) and records what it got."""

    name = "fake"
    safe_mode_aware = True

    def __init__(self, relay_dir: Path | None = None, parts: bool = True) -> None:
        self.got: list[Txn] = []
        self.safe: list[bool] = []
        self.gate = threading.Event()
        self.gate.set()
        self.relay_dir = relay_dir
        self.durable_at_apply: list[bool] = []
        self._on_success: OnSuccess = lambda ts: None
        self._parts = parts
        self.closed = False

    @property
    def takes_parts(self) -> bool:
        return self._parts

    def start(self, on_success: OnSuccess) -> None:
        self._on_success = on_success

    def add(self, txn: Txn) -> None:
        assert self.gate.wait(JOIN)
        if self.relay_dir is not None:  # the record must be in the relay files already
            self.durable_at_apply.append(any(t.commit_ts == txn.commit_ts for t in read_relay(self.relay_dir, 0)))
        self.got.append(txn)
        if not txn.partial:
            self._on_success(txn.commit_ts)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def error(self) -> BaseException | None:
        return None

    def set_safe_mode(self, on: bool) -> None:
        self.safe.append(on)


def write_records(directory: Path, *payloads: bytes, max_file_size: int = 1 << 20) -> None:
    with BinlogFileWriter(directory, max_file_size) as w:
        for p in payloads:
            w.write(p)


def enc(t: Txn) -> bytes:
    p = encode_txn(t)
    assert p is not None
    return p


def summary(txns: list[Txn]) -> list[tuple[int, list[int], bool]]:
    return [(t.commit_ts, [d.values[0] for d in t.dmls if d.values], t.partial) for t in txns]


# ---------------------------------------------------------------------------------------------- RelaySink


def test_sink_writes_each_txn_durably_before_the_inner_sink_gets_it(tmp_path: Path) -> None:
    inner = FakeSink(relay_dir=tmp_path)
    sink = RelaySink(inner, tmp_path, cluster_id=7, max_file_size=1 << 20)
    done: list[int] = []
    sink.start(done.append)
    for ts in (10, 11, 12):
        sink.add(txn(ts, ts))
    sink.add(Txn(13))  # a fake binlog: reported, not written
    sink.flush(JOIN)
    assert done == [10, 11, 12, 13]
    assert inner.durable_at_apply == [True, True, True, False]
    sink.close()
    assert inner.closed
    assert summary(list(read_relay(tmp_path, 0))) == [(10, [10], False), (11, [11], False), (12, [12], False)]
    assert RelayMeta.read(tmp_path).cluster_id == 7


def test_sink_parts_are_framed_by_markers(tmp_path: Path) -> None:
    sink = RelaySink(FakeSink(), tmp_path, cluster_id=1, max_file_size=1 << 20)
    sink.start(lambda ts: None)
    sink.add(txn(20, 1, 2, partial=True))
    sink.add(txn(20, 3, partial=True))
    sink.add(txn(20, 4))
    sink.add(txn(21, 5))
    sink.flush(JOIN)
    sink.close()
    got = list(read_relay(tmp_path, 0))
    assert summary(got) == [(20, [1, 2], True), (20, [3], True), (20, [4], False), (21, [5], False)]


def test_sink_deletes_files_once_applied_never_the_current_one(tmp_path: Path) -> None:
    inner = FakeSink()
    sink = RelaySink(inner, tmp_path, cluster_id=1, max_file_size=300)
    sink.start(lambda ts: None)
    for ts in range(1, 41):
        sink.add(txn(ts, ts))
    sink.flush(JOIN)
    files = list_binlog_files(tmp_path)
    assert sink.deleted_files >= 10
    assert len(files) <= 2  # the file being written, and the one just finished at most
    sink.close()


def test_sink_keeps_files_with_unapplied_records(tmp_path: Path) -> None:
    inner = FakeSink()
    inner.gate.clear()  # the downstream is stuck
    sink = RelaySink(inner, tmp_path, cluster_id=1, max_file_size=200, max_pending_bytes=1 << 30)
    sink.start(lambda ts: None)
    for ts in range(1, 21):
        sink.add(txn(ts, ts))
    assert len(list_binlog_files(tmp_path)) > 3
    assert sink.deleted_files == 0
    inner.gate.set()
    sink.flush(JOIN)
    assert sink.deleted_files > 0
    sink.close()


def test_sink_refuses_a_relay_log_of_another_cluster(tmp_path: Path) -> None:
    RelaySink(FakeSink(), tmp_path, cluster_id=1, max_file_size=1 << 20).close()
    with pytest.raises(RelayError, match="belongs to cluster 1, this drainer to 2"):
        RelaySink(FakeSink(), tmp_path, cluster_id=2, max_file_size=1 << 20)


def test_sink_records_schema_versions_for_recovery(tmp_path: Path) -> None:
    sink = RelaySink(FakeSink(), tmp_path, cluster_id=1, max_file_size=1 << 20)
    sink.start(lambda ts: None)
    sink.add(txn(1, 1))
    sink.add(ddl_txn(2, "d", "alter table t add column c int", version=5))
    sink.add(Txn(3, schema_version=6))  # a filtered DDL still moves the version
    sink.flush(JOIN)
    sink.close()
    meta = RelayMeta.read(tmp_path)
    assert meta.versions == [(2, 5), (3, 6)]
    assert (meta.version_at(1, 4), meta.version_at(2, 4), meta.version_at(9, 4)) == (4, 5, 6)


def test_sink_add_after_a_write_failure_raises(tmp_path: Path) -> None:
    sink = RelaySink(FakeSink(), tmp_path, cluster_id=1, max_file_size=1 << 20)
    sink.start(lambda ts: None)
    bad = Txn(5, dmls=[ins(5, "not an int", "x")])
    with pytest.raises(SinkError, match="cannot encode commit_ts=5"):
        sink.add(bad)
    with pytest.raises(SinkError):
        sink.add(txn(6, 6))
    sink.close()


# -------------------------------------------------------------------------------------------- reading


def test_read_skips_checkpointed_and_replayed_txns(tmp_path: Path) -> None:
    # a first run wrote 10..12, crashed; the restart replayed from the checkpoint (9): 10..13 again
    write_records(tmp_path, *(enc(txn(ts, ts)) for ts in (10, 11, 12, 10, 11, 12, 13)))
    assert summary(list(read_relay(tmp_path, 9))) == [(t, [t], False) for t in (10, 11, 12, 13)]
    assert [t.commit_ts for t in read_relay(tmp_path, 11)] == [12, 13]


def test_read_leaves_out_a_txn_cut_mid_parts_and_takes_its_replay(tmp_path: Path) -> None:
    from drainer.relay_codec import closing_marker, opening_marker

    write_records(
        tmp_path,
        enc(txn(10, 1)),
        opening_marker(11),
        enc(txn(11, 2, partial=True)),  # crash here: 11 was cut
        opening_marker(11),  # the restart writes 11 again, whole
        enc(txn(11, 2, partial=True)),
        enc(txn(11, 3)),
        closing_marker(11),
        opening_marker(12),
        enc(txn(12, 4, partial=True)),  # cut at the end of the log
    )
    stats = RelayStats()
    got = list(read_relay(tmp_path, 0, stats))
    assert summary(got) == [(10, [1], False), (11, [2], True), (11, [3], False)]
    assert stats.cut == 2


def test_torn_tail_is_end_of_log(tmp_path: Path) -> None:
    write_records(tmp_path, enc(txn(1, 1)), enc(txn(2, 2)))
    (f,) = list_binlog_files(tmp_path)
    path = tmp_path / f.name
    with open(path, "ab") as fh:
        fh.write(encode_record(enc(txn(3, 3)))[:-7])  # a crash in the middle of the last record
    stats = RelayStats()
    assert [t.commit_ts for t in read_relay(tmp_path, 0, stats)] == [1, 2]
    assert stats.skipped == 0
    assert stats.read.torn_tail_bytes > 0


def test_corrupted_record_is_skipped_and_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_records(tmp_path, enc(txn(1, 1)), enc(txn(2, 2)), enc(txn(3, 3)))
    (f,) = list_binlog_files(tmp_path)
    path = tmp_path / f.name
    data = bytearray(path.read_bytes())
    second = data.find(b"n2")  # inside the payload of the second record: its CRC no longer matches
    data[second] ^= 0xFF
    path.write_bytes(bytes(data))
    stats = RelayStats()
    assert [t.commit_ts for t in read_relay(tmp_path, 0, stats)] == [1, 3]
    assert stats.skipped == 1
    assert any("corrupt" in r.getMessage().lower() or "skip" in r.getMessage().lower() for r in caplog.records)


def test_a_txn_in_parts_with_a_corrupted_part_is_left_out(tmp_path: Path) -> None:
    from drainer.relay_codec import closing_marker, opening_marker

    write_records(tmp_path, opening_marker(5), enc(txn(5, 1, partial=True)), enc(txn(5, 2)), closing_marker(5))
    (f,) = list_binlog_files(tmp_path)
    path = tmp_path / f.name
    data = bytearray(path.read_bytes())
    data[data.find(b"n1")] ^= 0xFF
    path.write_bytes(bytes(data))
    stats = RelayStats()
    assert list(read_relay(tmp_path, 0, stats)) == []
    assert (stats.skipped, stats.cut) == (1, 1)


def test_unreadable_relay_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RelayError, match="does not exist"):
        list(read_relay(tmp_path / "nope", 0))
    not_dir = tmp_path / "file"
    not_dir.write_text("x")
    with pytest.raises(RelayError, match="does not exist"):
        list(read_relay(not_dir, 0))
    with pytest.raises(RelayError, match=r"has no relay\.meta"):
        RelayMeta.read(tmp_path)


# ------------------------------------------------------------------------------------------- recovery


def test_recover_applies_after_the_checkpoint_in_safe_mode(tmp_path: Path) -> None:
    write_records(tmp_path, *(enc(txn(ts, ts)) for ts in (5, 6, 7)), enc(ddl_txn(8, "d", "alter table t add x int")))
    sink = FakeSink()
    seen: list[RecoveryResult] = []
    result = recover(tmp_path, 5, sink, progress=seen.append)
    assert [t.commit_ts for t in sink.got] == [6, 7, 8]
    assert sink.safe == [True]
    assert sink.closed
    assert (result.txns, result.rows, result.ddls, result.last_ts, result.stopped_at_ddl) == (3, 2, 1, 8, 0)


def test_recover_stops_before_a_ddl_the_sink_cannot_run(tmp_path: Path) -> None:
    write_records(tmp_path, enc(txn(6, 6)), enc(ddl_txn(7, "d", "alter table t add x int")), enc(txn(8, 8)))
    sink = FakeSink()
    result = recover(tmp_path, 0, sink, ddl_supported=False)
    assert [t.commit_ts for t in sink.got] == [6]
    assert (result.last_ts, result.stopped_at_ddl) == (6, 7)


def test_recover_with_nothing_after_the_checkpoint_keeps_it(tmp_path: Path) -> None:
    write_records(tmp_path, enc(txn(3, 3)))
    result = recover(tmp_path, 3, FakeSink())
    assert (result.txns, result.last_ts) == (0, 3)
    assert os.path.isdir(tmp_path)
