"""The jobs on a real standalone Spark cluster (a master and two one-core workers, `spark_cluster`):
`binlog-spark replay` and `audit` run as a user runs them, as commands with `--master spark://…`, so
the tasks run in executor processes that import the code the job ships them (`spark_jobs.ship`).

One history (etcd, pd-server, three live pumps, a file-sink drainer, MariaDB; sysbench and the ddl
workload with every column type) is replayed:

* from the live pumps over gRPC into empty databases `k_*`: equal to the upstream under the audit and
  row by row; a second run changes nothing;
* from the drainer's file-sink directory into `h_*`: equal too;
* a difference planted in `k_*` is found by `binlog-spark audit` on the cluster (exit 1, its key);
* a worker killed while the replay runs: Spark runs the lost tasks again on the other worker and the
  result is still equal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from common.audit import DialectReader, mysql_reader
from common.sql.dialect import MySQLDialect
from tests.functional.drainerutil import Cluster
from tests.spark.test_replay_cli import ROOT
from tests.spark.test_replay_e2e import audit_prefixed
from tests.spark.test_replay_net import sysbench_and_ddl
from tools.sparkcluster import StandaloneCluster
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = [pytest.mark.spark, pytest.mark.functional]

JOB_TIMEOUT = 300.0


def _driver_flags(spark_cluster: StandaloneCluster) -> list[str]:
    """--master and the driver's loopback --conf, as both binlog-spark and spark-submit take them."""
    conf = [x for k, v in spark_cluster.driver_conf().items() for x in ("--conf", f"{k}={v}")]
    return ["--master", spark_cluster.master_url, *conf]


def cluster_cli(spark_cluster: StandaloneCluster, *args: str) -> list[str]:
    """The argv of a `binlog-spark` command on the standalone cluster."""
    return [sys.executable, "-m", "spark_jobs.cli", *_driver_flags(spark_cluster), *args]


def submit_cli(spark_cluster: StandaloneCluster, *args: str) -> list[str]:
    """The argv of `spark-submit … spark_jobs/cli.py …` (the venv's bin/ first on PATH, as the README says)."""
    import spark_jobs.cli

    submit = str(Path(sys.executable).parent / "spark-submit")
    return [submit, *_driver_flags(spark_cluster), spark_jobs.cli.__file__, *args]


def run_cli(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=JOB_TIMEOUT, check=False, env=env)


def rows_equal(cluster: Cluster, db: Any, prefix: str) -> list[str]:
    """Tables whose rows (every column, as a multiset) differ between the upstream and `<prefix>db`."""
    conn = cluster.mysql_conn()
    s = db.store.session()
    bad = []
    try:
        r = mysql_reader(conn, prefix)
        down = DialectReader(r.description, MySQLDialect(prefix=prefix), r.query_all)
        up = DialectReader(db.store.dsn, db.store.dialect(), s.query_all)
        for ref in db.schema.tables():
            a = sorted(map(repr, up.read(ref.db.name, ref.table)))
            b = sorted(map(repr, down.read(ref.db.name, ref.table)))
            if a != b:
                bad.append(f"{ref.db.name}.{ref.table.name}: {len(a)} rows upstream, {len(b)} downstream")
    finally:
        s.close()
        conn.close()
    return bad


