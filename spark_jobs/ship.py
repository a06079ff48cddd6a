"""The project's own code, zipped for the executors of a cluster (`SparkContext.addPyFile`).

On a cluster the executors run Python on other hosts.  They need two things: this project's packages
and its dependencies.  The dependencies (grpcio, protobuf, pymysql, crc32c, ...) are C extensions or
depend on them, so they cannot travel in a zip: every worker needs them installed, the same way as on
the driver's host (deploy/spark/README.md).  The project's packages are pure Python, and they change
with every upgrade: the job zips the ones the driver imported and ships them with the job, so executors
always run the driver's version of the code, even when a worker's own install is older or missing.
Spark puts the zip ahead of site-packages on the executors' `sys.path`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["PACKAGES", "package_zip"]

log = logging.getLogger(__name__)

PACKAGES: Final = ("common", "drainer", "spark_jobs")
"""What a task imports: the jobs, and the drainer's schema and translator with what they use."""
_SUFFIXES: Final = (".py", ".typed")


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name} is not importable here")
    return Path(next(iter(spec.submodule_search_locations)))


def package_zip(dest_dir: str | os.PathLike[str]) -> Path:
    """Write `tidb_binlog_code.zip` with every `PACKAGES` package (.py files) into `dest_dir`; its path."""
    out = Path(dest_dir) / "tidb_binlog_code.zip"
    files = 0
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in PACKAGES:
            root = _package_dir(name)
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                for f in sorted(filenames):
                    if f.endswith(_SUFFIXES):
                        path = Path(dirpath) / f
                        zf.write(path, str(Path(name) / path.relative_to(root)))
                        files += 1
    log.info("code for the executors: %s (%d files, %d bytes)", out, files, out.stat().st_size)
    return out
