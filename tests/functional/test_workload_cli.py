"""`binlog-workload` as a real process against real etcd, pd-server, two pumps, and sqlite or MariaDB."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.etcd import EtcdClient
from common.pd_client import TSOClient, read_cluster_id
from tests.functional.upstreamutil import pull_merged
from tests.harness.mysql import MySQLDSN
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional

PUMP_ARGS = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
RUN_TIMEOUT = 60.0


@dataclass
class Cluster:
    etcd: EtcdProcess
    pd: PDProcess
    pumps: list[PumpProcess]
    cluster_id: int

    def logs(self) -> str:
        procs = [self.etcd.process, self.pd.process, *(p.process for p in self.pumps)]
        return "".join(f"\n===== {p.name} log =====\n{p.log_tail(30)}" for p in procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One etcd, pd-server and two pumps for the whole module (each test uses its own logical database)."""
    base = tmp_path_factory.mktemp("workload-cluster")
    etcd = EtcdProcess(base / "etcd")
    pd = PDProcess(base, etcd.url)
    pumps = [PumpProcess(base, etcd.url, name=f"pump{i}", extra_args=PUMP_ARGS) for i in range(2)]
    started: list[EtcdProcess | PDProcess | PumpProcess] = []
    try:
        procs: list[EtcdProcess | PDProcess | PumpProcess] = [etcd, pd, *pumps]
        for proc in procs:
            proc.start()
            started.append(proc)
        client = EtcdClient(etcd.url)
        try:
            cid = read_cluster_id(client)
        finally:
            client.close()
        assert cid is not None
        yield Cluster(etcd, pd, pumps, cid)
    finally:
        for proc in reversed(started):
            proc.stop()


def run_workload(cluster: Cluster, tmp_path: Path, *args: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
    """Run `binlog-workload ... --json` to the end; its JSON summary (the test fails with its stderr otherwise)."""
    argv = [sys.executable, "-m", "upstream.workload_cli", "--etcd", cluster.etcd.url, "--json", *args]
    proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)
    context = f"exit {proc.returncode}\nstdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}{cluster.logs()}"
    assert proc.returncode == 0, context
    summary: dict[str, Any] = json.loads(proc.stdout)
    assert summary["ok"], context
    assert summary["check"] == [], context
    assert summary["committed"] > 0, context
    assert not summary["crashed"], context
    return summary


def sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'upstream.db'}"


def test_bank_on_sqlite_every_commit_reaches_the_pumps(cluster: Cluster, tmp_path: Path) -> None:
    s = run_workload(
        cluster, tmp_path, "--workload", "bank", "--store", sqlite(tmp_path), "--threads", "4",
        "--duration", "3", "--accounts", "20", "--seed", "7",
    )  # fmt: skip
    assert s["workload"] == "bank"
    assert s["txn_per_s"] > 0
    assert s["commit_latency_ms"]["p50"] > 0
    assert s["workload_info"] == {"accounts": 20, "total": "20000"}
    assert s["binlog"]
    assert s["seed"] == 7
    etcd = EtcdClient(cluster.etcd.url)
    tso = TSOClient(etcd)
    try:
        upto = tso.get_ts()
    finally:
        tso.close()
        etcd.close()
    pulled = pull_merged(cluster.pumps, cluster.cluster_id, upto)
    dml = [b for b in pulled if not b.ddl_job_id]
    assert len(dml) == s["committed"] + 1  # + the transaction that loaded the accounts
    assert len({b.start_ts for b in dml}) == len(dml)
    per_pump = [len(pull_merged([p], cluster.cluster_id, upto)) for p in cluster.pumps]
    assert all(n > 0 for n in per_pump), per_pump


def test_sysbench_on_sqlite(cluster: Cluster, tmp_path: Path) -> None:
    s = run_workload(
        cluster, tmp_path, "--workload", "sysbench", "--store", sqlite(tmp_path), "--threads", "4",
        "--duration", "3", "--tables", "2", "--table-size", "200", "--rows-per-txn", "5", "--row-size", "1000",
        "--strategy", "hash",
    )  # fmt: skip
    assert s["workload_info"]["c_type"] == "TEXT"
    assert sum(s["workload_info"]["rows"].values()) > 0


def test_ddl_on_sqlite(cluster: Cluster, tmp_path: Path) -> None:
    s = run_workload(
        cluster, tmp_path, "--workload", "ddl", "--store", sqlite(tmp_path), "--threads", "4",
        "--duration", "4", "--table-size", "100", "--ddl-ratio", "0.15", "--strategy", "score",
    )  # fmt: skip
    assert s["ddl"] > 0
    assert s["committed"] > s["ddl"]
    assert s["workload_info"]["types_rows_tracked"] > 0
    assert s["workload_info"]["ddl_failed"] == {}


