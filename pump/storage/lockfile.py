"""Exclusive lock on `<data-dir>/.lock` (fcntl.flock) held while a storage is open."""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from common.errors import StorageError

__all__ = ["DirLock"]

log = logging.getLogger(__name__)


class DirLock:
    def __init__(self, path: Path) -> None:
        self._path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            os.close(fd)
            raise StorageError(f"data directory {path.parent} is locked by another process ({path})") from e
        except OSError as e:
            os.close(fd)
            raise StorageError(f"cannot lock {path}: {e}") from e
        self._fd: int | None = fd
        log.debug("data directory locked path=%s", path)

    def release(self) -> None:
        """Unlock and close; idempotent."""
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        log.debug("data directory unlocked path=%s", self._path)
