"""`binlog-spark audit` against real stores: an sqlite store upstream, MariaDB (or sqlite) downstream.

Tables are built the way the writer builds them (``upstream.store`` dialects, ``to_store``
values), with every column type of ``tests/functional/test_store_values.py``; rows are then
deleted, added and changed by hand downstream and the audit must name each one by its key.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from common.dsn import MySQLDSN as StoreDSN
from common.schema.model import ColumnInfo, IndexInfo, TableInfo
from common.schema.types import check_value, parse_type
from spark_jobs.audit.cli import add_parsers
from spark_jobs.audit.compare import DOWN, UP
from spark_jobs.audit.job import prepare, run_audit
from spark_jobs.audit.plan import Chunk
from spark_jobs.audit.read import Endpoint, chunk_sql, query_all, read_partition
from tests.functional.test_store_values import CASES
from tests.harness.mysql import MySQLDSN
from upstream.store.base import Store
from upstream.store.mysql import MySQLStore
from upstream.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

TYPES = list(CASES)
ODD = 'v a"l`'
"""A column name that needs quoting in both stores."""


def _col(i: int, name: str, type_text: str, *, nullable: bool = True) -> ColumnInfo:
    ctype, text = parse_type(type_text)
    return ColumnInfo(id=i + 1, name=name, offset=i, type_text=text, ctype=ctype, nullable=nullable)


def _table(name: str, cols: list[tuple[str, str, bool]], pk: list[str], *, handle: bool = False) -> TableInfo:
    columns = tuple(_col(i, n, t, nullable=nullable) for i, (n, t, nullable) in enumerate(cols))
    indices = (IndexInfo(1, "PRIMARY", tuple(pk), primary=True),) if pk else ()
    return TableInfo(id=1, name=name, columns=columns, indices=indices, pk_is_handle=handle)


ALL_TYPES = _table(
    "all_types",
    [("id", "int", False), *((ODD if i == 0 else f"c{i}", t, True) for i, t in enumerate(TYPES))],
    ["id"],
    handle=True,
)
BY_NAME = _table("by_name", [("name", "varchar(16)", False), ("v", "int", True)], ["name"])
NOKEY = _table("nokey", [("a", "int", True), ("b", "varchar(8)", True)], [])
NAMES = [f"{c}{i}" for i in range(12) for c in ("a", "B", "b", "é")]
"""by_name keys: upper and lower case, non-ASCII (the byte order is what both stores must agree on)."""


def _all_types_rows() -> list[dict[str, Any]]:
    n = max(len(v) for v, _ in CASES.values()) + 1
    rows = []
    for i in range(n):
        row: dict[str, Any] = {"id": i + 1}
        for c, t in zip(ALL_TYPES.columns[1:], TYPES, strict=True):
            values = CASES[t][0]
            row[c.lname] = check_value(c, values[i]) if i < len(values) else None
        rows.append(row)
    return rows


def _fill(store: Store, db: str) -> None:
    d = store.dialect()
    s = store.session()
    try:
        for t in (ALL_TYPES, BY_NAME, NOKEY):
            for sql in d.create_table_sql(db, t):
                s.execute(sql)
        for row in _all_types_rows():
            s.insert_row(db, ALL_TYPES, row["id"], row)
        for h, name in enumerate(NAMES, start=1):
            s.insert_row(db, BY_NAME, h, {"name": name, "v": h})
        for h, (a, b) in enumerate([(1, "x"), (1, "x"), (None, None), (2, None)], start=1):
            s.insert_row(db, NOKEY, h, {"a": a, "b": b})
    finally:
        s.close()


@dataclass
class Pair:
    db: str
    up: Endpoint
    down: Endpoint
    up_path: Path
    mysql: MySQLDSN

    def sql(self, *statements: str) -> None:
        conn = self.mysql.connect(self.db)
        try:
            with conn.cursor() as cur:
                for s in statements:
                    cur.execute(s)
        finally:
            conn.close()


@pytest.fixture
def pair(tmp_path: Path, mysql_db: MySQLDSN) -> Pair:
    """The same tables upstream (sqlite store) and downstream (MariaDB database `mysql_db`)."""
    db = mysql_db.database
    assert db is not None
    up_path = tmp_path / "up.db"
    up = SqliteStore(up_path, f"sqlite:///{up_path}")
    _fill(up, db)
    down = MySQLStore(StoreDSN(mysql_db.host, mysql_db.port, mysql_db.user, mysql_db.password, db), mysql_db.url())
    _fill(down, db)
    return Pair(db, Endpoint.parse(f"sqlite:///{up_path}"), Endpoint.parse(mysql_db.url()), up_path, mysql_db)


def _cli(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="binlog-spark")
    add_parsers(p.add_subparsers(required=True))
    args = p.parse_args(argv)
    status: int = args.func(args)
    return status


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_column_type_hashes_alike_in_sqlite_and_mariadb(pair: Pair) -> None:
    prep = prepare(pair.up, pair.down, [(pair.db, "all_types")], chunk_size=1000)
    ((t, chunks),) = prep.plans
    assert t.typed  # types come from MariaDB, both sides are read through them
    assert t.info.column(ODD).type_text == "tinyint(4)"
    assert t.info.column(f"c{TYPES.index('json')}").type_text == "json"  # MariaDB: LONGTEXT + json_valid
    assert chunks == [Chunk(0)]
    rows = {task.side: list(read_partition([task])) for task in prep.tasks(rows=True)}
    up = {r[3]: (r[5], r[6]) for r in rows[UP]}
    down = {r[3]: (r[5], r[6]) for r in rows[DOWN]}
    assert len(up) == len(_all_types_rows())
    for key, (h, cells) in up.items():
        assert down[key][0] == h, f"{key}: {list(zip(t.column_names, cells, down[key][1], strict=True))}"


def test_equal_tables_exit_0(pair: Pair, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _digest(pair.up_path)
    out = tmp_path / "report.json"
    argv = ["audit", "--upstream", f"sqlite:///{pair.up_path}", "--downstream", pair.mysql.url()]
    assert _cli([*argv, "--chunk-size", "5", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "audit OK: 3 tables" in text
    doc = json.loads(out.read_text())
    assert doc["ok"] is True
    tables = {t["table"]: t for t in doc["tables"]}
    assert set(tables) == {f"{pair.db}.{n}" for n in ("all_types", "by_name", "nokey")}
    by_name = tables[f"{pair.db}.by_name"]
    assert by_name["key"] == "primary key (name)"  # the writer's pk_unique index behind _tidb_rowid
    assert by_name["chunks"] > 3  # sampled string boundaries
    assert by_name["upstream_rows"] == by_name["downstream_rows"] == len(NAMES)
    assert tables[f"{pair.db}.nokey"]["key"] == "whole row"
    assert _digest(pair.up_path) == before  # read only


def test_hand_made_differences_are_reported_with_their_keys(
    pair: Pair, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c4 = f"c{TYPES.index('varchar(20)')}"
    pair.sql(
        "DELETE FROM all_types WHERE id = 2",
        f"INSERT INTO all_types (id, `{ODD.replace('`', '``')}`) VALUES (100, 7)",
        f"UPDATE all_types SET {c4} = 'changed' WHERE id = 3",
        # downstream with a case-insensitive collation: chunk ranges must still select the same rows
        "ALTER TABLE by_name DROP INDEX pk_unique, MODIFY name VARCHAR(16) COLLATE utf8mb4_general_ci NOT NULL",
        "UPDATE by_name SET v = -1 WHERE BINARY name = 'B3'",
        "INSERT INTO nokey (_tidb_rowid, a, b) VALUES (99, 1, 'x')",
    )
    report = run_audit(spark, pair.up, pair.down, chunk_size=5)
    assert report.exit_status == 1
    t = report.table(f"{pair.db}.all_types")
    assert (t.missing, t.extra, t.different) == (1, 1, 1)
    assert t.chunks_differing < t.chunks  # rows were only compared where the checksums differ
    got = {(e.kind, e.key) for e in t.examples}
    assert got == {("missing", "id=2"), ("extra", "id=100"), ("different", "id=3")}
    different = next(e for e in t.examples if e.kind == "different").text(t.columns)
    assert different.startswith(f"id=3: {c4} upstream '")
    assert different.endswith("downstream 'changed'")
    n = report.table(f"{pair.db}.by_name")
    assert (n.missing, n.extra, n.different) == (0, 0, 1)
    assert [(e.kind, e.key) for e in n.examples] == [("different", "name='B3'")]
    k = report.table(f"{pair.db}.nokey")
    assert (k.missing, k.extra, k.different) == (0, 1, 0)
    assert [(e.kind, e.count) for e in k.examples] == [("extra", 1)]
    # the same through the command, as JSON on stdout
    argv = ["audit", "--upstream", f"sqlite:///{pair.up_path}", "--downstream", pair.mysql.url(), "--format", "json"]
    assert _cli([*argv, "--tables", f"{pair.db}.all_types", "--chunk-size", "5"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (table,) = doc["tables"]
    assert {(e["kind"], e["key"]) for e in table["examples"]} == got
    assert doc["ok"] is False


def test_mysql_upstream_with_a_database_prefix(pair: Pair, spark: SparkSession, tmp_path: Path) -> None:
    """The writer's MySQL store keeps logical database d as <prefix>d; the replica is an sqlite file."""
    prefix, logical = pair.db[:2], pair.db[2:]
    path = tmp_path / "replica.db"
    _fill(SqliteStore(path, f"sqlite:///{path}"), logical)
    server = MySQLDSN(pair.mysql.host, pair.mysql.port, pair.mysql.user, pair.mysql.password).url()
    up = Endpoint.parse(server, prefix=prefix)
    down = Endpoint.parse(f"sqlite:{path}")
    tables = [(logical, "all_types"), (logical, "by_name")]
    report = run_audit(spark, up, down, tables, chunk_size=7)
    assert report.ok, report.render()
    assert report.table(f"{logical}.by_name").upstream_rows == len(NAMES)
    pair.sql("UPDATE by_name SET v = 0 WHERE name = 'é5'")
    report = run_audit(spark, up, down, tables, chunk_size=7)
    assert [(e.kind, e.key) for e in report.table(f"{logical}.by_name").examples] == [("different", "name='é5'")]