def test_bigtxn_on_sqlite(cluster: Cluster, tmp_path: Path) -> None:
    s = run_workload(
        cluster, tmp_path, "--workload", "bigtxn", "--store", sqlite(tmp_path), "--threads", "2",
        "--txns", "6", "--txn-size", "24MiB", "--blob-size", "1MiB", "--keep-batches", "2",
    )  # fmt: skip
    assert s["committed"] == 6
    assert s["bytes_committed"] >= 3 * (24 << 20)  # some of the six may have been deletes of old batches
    assert s["workload_info"]["batches_inserted"] + s["workload_info"]["batches_deleted"] == 6


def test_ctrl_c_finishes_the_transactions_in_flight(cluster: Cluster, tmp_path: Path) -> None:
    err = tmp_path / "stderr.txt"
    argv = [
        sys.executable, "-m", "upstream.workload_cli", "--etcd", cluster.etcd.url, "--json", "--workload", "bank",
        "--database", "bank_sigint", "--store", sqlite(tmp_path), "--threads", "4", "--duration", "120",
    ]  # fmt: skip
    with err.open("w") as stderr:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=tmp_path)
        try:
            wait_for(lambda: "committed" in err.read_text(), 60, "the first progress line")
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err.read_text()[-3000:]
    s = json.loads(out)
    assert s["interrupted"]
    assert s["committed"] > 0
    assert s["check"] == []
    assert "SIGINT: finishing the transactions in flight" in err.read_text()


def test_bank_on_mariadb(cluster: Cluster, tmp_path: Path, mysql_db: MySQLDSN) -> None:
    store = f"mysql://{mysql_db.user}:{mysql_db.password}@{mysql_db.host}:{mysql_db.port}/{mysql_db.database}"
    prefix = f"{mysql_db.database}_"
    try:
        s = run_workload(
            cluster, tmp_path, "--workload", "bank", "--database", "mbank", "--store", store,
            "--mysql-db-prefix", prefix, "--threads", "4", "--duration", "3", "--accounts", "10",
        )  # fmt: skip
        assert s["store"] == f"mysql://{mysql_db.user}@{mysql_db.host}:{mysql_db.port}/{mysql_db.database}"
        assert s["retried"] >= 0
        conn = mysql_db.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*), SUM(balance) FROM `{prefix}mbank`.`accounts`")
                count, total = cur.fetchone()  # type: ignore[misc]
        finally:
            conn.close()
        assert (count, int(total)) == (10, 10_000)
    finally:
        conn = mysql_db.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{prefix}mbank`")
        finally:
            conn.close()


def test_ddl_on_mariadb_keeps_keys_differing_only_in_case(cluster: Cluster, tmp_path: Path, mysql_db: MySQLDSN) -> None:
    """The MySQL store (utf8mb4_bin, PAD SPACE) gets the case-only string keys, never trailing-space ones."""
    store = f"mysql://{mysql_db.user}:{mysql_db.password}@{mysql_db.host}:{mysql_db.port}/{mysql_db.database}"
    prefix = f"{mysql_db.database}_"
    try:
        s = run_workload(
            cluster, tmp_path, "--workload", "ddl", "--database", "mddl", "--store", store,
            "--mysql-db-prefix", prefix, "--threads", "2", "--txns", "120", "--table-size", "50",
            "--ddl-ratio", "0.1",
        )  # fmt: skip
        assert s["workload_info"]["ddl_failed"] == {}
        conn = mysql_db.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT k FROM `{prefix}mddl`.`skey`")
                keys = [str(r[0]) for r in cur.fetchall()]
        finally:
            conn.close()
        assert keys, "no string-key rows written"
        assert len({k.lower() for k in keys}) < len(keys), f"no keys differing only in case: {keys}"
        assert all(k == k.rstrip(" ") for k in keys), keys
    finally:
        conn = mysql_db.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{prefix}mddl`")
        finally:
            conn.close()


def test_sysbench_without_binlog(cluster: Cluster, tmp_path: Path) -> None:
    s = run_workload(
        cluster, tmp_path, "--workload", "sysbench", "--database", "sb_nobinlog", "--store", sqlite(tmp_path),
        "--no-binlog", "--txns", "20", "--table-size", "50", "--threads", "2",
    )  # fmt: skip
    assert not s["binlog"]
    assert s["committed"] + s["failed"] == 20
