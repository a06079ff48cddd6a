"""Binlog file names and directory listing.

    binlog-<index %016d>-<local time YYYYMMDDhhmmss at creation>      written by us
    binlog-<index %016d>                                              old form, read
    binlog-<index %016d>-<datetime>-<first commit ts>.tar.gz          archived: recognised, skipped

Anything else (e.g. `savepoint`, names ending `checkpoint`, `.lock`) is not a binlog file.
The indices of the binlog files in one directory must be consecutive.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Final, NamedTuple

from common.errors import StorageError

__all__ = ["BinlogFileName", "Position", "format_name", "list_binlog_files", "parse_name"]

log = logging.getLogger(__name__)

PREFIX: Final = "binlog-"
_PLAIN = re.compile(r"binlog-(\d{16})(?:-(\d{14}))?")
_ARCHIVED = re.compile(r"binlog-(\d{16})-(\d{14})-(\d+)\.tar\.gz")


class Position(NamedTuple):
    """A place in a binlog directory: file index and byte offset in that file."""

    file_index: int
    offset: int


@dataclass(frozen=True, slots=True)
class BinlogFileName:
    """A parsed binlog file name."""

    name: str
    index: int
    created: str | None = None  # YYYYMMDDhhmmss, None for the old `binlog-<index>` form
    first_ts: int | None = None  # archived files only
    archived: bool = False


def format_name(index: int, now: float | None = None) -> str:
    """`binlog-%016d-%s`: the index and the local time `YYYYMMDDhhmmss` (default: now)."""
    if index < 0:
        raise ValueError(f"negative binlog file index {index}")
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(now))
    return f"{PREFIX}{index:016d}-{stamp}"


def parse_name(name: str) -> BinlogFileName | None:
    """The parsed name, or None when `name` is not a binlog file name."""
    if not name.startswith(PREFIX) or name.endswith(("checkpoint", ".lock")):
        return None
    m = _PLAIN.fullmatch(name)
    if m:
        return BinlogFileName(name, int(m.group(1)), m.group(2))
    m = _ARCHIVED.fullmatch(name)
    if m:
        return BinlogFileName(name, int(m.group(1)), m.group(2), int(m.group(3)), archived=True)
    return None


def list_binlog_files(directory: str | os.PathLike[str], *, include_archived: bool = False) -> list[BinlogFileName]:
    """Binlog files of `directory` in index order.

    Raises `StorageError` when two files share an index or an index is missing between the first
    and the last (archived files count for the check; they are returned only if asked for).
    """
    found: dict[int, BinlogFileName] = {}
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                parsed = parse_name(entry.name)
                if parsed is None or not entry.is_file():
                    continue
                other = found.get(parsed.index)
                if other is not None:
                    raise StorageError(
                        f"binlog directory {os.fspath(directory)!r}: files {other.name!r} and {parsed.name!r} "
                        f"have the same index {parsed.index}"
                    )
                found[parsed.index] = parsed
    except OSError as e:
        raise StorageError(f"cannot list binlog directory {os.fspath(directory)!r}: {e}") from e
    files = [found[i] for i in sorted(found)]
    for prev, cur in itertools.pairwise(files):
        if cur.index != prev.index + 1:
            missing = f"{prev.index + 1}" if cur.index == prev.index + 2 else f"{prev.index + 1}..{cur.index - 1}"
            raise StorageError(
                f"binlog directory {os.fspath(directory)!r}: file index {missing} is missing "
                f"(between {prev.name!r} and {cur.name!r})"
            )
    if include_archived:
        return files
    for f in files:
        if f.archived:
            log.warning("skipping archived binlog file (tar.gz is not read) dir=%s file=%s", directory, f.name)
    return [f for f in files if not f.archived]