BIG = _table("big", [("name", "varchar(16)", False), ("n", "int", False), ("v", "int", True)], ["name", "n"])


def test_sampled_boundaries_cut_both_sides_alike(pair: Pair) -> None:
    """A composite string key sampled from either store: every row of either side in exactly one chunk."""
    # 'a..' < 'B..' case-insensitively, 'B..' < 'a..' byte-wise: the MySQL side's collation orders otherwise
    rows = [{"name": f"{'aB'[i % 2]}{i % 53:02d}é", "n": i, "v": i} for i in range(3000)]
    stores: list[Store] = [
        SqliteStore(pair.up_path, ""),
        MySQLStore(StoreDSN(pair.mysql.host, pair.mysql.port, pair.mysql.user, pair.mysql.password, pair.db), ""),
    ]
    for store in stores:
        s = store.session()
        try:
            for sql in store.dialect().create_table_sql(pair.db, BIG):
                s.execute(sql)
            for h, row in enumerate(rows, start=1):
                s.insert_row(pair.db, BIG, h, row)
        finally:
            s.close()
    pair.sql("ALTER TABLE big MODIFY name VARCHAR(16) COLLATE utf8mb4_general_ci NOT NULL")
    for up, down in ((pair.up, pair.down), (pair.down, pair.up)):  # sqlite's random() and MySQL's RAND()
        prep = prepare(up, down, [(pair.db, "big")], chunk_size=100)
        ((t, chunks),) = prep.plans
        assert t.chunk_key == (0, 1)
        assert 15 <= len(chunks) <= 30  # ~3000 / 100, from a sample of about a third of the keys
        for ep in (up, down):
            conn = ep.connect()
            try:
                seen = []
                for c in chunks:
                    sql, params = chunk_sql(ep, t, UP if ep is up else DOWN, c)
                    got = query_all(conn, sql, params)
                    assert 0 < len(got) <= 500, c.describe()
                    seen += [(str(r[0]), int(r[1])) for r in got]
            finally:
                conn.close()
            assert sorted(seen) == sorted((r["name"], r["n"]) for r in rows), ep.describe()


