"""The README's Python snippets are executable documentation: run each one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
SNIPPETS = _BLOCK.findall(README.read_text())


def test_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(SNIPPETS[index], f"README.md snippet {index}", "exec"), {})


def test_readme_names_the_two_commands() -> None:
    text = README.read_text()
    assert "make demo" in text
    assert "make test" in text
