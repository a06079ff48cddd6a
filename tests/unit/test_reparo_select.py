"""reparo's selection (window, files, filters), print format and the whole run in print mode (files only)."""

from __future__ import annotations

import io
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from common.binlogfile import BinlogFileWriter, list_binlog_files
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.filters import TableName
from common.pb import pb_binlog_pb2
from common.pbfile import txn_to_pb
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import parse_type
from tools.reparo import Summary, main, replay
from tools.reparo.config import load_config
from tools.reparo.dest import PrintDest
from tools.reparo.printer import format_datum
from tools.reparo.select import Selected, Selection, Window, first_commit_ts, first_file

pytestmark = pytest.mark.usefixtures("keep_root_logging")


def shape(db: str, table: str) -> TableShape:
    cols = [("id", "bigint"), ("name", "varchar(20)"), ("price", "decimal(6,2)"), ("f", "double"), ("b", "blob")]
    columns = tuple(
        ColumnInfo(id=i + 1, name=n, offset=i, type_text=parse_type(t)[1], ctype=parse_type(t)[0])
        for i, (n, t) in enumerate(cols)
    )
    info = TableInfo(id=1, name=table, columns=columns, indices=(IndexInfo(1, "PRIMARY", ("id",), True, True),))
    return TableShape.of(db, info)


def ddl_txn(ts: int, db: str, query: str) -> Txn:
    job = Job(1, JobType.CREATE_TABLE, 1, db, 2, "t", 3, query)
    return Txn(ts, ddl=DDL(db=db, table="t", query=query, job=job, before=InfoSchema()))


def dml_txn(ts: int, *dmls: DML) -> Txn:
    return Txn(ts, dmls=list(dmls))


def ins(s: TableShape, i: int) -> DML:
    return DML(DMLType.INSERT, s, values=(i, f"n{i}", None, 1.5, b"\x00\xff"))


def write_dir(path: Path, txns: list[Txn], max_file_size: int = 1 << 20) -> None:
    with BinlogFileWriter(path, max_file_size, sync=False) as w:
        for txn in txns:
            binlog = txn_to_pb(txn)
            assert binlog is not None
            w.write(binlog.SerializeToString())


class Recorder:
    """A Dest that keeps what it is given."""

    def __init__(self) -> None:
        self.got: list[Selected] = []
        self.rows: Counter[str] = Counter()

    def start(self) -> None:
        pass

    def apply(self, sel: Selected) -> None:
        self.got.append(sel)
        self.rows["ddl" if sel.ddl else "insert"] += 1

    def finish(self) -> int:
        return len(self.got)

    def close(self) -> None:
        pass


A, B = shape("a", "t"), shape("b", "u")


def history() -> list[Txn]:
    """commit_ts 10, 20, ... 200: DDLs at 10 and 20, then one insert into a.t and b.u per transaction."""
    txns = [ddl_txn(10, "", "CREATE DATABASE `a`"), ddl_txn(20, "a", "CREATE TABLE `t` (id bigint primary key)")]
    txns += [dml_txn(ts, ins(A, ts), ins(B, ts)) for ts in range(30, 201, 10)]
    return txns


def run(path: Path, **flags: Any) -> tuple[Summary, Recorder]:
    cfg = load_config(flags={"data-dir": str(path), **flags})
    rec = Recorder()
    return replay(cfg, rec), rec


# ----------------------------------------------------------------------------------------------- window


@pytest.mark.parametrize(
    ("start", "stop", "want"),
    [
        (0, 0, list(range(10, 201, 10))),
        (95, 150, list(range(100, 151, 10))),
        (100, 150, list(range(100, 151, 10))),  # both ends inclusive
        (101, 149, list(range(110, 141, 10))),
        (200, 0, [200]),
        (201, 0, []),
        (0, 9, []),
    ],
)
def test_window_keeps_exactly_start_to_stop(tmp_path: Path, start: int, stop: int, want: list[int]) -> None:
    write_dir(tmp_path, history(), max_file_size=300)  # several files
    assert len(list_binlog_files(tmp_path)) > 4
    summary, rec = run(tmp_path, **{"start-tso": start, "stop-tso": stop})
    assert [s.commit_ts for s in rec.got] == want
    assert summary.applied == len(want)
    before = sum(1 for ts in range(10, 201, 10) if ts < start)
    assert summary.skipped_window + _skipped_by_files(tmp_path, start) == before


