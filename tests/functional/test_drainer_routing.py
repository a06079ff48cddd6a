"""Drainer end to end with the original's v2 rules: table-migrate-rule targets route tables (DML and DDL) to
another downstream schema / table, binlog-filter-rules drop events (issue 21)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from drainer.relay import read_relay
from tests.functional.drainerutil import Cluster
from tests.functional.test_drainer_cases import insert, simple_table
from tests.functional.test_drainer_relay import kill_if_alive, relay_args, relayed_ids
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction

pytestmark = pytest.mark.functional


class Downstream:
    """Reads the routed downstream: MySQL (`db`.`table`) or the sqlite sink's file ("db.table")."""

    def __init__(self, cluster: Cluster, sqlite_file: Path | None) -> None:
        self.cluster = cluster
        self.sqlite_file = sqlite_file

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        if self.sqlite_file is not None:
            conn = sqlite3.connect(self.sqlite_file)
            try:
                return [tuple(r) for r in conn.execute(sql).fetchall()]
            finally:
                conn.close()
        mysql = self.cluster.mysql_conn()
        try:
            with mysql.cursor() as cur:
                cur.execute(sql)
                return [tuple(r) for r in cur.fetchall()]
        finally:
            mysql.close()

    def _name(self, db: str, table: str) -> str:
        return f'"{db}.{table}"' if self.sqlite_file is not None else f"`{db}`.`{table}`"

    def rows(self, db: str, table: str) -> list[tuple[Any, ...]]:
        return self._query(f"SELECT * FROM {self._name(db, table)} ORDER BY id")

    def columns(self, db: str, table: str) -> list[str]:
        if self.sqlite_file is not None:
            return [str(r[1]) for r in self._query(f"PRAGMA table_info({self._name(db, table)})")]
        return [str(r[0]) for r in self._query(f"SHOW COLUMNS FROM {self._name(db, table)}")]

    def exists(self, db: str, table: str) -> bool:
        if self.sqlite_file is not None:
            return bool(self._query(f"SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '{db}.{table}'"))
        return bool(
            self._query(
                f"SELECT 1 FROM information_schema.tables WHERE table_schema = '{db}' AND table_name = '{table}'"
            )
        )


def insert_extra(db: Database, table: str, ids: range) -> None:
    for i in ids:

        def body(txn: Transaction, i: int = i) -> None:
            txn.insert(table, {"id": i, "v": i, "extra": -i})

        db.run(body)


