"""Fixtures of the scenarios: a whole cluster (etcd, pd-server, 3 pumps) with MariaDB downstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.dsn import MySQLDSN
from pump_client import PumpsClient
from tests.functional.drainerutil import Cluster
from tests.scenarios.load import Load

WRITER_PROBE_INTERVAL = 1.0
"""The writer probes unavailable pumps every second (30 s by default), so a restarted pump is used again soon."""

SCENARIO_PUMPS = 3


@pytest.fixture
def cluster(tmp_path: Path, mysql_server: MySQLDSN, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """etcd, pd-server and 3 pumps (or `indirect` param); every log tail printed when the test fails."""
    c = Cluster(tmp_path, mysql_server, pumps=getattr(request, "param", SCENARIO_PUMPS), fork_safe=True)
    try:
        yield c
    finally:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(c.logs())
            print(c.server_logs())
        c.close()


@pytest.fixture
def load(cluster: Cluster) -> Iterator[Load]:
    """The writer (its pump client probing every second) and a ledger; add workloads, then `start()`.

    Stopped at teardown whatever happened, before the cluster closes."""
    client = PumpsClient(cluster.etcd_server.url, probe_interval=WRITER_PROBE_INTERVAL)
    ld = Load(cluster, cluster.writer(client), client)
    try:
        yield ld
    finally:
        ld.halt()
