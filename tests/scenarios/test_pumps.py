"""Pumps come and go under load: restarts, kill -9, offline, a new pump.  Three pumps, one drainer.

Each scenario keeps a ledger and sysbench running through the disturbance, shows the writer goes on
and the drainer's merge moves past a fresh TSO once the pumps are back, and ends with `finish`.
"""

from __future__ import annotations

import pytest

from common.registry import NodeKind, NodeState
from tests.functional.drainerutil import Cluster
from tests.scenarios.helpers import DRAINER_ARGS, merge_moves, pump_positions, put, registered, saved_ts, wait_used
from tests.scenarios.load import Load, finish
from tools.localcluster import PumpProcess
from tools.procs import wait_for

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(300)]


def test_pumps_restarted_one_after_another(cluster: Cluster, load: Load) -> None:
    """SIGTERM (pause) then start, pump by pump: the writer routes around the paused pump and uses it again."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    client = load.client
    load.sysbench()
    load.start()
    load.wait_commits(20, "before the restarts")
    for pump in cluster.pumps:
        code = pump.stop()
        assert code == 0, f"{pump.name} exited with {code}:\n{pump.process.log_tail()}"
        st = registered(cluster, NodeKind.PUMP, pump.node_id)
        assert st is not None
        assert st.state is NodeState.PAUSED, st
        load.wait_commits(20, f"while {pump.name} is paused")
        pump.start()
        wait_used(load, client, pump, 1, f"the writer uses {pump.name} again")
        merge_moves(cluster, drainer)
    finish(cluster, drainer, load)


def test_pump_kill9_under_load_and_restart(cluster: Cluster, load: Load) -> None:
    """kill -9 of two pumps in turn: writes go on on the others, acknowledged binlogs survive the crash."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    client = load.client
    load.sysbench(threads=3)
    load.start()
    load.wait_commits(20, "before the kills")
    for pump in (cluster.pumps[1], cluster.pumps[0]):
        wait_used(load, client, pump, 10, f"{pump.name} takes writes")
        pump.kill9()
        load.wait_commits(30, f"while {pump.name} is dead")
        pump.start()
        wait_used(load, client, pump, 1, f"the writer uses {pump.name} again")
        merge_moves(cluster, drainer)
    finish(cluster, drainer, load)


def close_pump(cluster: Cluster, load: Load, pump: PumpProcess) -> int:
    """PUT /state/{id}/close; returns a TSO taken just before the request."""
    wait_used(load, load.client, pump, 20, f"{pump.name} takes writes")
    asked = cluster.now()
    status, body = put(pump, f"/state/{pump.node_id}/close")
    assert status == 200, body
    return asked


def assert_offline(cluster: Cluster, pump: PumpProcess) -> None:
    assert pump.process.proc is not None
    assert pump.process.proc.returncode == 0, pump.process.log_tail()
    st = registered(cluster, NodeKind.PUMP, pump.node_id)
    assert st is not None
    assert st.state is NodeState.OFFLINE, st


def test_pump_offline_under_load(cluster: Cluster, load: Load) -> None:
    """PUT /state/{id}/close: the pump waits for the drainer to consume its data, goes offline and exits;
    replication goes on with the others and nothing a closed pump held is lost.  pump1 closes while the
    drainer runs; pump2 while the drainer is stopped, so it has to wait for the drainer's restart."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    load.sysbench(threads=3)
    load.start()
    pump1, pump2 = cluster.pumps[1], cluster.pumps[2]

    asked = close_pump(cluster, load, pump1)
    load.wait_until(lambda: not pump1.process.alive, 90, "pump1 goes offline and exits")
    assert_offline(cluster, pump1)
    # the pump waited for the drainer to pass a fake binlog written after the request
    assert saved_ts(drainer) > asked, "pump1 went offline before the drainer consumed its data"
    wait_for(lambda: pump1.node_id not in pump_positions(drainer), 30, "the drainer drops the offline pump")
    load.wait_commits(30, "after pump1 went offline")
    merge_moves(cluster, drainer)

    assert drainer.stop() == 0, drainer.process.log_tail()
    asked = close_pump(cluster, load, pump2)
    load.wait_commits(30, "with pump2 closing and the drainer stopped")
    assert pump2.process.alive, "pump2 went offline while the drainer that has not read its data was stopped"
    drainer.start()
    load.wait_until(lambda: not pump2.process.alive, 90, "pump2 goes offline and exits after the drainer's restart")
    assert_offline(cluster, pump2)
    assert saved_ts(drainer) > asked, "pump2 went offline before the drainer consumed its data"
    load.wait_commits(30, "on pump0 alone")
    merge_moves(cluster, drainer)
    finish(cluster, drainer, load)


def test_new_pump_joins_under_load(cluster: Cluster, load: Load) -> None:
    """A fourth pump starts while the load runs: the writer uses it and the drainer merges it."""
    drainer = cluster.drainer(*DRAINER_ARGS)
    client = load.client
    load.sysbench(threads=3)
    load.start()
    load.wait_commits(20, "before the new pump")
    new = cluster.add_pump()
    assert new.node_id in pump_positions(drainer), "the new pump served before Notify added it to the merge"
    wait_used(load, client, new, 20, "the writer uses the new pump")
    merge_moves(cluster, drainer)
    finish(cluster, drainer, load)
