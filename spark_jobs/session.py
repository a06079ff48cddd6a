"""SparkSession construction shared by every `binlog-spark` job and the Spark tests.

One place decides the defaults so that a job behaves the same on `local[*]`, on a
standalone cluster, YARN or Kubernetes: only `--master` changes. The defaults are
tuned for the sizes these jobs see (tens of millions of small row changes):

- `spark.sql.shuffle.partitions` follows the parallelism (2x the cores of a local
  master, else 2x the executors' cores once a job's first stage ran: `fit_shuffle_partitions`)
  instead of Spark's fixed 200, which on a 2-core box makes a
  compaction run 200 nearly empty tasks.
- the UI is off unless asked for (tests and CI start many sessions; the UI binds a port);
- log4j is quiet (WARN) so the job's own progress lines are readable;
- Python workers are reused between tasks (one interpreter start per executor core,
  not per task), and Arrow is on for pandas conversions.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"
DEFAULT_APP_NAME = "binlog-spark"
DEFAULT_LOG_LEVEL = "WARN"

SUBMIT_ENV = "PYSPARK_GATEWAY_PORT"
"""Set when spark-submit started this Python driver: its --master and --conf then apply."""
AUTO_SHUFFLE = "spark.binlog.shuffle.auto"
"""Set by `make_session` when `fit_shuffle_partitions` is to size the shuffles (cluster master, no --conf)."""

_LOCAL_RE = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")


def local_cores(master: str) -> int | None:
    """Number of cores a `local[...]` master uses, None for a cluster master.

    `local` is one core, `local[N]` is N, `local[*]` is every core of this machine.
    """
    m = _LOCAL_RE.match(master.strip())
    if m is None:
        return None
    n = m.group(1)
    if n is None:
        return 1
    if n == "*":
        return os.cpu_count() or 1
    return max(1, int(n))


def default_conf(master: str, *, ui: bool = False) -> dict[str, str]:
    """The configuration every session starts from (a caller's `conf` overrides it)."""
    conf = {
        "spark.ui.enabled": "true" if ui else "false",
        "spark.ui.showConsoleProgress": "true",
        "spark.python.worker.reuse": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # The driver runs the same interpreter as the workers: a mismatch is a hard failure in PySpark.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.driver.host": "127.0.0.1" if master.startswith("local") else "",
        "spark.driver.bindAddress": "127.0.0.1" if master.startswith("local") else "",
    }
    cores = local_cores(master)
    if cores is not None:
        conf["spark.sql.shuffle.partitions"] = str(max(2, 2 * cores))
        conf["spark.default.parallelism"] = str(max(2, 2 * cores))
    return {k: v for k, v in conf.items() if v != ""}


def make_session(
    master: str | None = None,
    app_name: str = DEFAULT_APP_NAME,
    conf: Mapping[str, str] | None = None,
    *,
    log_level: str = DEFAULT_LOG_LEVEL,
    ui: bool = False,
    ship_code: bool | None = None,
) -> SparkSession:
    """Build (or return the running) SparkSession with this project's defaults.

    `master` None: spark-submit's master when spark-submit runs this driver, else DEFAULT_MASTER.
    `ship_code` (default: on for any master but `local`): zip this project's packages and ship them to
    the executors (`spark_jobs.ship`), so a cluster runs the driver's version of the code.

    `getOrCreate` returns an existing session when one runs in this process (the
    shared test session); its static settings cannot change then, so a caller that
    needs a different master must stop the running session first.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    submitted = master is None and SUBMIT_ENV in os.environ
    builder = SparkSession.builder.appName(app_name)
    if not submitted:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        if local_cores(master) is not None:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # no "resolves to a loopback address" warning
    merged = default_conf(master or "", ui=ui)
    if submitted:  # spark-submit's --master and --conf win over these defaults
        given = _submitted_conf()
        merged = {k: v for k, v in merged.items() if not given.contains(k)}
    merged.update(conf or {})
    for key, value in merged.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    master = str(spark.sparkContext.master)
    cluster = local_cores(master) is None
    if not spark.sparkContext.getConf().contains("spark.sql.shuffle.partitions"):
        spark.conf.set(AUTO_SHUFFLE, "true")  # a cluster master, no --conf: fitted once executors are up
    if ship_code if ship_code is not None else cluster:
        _ship(spark)
    log.info("spark session up: master=%s app=%s", master, app_name)
    return spark


def fit_shuffle_partitions(spark: SparkSession) -> None:
    """On a cluster master, set `spark.sql.shuffle.partitions` to twice the executors' cores, as a local
    master gets at start (Spark's fixed 200 made the compaction of a small replay on a two-core cluster
    take 2.5 times as long).  Jobs call it once their first stage ran: only then have the executors
    registered.  A value the user set (`--conf`) is kept."""
    if spark.conf.get(AUTO_SHUFFLE, "false") == "true":
        parallelism = max(2, 2 * spark.sparkContext.defaultParallelism)
        spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
        log.info("shuffle partitions: %d (twice the executors' cores)", parallelism)


def _submitted_conf() -> SparkConf:
    """The settings spark-submit gave this driver (its JVM's system properties)."""
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, so SparkConf() loads its settings
    return SparkConf()


_SHIPPED: set[str] = set()
"""Applications the code was added to (Spark refuses a second file of the same name)."""


def _ship(spark: SparkSession) -> None:
    """Zip the project's packages into a directory removed at exit and add the zip to the job, once per
    application (`make_session` returns a running session as it is)."""
    import atexit
    import shutil
    import tempfile

    from spark_jobs.ship import package_zip

    app = str(spark.sparkContext.applicationId)
    if app in _SHIPPED:
        return
    _SHIPPED.add(app)
    tmp = tempfile.mkdtemp(prefix="binlog-spark-code-")
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    spark.sparkContext.addPyFile(str(package_zip(tmp)))
