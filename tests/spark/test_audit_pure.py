"""The audit's pure parts: chunk planning, canonical hashing, table merging, and the DataFrame comparison."""

from __future__ import annotations

import datetime as dt
import itertools
import sqlite3
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pytest

from common.schema.model import ColumnInfo
from common.schema.types import parse_type
from spark_jobs.audit import hashing
from spark_jobs.audit.compare import (
    CHUNK_DDL,
    ROW_DDL,
    chunk_status,
    difference_counts,
    difference_examples,
    row_differences,
)
from spark_jobs.audit.meta import StoreColumn, StoreIndex, StoreTable, TableProblemError, audit_table
from spark_jobs.audit.plan import Chunk, boundary_chunks, chunk_count, int_chunks, range_predicate
from spark_jobs.audit.report import AuditReport, Example, TableReport, differing_positions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def col(type_text: str, name: str = "c") -> ColumnInfo:
    ctype, text = parse_type(type_text)
    return ColumnInfo(id=1, name=name, offset=0, type_text=text, ctype=ctype)


# ------------------------------------------------------------------------------------- planning
def _select(conn: sqlite3.Connection, chunk: Chunk, exprs: list[str]) -> list[tuple[Any, ...]]:
    where, params = range_predicate(chunk, exprs, "?")
    sql = "SELECT a, b FROM t" + (f" WHERE {where}" if where else "")
    return conn.execute(sql, [v for _, v in params]).fetchall()


def test_int_chunks_cover_the_key_space_exactly_once() -> None:
    chunks = int_chunks(1, 1000, 1000, 100)
    assert len(chunks) == 10
    assert chunks[0].lower is None
    assert chunks[-1].upper is None
    assert [c.index for c in chunks] == list(range(10))
    assert [c.lower for c in chunks[1:]] == [(1 + 100 * i,) for i in range(1, 10)]
    assert all(a.upper == b.lower for a, b in itertools.pairwise(chunks))
    # fewer distinct keys than chunks: never an empty range
    assert len(int_chunks(5, 7, 1000, 10)) == 3
    assert int_chunks(5, 5, 1, 10) == [Chunk(0)]
    assert chunk_count(0, 10) == 1
    assert chunk_count(10_001, 10_000) == 2
    with pytest.raises(ValueError, match="chunk size"):
        chunk_count(1, 0)


def test_boundary_chunks_over_a_composite_key_partition_the_rows() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (a TEXT NOT NULL, b INTEGER NOT NULL, PRIMARY KEY (a, b))")
    rows = [(f"k{i % 13:02d}", i) for i in range(500)]
    conn.executemany("INSERT INTO t VALUES (?, ?)", rows)
    sample = conn.execute("SELECT a, b FROM t WHERE b % 3 = 0 ORDER BY a, b").fetchall()
    chunks = boundary_chunks(sample, 500, 50)
    assert len(chunks) == 10
    seen: list[tuple[Any, ...]] = []
    for c in chunks:
        got = _select(conn, c, ["a", "b"])
        assert got, c.describe()  # no empty chunk
        seen += got
    assert sorted(seen) == sorted(rows)  # every row in exactly one chunk
    # a chunk's boundary splits one value of `a` between two chunks: the expansion handles it
    assert any(c.lower is not None and c.lower[1] != min(b for a, b in rows if a == c.lower[0]) for c in chunks)


def test_boundary_chunks_drop_repeated_sample_keys() -> None:
    assert boundary_chunks([(1,), (1,), (1,)], 1000, 10) == [Chunk(0)]
    chunks = boundary_chunks([("a",), ("a",), ("b",), ("c",)], 1000, 10)
    assert [(c.lower, c.upper) for c in chunks] == [(None, ("b",)), (("b",), ("c",)), (("c",), None)]


def test_range_predicate_text() -> None:
    where, params = range_predicate(Chunk(1, (1, "x"), (2, "y")), ["`a`", "BINARY `b`"], "%s")
    assert where == (
        "(`a` > %s OR (`a` = %s AND (BINARY `b` >= %s))) AND (`a` < %s OR (`a` = %s AND (BINARY `b` < %s)))"
    )
    assert params == [(0, 1), (0, 1), (1, "x"), (0, 2), (0, 2), (1, "y")]
    assert range_predicate(Chunk(0), ["a"], "?") == ("", [])
    with pytest.raises(ValueError, match="bound has 1 values"):
        range_predicate(Chunk(0, (1,)), ["a", "b"], "?")