def _skipped_by_files(path: Path, start: int) -> int:
    """Binlogs in the files reparo did not open for a window starting at `start`."""
    first, _, _ = first_file(str(path), start)
    total = 0
    for f in list_binlog_files(path):
        if f.index < first:
            total += sum(1 for _ in _records(path / f.name))
    return total


def _records(path: Path) -> list[bytes]:
    from common.binlogfile.reader import scan_file
    from common.binlogfile.record import Record

    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        return [ev[1] for evs in scan_file(fh, 0, size) for ev in evs if isinstance(ev, Record)]


def test_files_before_the_window_are_not_read(tmp_path: Path) -> None:
    write_dir(tmp_path, history(), max_file_size=300)
    files = list_binlog_files(tmp_path)
    firsts = [ts for f in files if (ts := first_commit_ts(str(tmp_path / f.name))) is not None]
    assert len(firsts) == len(files)
    assert firsts == sorted(firsts)
    assert firsts[0] == 10
    start = firsts[3] + 5  # inside the fourth file
    index, skipped, total = first_file(str(tmp_path), start)
    assert (index, skipped, total) == (files[3].index, 3, len(files))
    index, skipped, _ = first_file(str(tmp_path), firsts[3])  # equal to a file's first: the file before may hold it
    assert skipped == 2
    summary, rec = run(tmp_path, **{"start-tso": start})
    assert summary.files_skipped == 3
    assert rec.got[0].commit_ts == min(ts for ts in range(10, 201, 10) if ts >= start)
    assert summary.binlogs_read < 20


def test_reading_stops_after_stop(tmp_path: Path) -> None:
    write_dir(tmp_path, history())
    summary, rec = run(tmp_path, **{"stop-tso": 55})
    assert [s.commit_ts for s in rec.got] == [10, 20, 30, 40, 50]
    assert summary.binlogs_read == 6  # the first one past stop ends the read


def test_duplicates_of_a_restarted_drainer_are_skipped(tmp_path: Path) -> None:
    txns = history()
    write_dir(tmp_path, txns[:8] + txns[5:])  # written again from an older checkpoint
    summary, rec = run(tmp_path)
    assert [s.commit_ts for s in rec.got] == list(range(10, 201, 10))
    assert summary.duplicates == 3


def test_corrupted_records_are_skipped_and_counted(tmp_path: Path) -> None:
    write_dir(tmp_path, history(), max_file_size=300)
    first = tmp_path / list_binlog_files(tmp_path)[0].name
    data = bytearray(first.read_bytes())
    data[20] ^= 0xFF  # inside the first record's payload: its CRC no longer matches
    first.write_bytes(bytes(data))
    summary, rec = run(tmp_path)
    assert summary.corrupted == 1
    assert [s.commit_ts for s in rec.got] == list(range(20, 201, 10))


# ----------------------------------------------------------------------------------------------- filters


def _binlog(txn: Txn) -> pb_binlog_pb2.Binlog:
    b = txn_to_pb(txn)
    assert b is not None
    return b


