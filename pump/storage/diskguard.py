"""Free-space guard of the data directory (upstream `storage.go updateSize`, `writableOfSpace`).

`refresh()` samples `os.statvfs` (the storage calls it at start and every 3 s).  Between two samples
the guard counts the bytes it admitted (ours: the original looked at the sample alone, so it let
through a payload larger than the space left above the threshold, and any number of writes until
the next sample).  `admit(n)` takes a write of `n` bytes only while what is left after it stays above
`stop-write-at-available-space`; an exempt write (a fake binlog) only while it fits at all.  A new
sample replaces the count: the bytes written since the last one are in it (those still queued at that
moment are missed, at most the storage's write queue; the real ENOSPC is the backstop, see vlog.py).
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["NO_SPACE_ERRNOS", "REFRESH_INTERVAL", "DiskGuard"]

log = logging.getLogger(__name__)

REFRESH_INTERVAL: Final = 3.0
NO_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT})
"""An OSError with one of these means "no room": the file system is full, or the user's quota is."""


class DiskGuard:
    def __init__(
        self,
        path: Path,
        stop_write_at: int,
        *,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
    ) -> None:
        self._path = path
        self._stop_write_at = stop_write_at
        self._statvfs = statvfs
        self._lock = threading.Lock()
        self.capacity = 0
        self.available = 0
        self._counted = 0  # bytes admitted since the last sample
        self._writable = True
        self.refresh()

    def refresh(self) -> None:
        try:
            st = self._statvfs(self._path)
        except OSError as e:
            log.error("cannot read free space of %s: %s", self._path, e)
            return
        frsize = st.f_frsize or st.f_bsize
        with self._lock:
            self.capacity = st.f_blocks * frsize
            self.available = st.f_bavail * frsize
            self._counted = 0
        self._note_state()

    def admit(self, size: int, *, exempt: bool = False) -> bool:
        """Count a write of `size` bytes; False (nothing counted) when it would leave the free space at
        or below stop-write-at-available-space or, `exempt`, when it does not fit at all."""
        with self._lock:
            floor = -1 if exempt else self._stop_write_at
            admitted = self.available - self._counted - size > floor
            if admitted:
                self._counted += size
        if admitted:
            self._note_state()
        return admitted

    def writable(self) -> bool:
        """Whether the free space, less what was admitted since the last sample, is above the threshold."""
        with self._lock:
            return self.available - self._counted > self._stop_write_at

    def message(self, size: int = 0) -> str:
        with self._lock:
            available, counted = self.available, self._counted
        return (
            f"no available space: {available} bytes free in {self._path} ({counted} more being written), "
            f"a write of {size} bytes would leave {available - counted - size}, "
            f"at or below stop-write-at-available-space {self._stop_write_at}"
        )

    def _note_state(self) -> None:
        """Log when the guard starts or stops refusing writes."""
        with self._lock:
            writable = self.available - self._counted > self._stop_write_at
            if writable == self._writable:
                return
            self._writable = writable
        if writable:
            log.info("free space above the threshold again, writes accepted available=%d", self.available)
        else:
            log.error(
                "free space at or below stop-write-at-available-space, refusing writes available=%d threshold=%d",
                self.available,
                self._stop_write_at,
            )
