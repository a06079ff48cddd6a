"""A start position beyond the present (hardening item 4), with real etcd, pd-server, a pump, drainers and MariaDB.

A checkpoint (mysql row or savepoint file) or an initial-commit-ts ahead of a fresh TSO makes the drainer
exit 1 with one line naming the position, its value, the current TSO and the fix, and leaves the
checkpoint as it was. The old drainer started "from commit_ts=9223372036854775807", applied nothing and
saved that checkpoint as consistent. A sane checkpoint, and an initial-commit-ts just taken, still start.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from common import tso
from common.tso_guard import ts_text
from tests.functional.drainerutil import Cluster
from tests.functional.test_drainer_cases import insert, simple_table, wait_exit
from tests.functional.test_drainer_e2e import catch_up
from tests.functional.test_drainer_relay import crash_with_relay_ahead
from tools.localcluster import DrainerProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional

BEYOND = 9223372036854775807
EXIT_TIMEOUT = 40.0
"""Seconds for a refusing drainer to exit: start-up, one TSO, the message (the old drainer never exits)."""


def refused_line(d: DrainerProcess, state: Callable[[], object] = lambda: None) -> str:
    """Start `d`, expect exit 1; its last stderr line (the one-line refusal).

    A drainer that comes online instead is stopped (SIGTERM) and the failure shows its start line
    and `state()` after the stop (the checkpoint it saved)."""
    path = d.process.log_path
    before = path.stat().st_size if path.exists() else 0

    def new_lines() -> list[str]:
        with path.open("rb") as f:
            f.seek(before)
            return f.read().decode(errors="replace").splitlines()

    d.process.start()
    wait_for(
        lambda: not d.process.alive or any("is online" in line for line in new_lines()),
        EXIT_TIMEOUT,
        f"{d.name} exits or comes online",
    )
    code = d.process.stop()
    lines = new_lines()
    online = [line for line in lines if "is online" in line]
    assert code == 1, f"exit status {code}; {online}; after the stop: {state()}"
    said = [line for line in lines if line.startswith("drainer: ")]
    assert len(said) == 1, lines[-30:]
    return said[0]


def raw_row(cluster: Cluster) -> str | None:
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT checkPoint FROM tidb_binlog.checkpoint WHERE clusterID = %s", (cluster.cluster_id,))
            row = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    return None if row is None else str(row[0])


def put_row(cluster: Cluster, text: str) -> None:
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute("REPLACE INTO tidb_binlog.checkpoint VALUES (%s, %s)", (cluster.cluster_id, text))
        conn.commit()
    finally:
        conn.close()


def downstream_ids(cluster: Cluster, name: str) -> list[int]:
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id FROM `{name}`.t ORDER BY id")
            return [int(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_mysql_checkpoint_beyond_the_present_is_refused_and_kept(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    db = cluster.writer()
    name = cluster.dbname("ahead")
    simple_table(db, name)
    insert(db, f"{name}.t", range(5))
    catch_up(cluster, drainer, db)
    assert drainer.stop() == 0
    saved = raw_row(cluster)
    assert saved is not None
    doc = json.loads(saved)
    assert doc["consistent"] is True

    bogus = saved.replace(f'"commitTS":{doc["commitTS"]}', f'"commitTS":{BEYOND}')
    assert json.loads(bogus)["commitTS"] == BEYOND
    put_row(cluster, bogus)
    insert(db, f"{name}.t", range(5, 10))  # what the old drainer skipped for good
    lo = cluster.now()
    line = refused_line(drainer, lambda: raw_row(cluster))
    hi = cluster.now()
    m = cluster.mysql
    assert m is not None
    prefix = (
        f"drainer: checkpoint (mysql, `tidb_binlog`.`checkpoint` clusterID={cluster.cluster_id} on "
        f"{m.user}@{m.host}:{m.port}) commitTS {BEYOND} (3084-12-12 12:41:28 UTC) is ahead of the current TSO "
    )
    assert line.startswith(prefix), line
    current = int(line.split("is ahead of the current TSO ")[1].split()[0])
    assert lo < current < hi, line  # a TSO taken at this start
    assert "UPDATE `tidb_binlog`.`checkpoint` SET checkPoint = " in line, line
    assert f"WHERE clusterID = {cluster.cluster_id}" in line, line
    assert "or delete that row to start from initial-commit-ts" in line, line
    assert raw_row(cluster) == bogus  # unchanged: not saved back as consistent
    assert downstream_ids(cluster, name) == list(range(5))

    put_row(cluster, saved)  # the fix: a sane checkpoint starts and replicates what was skipped
    drainer.start()
    catch_up(cluster, drainer, db)
    assert downstream_ids(cluster, name) == list(range(10))


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_file_checkpoint_beyond_the_present_is_refused_and_kept(cluster: Cluster) -> None:
    drainer = cluster.drainer("--syncer.to.checkpoint.type", "file")
    db = cluster.writer()
    name = cluster.dbname("aheadf")
    simple_table(db, name)
    insert(db, f"{name}.t", range(3))
    catch_up(cluster, drainer, db)
    assert drainer.stop() == 0
    savepoint = drainer.data_dir / "savepoint"
    saved = savepoint.read_text()
    bogus = "\n".join(f"commitTS = {BEYOND}" if s.startswith("commitTS") else s for s in saved.splitlines()) + "\n"
    assert bogus != saved
    savepoint.write_text(bogus)

    line = refused_line(drainer)
    assert line.startswith(
        f"drainer: checkpoint (file, {savepoint}) commitTS {BEYOND} (3084-12-12 12:41:28 UTC) is ahead of "
    ), line
    assert "is ahead of the current TSO " in line, line
    assert f"set commitTS in {savepoint} to the last commit_ts applied downstream" in line, line
    assert "or delete the file to start from initial-commit-ts" in line, line
    assert savepoint.read_text() == bogus
    assert cluster.checkpoint_row() is None  # the file checkpoint was used, not the MySQL table

    savepoint.write_text(saved)
    insert(db, f"{name}.t", range(3, 6))
    drainer.start()
    catch_up(cluster, drainer, db)
    assert downstream_ids(cluster, name) == list(range(6))


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_initial_commit_ts_beyond_the_present_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    future = tso.compose(tso.now_ms() + 86_400_000, 0)  # a day ahead
    early = cluster.drainer("--initial-commit-ts", str(future), name="early", start=False)
    line = refused_line(early)
    assert line.startswith(f"drainer: initial-commit-ts {future} ("), line
    assert "is ahead of the current TSO " in line, line
    assert "set initial-commit-ts to a commit_ts at or below it, or to -1" in line, line
    assert cluster.checkpoint_row() is None  # nothing was saved

    # a ts just taken is not ahead of the TSO the drainer takes after it
    fresh = cluster.now()
    drainer = cluster.drainer("--initial-commit-ts", str(fresh))
    db = cluster.writer()
    name = cluster.dbname("fresh")
    simple_table(db, name)
    insert(db, f"{name}.t", range(4))
    catch_up(cluster, drainer, db)
    row = cluster.checkpoint_row()
    assert row is not None
    assert row["commitTS"] >= fresh


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_pd_server_down_checks_against_its_saved_window_and_a_sane_checkpoint_starts(cluster: Cluster) -> None:
    drainer = cluster.drainer()
    db = cluster.writer()
    name = cluster.dbname("nopd")
    simple_table(db, name)
    insert(db, f"{name}.t", range(3))
    catch_up(cluster, drainer, db)
    assert drainer.stop() == 0
    saved = raw_row(cluster)
    assert saved is not None
    doc = json.loads(saved)
    put_row(cluster, saved.replace(f'"commitTS":{doc["commitTS"]}', f'"commitTS":{BEYOND}'))
    cluster.pd.stop()

    line = refused_line(drainer, lambda: raw_row(cluster))
    assert f"commitTS {ts_text(BEYOND)} is ahead of pd-server's saved TSO window (/pd/timestamp; pd-server " in line
    assert json.loads(raw_row(cluster) or "{}")["commitTS"] == BEYOND

    put_row(cluster, saved)
    drainer.start()  # pd-server is still down: the saved window is the bound, the drainer comes online
    log = drainer.process.log_tail(200)
    assert "the start position is checked against its saved window" in log, log
    cluster.pd.start()
    insert(db, f"{name}.t", range(3, 6))
    catch_up(cluster, drainer, db)
    assert downstream_ids(cluster, name) == list(range(6))


def test_relay_recovery_with_the_upstream_gone_refuses_a_checkpoint_beyond_the_local_clock(
    cluster: Cluster, tmp_path: Path
) -> None:
    relay = tmp_path / "relay"
    drainer, _db, name, wanted = crash_with_relay_ahead(cluster, relay)
    saved = raw_row(cluster)
    assert saved is not None
    doc = json.loads(saved)
    assert doc["consistent"] is False
    bogus = saved.replace(f'"commitTS":{doc["commitTS"]}', f'"commitTS":{BEYOND}')
    put_row(cluster, bogus)
    cluster.pd.stop()
    cluster.etcd_server.stop()

    line = refused_line(drainer, lambda: raw_row(cluster))
    assert f"commitTS {ts_text(BEYOND)} is ahead of the local clock + 600 s (upstream unreachable: " in line, line
    assert raw_row(cluster) == bogus  # not marked consistent: the relay log is still to be applied

    put_row(cluster, saved)  # the fix: recovery runs and the downstream gets every relayed row
    drainer.process.start()
    assert wait_exit(drainer, timeout=90) == 0, drainer.process.log_tail(40)
    assert downstream_ids(cluster, name) == sorted(wanted)
    assert json.loads(raw_row(cluster) or "{}")["consistent"] is True
    cluster.etcd_server.start()  # the upstream comes back, so the pumps close without waiting for etcd
    cluster.pd.start()
