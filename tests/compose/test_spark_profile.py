"""The `spark` profile of docker-compose.yml: a Spark master and worker from our image built with the spark
extra (`IMAGE=tidb-binlog-py:spark EXTRAS=playground,kafka,spark deploy/container/build-images.sh`), used
through SPARK_IMAGE.  The worker must register with the master, both health checks must pass, and a job
driven from the master's container must run on the worker's executor with the code the job ships (the
zip of `spark_jobs.ship`), not the image's own copy.  `down -v` leaves nothing of the project.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.compose.cluster import COMPOSE_FILE, http_json
from tests.compose.conftest import build_missing
from tests.compose.engine import ROOT, EngineError, compose_command, engine_env, podman, tail, wait_for

pytestmark = pytest.mark.timeout(900)  # the first run builds the spark image (a JRE and pyspark): about a minute

PROJECT = "tidb-binlog-sparktest"
SPARK_IMAGE = "tidb-binlog-py:spark"
MASTER_UI = "http://127.0.0.1:18080/json/"
JOB = r"""
import json, os
from spark_jobs.session import make_session

spark = make_session("spark://spark-master:7077", app_name="compose-spark-check",
                     conf={"spark.driver.host": "spark-master", "spark.executor.memory": "512m"})


def task(x):
    import spark_jobs.readers.pump_net as code

    return x * x, code.__file__, os.uname().nodename


rows = spark.sparkContext.parallelize(range(100), 4).map(task).collect()
print(json.dumps({"sum": sum(r[0] for r in rows), "files": sorted({r[1] for r in rows}),
                  "hosts": sorted({r[2] for r in rows})}))
spark.stop()
"""


def compose(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    command = compose_command()
    if command is None:
        raise EngineError("podman-compose is not installed")
    argv = [*command, "--in-pod=false", "-p", PROJECT, "-f", str(COMPOSE_FILE), "--profile", "spark", *args]
    done = subprocess.run(
        argv,
        env=engine_env(SPARK_IMAGE=SPARK_IMAGE),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        raise EngineError(f"podman-compose {' '.join(args)}: exit {done.returncode}: {tail(done.stderr)}")
    return done


def container(service: str) -> str:
    out = podman(
        "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}",
        "--filter", f"label=com.docker.compose.service={service}", "--format", "{{.Names}}",
    ).stdout.split()  # fmt: skip
    assert len(out) == 1, f"service {service}: containers {out}"
    return out[0]


def leftovers() -> list[str]:
    label = f"label=io.podman.compose.project={PROJECT}"
    found = podman("ps", "-a", "--filter", label, "--format", "{{.Names}}", check=False).stdout.split()
    found += podman("volume", "ls", "--filter", label, "--format", "{{.Name}}", check=False).stdout.split()
    return found


@pytest.fixture
def spark_image(podman_engine: str) -> str:
    """Our image with the spark extra, built when missing (the layer cache shares the base and the build)."""
    build_missing([SPARK_IMAGE], CONTAINER_ENGINE=podman_engine, IMAGE=SPARK_IMAGE, EXTRAS="playground,kafka,spark")
    return SPARK_IMAGE


@pytest.fixture
def spark_services(spark_image: str) -> Iterator[None]:
    compose("down", "-v", timeout=120)  # nothing of an earlier, killed run
    try:
        compose("up", "-d", "spark-master", "spark-worker")
        yield
    except BaseException:
        for service in ("spark-master", "spark-worker"):
            print(podman("logs", "--tail", "40", container(service), check=False).stdout)
        raise
    finally:
        compose("down", "-v", timeout=180)
        assert leftovers() == []


def alive_workers() -> int:
    try:
        state: dict[str, Any] = http_json(MASTER_UI, timeout=2.0)
    except OSError:
        return 0
    return sum(1 for w in state["workers"] if w.get("state") == "ALIVE")


def test_the_spark_profile_runs_a_job_on_its_worker(spark_services: None) -> None:
    wait_for("the spark worker to register ALIVE with the master", lambda: alive_workers() == 1, 120.0)
    for service in ("spark-master", "spark-worker"):
        check = podman("healthcheck", "run", container(service), check=False)
        assert check.returncode == 0, f"{service}: {check.stdout}{check.stderr}"
    worker_host = podman("exec", container("spark-worker"), "hostname").stdout.strip()
    job = podman("exec", container("spark-master"), "python", "-c", JOB, check=False, timeout=300)
    assert job.returncode == 0, tail(job.stderr)
    result = json.loads(job.stdout.strip().splitlines()[-1])
    assert result["sum"] == sum(x * x for x in range(100))
    assert result["hosts"] == [worker_host]  # executed on the worker's executor, not in the driver
    assert all("/tidb_binlog_code.zip/spark_jobs/" in f for f in result["files"]), result["files"]