# -------------------------------------------------------------------------------------- hashing
def test_canonical_values_are_tagged_and_exact() -> None:
    assert hashing.canonical_value(None) == b"N"
    assert hashing.canonical_value(7) == b"i7"
    assert hashing.canonical_value(-0.0) == hashing.canonical_value(0.0)
    assert hashing.canonical_value(0.1) != hashing.canonical_value(0.1 + 1e-17 * 2)
    assert hashing.canonical_value(Decimal("1.50")) == b"d1.50"
    assert hashing.canonical_value("1") != hashing.canonical_value(1)
    assert hashing.canonical_value(b"a") != hashing.canonical_value("a")
    assert hashing.canonical_value(dt.date(2024, 1, 2)) == b"D2024-01-02"
    assert hashing.canonical_value(dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)) == b"t2024-01-02T03:04:05+00:00"
    assert hashing.canonical_value(dt.timedelta(hours=-1, microseconds=5)) == b"T-3599999995"
    j = col("json")
    assert hashing.canonical_value({"b": 1, "a": [True, None]}, j) == hashing.canonical_value(
        {"a": [True, None], "b": 1}, j
    )
    assert hashing.canonical_value(True, j) != hashing.canonical_value(1, j)
    # column boundaries are part of the bytes
    cols = [None, None]
    assert hashing.row_bytes(["ab", "c"], cols) != hashing.row_bytes(["a", "bc"], cols)


def test_row_hash_and_chunk_sum() -> None:
    h1 = hashing.row_hash(b"one")
    h2 = hashing.row_hash(b"two")
    assert -(2**63) <= h1 < 2**63
    assert h1 != h2
    a = hashing.ChunkSum.of([h1, h2, h2])
    b = hashing.ChunkSum.of([h2, h1, h2])
    assert (a.rows, a.checksum) == (b.rows, b.checksum) == (3, a.checksum)
    assert hashing.ChunkSum.of([h1, h2]).checksum != a.checksum  # a duplicate counts (XOR would cancel it)
    big = hashing.ChunkSum.of([2**63 - 1, 2**63 - 1])
    assert big.checksum == -2  # wraps modulo 2**64, stays signed
    assert hashing.key_id(b"x") != hashing.key_id(b"y")
    assert hashing.show("x" * 100).endswith("…")
    assert len(hashing.show("x" * 100)) == hashing.SHOW_CHARS


# ----------------------------------------------------------------------------------------- meta
def _mysql(name: str, *cols: tuple[str, str, bool], unique: tuple[StoreIndex, ...] = ()) -> StoreTable:
    return StoreTable("d", name, True, tuple(StoreColumn(n, t, nullable) for n, t, nullable in cols), unique)


def test_audit_table_takes_types_from_the_mysql_side_and_keys_from_upstream() -> None:
    up = StoreTable(
        "d",
        "t",
        False,
        (
            StoreColumn("_tidb_rowid", "INTEGER", False),
            StoreColumn("name", "TEXT", False),
            StoreColumn("n", "TEXT", False),
            StoreColumn("v", "TEXT", True),
        ),
        (StoreIndex("PRIMARY", ("_tidb_rowid",), True), StoreIndex("d.t.pk_unique", ("name", "n"))),
    )
    down = _mysql(
        "t",
        ("name", "varchar(20)", False),
        ("n", "decimal(5,2)", False),
        ("V", "json", True),
        unique=(StoreIndex("PRIMARY", ("name", "n"), True),),
    )
    t = audit_table(up, down)
    assert t.typed
    assert t.column_names == ["name", "n", "v"]  # hidden handle left out, upstream's spelling
    assert [c.type_text for c in t.info.columns] == ["varchar(20)", "decimal(5,2)", "json"]
    assert t.key.description == "primary key (name, n)"
    assert t.key.positions == (0, 1)
    assert t.chunk_key == (0,)  # DECIMAL sorts differently in sqlite (TEXT): the prefix stops there
    assert not t.int_ranges


