"""replay from live pumps over gRPC (`--from-pump-addrs`, `--from-cluster`): real etcd, pd-server, three
pumps, the upstream writer and MariaDB; no pump's data directory is read.

The sysbench and ddl workloads (DDL churn, a table with every column type) run through the pumps while
they stay up; the replay into empty databases (prefix `n_`) must equal the upstream under the audit,
and equal what the file reader makes of the pumps' value logs.  Bad input fails before Spark starts,
with one line naming the pump: an unreachable address, a wrong cluster id, a window that is empty.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest

from common.errors import PumpReadError
from common.pb import pump_pb2
from common.pull import GC_TS_METADATA, PULL_METHOD
from spark_jobs.errors import InputError
from tests.functional.drainerutil import Cluster
from tests.spark.test_replay_cli import spark_cli
from tests.spark.test_replay_e2e import audit_prefixed
from upstream.database import Database
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.runner import run

pytestmark = [pytest.mark.spark, pytest.mark.functional]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def sysbench_and_ddl(cluster: Cluster, tag: str, *, seed: int, txns: int, prefixes: tuple[str, ...]) -> Database:
    """The upstream writer after the sysbench and ddl workloads (databases `<tag>sb`, `<tag>ddl`) ran through
    the cluster's pumps; the downstream databases `<prefix><db>` are dropped at the end of the test."""
    db = cluster.writer()
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname(f"{tag}sb"), tables=2, table_size=60))
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname(f"{tag}ddl"), ddl_ratio=0.12))
    for w in (sb, ddl):
        w.setup(db)
        result = run(db, w, threads=2, seed=seed, txns=txns)
        assert result.crashed == [], result.summary()
    for name in [d.name for d in db.schema.databases()]:
        cluster.downstream_names.extend(prefix + name for prefix in prefixes)
    return db


@pytest.mark.parametrize("cluster", [3], indirect=True)
def test_replay_from_live_pumps_equals_the_upstream(spark: Any, cluster: Cluster) -> None:
    from spark_jobs.readers.ddl import jobs_from_etcd
    from spark_jobs.readers.pump_net import live_windows
    from spark_jobs.replay.job import ReplayOptions, run_replay
    from spark_jobs.replay.target import MySQLTarget

    db = sysbench_and_ddl(cluster, "n", seed=31, txns=90, prefixes=("n_",))
    etcd = cluster.etcd_server.url
    addrs = [p.addr for p in cluster.pumps]

    windows, stop_ts = live_windows(addrs=addrs, pd_urls=etcd, cluster_id=None, start_ts=None, stop_ts=None)
    assert len({w.name for w in windows}) == 3
    assert stop_ts > 0
    assert all(w.upto <= stop_ts for w in windows)
    jobs = jobs_from_etcd(etcd)
    m = cluster.mysql
    assert m is not None
    target = MySQLTarget(m.host, m.port, m.user, m.password, "n_")
    opts = ReplayOptions(target, pump_windows=tuple(windows), stop_ts=stop_ts)
    lines: list[str] = []
    first = run_replay(spark, opts, jobs, out=lines.append)
    assert first.written > 0
    assert first.decode_errors.empty, first.decode_errors.lines()
    assert any("pulled from 3 pump(s) over gRPC" in line for line in lines), lines
    problems = audit_prefixed(cluster, db, "n_")
    assert problems == [], "\n".join(problems)

    # the same window, found through etcd and cut finer: the same rows; a second run changes nothing
    found, _ = live_windows(addrs=None, pd_urls=etcd, cluster_id=None, start_ts=None, stop_ts=stop_ts, per_pump=7)
    assert {w.addr for w in found} == set(addrs)
    again = run_replay(spark, ReplayOptions(target, pump_windows=tuple(found), stop_ts=stop_ts), jobs, out=lines.append)
    assert (again.tables, again.final_rows, again.changes) == (first.tables, first.final_rows, first.changes)
    assert audit_prefixed(cluster, db, "n_") == []

    # the file reader of the same pumps' value logs, up to the same stop ts: the same final rows
    from spark_jobs.replay.job import read_decode_compact

    files = read_decode_compact(
        spark, ReplayOptions(None, pump_dirs=tuple(str(p.data_dir) for p in cluster.pumps), stop_ts=stop_ts), jobs
    )
    net = read_decode_compact(spark, ReplayOptions(None, pump_windows=tuple(windows), stop_ts=stop_ts), jobs)
    try:
        cols = ["table_id", "key", "deleted", "values", "commit_ts"]
        assert sorted(files.final.select(*cols).collect()) == sorted(net.final.select(*cols).collect())
        assert files.changes == net.changes
    finally:
        files.final.unpersist()
        net.final.unpersist()


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_live_pumps_bad_input_fails_before_spark_with_one_line(cluster: Cluster) -> None:
    from spark_jobs.readers.pump_net import live_windows

    etcd = cluster.etcd_server.url
    pump = cluster.pumps[0]
    dead = f"127.0.0.1:{_free_port()}"
    with pytest.raises(PumpReadError, match=rf"pump {dead} at {dead}: PullBinlogs failed .*UNAVAILABLE"):
        live_windows(addrs=[pump.addr, dead], pd_urls=etcd, cluster_id=None, start_ts=None, stop_ts=None)
    with pytest.raises(PumpReadError, match=r"FAILED_PRECONDITION: cluster id mismatch"):
        live_windows(addrs=[pump.addr], pd_urls=None, cluster_id=12345, start_ts=None, stop_ts=cluster.now())
    with pytest.raises(InputError, match=r"needs --pd-urls .* or --cluster-id and --stop-ts"):
        live_windows(addrs=[pump.addr], pd_urls=None, cluster_id=None, start_ts=None, stop_ts=None)
    with pytest.raises(InputError, match=r"expected host:port"):
        live_windows(addrs=["pump-without-port"], pd_urls=etcd, cluster_id=None, start_ts=None, stop_ts=None)
    now = cluster.now()
    with pytest.raises(InputError, match=rf"start ts {now} is not below stop ts {now}"):
        live_windows(addrs=[pump.addr], pd_urls=etcd, cluster_id=None, start_ts=now, stop_ts=now)

    # the command: one line, exit 1, before any Spark session
    proc = spark_cli("replay", "--from-pump-addrs", dead, "--pd-urls", etcd, "--to", "sqlite:///unused.db")
    assert proc.returncode == 1, proc.stderr
    assert f"pump {dead} at {dead}" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("cluster", [1], indirect=True)
def test_a_pump_announces_its_gc_ts_on_every_pull_stream(cluster: Cluster) -> None:
    import grpc

    pump = cluster.pumps[0]
    channel = grpc.insecure_channel(pump.addr)
    try:
        pull = channel.unary_stream(
            PULL_METHOD, request_serializer=pump_pb2.PullBinlogReq.SerializeToString, response_deserializer=None
        )
        call: Any = pull(pump_pb2.PullBinlogReq(clusterID=cluster.cluster_id, startFrom=pump_pb2.Pos(offset=0)))
        meta = dict(call.initial_metadata())
        call.cancel()
    finally:
        channel.close()
    assert meta[GC_TS_METADATA] == "0"  # a new pump has collected nothing
