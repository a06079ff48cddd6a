"""The nemesis workload, sampler, stream puller and checker against a real cluster on loopback (no faults).

Two pumps, a drainer into MariaDB (a unique database), the workload as its own process for a few seconds:
the checker finds nothing; then one acknowledged insert is deleted downstream and rules a and b report it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from common.dsn import MySQLDSN as DownstreamDSN
from tests.functional.drainerutil import Cluster
from tests.harness.mysql import MySQLDSN
from tests.nemesis.checker import CheckpointSampler, check, read_mysql_tables, read_sqlite_tables
from tests.nemesis.history import read_history
from tests.nemesis.streams import pull_streams
from tests.nemesis.workload import INITIAL_BALANCE
from tools.procs import wait_for

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
ACCOUNTS = 8
DURATION = 8


def test_workload_checked_clean_then_lost_row(tmp_path: Path, mysql_server: MySQLDSN) -> None:
    downstream = DownstreamDSN(mysql_server.host, mysql_server.port, mysql_server.user, mysql_server.password, "")
    cluster = Cluster(tmp_path, downstream, pumps=2)
    sampler: CheckpointSampler | None = None
    try:
        drainer = cluster.drainer()
        name = cluster.dbname("nem")
        sampler = CheckpointSampler(mysql_server, cluster.cluster_id, f"{name}.inserts", interval=0.3)
        sampler.start()
        history_path = tmp_path / "history.jsonl"
        started = time.time()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [
            sys.executable, "-m", "tests.nemesis.workload",
            "--etcd", cluster.etcd_server.url, "--store", cluster.upstream_dsn, "--history", str(history_path),
            "--threads", "3", "--duration", str(DURATION), "--seed", "7", "--accounts", str(ACCOUNTS), "--db", name,
        ]  # fmt: skip
        done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("nemesis workload: ok="), done.stdout

        upto = cluster.now()
        cluster.wait_applied(drainer, upto, timeout=30)
        row = cluster.checkpoint_row()
        assert row is not None
        final_checkpoint = int(row["commitTS"])
        running = sampler
        seen = len(running.samples.times)
        wait_for(lambda: len(running.samples.times) >= seen + 2, 10.0, "two more checkpoint samples")
        samples = running.stop()
        sampler = None

        pulled = pull_streams([p.addr for p in cluster.pumps], cluster.cluster_id, upto, idle_timeout=5, timeout=30)
        assert all(s.complete for s in pulled.values()), {a: s.error for a, s in pulled.items()}
        streams = {a: s.entries for a, s in pulled.items()}
        history = list(read_history(history_path))
        up = read_sqlite_tables(str(cluster.upstream_path), name)
        down = read_mysql_tables(mysql_server, name)
        expected = INITIAL_BALANCE * ACCOUNTS

        report = check(
            history,
            up,
            down,
            streams,
            samples,
            final_checkpoint=final_checkpoint,
            heals=[started],
            recovery_bound=30,
            expected_total=expected,
            upto=upto,
        )
        print(report.render())
        assert report.ok, report.render()
        assert report.counts["acknowledged_ok"] > 20
        assert report.counts["insert_ok"] > 0
        assert report.recovery[0] is not None

        victim = next(r.insert_id for r in history if r.outcome == "ok" and r.insert_id is not None)
        conn = mysql_server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM `{name}`.`inserts` WHERE id = %s", (victim,))
        finally:
            conn.close()
        broken = check(
            history,
            up,
            read_mysql_tables(mysql_server, name),
            streams,
            samples,
            final_checkpoint=final_checkpoint,
            expected_total=Decimal(expected),
            upto=upto,
        )
        rules = {v.rule for v in broken.violations}
        assert rules == {"a", "b"}, broken.render()
        assert f"lost: ok insert id={victim}" in broken.violations[0].message
        assert broken.counts["lost"] == 1
    finally:
        if sampler is not None:
            sampler.stop()
        cluster.close()