def test_do_and_ignore_filters() -> None:
    c = shape("a", "keep_me")
    both = _binlog(dml_txn(5, ins(A, 1), ins(B, 2), ins(c, 3)))
    only_a = Selection(do_dbs=["a"])
    sel = only_a.select(both)
    assert sel is not None
    assert [e.table_name for e in sel.events] == ["t", "keep_me"]
    assert only_a.rows_filtered == 1
    tables = Selection(do_tables=[TableName("b", "~^U$")])
    sel = tables.select(both)
    assert sel is not None
    assert [(e.schema_name, e.table_name) for e in sel.events] == [("b", "u")]
    ignore = Selection(do_dbs=["~^[ab]$"], ignore_tables=[TableName("a", "t")], ignore_dbs=["B"])
    sel = ignore.select(both)
    assert sel is not None
    assert [e.table_name for e in sel.events] == ["keep_me"]
    assert Selection(ignore_dbs=["a", "b"]).select(both) is None


@pytest.mark.parametrize(
    ("db", "query", "selection", "passes"),
    [
        ("", "CREATE DATABASE `a`", {"do_dbs": ["a"]}, True),
        ("", "CREATE DATABASE `x`", {"do_dbs": ["a"]}, False),
        ("", "CREATE DATABASE `b`", {"do_tables": [TableName("b", "u")]}, True),  # its tables need it
        ("a", "CREATE TABLE `t` (id int)", {"do_tables": [TableName("a", "t")]}, True),
        ("a", "CREATE TABLE `z` (id int)", {"do_tables": [TableName("a", "t")]}, False),
        ("a", "CREATE TABLE `b`.`t` (id int)", {"ignore_dbs": ["b"]}, False),  # the qualified schema decides
        ("a", "DROP TABLE `t`", {"ignore_tables": [TableName("a", "~^t")]}, False),
        ("a", "DROP DATABASE `a`", {"ignore_dbs": ["a"]}, False),
    ],
)
def test_ddl_filtered_by_the_names_in_its_query(db: str, query: str, selection: dict[str, Any], passes: bool) -> None:
    sel = Selection(**selection).select(_binlog(ddl_txn(7, db, query)))
    assert (sel is not None) == passes


def test_filters_in_a_run(tmp_path: Path) -> None:
    write_dir(tmp_path, history())
    summary, rec = run(tmp_path, **{"replicate-ignore-db": "a"})
    assert [s.commit_ts for s in rec.got] == list(range(30, 201, 10))  # both DDLs are about a
    assert all([e.schema_name for e in s.events] == ["b"] for s in rec.got)
    assert (summary.skipped_filter, summary.rows_filtered) == (2, 18)


# ----------------------------------------------------------------------------------------------- print


def test_print_format() -> None:
    s = shape("db", "t")
    upd = DML(DMLType.UPDATE, s, values=(1, "new", None, 3.0, b"ok"), old_values=(1, "old", None, 1e21, b"\xff\x00"))
    dele = DML(DMLType.DELETE, s, old_values=(2, "x", None, -0.25, b""))
    out = io.StringIO()
    dest = PrintDest(out)
    for txn in (ddl_txn(3, "db", "CREATE TABLE `t` (id int)"), dml_txn(4, ins(s, 7), upd, dele)):
        b = _binlog(txn)
        sel = Selection().select(b)
        assert sel is not None
        dest.apply(sel)
    assert dest.finish() == 2
    assert out.getvalue() == (
        "DDL query: use `db`; CREATE TABLE `t` (id int);\n"
        "schema: db; table: t; type: Insert\n"
        "id(bigint): 7\n"
        "name(varchar): n7\n"
        "price(decimal): <nil>\n"
        "f(double): 1.5\n"
        "b(blob): 0x00ff\n"
        "schema: db; table: t; type: Update\n"
        "id(bigint): 1 => 1\n"
        "name(varchar): old => new\n"
        "price(decimal): <nil> => <nil>\n"
        "f(double): 1e+21 => 3\n"
        "b(blob): 0xff00 => ok\n"
        "schema: db; table: t; type: Delete\n"
        "id(bigint): 2\n"
        "name(varchar): x\n"
        "price(decimal): <nil>\n"
        "f(double): -0.25\n"
        "b(blob): \n"
    )
    assert dest.rows == Counter({"ddl": 1, "insert": 1, "update": 1, "delete": 1})