def summary_lines(out: str) -> list[str]:
    """The replay summary table (rows written / deleted per table) of a command's output."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("replay summary"))
    return lines[start:]


@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_replay_and_audit_on_a_standalone_cluster(
    cluster: Cluster, standalone: StandaloneCluster, tmp_path: Path
) -> None:
    spark_cluster = standalone
    files = cluster.drainer("--syncer.db-type", "file", sink="file", name="fdrainer")
    db = sysbench_and_ddl(cluster, "k", seed=37, txns=100, prefixes=("k_", "h_"))
    cluster.wait_applied(files, cluster.now())
    files.stop()
    m = cluster.mysql
    assert m is not None
    to = ["--to", f"mysql://{m.user}@{m.host}:{m.port}"]
    etcd = cluster.etcd_server.url
    addrs = [p.addr for p in cluster.pumps]
    net = ["replay", "--from-pump-addrs", *addrs, "--pd-urls", etcd, *to]

    first = run_cli(cluster_cli(spark_cluster, *net, "--db-prefix", "k_"))
    assert first.returncode == 0, first.stderr[-3000:]
    assert "pulled from 3 pump(s) over gRPC" in first.stdout, first.stdout
    assert audit_prefixed(cluster, db, "k_") == []
    assert rows_equal(cluster, db, "k_") == []

    again = run_cli(cluster_cli(spark_cluster, *net, "--db-prefix", "k_", "--stop-ts", str(cluster.now())))
    assert again.returncode == 0, again.stderr[-3000:]
    assert summary_lines(again.stdout) == summary_lines(first.stdout)  # idempotent: the same rows again
    assert audit_prefixed(cluster, db, "k_") == []

    from_files = run_cli(
        cluster_cli(
            spark_cluster, "replay", "--from-files", str(files.data_dir), "--pd-urls", etcd, *to, "--db-prefix", "h_"
        )
    )
    assert from_files.returncode == 0, from_files.stderr[-3000:]
    assert rows_equal(cluster, db, "h_") == []
    assert audit_prefixed(cluster, db, "h_") == []

    # the README's spark-submit command: spark-submit's --master applies, the job ships its code itself
    down = f"mysql://{m.user}@{m.host}:{m.port}"
    sides = [f"--upstream=sqlite:{cluster.upstream_path}", f"--downstream={down}", "--downstream-db-prefix=h_"]
    submitted = run_cli(submit_cli(spark_cluster, "audit", *sides))
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    apps = [a["name"] for a in spark_cluster.state()["completedapps"]]
    assert "binlog-spark audit" in apps, apps

    # a planted difference, found by the audit running on the cluster
    target = next(r for r in db.schema.tables() if r.table.name == "sbtest1")
    conn = cluster.mysql_conn()
    try:
        with conn.cursor() as cur:
            cur.execute(f"UPDATE `k_{target.db.name}`.`sbtest1` SET k = k + 1 ORDER BY id LIMIT 1")
            cur.execute(f"SELECT id FROM `k_{target.db.name}`.`sbtest1` ORDER BY id LIMIT 1")
            (changed_id,) = cur.fetchone()
        conn.commit()
    finally:
        conn.close()
    report = tmp_path / "audit.json"
    audit = run_cli(
        cluster_cli(
            spark_cluster,
            "audit",
            "--upstream",
            f"sqlite:{cluster.upstream_path}",
            "--downstream",
            f"mysql://{m.user}@{m.host}:{m.port}",
            "--downstream-db-prefix",
            "k_",
            "--json",
            str(report),
        )
    )
    assert audit.returncode == 1, audit.stderr[-3000:]
    doc = json.loads(report.read_text())
    unequal = [t for t in doc["tables"] if t["missing"] or t["extra"] or t["different"] or t["problem"]]
    assert [(t["table"], t["different"]) for t in unequal] == [(f"{target.db.name}.sbtest1", 1)], doc["tables"]
    (example,) = unequal[0]["examples"]
    assert (example["kind"], example["key"]) == ("different", f"id={changed_id}")


@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_a_worker_killed_during_a_replay_loses_nothing(cluster: Cluster, standalone: StandaloneCluster) -> None:
    spark_cluster = standalone
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("wsb"), tables=2, table_size=200))
    sb.setup(db)
    result = run(db, sb, threads=2, seed=41, txns=400)
    assert result.crashed == [], result.summary()
    for name in [d.name for d in db.schema.databases()]:
        cluster.downstream_names.append("w_" + name)
    m = cluster.mysql
    assert m is not None
    argv = cluster_cli(
        spark_cluster,
        "--conf",  # the first stage waits for both executors: worker 0 gets tasks to lose
        "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "replay",
        "--from-pump-addrs",
        *(p.addr for p in cluster.pumps),
        "--pd-urls",
        cluster.etcd_server.url,
        "--windows-per-pump",
        "8",
        "--to",
        f"mysql://{m.user}@{m.host}:{m.port}",
        "--db-prefix",
        "w_",
    )
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # PySpark's Python processes on worker 0: a task runs there (the first stage pulls the pumps,
        # and its output is cached on the executors: all of it is lost too)
        while not spark_cluster.python_pids("worker-0"):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no task started on worker 0"
            time.sleep(0.05)
        spark_cluster.kill_worker(0)
        out, err = proc.communicate(timeout=JOB_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        spark_cluster.restart_worker(0)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"Lost (task|executor)|Executor lost|Removed executor", err, re.IGNORECASE), err[-3000:]
    assert "[5/5] write:" in out
    assert audit_prefixed(cluster, db, "w_") == []
    assert rows_equal(cluster, db, "w_") == []
