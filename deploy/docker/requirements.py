#!/usr/bin/env python3
"""Print the requirements of the project and of some of its extras, one per line, from pyproject.toml.

    python3 requirements.py pyproject.toml playground,spark > requirements.txt

The Dockerfile's build stage installs these first, from pyproject.toml alone, so that a change to the
code rebuilds only the small layers after it (the wheel), not the dependencies.  An extra that names
the project itself (the `test` extra's `tidb-binlog-py[...]`) is expanded into those extras.  An unknown
extra is one line on stderr and exit status 2.
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Sequence


def requirements(project: dict[str, object], extras: Sequence[str]) -> list[str]:
    name = str(project["name"])
    optional = project.get("optional-dependencies", {})
    assert isinstance(optional, dict)
    dependencies = project.get("dependencies", [])
    assert isinstance(dependencies, list)
    out = [str(r) for r in dependencies]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise KeyError(extra)
        for req in optional[extra]:
            own = re.fullmatch(rf"{re.escape(name)}\[([\w,\s-]+)\]", str(req).strip())
            if own:
                todo += [e.strip() for e in own.group(1).split(",") if e.strip()]
            elif req not in out:
                out.append(str(req))
    return out


def main(argv: Sequence[str]) -> int:
    if len(argv) not in (1, 2):
        sys.stderr.write("usage: requirements.py PYPROJECT [EXTRA,...]\n")
        return 2
    with open(argv[0], "rb") as f:
        project = tomllib.load(f)["project"]
    extras = [e.strip() for e in (argv[1] if len(argv) == 2 else "").split(",") if e.strip()]
    try:
        lines = requirements(project, extras)
    except KeyError as exc:
        sys.stderr.write(f"requirements.py: unknown extra {exc.args[0]!r}\n")
        return 2
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
