"""MySQLCheckpoint on a real MariaDB/MySQL: table layout, exact JSON text, round trip, monotonicity, errors."""

from __future__ import annotations

import logging

import pytest

from drainer.checkpoint import CheckpointError, CheckpointState, MySQLCheckpoint, make_checkpoint
from drainer.config import load_config
from tests.harness.mysql import MySQLDSN

pytestmark = pytest.mark.functional

CLUSTER = 7_000_000_000_000_000_123  # above 2**62, still fits bigint unsigned
TS = 417455000000000000


def open_checkpoint(dsn: MySQLDSN, cluster_id: int = CLUSTER, **kwargs: object) -> MySQLCheckpoint:
    assert dsn.database is not None
    return MySQLCheckpoint(
        dsn.host,
        dsn.port,
        dsn.user,
        dsn.password,
        cluster_id,
        dsn.database,
        "checkpoint",
        **kwargs,  # type: ignore[arg-type]
    )


def stored_rows(dsn: MySQLDSN) -> list[tuple[object, ...]]:
    conn = dsn.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT clusterID, checkPoint FROM `{dsn.database}`.`checkpoint` ORDER BY clusterID")
            return [tuple(row) for row in cur.fetchall()]
    finally:
        conn.close()


def test_table_layout_and_exact_json(mysql_db: MySQLDSN) -> None:
    cp = open_checkpoint(mysql_db)
    assert cp.load() is None
    cp.save(TS, 123)
    cp.close()
    assert stored_rows(mysql_db) == [
        (CLUSTER, '{"consistent":false,"commitTS":417455000000000000,"ts-map":{},"schema-version":123}')
    ]
    conn = mysql_db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE, COLUMN_KEY FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'checkpoint' ORDER BY ORDINAL_POSITION",
                (mysql_db.database,),
            )
            columns = [(name, str(tp).lower(), key) for name, tp, key in cur.fetchall()]
    finally:
        conn.close()
    assert columns == [("clusterID", "bigint(20) unsigned", "PRI"), ("checkPoint", "mediumtext", "")]


def test_round_trip_across_instances(mysql_db: MySQLDSN) -> None:
    cp = open_checkpoint(mysql_db)
    cp.save(TS, 1)
    cp.save(TS + 5, 2, consistent=True)
    cp.close()
    again = open_checkpoint(mysql_db)
    assert again.load() == CheckpointState(TS + 5, 2, True)
    again.save(TS + 6, 2)
    assert again.load() == CheckpointState(TS + 6, 2, False)
    again.close()
    # Another cluster id has its own row.
    other = open_checkpoint(mysql_db, cluster_id=1)
    assert other.load() is None
    other.save(3, 0)
    other.close()
    assert [row[0] for row in stored_rows(mysql_db)] == [1, CLUSTER]


def test_schema_version_monotonic_and_commit_ts_never_backwards(mysql_db: MySQLDSN) -> None:
    cp = open_checkpoint(mysql_db)
    cp.save(100, 9)
    cp.save(200, 4)
    assert cp.load() == CheckpointState(200, 9, False)
    with pytest.raises(CheckpointError, match="backwards"):
        cp.save(150, 10)
    cp.close()
    assert stored_rows(mysql_db)[0][1] == '{"consistent":false,"commitTS":200,"ts-map":{},"schema-version":9}'


def test_cluster_id_zero_adopts_the_single_row(mysql_db: MySQLDSN) -> None:
    with pytest.raises(CheckpointError, match="no any checkpoint item"):
        open_checkpoint(mysql_db, cluster_id=0)
    cp = open_checkpoint(mysql_db)
    cp.save(10, 1)
    cp.close()
    adopted = open_checkpoint(mysql_db, cluster_id=0)
    assert adopted.cluster_id == CLUSTER
    assert adopted.load() == CheckpointState(10, 1, False)
    adopted.close()


def test_reconnects_after_the_connection_is_killed(mysql_db: MySQLDSN, caplog: pytest.LogCaptureFixture) -> None:
    cp = open_checkpoint(mysql_db, retry_interval=0.01)
    cp.save(10, 0)
    assert cp._conn is not None
    thread_id = cp._conn.thread_id()  # type: ignore[no-untyped-call] # this checkpoint's own server connection, and nobody else's
    conn = mysql_db.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"KILL {int(thread_id)}")
    finally:
        conn.close()
    with caplog.at_level(logging.WARNING, logger="drainer.checkpoint"):
        cp.save(11, 0)
    assert "cannot save the checkpoint (attempt 1/5)" in caplog.text
    assert cp.load() == CheckpointState(11, 0, False)
    cp.close()


def test_wrong_password_is_a_clear_error_without_retries(mysql_db: MySQLDSN) -> None:
    assert mysql_db.database is not None
    with pytest.raises(CheckpointError) as excinfo:
        MySQLCheckpoint(mysql_db.host, mysql_db.port, mysql_db.user, "wrong-password", CLUSTER, mysql_db.database)
    message = str(excinfo.value)
    assert f"checkpoint database {mysql_db.user}@{mysql_db.host}:{mysql_db.port}" in message
    assert "cannot create the checkpoint table: (1045" in message
    assert "Access denied" in message
    assert "wrong-password" not in message


def test_factory_uses_syncer_to_for_mysql(mysql_db: MySQLDSN) -> None:
    flags = {
        "syncer.db-type": "mysql",
        "syncer.to.host": mysql_db.host,
        "syncer.to.port": str(mysql_db.port),
        "syncer.to.user": mysql_db.user,
        "syncer.to.password": mysql_db.password,
        "syncer.to.checkpoint.schema": str(mysql_db.database),
    }
    cp = make_checkpoint(load_config(flags=flags, env={}), CLUSTER)
    assert isinstance(cp, MySQLCheckpoint)
    cp.save(TS, 0, consistent=True)
    cp.close()
    assert stored_rows(mysql_db) == [
        (CLUSTER, '{"consistent":true,"commitTS":417455000000000000,"ts-map":{},"schema-version":0}')
    ]
