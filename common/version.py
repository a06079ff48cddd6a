"""`-V` / `--version` of every command: release version, git commit hash, build time, as the original prints.

    Release Version: 0.1.0
    Git Commit Hash: 64f4e56c0a...
    Build TS: 2026-11-27 09:30:00
    Python Version: 3.11.2
    Python OS/Arch: linux/x86_64

The original's Makefile linked the hash and the build time into the binary.  Here they come from a
generated module, `common/_build_info.py` (GIT_HASH, BUILD_TS; gitignored), that deploy/build_info.py
writes when the project is built: by the Makefile's venv step and by the Dockerfile, which is given the
hash as the build argument GIT_HASH (the image's build context has no .git).

Where the code runs from a git checkout (an editable install, or PYTHONPATH), the checkout's HEAD is the
hash: a generated module there was written at install time and goes stale with the next commit, so its
build time is shown only while its hash is still HEAD.  Without either the fields say "unknown"; nothing
here raises.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Final

from common.cli import DISTRIBUTION

BUILD_INFO_MODULE: Final = "common._build_info"
UNKNOWN: Final = "unknown"
GIT_TIMEOUT: Final = 5.0
"""Seconds `git rev-parse` may take before the hash is given up as unknown."""
SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent
"""The directory holding the `common` package: a checkout's root, or site-packages."""


@dataclass(frozen=True)
class BuildInfo:
    release: str
    git_hash: str
    build_ts: str

    def text(self) -> str:
        """The lines `-V` prints (no trailing newline)."""
        return "\n".join(
            (
                f"Release Version: {self.release}",
                f"Git Commit Hash: {self.git_hash}",
                f"Build TS: {self.build_ts}",
                f"Python Version: {platform.python_version()}",
                f"Python OS/Arch: {sys.platform}/{platform.machine() or UNKNOWN}",
            )
        )


def build_info(root: Path = SOURCE_ROOT) -> BuildInfo:
    """This install's version, hash and build time (see the module docstring for where each comes from)."""
    generated_hash, generated_ts = _generated()
    checkout_hash = checkout_head(root)
    if checkout_hash is None:
        return BuildInfo(_release(), generated_hash or UNKNOWN, generated_ts or UNKNOWN)
    build_ts = generated_ts if generated_ts and generated_hash == checkout_hash else f"{UNKNOWN} (source checkout)"
    return BuildInfo(_release(), checkout_hash, build_ts)


def checkout_head(root: Path) -> str | None:
    """HEAD's commit hash when `root` is the top of a git checkout (its own `.git`), else None."""
    if not (root / ".git").exists():  # a .git directory, or a worktree's .git file
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    head = done.stdout.strip()
    return head if done.returncode == 0 and head else None


def _generated() -> tuple[str, str]:
    try:
        module = importlib.import_module(BUILD_INFO_MODULE)
    except ImportError:
        return "", ""
    return str(getattr(module, "GIT_HASH", "")), str(getattr(module, "BUILD_TS", ""))


def _release() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return UNKNOWN


class _VersionAction(argparse.Action):
    """Print `build_info().text()` and exit 0; the text is made only when the flag is given."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "print the release version, git commit hash and build time, and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(build_info().text() + "\n")
        sys.stdout.flush()
        parser.exit(0)


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """Add `-V` / `--version` to a console script's parser."""
    parser.add_argument("-V", "--version", action=_VersionAction)
