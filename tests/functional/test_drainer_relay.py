"""Relay log with real processes and MariaDB (issue 7): recovery after kill -9 with the upstream gone and
with it reachable, GC while replicating, a relay dir that cannot be used."""

from __future__ import annotations

from pathlib import Path

import pytest

from drainer.relay import read_relay
from tests.functional.drainerutil import Cluster
from tests.functional.test_drainer_cases import insert, simple_table, wait_exit
from tests.functional.test_drainer_e2e import assert_equal, catch_up
from tools.localcluster import DrainerProcess
from tools.procs import wait_for
from upstream.database import Database

pytestmark = pytest.mark.functional


def relay_args(path: Path, max_file_size: int = 10 << 20) -> list[str]:
    return ["--syncer.relay.log-dir", str(path), "--syncer.relay.max-file-size", str(max_file_size)]


def relayed_ids(relay: Path, table: str) -> set[int]:
    ids: set[int] = set()
    for txn in read_relay(relay, 0):
        ids.update(int(d.values[0]) for d in txn.dmls if d.shape.table == table and d.values is not None)
    return ids


def downstream_ids(cluster: Cluster, db: str, table: str) -> set[int]:
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM `{db}`.`{table}`")
            return {int(r[0]) for r in cur.fetchall()}
    finally:
        conn.close()


def crash_with_relay_ahead(cluster: Cluster, relay: Path) -> tuple[DrainerProcess, Database, str, set[int]]:
    """A drainer with a relay log applies a table's creation; then the downstream table is locked, rows are
    written upstream, the drainer relays them all but cannot apply them, and is killed with -9."""
    drainer = cluster.drainer(*relay_args(relay))
    db = cluster.writer()
    name = cluster.dbname("relay")
    simple_table(db, name)
    insert(db, f"{name}.t", range(10))
    cluster.wait_applied(drainer, cluster.now())
    locker = cluster.mysql_conn()
    try:
        with locker.cursor() as cur:
            cur.execute(f"LOCK TABLES `{name}`.`t` WRITE")
        insert(db, f"{name}.t", range(10, 150))
        wanted = set(range(150))
        wait_for(lambda: relayed_ids(relay, "t") >= set(range(10, 150)), 60, "every row in the relay log")
        assert downstream_ids_nolock(locker, name) < wanted  # blocked: nothing new applied
        drainer.kill9()
        with locker.cursor() as cur:  # the dead drainer's statements still waiting for the lock go too
            cur.execute(
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND INFO LIKE %s",
                (f"%{name}%",),
            )
            for (pid,) in cur.fetchall():
                kill_if_alive(cur, int(pid))
            cur.execute("UNLOCK TABLES")
    finally:
        locker.close()
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert cp["consistent"] is False
    assert downstream_ids(cluster, name, "t") < wanted  # the crash left the downstream behind the relay log
    return drainer, db, name, wanted


def kill_if_alive(cur: object, pid: int) -> None:
    """KILL a server thread that may have ended on its own since it was listed (the server notices the
    killed client's closed socket): 1094 "Unknown thread id" means it is already gone."""
    import pymysql

    assert isinstance(cur, pymysql.cursors.Cursor)
    try:
        cur.execute(f"KILL {pid}")
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != 1094:
            raise


def downstream_ids_nolock(conn: object, name: str) -> set[int]:
    """The rows the locking session itself sees (it holds the write lock, so it can read)."""
    import pymysql

    assert isinstance(conn, pymysql.connections.Connection)
    with conn.cursor() as cur:
        cur.execute(f"SELECT id FROM `{name}`.`t`")
        return {int(r[0]) for r in cur.fetchall()}


def test_relay_log_recovers_the_downstream_with_the_upstream_gone(cluster: Cluster, tmp_path: Path) -> None:
    relay = tmp_path / "relay"
    drainer, db, name, wanted = crash_with_relay_ahead(cluster, relay)
    cluster.pd.stop()
    cluster.etcd_server.stop()
    drainer.process.start()
    assert wait_exit(drainer, timeout=90) == 0, drainer.process.log_tail(40)
    log = drainer.process.log_tail(60)
    assert "relay log recovery done: the downstream is consistent" in log, log
    assert "consistent=true" in log, log
    cp = cluster.checkpoint_row()
    assert cp is not None
    assert cp["consistent"] is True
    last = max(t.commit_ts for t in read_relay(relay, 0))
    assert cp["commitTS"] == last
    assert downstream_ids(cluster, name, "t") == wanted
    assert_equal(cluster, db)  # the upstream committed nothing after the relay log's last transaction

    # the upstream comes back: the drainer starts from the consistent checkpoint and goes on
    cluster.etcd_server.start()
    cluster.pd.start()
    drainer.start()
    insert(db, f"{name}.t", range(150, 170))
    catch_up(cluster, drainer, db)


def test_relay_log_replays_first_then_replication_resumes(cluster: Cluster, tmp_path: Path) -> None:
    relay = tmp_path / "relay"
    drainer, db, name, wanted = crash_with_relay_ahead(cluster, relay)
    drainer.start()
    log = drainer.process.log_tail(200)
    assert "relay log recovery: 140 txns (140 rows, 0 DDLs) applied" in log, log
    assert "replication resumes after it" in log, log
    assert downstream_ids(cluster, name, "t") == wanted
    insert(db, f"{name}.t", range(150, 200))
    catch_up(cluster, drainer, db)


def test_relay_files_are_deleted_while_replicating(cluster: Cluster, tmp_path: Path) -> None:
    relay = tmp_path / "relay"
    drainer = cluster.drainer(*relay_args(relay, max_file_size=4 << 10))
    db = cluster.writer()
    name = cluster.dbname("gc")
    simple_table(db, name)
    counts: list[int] = []
    for batch in range(10):
        insert(db, f"{name}.t", range(batch * 60, (batch + 1) * 60))
        counts.append(len([p for p in relay.iterdir() if p.name.startswith("binlog-")]))
    catch_up(cluster, drainer, db)
    files = sorted(p.name for p in relay.iterdir() if p.name.startswith("binlog-"))
    newest = int(files[-1].split("-")[1])
    assert newest >= 10, files  # the log went through many files ...
    assert max(counts) <= 4, counts  # ... but only a few were ever there at once
    wait_for(lambda: len([p for p in relay.iterdir() if p.name.startswith("binlog-")]) <= 2, 30, "GC after catch-up")


def test_unusable_relay_dir_fails_at_start_and_changes_nothing(cluster: Cluster, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "relay-file"
    not_a_dir.write_text("not a directory")
    d = DrainerProcess(
        cluster.tmp,
        cluster.etcd_server.url,
        name="badrelay",
        extra_args=["--initial-commit-ts", "0", *cluster.mysql_args(), *relay_args(not_a_dir)],
    )
    cluster.drainers.append(d)
    before = cluster.checkpoint_row()
    d.process.start()
    assert wait_exit(d) == 2  # a file where the directory should be: the config must change (was exit 1)
    log = d.process.log_tail(40)
    assert f"syncer.relay.log-dir: relay log directory '{not_a_dir}' cannot be created" in log, log
    assert cluster.checkpoint_row() == before
    assert not_a_dir.read_text() == "not a directory"
