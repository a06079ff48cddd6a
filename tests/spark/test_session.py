"""The shared session and the defaults `make_session` applies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
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


SUBMITTED = r"""
import json
from spark_jobs.session import fit_shuffle_partitions, make_session

spark = make_session(None, app_name="submitted")  # what the commands pass when --master is not given
sc = spark.sparkContext
sc.parallelize(range(4), 2).count()  # a first stage: the executors' cores are known
fit_shuffle_partitions(spark)
conf = sc.getConf()
print(json.dumps({
    "master": sc.master,
    "reuse": conf.get("spark.python.worker.reuse"),
    "tz": conf.get("spark.sql.session.timeZone"),
    "shuffle": spark.conf.get("spark.sql.shuffle.partitions"),
    "shipped": any("tidb_binlog_code.zip" in f for f in sc.listFiles),
}))
spark.stop()
"""


def test_under_spark_submit_its_master_and_conf_win(tmp_path: Path) -> None:
    """`spark-submit --master M --conf K=V app.py`: the jobs' session takes M and keeps V over its own
    defaults; defaults spark-submit did not set still apply; a shuffle size given is not refitted."""
    script = tmp_path / "submitted.py"
    script.write_text(SUBMITTED)
    bindir = Path(sys.executable).parent
    argv = [str(bindir / "spark-submit"), "--master", "local[1]", "--conf", "spark.python.worker.reuse=false"]
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}", "SPARK_LOCAL_IP": "127.0.0.1"}
    runs = []
    for extra in ([], ["--conf", "spark.sql.shuffle.partitions=7"]):
        proc = subprocess.run(
            [*argv, *extra, str(script)], capture_output=True, text=True, timeout=180, check=False, env=env
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    fitted, given = runs
    assert fitted == {"master": "local[1]", "reuse": "false", "tz": "UTC", "shuffle": "2", "shipped": False}
    assert given["shuffle"] == "7"
