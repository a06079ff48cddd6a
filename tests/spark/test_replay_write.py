"""The writers without Spark: tables created at their final schema, rows and tombstones, re-runs, refusals."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from spark_jobs.errors import TargetError
from spark_jobs.replay.target import SqliteTarget
from spark_jobs.replay.write import (
    FinalTable,
    WritePlan,
    _Writer,
    mysql_create_table,
    prepare_target,
    write_partition,
)
from spark_jobs.rowjson import encode_key, encode_row
from tests.spark.historyutil import HistoryBuilder
from upstream.ddl import Column

pytestmark = pytest.mark.spark


def _final() -> FinalTable:
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    cols = [Column("id", "VARCHAR(8)", nullable=False), Column("v", "INT"), Column("n", "INT", default=3)]
    h.add(lambda p: p.create_table("d", "t", cols, primary_key=["id"]), ts=2)
    return FinalTable.of("d", h.schema.table("d", "t"))


def _rows(t: FinalTable, live: dict[str, int], dead: list[str]) -> list[dict[str, object]]:
    info = t.info()
    cols = info.columns[:2]  # images written before column n was added: n gets its default
    out: list[dict[str, object]] = [
        {"table_id": t.table_id, "key": encode_key(cols[:1], [k]), "deleted": False, "values": encode_row(cols, [k, v])}
        for k, v in live.items()
    ]
    out += [{"table_id": t.table_id, "key": encode_key(cols[:1], [k]), "deleted": True, "values": None} for k in dead]
    return out


def test_sqlite_rows_tombstones_and_rerun(tmp_path: Path) -> None:
    t = _final()
    target = SqliteTarget(tmp_path / "r.db")
    assert prepare_target(target, [t]) == (1, 0)
    plan = WritePlan(target, {t.table_id: t}, batch_rows=2)
    conn = sqlite3.connect(target.path)
    try:
        conn.execute("INSERT INTO \"d.t\" (id, v, n) VALUES ('gone', 0, 0)")
        conn.commit()
        counts = list(write_partition(_rows(t, {"a": 1, "b": 2, "c": 3}, ["gone", "never"]), plan))
        assert counts == [(t.table_id, 3, 2)]
        assert sorted(conn.execute('SELECT id, v, n FROM "d.t"')) == [("a", 1, 3), ("b", 2, 3), ("c", 3, 3)]
        assert prepare_target(target, [t]) == (0, 1)  # a re-run finds its own table
        list(write_partition(_rows(t, {"a": 1, "b": 2, "c": 3}, ["gone", "never"]), plan))
        assert sorted(conn.execute('SELECT id, v, n FROM "d.t"')) == [("a", 1, 3), ("b", 2, 3), ("c", 3, 3)]
    finally:
        conn.close()


def test_existing_table_with_other_columns_is_refused(tmp_path: Path) -> None:
    t = _final()
    path = tmp_path / "r.db"
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE "d.t" (id TEXT PRIMARY KEY, w INT)')
    conn.commit()
    conn.close()
    with pytest.raises(
        TargetError, match=r"table d\.t exists in the target with other columns .*lacks n, v; has extra w"
    ):
        prepare_target(SqliteTarget(path), [t])


def test_unopenable_sqlite_target(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="cannot open sqlite:"):
        prepare_target(SqliteTarget(tmp_path / "no" / "such" / "dir.db"), [_final()])


def test_mysql_table_at_final_schema() -> None:
    sql = mysql_create_table("p_d", _final().info())
    assert sql.startswith(
        "CREATE TABLE IF NOT EXISTS `p_d`.`t` (`id` varchar(8) NOT NULL, `v` int(11), `n` int(11) DEFAULT '3'"
    )
    assert "PRIMARY KEY (`id`)" in sql
    assert sql.endswith("ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin")


def test_tables_filter_names_a_missing_table() -> None:
    from common.schema.infoschema import InfoSchema
    from spark_jobs.errors import InputError
    from spark_jobs.replay.job import select_tables

    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=1)
    h.add(lambda p: p.create_table("d", "t", [Column("id", "INT", nullable=False)], primary_key=["id"]), ts=2)
    schema = InfoSchema.from_jobs(h.jobs)
    assert [t.full_name for t in select_tables(schema, ["D.T"])] == ["d.t"]
    assert [t.full_name for t in select_tables(schema, [])] == ["d.t"]
    with pytest.raises(InputError, match=r"--tables: table d\.gone is not in the schema at stop-ts \(tables: d\.t\)"):
        select_tables(schema, ["d.gone"])


def test_mysql_table_gets_the_servers_nopad_binary_collation() -> None:
    from dataclasses import replace

    info = replace(_final().info(), charset="utf8mb4", collate="utf8mb4_bin")
    mariadb = {"utf8mb4_bin": "utf8mb4", "utf8mb4_nopad_bin": "utf8mb4", "utf8mb4_general_ci": "utf8mb4"}
    assert mysql_create_table("p_d", info, mariadb).endswith("DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_nopad_bin")
    old = replace(info, charset="", collate="")  # history from before the collation was recorded
    assert mysql_create_table("p_d", old, mariadb).endswith("COLLATE=utf8mb4_nopad_bin")


class _FakeCursor:
    def __init__(self, conn: _FakeMySQL) -> None:
        self.conn = conn

    def __enter__(self) -> _FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def execute(self, sql: str, params: list[object]) -> None:
        self.conn.log.append("execute")
        if self.conn.errors:
            raise self.conn.errors.pop(0)


class _FakeMySQL:
    """A MySQL connection whose statements fail with the queued errors, one per statement."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.log: list[str] = []

    def cursor(self) -> _FakeCursor:
        return _FakeCursor(self)

    def commit(self) -> None:
        self.log.append("commit")

    def rollback(self) -> None:
        self.log.append("rollback")


def _mysql_writer(conn: _FakeMySQL) -> _Writer:
    w = object.__new__(_Writer)
    w.mysql = True
    w.conn = conn
    w.plan = cast(WritePlan, SimpleNamespace(target=SimpleNamespace(describe=lambda: "mysql://target")))
    return w


def test_mysql_batch_is_retried_after_a_deadlock(caplog: pytest.LogCaptureFixture) -> None:
    import pymysql

    conn = _FakeMySQL([pymysql.err.OperationalError(1213, "Deadlock found")])
    with caplog.at_level(logging.WARNING, logger="spark_jobs.replay.write"):
        _mysql_writer(conn)._run([("INSERT 1", ()), ("INSERT 2", ())])
    assert conn.log == ["execute", "rollback", "execute", "execute", "commit"]
    assert "write batch retried after" in caplog.text
    assert "(attempt 1)" in caplog.text


def test_mysql_batch_fails_at_once_on_an_error_not_worth_a_retry() -> None:
    import pymysql

    conn = _FakeMySQL([pymysql.err.IntegrityError(1062, "Duplicate entry")])
    with pytest.raises(TargetError, match=r"mysql://target: write failed: .*Duplicate entry"):
        _mysql_writer(conn)._run([("INSERT 1", ())])
    assert conn.log == ["execute", "rollback"]