def test_audit_table_chunk_keys() -> None:
    ints = _mysql("t", ("id", "bigint(20) unsigned", False), unique=(StoreIndex("PRIMARY", ("id",), True),))
    t = audit_table(ints, ints)
    assert (t.chunk_key, t.int_ranges) == ((0,), True)
    nullable = _mysql("t", ("k", "int(11)", True), ("v", "int(11)", True), unique=(StoreIndex("k", ("k",)),))
    t = audit_table(nullable, nullable)
    assert t.key.description == "unique key k (k)"
    assert t.chunk_key == ()  # a range never selects NULL: one chunk
    keyless = _mysql("t", ("a", "int(11)", False))
    t = audit_table(keyless, keyless)
    assert (t.key.description, t.chunk_key) == ("whole row", ())
    lite = StoreTable("d", "t", False, (StoreColumn("k", "TEXT", False),), (StoreIndex("PRIMARY", ("k",), True),))
    t = audit_table(lite, lite)
    assert not t.typed
    assert t.chunk_key == (0,)  # two sqlite stores order alike whatever the type
    assert t.columns_for_values() == [None]


def test_audit_table_problems() -> None:
    a = _mysql("t", ("a", "int(11)", False), ("b", "int(11)", False))
    b = _mysql("t", ("a", "int(11)", False), ("c", "int(11)", False))
    with pytest.raises(TableProblemError, match="columns missing downstream: b; extra columns downstream: c"):
        audit_table(a, b)
    odd = _mysql("t", ("g", "geometry", False))
    with pytest.raises(TableProblemError, match="column g: type 'geometry' is not supported"):
        audit_table(odd, odd)


# ------------------------------------------------------------------------------------- compare
def test_chunk_status_flags_differing_chunks(spark: SparkSession) -> None:
    sums = spark.createDataFrame(
        [
            ("d.t", 0, "up", 10, 111, None),
            ("d.t", 0, "down", 10, 111, None),
            ("d.t", 1, "up", 10, 222, None),
            ("d.t", 1, "down", 10, 223, None),
            ("d.t", 2, "up", 10, 333, None),
            ("d.t", 2, "down", 9, 333, None),
            ("d.t", 3, "up", 0, None, "boom"),
            ("d.t", 3, "down", 5, 5, None),
            ("d.t", 4, "up", 5, 5, None),
        ],
        CHUNK_DDL,
    )
    rows = {r["chunk"]: r for r in chunk_status(sums).collect()}
    assert {c for c, r in rows.items() if r["differs"]} == {1, 2, 4}
    assert rows[3]["up_error"] == "boom"
    assert not rows[3]["differs"]  # an unreadable chunk is an error, not a difference
    assert (rows[4]["up_rows"], rows[4]["down_rows"]) == (5, 0)


def _row(side: str, key: str, h: int, cells: list[str], chunk: int = 0) -> tuple[Any, ...]:
    return ("d.t", chunk, side, key, key, h, cells, [hashing.row_hash(c.encode()) for c in cells])


def test_row_differences_missing_extra_different_equal(spark: SparkSession) -> None:
    rows = spark.createDataFrame(
        [
            _row("up", "id=1", 1, ["1", "'a'"]),
            _row("down", "id=1", 1, ["1", "'a'"]),  # equal
            _row("up", "id=2", 2, ["2", "'b'"]),  # missing
            _row("down", "id=3", 3, ["3", "'c'"]),  # extra
            _row("up", "id=4", 4, ["4", "'d'"]),
            _row("down", "id=4", 5, ["4", "'D'"]),  # different
            _row("up", "row:x", 9, ["9", "NULL"]),
            _row("up", "row:x", 9, ["9", "NULL"]),
            _row("up", "row:x", 9, ["9", "NULL"]),
            _row("down", "row:x", 9, ["9", "NULL"]),  # a whole-row key: two copies missing
        ],
        ROW_DDL,
    )
    diffs = row_differences(rows)
    got = {(r["key_text"], r["kind"], r["n"]) for r in diffs.collect()}
    assert got == {("id=2", "missing", 1), ("id=3", "extra", 1), ("id=4", "different", 1), ("row:x", "missing", 2)}
    counts = {(r["table"], r["kind"]): r["n"] for r in difference_counts(diffs).collect()}
    assert counts == {("d.t", "missing"): 3, ("d.t", "extra"): 1, ("d.t", "different"): 1}
    first = difference_examples(diffs, 1).collect()
    assert sorted((r["kind"], r["key_text"]) for r in first) == [
        ("different", "id=4"),
        ("extra", "id=3"),
        ("missing", "id=2"),
    ]
    different = next(r for r in first if r["kind"] == "different")
    assert (list(different["up_cells"]), list(different["down_cells"])) == (["4", "'d'"], ["4", "'D'"])
    assert differing_positions(different["up_hashes"], different["down_hashes"]) == (1,)


