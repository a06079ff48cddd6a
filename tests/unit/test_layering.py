"""The package layering (docs/architecture.md#layout-and-layering), checked on every import statement.

* `common` is the library layer: it imports no other package of the project.
* The daemons' packages (`pd`, `pump`, `pump_client`, `drainer`) import only `common` and themselves.
* `upstream`, the writer, imports `common` and the pump client it embeds, through `pump_client`'s
  public entry point (the names in its `__all__`) only.
* `tools` and `spark_jobs` import `common`, themselves, and the components only through their public
  entry points; they do not import each other.
* `arbiter` imports `common`, and `drainer` through its public entry point (the MySQL sink, the record
  decoder); nothing imports `arbiter`.

Every import counts: at module level, inside functions and under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ("pd", "pump", "pump_client", "drainer", "upstream")
PACKAGES = ("common", *COMPONENTS, "arbiter", "tools", "spark_jobs")

ALLOWED: dict[str, frozenset[str]] = {
    "common": frozenset(),
    "pd": frozenset({"common"}),
    "pump": frozenset({"common"}),
    "pump_client": frozenset({"common"}),
    "drainer": frozenset({"common"}),
    "upstream": frozenset({"common", "pump_client"}),
    "arbiter": frozenset({"common", "drainer"}),
    "tools": frozenset({"common", *COMPONENTS}),
    "spark_jobs": frozenset({"common", *COMPONENTS}),
}
"""Which other packages each package may import at all."""

ENTRY_POINT_ONLY: dict[str, frozenset[str]] = {
    "upstream": frozenset({"pump_client"}),
    "arbiter": frozenset({"drainer"}),
    "tools": frozenset(COMPONENTS),
    "spark_jobs": frozenset(COMPONENTS),
}
"""Packages that a package may import only through their `__init__` (names in `__all__`)."""


def imports(source: str) -> Iterator[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of every absolute import; names are empty for `import module`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, ()
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, tuple(alias.name for alias in node.names)


def public_names(package: str) -> frozenset[str]:
    return frozenset(getattr(importlib.import_module(package), "__all__", ()))


def violations(package: str, path: str, source: str) -> list[str]:
    """Why each import of `source` (a module of `package`) breaks the layering."""
    found = []
    for line, module, names in imports(source):
        top = module.split(".")[0]
        if top not in PACKAGES or top == package:
            continue
        where = f"{path}:{line}: {package} imports {module}"
        if top not in ALLOWED[package]:
            found.append(f"{where}: {package} may import only {sorted(ALLOWED[package]) or 'no other package'}")
        elif top in ENTRY_POINT_ONLY.get(package, ()):
            if module != top:
                found.append(f"{where}: use {top}'s public entry point (`from {top} import ...`)")
            elif not names:
                found.append(f"{where}: import names from {top}'s entry point, not the package")
            else:
                private = sorted(set(names) - public_names(top))
                if private:
                    found.append(f"{where}: {', '.join(private)} not in {top}.__all__")
    return found


def project_modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield package, path


def test_every_package_keeps_to_its_layer() -> None:
    found = []
    checked = 0
    for package, path in project_modules():
        found += violations(package, str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
        checked += 1
    assert checked > 150  # the walk found the project
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("package", "source", "why"),
    [
        ("common", "from drainer.events import DML", "may import only no other package"),
        ("common", "def f():\n    import upstream.database\n", "may import only no other package"),
        ("drainer", "from upstream.store.values import to_mysql", "may import only ['common']"),
        ("pump", "from pump_client import PumpsClient", "may import only ['common']"),
        ("pd", "if TYPE_CHECKING:\n    from pump.node import Node\n", "may import only ['common']"),
        ("upstream", "from pump_client.payload import EncodedBinlog", "public entry point"),
        ("upstream", "from drainer import MySQLSink", "may import only"),
        ("tools", "from drainer.sinks.mysql import MySQLSink", "public entry point"),
        ("tools", "import drainer", "import names from drainer's entry point"),
        ("tools", "from drainer import loader", "loader not in drainer.__all__"),
        ("spark_jobs", "from pump.storage.vlog import ValueLog", "public entry point"),
        ("spark_jobs", "from tools.audit import audit", "may import only"),
        ("tools", "from spark_jobs.cli import main", "may import only"),
        ("arbiter", "from drainer.relay_codec import decode_record", "public entry point"),
        ("arbiter", "from pump.storage.vlog import ValueLog", "may import only"),
        ("drainer", "from arbiter.position import Dedup", "may import only"),
    ],
)
def test_the_check_finds_a_layering_break(package: str, source: str, why: str) -> None:
    found = violations(package, "x.py", source)
    assert len(found) == 1, found
    assert why in found[0]


@pytest.mark.parametrize(
    ("package", "source"),
    [
        ("drainer", "from common.sql.render import Renderer\nimport drainer.sinks.base"),
        ("upstream", "from pump_client import EncodedBinlog, PumpsClient"),
        ("tools", "from drainer import MySQLSink, SinkError\nfrom upstream import Database"),
        ("spark_jobs", "from common.pbfile import decode_value\nfrom drainer import translate_iter"),
        ("common", "import grpc\nfrom google.protobuf.message import DecodeError"),
    ],
)
def test_the_check_lets_allowed_imports_pass(package: str, source: str) -> None:
    assert violations(package, "x.py", source) == []
