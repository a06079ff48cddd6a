"""What the cluster leans on fails under load: etcd, pd-server, the downstream's connections.

Three pumps, one drainer with 16 workers, a ledger and sysbench running throughout; each ends with
`finish` (fresh TSO, checkpoint past it, audit clean, every ledger row downstream).
"""

from __future__ import annotations

import itertools

import pytest

from common.registry import NodeKind, NodeState, Registry
from tests.functional.drainerutil import Cluster
from tests.scenarios.downstream import connection_ids, kill_connections
from tests.scenarios.helpers import DRAINER_ARGS, STEP_TIMEOUT, merge_moves
from tests.scenarios.load import Load, finish
from tools.procs import wait_for

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(300)]


def all_pumps_online(cluster: Cluster) -> bool:
    try:
        states = {s.node_id: s.state for s in Registry(cluster.etcd).list(NodeKind.PUMP)}
    except Exception:  # etcd still coming back
        return False
    return all(states.get(p.node_id) is NodeState.ONLINE for p in cluster.pumps)


PD_TERM_OVER = "pd leader term over"


def pd_log(cluster: Cluster) -> str:
    return cluster.pd.process.log_path.read_text(errors="replace")


def test_etcd_restarted_under_load(cluster: Cluster, load: Load) -> None:
    """etcd stopped and restarted, killed -9 and restarted, then stopped until pd-server's leader lease is
    gone (same data, same port): the pumps' registrations, pd-server's leadership and TSO, the writer's
    watches and the drainer all recover; commit_ts keeps increasing and nothing is lost."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    load.sysbench()
    load.start()
    load.wait_commits(20, "before the restarts")
    for how in ("restart", "kill -9", "outage past pd's lease"):
        if how == "restart":
            cluster.etcd_server.restart()
        elif how == "kill -9":
            cluster.etcd_server.process.kill9()
            cluster.etcd_server.start()
        else:
            terms = pd_log(cluster).count(PD_TERM_OVER)
            cluster.etcd_server.stop()

            def term_over(terms: int = terms) -> bool:
                return pd_log(cluster).count(PD_TERM_OVER) > terms

            wait_for(term_over, STEP_TIMEOUT, "pd-server's leader term to end")
            cluster.etcd_server.start()
        load.wait_commits(30, f"after etcd {how}")
        wait_for(lambda: all_pumps_online(cluster), STEP_TIMEOUT, f"every pump registered online after etcd {how}")
        merge_moves(cluster, drainer)
    assert drainer.process.alive, drainer.process.log_tail()
    load.stop()
    assert_increasing(load)
    finish(cluster, drainer, load)


def assert_increasing(load: Load) -> None:
    """The ledger commits one transaction at a time: its commit_ts must only grow."""
    ts = [c for _, c in load.ledger.snapshot()]
    back = [(a, b) for a, b in itertools.pairwise(ts) if b <= a]
    assert back == [], f"commit_ts went backwards: {back[:5]}"


def test_pd_server_restarted_under_load(cluster: Cluster, load: Load) -> None:
    """pd-server stopped and restarted, then killed -9 and restarted: TSOs keep increasing, writes go on."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    load.sysbench()
    load.start()
    load.wait_commits(20, "before the restarts")
    cluster.pd.restart()
    load.wait_commits(30, "after pd-server restart")
    merge_moves(cluster, drainer)
    cluster.pd.kill9()
    cluster.pd.start()
    load.wait_commits(30, "after pd-server kill -9")
    merge_moves(cluster, drainer)
    load.stop()
    assert_increasing(load)
    finish(cluster, drainer, load)


def test_downstream_connections_killed_under_load(cluster: Cluster, load: Load) -> None:
    """KILL CONNECTION of every connection the drainer has to MariaDB, five times: it reconnects, retries
    the batches that failed (in safe mode) and loses nothing."""
    assert cluster.mysql is not None
    drainer = cluster.drainer(*DRAINER_ARGS)
    pid = drainer.process.pid
    assert pid is not None
    load.sysbench(threads=3)
    load.start()
    load.wait_commits(20, "before the kills")
    admin = cluster.mysql_conn()
    killed = 0
    try:
        for i in range(5):
            seen: list[int] = []

            def connected(seen: list[int] = seen) -> bool:
                seen[:] = connection_ids(admin, pid, cluster.mysql.port if cluster.mysql else 0)
                return len(seen) >= 2  # the checkpoint's and at least one worker's

            load.wait_until(connected, STEP_TIMEOUT, f"the drainer is connected downstream (round {i + 1})")
            killed += kill_connections(admin, seen)
            load.wait_commits(15, f"after kill round {i + 1}")
    finally:
        admin.close()
    assert killed >= 10, f"only {killed} connections killed"
    merge_moves(cluster, drainer)
    assert drainer.process.alive, drainer.process.log_tail()
    log = drainer.process.log_path.read_text(errors="replace")
    assert "failed (try" in log, "no batch was retried: the kills never hit the drainer's work"
    finish(cluster, drainer, load)