# -------------------------------------------------------------------------------------- report
def test_report_json_and_table() -> None:
    r = AuditReport("sqlite:/up.db", "mysql://root@h:3306", 100)
    t = TableReport("d", "t", "primary key (id)", ["id", "v"], 3, 3, 1, 1, 1, 1, 1)
    t.examples = [
        Example("missing", "id=2", ["2", "'b'"], None),
        Example("extra", "id=3", None, ["3", "'c'"]),
        Example("different", "id=4", ["4", "'d'"], ["4", "'D'"]),
    ]
    r.tables = [t, TableReport("d", "gone", problem="missing downstream (upstream has 4 rows)")]
    r.extra_tables = ["d.new"]
    assert not r.ok
    assert r.exit_status == 1
    doc = r.to_json()
    assert doc["tables"][0]["table"] == "d.t"
    assert doc["tables"][0]["examples"][2] == {
        "kind": "different",
        "key": "id=4",
        "count": 1,
        "upstream": {"id": "4", "v": "'d'"},
        "downstream": {"id": "4", "v": "'D'"},
        "columns": ["v"],
    }
    text = r.render()
    assert text.splitlines()[0].startswith("audit FAILED: 3 of 3 tables differ")
    assert "    missing   id=2: (id=2, v='b')" in text
    assert "    different id=4: v upstream 'd' downstream 'D'" in text
    assert "d.gone" in text
    assert "missing downstream (upstream has 4 rows)" in text
    assert "extra table downstream" in text
    ok = AuditReport("a", "b", 1, [TableReport("d", "t", "whole row", ["a"], 2, 2, 1)])
    assert ok.ok
    assert ok.exit_status == 0
    assert ok.render().startswith("audit OK: 1 tables, 2 rows, all equal")


def test_a_difference_beyond_the_shown_characters_names_the_column() -> None:
    """Was: "id=1: values differ beyond the characters shown", naming no column."""
    cols = [col("int", "id"), col("text", "body"), col("text", "note"), col("int", "v")]
    names = [c.name for c in cols]
    up_values = [1, "x" * 60 + "a", "y" * 60 + "a", 7]
    down_values = [1, "x" * 60 + "b", "y" * 60 + "a", 7]
    up = [hashing.show(v, c) for v, c in zip(up_values, cols, strict=True)]
    down = [hashing.show(v, c) for v, c in zip(down_values, cols, strict=True)]
    assert up == down  # cut at SHOW_CHARS: the shown text cannot tell
    differing = differing_positions(hashing.cell_hashes(up_values, cols), hashing.cell_hashes(down_values, cols))
    assert differing == (1,)
    e = Example("different", "id=1", up, down, differing=differing)
    assert (
        e.text(names) == f"id=1: body upstream {up[1]} downstream {down[1]} (they differ beyond the characters shown)"
    )
    assert e.to_json(names)["columns"] == ["body"]
    shown = Example("different", "id=2", ["2", "'a'"], ["2", "'b'"], differing=(1,))
    assert shown.text(["id", "v"]) == "id=2: v upstream 'a' downstream 'b'"
    unknown = Example("different", "id=3", ["3", "'a'"], ["3", "'b'"])  # no hashes: the shown cells tell
    assert unknown.changed_columns(["id", "v"]) == ["v"]
    assert differing_positions(None, [1]) is None
    assert differing_positions([1, 2], [1]) is None
