"""One SparkSession (`local[2]`) for the whole Spark test run.

Starting a JVM costs seconds; every Spark test shares this session and the session
is stopped once at the end. Tests that need a different master (the benchmark's
`local[1]`) run as a separate process instead.

`spark_cluster` is a real standalone cluster (a master and two one-core workers, each a
JVM) for the tests that run a job on executors; it too is started once per run, and only
when a test asks for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.functional.conftest import cluster  # the whole-cluster fixture (etcd, pd, pumps, MariaDB)
from tools.sparkcluster import StandaloneCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


__all__ = ["cluster", "spark", "spark_cluster", "standalone"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from spark_jobs.session import make_session

    session = make_session("local[2]", app_name="binlog-spark-tests", log_level="ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A started Spark standalone cluster on loopback: master + 2 workers (1 core, 1 GiB each).

    A test that kills a worker restarts it before it returns, so the next test finds both ALIVE."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def standalone(spark_cluster: StandaloneCluster, request: pytest.FixtureRequest) -> Iterator[StandaloneCluster]:
    """The session's cluster with both workers ALIVE; the nodes' logs printed when the test fails."""
    for worker in spark_cluster.workers:
        if not worker.process.alive:  # a test before this one failed before restarting it
            spark_cluster.restart_worker(worker.index)
    yield spark_cluster
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(spark_cluster.logs(60))