def test_sqlite_to_sqlite_compares_raw_values(spark: SparkSession, tmp_path: Path) -> None:
    paths = [tmp_path / "a.db", tmp_path / "b.db"]
    for p in paths:
        _fill(SqliteStore(p, f"sqlite:///{p}"), "d")
    a, b = (Endpoint.parse(f"sqlite:///{p}") for p in paths)
    equal = run_audit(spark, a, b, chunk_size=4)
    assert equal.ok, equal.render()
    assert equal.table("d.by_name").chunks > 1
    s = SqliteStore(paths[1], "").session()
    try:
        s.execute('UPDATE "d.by_name" SET "name" = ? WHERE "name" = ?', ("zz", "a7"))
    finally:
        s.close()
    r = run_audit(spark, a, b, [("d", "by_name")], chunk_size=4)
    t = r.table("d.by_name")
    assert not r.ok
    assert {(e.kind, e.key) for e in t.examples} == {("missing", "name='a7'"), ("extra", "name='zz'")}


def test_a_difference_beyond_the_shown_characters_names_its_column(spark: SparkSession, tmp_path: Path) -> None:
    """Two long texts that differ after the first SHOW_CHARS characters (was: "values differ beyond the
    characters shown", naming no column)."""
    notes = _table("notes", [("id", "int", False), ("body", "text", True), ("v", "int", True)], ["id"], handle=True)
    paths = [tmp_path / "a.db", tmp_path / "b.db"]
    for p, tail in zip(paths, "ab", strict=True):
        store = SqliteStore(p, f"sqlite:///{p}")
        s = store.session()
        try:
            for sql in store.dialect().create_table_sql("d", notes):
                s.execute(sql)
            s.insert_row("d", notes, 1, {"id": 1, "body": "x" * 60 + tail, "v": 7})
            s.insert_row("d", notes, 2, {"id": 2, "body": "same", "v": 8})
        finally:
            s.close()
    a, b = (Endpoint.parse(f"sqlite:///{p}") for p in paths)
    r = run_audit(spark, a, b)
    t = r.table("d.notes")
    assert (t.different, t.missing, t.extra) == (1, 0, 0)
    (example,) = t.examples
    assert example.changed_columns(t.columns) == ["body"]
    line = example.text(t.columns)
    assert line.startswith("id=1: body upstream 'xxx"), line
    assert line.endswith("(they differ beyond the characters shown)"), line
    assert r.to_json()["tables"][0]["examples"][0]["columns"] == ["body"]


