"""Every pointer into the repository's docs/ names a file and a heading that exist.

Docstrings and comments cite the design as ``docs/<file>.md#<anchor>``.  This test scans the
repository's text files (``git ls-files``, tracked and new; a plain directory walk when there is no
git) and fails, naming ``file:line``, when

* a cited ``docs/*.md`` file does not exist, or the anchor is not a heading of that file (anchors
  are computed as GitHub does: lower case, punctuation other than ``-`` and ``_`` dropped, spaces
  to ``-``, and ``-1``, ``-2`` ... appended to repeated headings);
* a relative link inside ``docs/*.md`` points at a missing file or heading;
* a citation of the old design documents that lived outside the repository remains: section
  signs after ``DESIGN``, ``reference`` or ``wire-formats``, or a path into ``shared/docs``.
  A clone cannot follow those.

No network: only files of the working tree are read.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
THIS = Path(__file__).resolve()

SUFFIXES = (".py", ".md", ".toml", ".service", ".yml", ".yaml")
SKIP_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"})

# docs/<name>.md with an optional #anchor, not preceded by a path character (so `x/docs/y.md` is no match)
DOC_REF = re.compile(r"(?<![\w./-])docs/(?P<path>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]*))?")
# a markdown link target inside docs/: [text](target)
MD_LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
SECTION = "\u00a7"  # the section sign, kept out of this file's own text
STALE = re.compile(
    rf"\b(?:DESIGN(?:\.md)?|reference|wire-formats(?:\.md)?)[\s(]*{SECTION}|shared/docs",
    re.IGNORECASE,
)
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(?P<text>.*?)[ \t]*#*[ \t]*$")
FENCE = re.compile(r"^ {0,3}(```|~~~)")


def github_slug(text: str) -> str:
    """The anchor GitHub gives a heading's text (before duplicate suffixes)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links and images: their text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and '_' (unicode letters too)
    return text.replace(" ", "-")


def anchors_of(markdown: str) -> set[str]:
    """Every heading anchor of a markdown text, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    anchors: set[str] = set()
    in_fence = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        m = HEADING.match(line)
        if m is None:
            continue
        slug = github_slug(m.group("text"))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@cache
def doc_anchors(path: Path) -> frozenset[str] | None:
    """Anchors of a markdown file, or None when it does not exist."""
    if not path.is_file():
        return None
    return frozenset(anchors_of(path.read_text(encoding="utf-8")))


def text_files() -> list[Path]:
    """The repository's text files: tracked and untracked-but-not-ignored ones, else a directory walk."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
            rel = os.path.relpath(dirpath, ROOT)
            names += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
    files = [ROOT / n for n in sorted(set(names)) if n.endswith(SUFFIXES)]
    return [f for f in files if f.is_file()]


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def check_target(path: Path, anchor: str | None) -> str | None:
    """Why a pointer at `path`#`anchor` is broken, or None."""
    anchors = doc_anchors(path.resolve())
    if anchors is None:
        return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} does not exist"
    if anchor is not None and anchor not in anchors:
        return f"no heading with anchor #{anchor} in {path.resolve().relative_to(ROOT)}"
    return None


def broken_pointers(files: list[Path]) -> Iterator[str]:
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        rel = f.relative_to(ROOT)
        for m in DOC_REF.finditer(text):
            why = check_target(DOCS / m.group("path"), m.group("anchor"))
            if why is not None:
                yield f"{rel}:{line_of(text, m.start())}: {m.group(0)}: {why}"
        if f.suffix == ".md" and f.is_relative_to(DOCS):
            for m in MD_LINK.finditer(text):
                target = m.group("target")
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                    continue
                path_part, _, anchor = target.partition("#")
                if path_part and not path_part.endswith(".md"):
                    continue
                dest = f if not path_part else f.parent / path_part
                why = check_target(dest, anchor or None)
                if why is not None:
                    yield f"{rel}:{line_of(text, m.start())}: ({target}): {why}"


def stale_citations(files: list[Path]) -> Iterator[str]:
    for f in files:
        if f.resolve() == THIS or f.is_relative_to(DOCS):
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        for m in STALE.finditer(text):
            snippet = " ".join(m.group(0).split())
            yield f"{f.relative_to(ROOT)}:{line_of(text, m.start())}: {snippet!r} cites a document outside the repo"


# ----------------------------------------------------------------------------------------------- tests


def test_slugs_follow_github() -> None:
    assert github_slug("PrewriteValue and TableMutation") == "prewritevalue-and-tablemutation"
    assert github_slug("`common/` and the import rules!") == "common-and-the-import-rules"
    assert github_slug("pd-server TSO") == "pd-server-tso"
    assert github_slug("Byte budgets (pump_client)") == "byte-budgets-pump_client"
    assert github_slug("[Link](x.md) text") == "link-text"
    md = "# A\n## Same\n```\n## Not a heading\n```\n## Same\n### Same\n"
    assert anchors_of(md) == {"a", "same", "same-1", "same-2"}


def test_stale_patterns_match_old_citations() -> None:
    s = SECTION
    old_citations = (f"(DESIGN {s}4)", f"reference {s}3.6", f"(wire-formats.md {s}4c)", f"Reference\n{s}6")
    for old in (*old_citations, "../shared/docs/x"):
        assert STALE.search(old), old
    assert not STALE.search("docs/formats.md#vlog-record")


def test_docs_exist() -> None:
    assert (DOCS / "architecture.md").is_file()
    assert (DOCS / "formats.md").is_file()


def test_every_docs_pointer_resolves() -> None:
    problems = list(broken_pointers(text_files()))
    if problems:
        pytest.fail("broken pointers into docs/:\n" + "\n".join(problems), pytrace=False)


def test_no_citation_of_documents_outside_the_repo() -> None:
    problems = list(stale_citations(text_files()))
    if problems:
        pytest.fail("citations of documents outside the repository:\n" + "\n".join(problems), pytrace=False)
