"""One SparkSession (`local[2]`) for the whole Spark test run.

Starting a JVM costs seconds; every Spark test shares this session and the session
is stopped once at the end. Tests that need a different master (the benchmark's
`local[1]`) run as a separate process instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.functional.conftest import cluster  # the whole-cluster fixture (etcd, pd, pumps, MariaDB)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


__all__ = ["cluster", "spark"]


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from spark_jobs.session import make_session

    session = make_session("local[2]", app_name="binlog-spark-tests", log_level="ERROR")
    yield session
    session.stop()