@pytest.mark.parametrize("sink", ["mysql", "sqlite"])
def test_tables_are_routed_and_filtered_by_the_v2_rules(cluster: Cluster, tmp_path: Path, sink: str) -> None:
    src, dst = cluster.dbname("rsrc"), cluster.dbname("rdst")
    config = tmp_path / "drainer.toml"
    config.write_text(
        f"""
[syncer]
[[syncer.table-migrate-rule]]
source = {{ schema = "{src}", table = "orders" }}
target = {{ schema = "{dst}", table = "orders_copy" }}

[[syncer.table-migrate-rule]]
source = {{ schema = "{src}", table = "s?" }}
target = {{ schema = "{dst}", table = "merged" }}

[[syncer.table-migrate-rule]]
source = {{ schema = "{src}", table = "noins" }}
binlog-filter-rule = ["no-inserts"]

[syncer.binlog-filter-rule.no-inserts]
ignore-event = ["insert"]
""",
        encoding="utf-8",
    )
    args = ["--syncer.db-type", "sqlite", "--syncer.worker-count", "1"] if sink == "sqlite" else []
    drainer = cluster.drainer("--config", str(config), *args, sink=sink)
    down = Downstream(cluster, drainer.data_dir / "downstream.db" if sink == "sqlite" else None)
    db = cluster.writer()
    # a routed table: create, rows, add column, rows, truncate, rows
    simple_table(db, src, "orders")
    insert(db, f"{src}.orders", range(10))
    db.add_column(src, "orders", Column("extra", "INT"))
    insert_extra(db, f"{src}.orders", range(10, 20))
    db.run(lambda txn: txn.update(f"{src}.orders", 12, {"v": 120}))
    db.run(lambda txn: txn.delete(f"{src}.orders", 13))
    before_truncate = cluster.now()
    cluster.wait_applied(drainer, before_truncate)
    expected = [(i, i, None) for i in range(10)] + [(i, 120 if i == 12 else i, -i) for i in range(10, 20) if i != 13]
    assert down.rows(dst, "orders_copy") == expected
    db.truncate_table(src, "orders")
    insert_extra(db, f"{src}.orders", range(20, 25))
    # two shards merged into one target table; a TRUNCATE of one shard must not empty the other's rows
    simple_table(db, src, "s1")
    simple_table(db, src, "s2")
    insert(db, f"{src}.s1", range(5))
    insert(db, f"{src}.s2", range(100, 105))
    db.truncate_table(src, "s1")
    # a filtered table: its inserts are dropped, its DDL is not
    simple_table(db, src, "noins")
    insert(db, f"{src}.noins", range(10))
    # an unrouted table of the same schema replicates under its own name
    simple_table(db, src, "plain")
    insert(db, f"{src}.plain", range(7))
    cluster.wait_applied(drainer, cluster.now())

    assert down.columns(dst, "orders_copy") == ["id", "v", "extra"]
    assert down.rows(dst, "orders_copy") == [(i, i, -i) for i in range(20, 25)]
    assert not down.exists(src, "orders")  # never created under its upstream name
    assert down.rows(dst, "merged") == [(i, i) for i in (*range(5), *range(100, 105))]
    assert not down.exists(src, "s1")
    assert down.exists(src, "noins")
    assert down.rows(src, "noins") == []
    assert down.rows(src, "plain") == [(i, i) for i in range(7)]


def test_the_relay_log_keeps_upstream_names_and_its_replay_is_routed(cluster: Cluster, tmp_path: Path) -> None:
    """Rows relayed but not applied (the routed target locked) reach the target after kill -9 and restart."""
    src, dst = cluster.dbname("rrsrc"), cluster.dbname("rrdst")
    config = tmp_path / "drainer.toml"
    config.write_text(
        f'[syncer]\n[[syncer.table-migrate-rule]]\nsource = {{ schema = "{src}", table = "t" }}\n'
        f'target = {{ schema = "{dst}", table = "t2" }}\n',
        encoding="utf-8",
    )
    relay = tmp_path / "relay"
    drainer = cluster.drainer("--config", str(config), *relay_args(relay))
    db = cluster.writer()
    simple_table(db, src)
    insert(db, f"{src}.t", range(10))
    cluster.wait_applied(drainer, cluster.now())
    locker = cluster.mysql_conn()
    try:
        with locker.cursor() as cur:
            cur.execute(f"LOCK TABLES `{dst}`.`t2` WRITE")
        insert(db, f"{src}.t", range(10, 60))
        wait_for(lambda: relayed_ids(relay, "t") >= set(range(10, 60)), 60, "every row in the relay log")
        shapes = {(d.shape.db, d.shape.table) for txn in read_relay(relay, 0) for d in txn.dmls}
        assert shapes == {(src, "t")}  # upstream names
        drainer.kill9()
        with locker.cursor() as cur:
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE %s",
                (f"%{dst}%",),
            )
            for (pid,) in cur.fetchall():
                kill_if_alive(cur, int(pid))
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()
    down = Downstream(cluster, None)
    assert len(down.rows(dst, "t2")) < 60
    drainer.start()
    assert "relay log recovery: " in drainer.process.log_tail(200)
    insert(db, f"{src}.t", range(60, 70))
    cluster.wait_applied(drainer, cluster.now())
    assert down.rows(dst, "t2") == [(i, i) for i in range(70)]
    assert not down.exists(src, "t")
