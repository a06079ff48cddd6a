"""Checkpoint stores without servers: the savepoint file, the sqlite table, the JSON text, the factory."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from common.errors import ConfigError
from drainer.checkpoint import (
    Checkpoint,
    CheckpointError,
    CheckpointState,
    FileCheckpoint,
    MySQLCheckpoint,
    SqliteCheckpoint,
    decode_json,
    encode_json,
    make_checkpoint,
)
from drainer.config import load_config

TS = 417455000000000000
Factory = Callable[[Path], Checkpoint]


def file_store(tmp: Path) -> Checkpoint:
    return FileCheckpoint(tmp / "data")


def sqlite_store(tmp: Path) -> Checkpoint:
    return SqliteCheckpoint(tmp / "downstream.db", 6_000_000_000_000_000_001)


STORES = [pytest.param(file_store, id="file"), pytest.param(sqlite_store, id="sqlite")]


def test_json_text_is_byte_exact() -> None:
    assert encode_json(CheckpointState(TS, 123, False)) == (
        '{"consistent":false,"commitTS":417455000000000000,"ts-map":{},"schema-version":123}'
    )
    assert encode_json(CheckpointState(5, 0, True), {"secondary-ts": 2, "primary-ts": 1}) == (
        '{"consistent":true,"commitTS":5,"ts-map":{"primary-ts":1,"secondary-ts":2},"schema-version":0}'
    )


def test_json_decoding_accepts_older_versions_and_rejects_garbage() -> None:
    assert decode_json('{"commitTS":7,"ts-map":{"primary-ts":1}}', "x") == (
        CheckpointState(7, 0, False),
        {"primary-ts": 1},
    )
    assert decode_json('{"status":1,"commitTS":7}', "x")[0] == CheckpointState(7, 0, False)
    for bad in ("not json", "[]", '{"consistent":true}', '{"commitTS":"7"}', '{"commitTS":1,"ts-map":[]}'):
        with pytest.raises(CheckpointError):
            decode_json(bad, "x")


@pytest.mark.parametrize("factory", STORES)
def test_round_trip_and_reopen(tmp_path: Path, factory: Factory) -> None:
    cp = factory(tmp_path)
    assert cp.load() is None
    cp.save(TS, 3)
    cp.save(TS + 10, 4, consistent=True)
    assert cp.load() == CheckpointState(TS + 10, 4, True)
    cp.close()
    cp.close()  # idempotent
    with pytest.raises(CheckpointError, match="closed"):
        cp.save(TS + 11, 4)
    again = factory(tmp_path)
    assert again.load() == CheckpointState(TS + 10, 4, True)
    again.close()


@pytest.mark.parametrize("factory", STORES)
def test_commit_ts_never_goes_backwards(tmp_path: Path, factory: Factory) -> None:
    cp = factory(tmp_path)
    cp.save(100, 1)
    cp.save(100, 1, consistent=True)  # the same ts again is fine (clean shutdown)
    with pytest.raises(CheckpointError, match=r"backwards: commit_ts 99 < saved 100"):
        cp.save(99, 1)
    cp.close()
    # A fresh instance that never loaded still checks against what is stored.
    again = factory(tmp_path)
    with pytest.raises(CheckpointError, match="backwards"):
        again.save(50, 1)
    assert again.load() == CheckpointState(100, 1, True)
    again.close()


@pytest.mark.parametrize("factory", STORES)
def test_schema_version_never_decreases(tmp_path: Path, factory: Factory) -> None:
    cp = factory(tmp_path)
    cp.save(100, 9)
    cp.save(200, 3)
    assert cp.load() == CheckpointState(200, 9, False)
    assert cp.last == CheckpointState(200, 9, False)
    cp.close()


@pytest.mark.parametrize("factory", STORES)
def test_commit_ts_zero_means_no_checkpoint(tmp_path: Path, factory: Factory) -> None:
    cp = factory(tmp_path)
    cp.save(0, 0)
    assert cp.load() is None
    cp.close()


def test_savepoint_file_format_and_mode(tmp_path: Path) -> None:
    cp = FileCheckpoint(tmp_path)
    cp.save(TS, 7)
    assert cp.path == tmp_path / "savepoint"
    assert cp.path.read_text() == f"consistent = false\ncommitTS = {TS}\nschema-version = 7\n"
    assert stat.S_IMODE(os.stat(cp.path).st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["savepoint"]  # no temp file left behind
    cp.close()


def test_savepoint_written_by_the_original_loads(tmp_path: Path) -> None:
    (tmp_path / "savepoint").write_text("commitTS = 42\n")  # pre-2020 savepoint: commitTS only
    assert FileCheckpoint(tmp_path).load() == CheckpointState(42, 0, False)
    (tmp_path / "savepoint").write_text("consistent = true\ncommitTS = 43\nschema-version = 2\n")
    assert FileCheckpoint(tmp_path).load() == CheckpointState(43, 2, True)


@pytest.mark.parametrize("text", ["commitTS = ", "consistent = 1\ncommitTS = 2\n", "schema-version = 1\n"])
def test_bad_savepoint_is_a_clear_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "savepoint").write_text(text)
    with pytest.raises(CheckpointError, match="savepoint"):
        FileCheckpoint(tmp_path).load()


def test_sqlite_row_layout(tmp_path: Path) -> None:
    cp = SqliteCheckpoint(tmp_path / "d.db", 12)
    cp.save(TS, 5)
    cp.close()
    conn = sqlite3.connect(tmp_path / "d.db")
    rows = conn.execute('SELECT clusterID, checkPoint FROM "tidb_binlog.checkpoint"').fetchall()
    conn.close()
    assert rows == [(12, '{"consistent":false,"commitTS":417455000000000000,"ts-map":{},"schema-version":5}')]


def test_sqlite_keeps_a_loaded_ts_map(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "d.db")
    conn.execute('CREATE TABLE "tidb_binlog.checkpoint" (clusterID INTEGER PRIMARY KEY, checkPoint TEXT NOT NULL)')
    doc = {"consistent": False, "commitTS": 10, "ts-map": {"primary-ts": 10, "secondary-ts": 3}, "schema-version": 1}
    conn.execute('INSERT INTO "tidb_binlog.checkpoint" VALUES (1, ?)', (json.dumps(doc),))
    conn.commit()
    conn.close()
    cp = SqliteCheckpoint(tmp_path / "d.db", 1)
    assert cp.load() == CheckpointState(10, 1, False)
    cp.save(11, 1)
    cp.close()
    conn = sqlite3.connect(tmp_path / "d.db")
    (text,) = conn.execute('SELECT checkPoint FROM "tidb_binlog.checkpoint"').fetchone()
    conn.close()
    assert text == '{"consistent":false,"commitTS":11,"ts-map":{"primary-ts":10,"secondary-ts":3},"schema-version":1}'


def test_sqlite_cluster_id_zero_adopts_the_single_row(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    with pytest.raises(CheckpointError, match="no any checkpoint item"):
        SqliteCheckpoint(db, 0)
    big = (1 << 64) - 5
    cp = SqliteCheckpoint(db, big)
    cp.save(10, 0)
    cp.close()
    cp = SqliteCheckpoint(db, 0)
    assert cp.cluster_id == big
    assert cp.load() == CheckpointState(10, 0, False)
    cp.close()
    other = SqliteCheckpoint(db, 7)
    other.save(11, 0)
    other.close()
    with pytest.raises(CheckpointError, match="2 checkpoint rows"):
        SqliteCheckpoint(db, 0)


def test_factory_picks_the_store_by_db_type(tmp_path: Path) -> None:
    data = str(tmp_path / "data")
    for db_type in ("file", "pb"):
        cp = make_checkpoint(load_config(flags={"data-dir": data, "syncer.db-type": db_type}, env={}), 1)
        assert isinstance(cp, FileCheckpoint)
        assert cp.path == tmp_path / "data" / "savepoint"
        cp.close()
    cp = make_checkpoint(load_config(flags={"data-dir": data, "syncer.db-type": "sqlite"}, env={}), 1)
    assert isinstance(cp, SqliteCheckpoint)
    cp.close()
    assert (tmp_path / "data" / "downstream.db").exists()
    cfg = load_config(flags={"data-dir": data, "syncer.db-type": "sqlite", "syncer.to.checkpoint.type": "file"}, env={})
    cp = make_checkpoint(cfg, 1)
    assert isinstance(cp, FileCheckpoint)
    cp.close()
    with pytest.raises(ConfigError, match="'oracle' is not supported"):
        make_checkpoint(load_config(flags={"syncer.db-type": "oracle"}, env={}), 1)


class _Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def __call__(self, *args: object, **kwargs: object) -> str:
        self.calls.append((*args, kwargs))
        return "mysql-checkpoint"


def test_factory_mysql_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _Recorder()
    monkeypatch.setattr("drainer.checkpoint.MySQLCheckpoint", rec)
    to = {"syncer.to.host": "down", "syncer.to.port": "3307", "syncer.to.user": "u", "syncer.to.password": "p"}
    assert make_checkpoint(load_config(flags=to, env={}), 9) == "mysql-checkpoint"  # type: ignore[comparison-overlap]
    make_checkpoint(load_config(flags={**to, "syncer.db-type": "tidb", "syncer.to.checkpoint.table": "cp2"}, env={}), 9)
    # An explicit checkpoint type uses [syncer.to.checkpoint], with 127.0.0.1 / root / 3306 for what is unset.
    make_checkpoint(load_config(flags={**to, "syncer.to.checkpoint.type": "mysql"}, env={}), 9)
    make_checkpoint(
        load_config(flags={"syncer.to.checkpoint.type": "tidb", "syncer.to.checkpoint.host": "h2"}, env={}), 9
    )
    assert [c[:7] for c in rec.calls] == [
        ("down", 3307, "u", "p", 9, "tidb_binlog", "checkpoint"),
        ("down", 3307, "u", "p", 9, "tidb_binlog", "cp2"),
        ("127.0.0.1", 3306, "root", "", 9, "tidb_binlog", "checkpoint"),
        ("h2", 3306, "root", "", 9, "tidb_binlog", "checkpoint"),
    ]


def test_mysql_unreachable_is_a_checkpoint_error_after_the_retries() -> None:
    # Port 1 on loopback refuses connections: retried, then reported with where it tried.
    with pytest.raises(
        CheckpointError, match=r"root@127\.0\.0\.1:1: cannot create the checkpoint table after 2 attempts"
    ):
        MySQLCheckpoint("127.0.0.1", 1, "root", "", 1, retries=2, retry_interval=0.01)