# ------------------------------------------------------------------------------------ bad input
def test_unreachable_side_is_one_line_exit_2(pair: Pair, capsys: pytest.CaptureFixture[str]) -> None:
    up = f"sqlite:///{pair.up_path}"
    assert _cli(["audit", "--upstream", up, "--downstream", "mysql://root@127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("binlog-spark audit: cannot connect to mysql://root@127.0.0.1:1")
    missing = pair.up_path.parent / "nope.db"
    assert _cli(["audit", "--upstream", f"sqlite:///{missing}", "--downstream", pair.mysql.url()]) == 2
    assert capsys.readouterr().err.strip() == f"binlog-spark audit: sqlite:{missing}: no such sqlite file"
    assert not missing.exists()  # nothing created
    assert _cli(["audit", "--upstream", "postgres://h/db", "--downstream", up]) == 2
    assert "unsupported scheme 'postgres'" in capsys.readouterr().err
    assert _cli(["audit", "--upstream", up, "--downstream", up, "--tables", "nodot"]) == 2
    assert "--tables 'nodot': expected db.table" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        _cli(["audit", "--upstream", up, "--downstream", up, "--chunk-size", "0"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err


def test_table_missing_on_one_side(pair: Pair, spark: SparkSession, capsys: pytest.CaptureFixture[str]) -> None:
    pair.sql("DROP TABLE nokey", "CREATE TABLE only_down (id INT PRIMARY KEY)")
    report = run_audit(spark, pair.up, pair.down, chunk_size=1000)
    assert report.exit_status == 1
    assert report.table(f"{pair.db}.nokey").problem == "missing downstream (upstream has 4 rows)"
    assert report.extra_tables == [f"{pair.db}.only_down"]
    assert report.table(f"{pair.db}.all_types").ok  # the others are still compared
    argv = ["audit", "--upstream", f"sqlite:///{pair.up_path}", "--downstream", pair.mysql.url()]
    assert _cli([*argv, "--tables", f"{pair.db}.only_down,{pair.db}.by_name"]) == 1
    out = capsys.readouterr().out
    assert f"{pair.db}.only_down" in out
    assert "missing upstream (downstream has 0 rows)" in out
    assert "audit FAILED: 1 of 2 tables differ" in out