def test_format_datum_kinds() -> None:
    from common.codec import Datum, Kind, SizedDecimal

    assert format_datum(Datum(Kind.UINT, 18446744073709551615)) == "18446744073709551615"
    assert format_datum(Datum(Kind.INT, -3)) == "-3"
    assert format_datum(Datum(Kind.FLOAT, 1e-05)) == "1e-05"
    assert format_datum(Datum(Kind.BYTES, "ü".encode())) == "ü"
    from decimal import Decimal

    assert format_datum(Datum(Kind.DECIMAL, SizedDecimal(Decimal("1.50"), 5, 2))) == "1.50"


# ----------------------------------------------------------------------------------------------- main


def test_main_prints_and_summarises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_dir(tmp_path, history())
    out = io.StringIO()
    assert main(["--data-dir", str(tmp_path), "--start-tso", "190", "--log-level", "error"], out=out) == 0
    text = out.getvalue()
    assert text.count("type: Insert") == 4  # commit_ts 190 and 200, two rows each
    assert "id(bigint): 190" in text
    assert "id(bigint): 180" not in text
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("reparo: done in ")
    assert "2 applied (4 inserts, 0 updates, 0 deletes, 0 DDLs)" in err[0]
    assert "outside the window" in err[0]
    assert "0 corrupted records" in err[0]


def test_progress_lines_on_long_runs(tmp_path: Path) -> None:
    write_dir(tmp_path, history())
    ticks = iter(range(1000))
    lines: list[str] = []
    cfg = load_config(flags={"data-dir": str(tmp_path)})
    replay(cfg, Recorder(), progress=lines.append, clock=lambda: float(next(ticks)))  # one "second" per call
    assert 5 <= len(lines) <= 20
    assert lines[0].startswith("progress: ")
    assert "at commit_ts" in lines[0]


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "does not exist"),
        ("file", "is not a directory"),
        ("empty", "holds no pb binlog files"),
        ("gap", "file index 1 is missing"),
    ],
)
def test_bad_data_dir_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], setup: str, message: str
) -> None:
    target = tmp_path / "dir"
    if setup == "file":
        target.write_text("x")
    elif setup == "empty":
        target.mkdir()
        (target / "savepoint").write_text("commitTS = 1\n")
    elif setup == "gap":
        write_dir(target, history(), max_file_size=300)
        os.remove(target / list_binlog_files(target)[1].name)
    out = io.StringIO()
    assert main(["--data-dir", str(target), "--log-level", "error"], out=out) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("reparo: error: ")
    assert message in err
    assert out.getvalue() == ""


def test_unwritable_log_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_dir(tmp_path / "pb", history())
    (tmp_path / "a-file").write_text("x")
    bad = tmp_path / "a-file" / "r.log"  # under a regular file: a missing directory would be created
    assert main(["--data-dir", str(tmp_path / "pb"), "--log-file", str(bad)], out=io.StringIO()) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("reparo: error: cannot open log-file")


def test_unreadable_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any directory")
    target = tmp_path / "dir"
    write_dir(target, history())
    target.chmod(0)
    try:
        assert main(["--data-dir", str(target), "--log-level", "error"], out=io.StringIO()) == 1
    finally:
        target.chmod(0o700)
    err = capsys.readouterr().err
    assert err.startswith("reparo: error: ")
    assert "cannot list binlog directory" in err


def test_a_record_that_is_not_a_pb_binlog_stops_with_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with BinlogFileWriter(tmp_path, sync=False) as w:
        w.write(_binlog(history()[0]).SerializeToString())
        w.write(b"\xff\xff\xff")
    assert main(["--data-dir", str(tmp_path), "--log-level", "error"], out=io.StringIO()) == 1
    assert "is not a pb_binlog.Binlog" in capsys.readouterr().err


def test_window_and_window_exports() -> None:
    w = Window(10, 20)
    assert (w.before(9), w.before(10), w.after(20), w.after(21)) == (True, False, False, True)
    assert not Window(10, 0).after(1 << 62)
