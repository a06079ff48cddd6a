"""Directories named by a config option, created at start: a failure is one line naming the option.

Which failures are whose (the exit status rule of every command): a path that cannot be a directory
(a component missing where it cannot be created, a file in the way, a name too long, a symlink loop)
is the configuration's fault, ConfigError, exit status 2: the operator must change the option.  Anything
else (no permission, read-only file system, disk full, I/O error) is the environment's at run time,
StorageError, exit status 1.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Final

from common.errors import BinlogError, ConfigError, StorageError

CONFIG_ERRNOS: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.ELOOP})
"""mkdir failures that only a different path fixes."""


def dir_error(option: str, path: str | os.PathLike[str], exc: OSError, what: str = "directory") -> BinlogError:
    """The one-line error for `path` (the value of `option`) that `exc` stopped from being created.

    `exc.filename`, when it is another path (the component that failed), is named too."""
    text = os.fspath(path)
    why = "it exists and is not a directory" if exc.errno == errno.EEXIST else exc.strerror or str(exc)
    failed = os.fspath(exc.filename) if exc.filename is not None else text
    at = "" if failed == text else f" (at {failed!r})"
    message = f"{option}: {what} {text!r} cannot be created: {why}{at}"
    return ConfigError(message) if exc.errno in CONFIG_ERRNOS else StorageError(message)


def ensure_dir(option: str, path: str | os.PathLike[str], *, mode: int = 0o777, what: str = "directory") -> Path:
    """`path` as a directory (created with its parents when missing), else `dir_error`'s error."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True, mode=mode)
    except OSError as exc:
        raise dir_error(option, p, exc, what) from None
    return p
