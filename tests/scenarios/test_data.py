"""Hard data under load: a storm of DDL while writing, and one 64 MiB transaction.

Three pumps, one drainer with 16 workers, the ledger running throughout; each ends with `finish`.
"""

from __future__ import annotations

import pytest

from tests.functional.drainerutil import Cluster
from tests.scenarios.helpers import DRAINER_ARGS, STEP_TIMEOUT, pump_positions
from tests.scenarios.load import Load, finish
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(300)]

STORM_DDLS = 60
BIG_TXN = 64 << 20
BLOB = 1 << 20
"""Row size of the big transaction: under the downstream's max_allowed_packet (16 MiB on MariaDB 10.11)."""


def test_ddl_storm_while_writing(cluster: Cluster, load: Load) -> None:
    """The ddl workload at ddl_ratio 0.5 from 3 threads (add/drop column and index, create, rename,
    truncate, drop table) while the same threads, sysbench and the ledger write rows."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    storm = load.add("ddl", WorkloadOptions(ddl_ratio=0.5, tables=3, table_size=100), threads=3)
    load.sysbench(threads=1)
    load.start()
    job = next(j for j in load.jobs if j.workload is storm)

    def ddls() -> int:
        return 0 if job.progress is None else job.progress.ddl

    load.wait_until(lambda: ddls() >= STORM_DDLS, 150, f"{STORM_DDLS} DDLs")
    load.wait_commits(20, "the ledger during the storm")
    finish(cluster, drainer, load, timeout=150)
    assert job.result is not None
    assert job.result.stats.ddl >= STORM_DDLS
    assert job.result.stats.committed - job.result.stats.ddl >= STORM_DDLS, "hardly any DML between the DDLs"


def blob_totals(cluster: Cluster, database: str) -> tuple[int, int]:
    """(rows, payload bytes) of the downstream blobs table."""
    conn = cluster.mysql_conn(database)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM blobs")
            row = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    assert row is not None
    return int(row[0]), int(row[1])


def test_64mib_transactions_replicated_intact(cluster: Cluster, load: Load) -> None:
    """64 MiB transactions of BLOBs (64 rows of 1 MiB) while the ledger and sysbench write small ones:
    one insert replicated as is; a second one with the drainer killed -9 once it has received it
    (the restart replays it in safe mode); then a 64 MiB delete of the first.  Downstream every byte
    equals upstream's."""
    drainer = cluster.drainer(*DRAINER_ARGS, "--syncer.safe-mode-duration", "5m")
    opts = WorkloadOptions(database=cluster.dbname("bigtxn"), txn_size=BIG_TXN, blob_size=BLOB, keep_batches=1)
    big = make_workload("bigtxn", opts)
    big.setup(load.db)
    load.sysbench(threads=1)
    load.start()
    load.wait_commits(10, "before the big transactions")
    rows = BIG_TXN // BLOB

    def one_big_txn(what: str) -> int:
        result = run(load.db, big, threads=1, seed=5, txns=1)
        assert result.crashed == [], result.crashed
        assert result.stats.committed == 1, f"{what}: {result.summary()}"
        return cluster.now()

    after = one_big_txn("insert 1")
    cluster.wait_applied(drainer, after, STEP_TIMEOUT * 2)
    assert blob_totals(cluster, big.db_name) == (rows, BIG_TXN)

    after = one_big_txn("insert 2")

    def received(after: int = after) -> bool:  # from every pump, everything up to `after`
        return min(pump_positions(drainer).values()) >= after

    load.wait_until(received, STEP_TIMEOUT * 2, "the drainer received the second big transaction")
    drainer.kill9()
    cp = cluster.checkpoint_row()
    assert cp is not None
    missing = load.ledger.missing_downstream(cluster, up_to_ts=int(cp["commitTS"]))
    assert missing == [], f"checkpoint {cp['commitTS']} is ahead of the data: missing {missing[:10]}"
    drainer.start()

    one_big_txn("delete 1")  # keep_batches=1: the oldest batch goes, 64 MiB of deleted rows in one binlog
    load.wait_commits(10, "after the big transactions")
    finish(cluster, drainer, load, timeout=180)
    assert big.check(load.db) == []
    assert blob_totals(cluster, big.db_name) == (rows, BIG_TXN)
