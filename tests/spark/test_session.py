"""The shared session and the defaults `make_session` applies."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from spark_jobs.session import default_conf, local_cores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


@pytest.mark.parametrize(
    ("master", "cores"),
    [("local", 1), ("local[1]", 1), ("local[2]", 2), ("local[3, 2]", 3), ("spark://h:7077", None), ("yarn", None)],
)
def test_local_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def test_default_conf_ties_shuffle_partitions_to_cores() -> None:
    assert default_conf("local[2]")["spark.sql.shuffle.partitions"] == "4"
    assert default_conf("local[2]")["spark.ui.enabled"] == "false"
    assert "spark.sql.shuffle.partitions" not in default_conf("yarn")


def test_shared_session_runs_a_job(spark: SparkSession) -> None:
    assert spark.sparkContext.master == "local[2]"
    assert spark.range(100).selectExpr("sum(id) AS s").collect()[0]["s"] == 4950
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
