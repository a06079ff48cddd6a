"""Free-space guard of the data directory (upstream `storage.go updateSize`, `writableOfSpace`).

`refresh()` samples `os.statvfs` (the storage calls it at start and every 3 s); writes are refused
while the available space is at or below `stop-write-at-available-space`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

__all__ = ["REFRESH_INTERVAL", "DiskGuard"]

log = logging.getLogger(__name__)

REFRESH_INTERVAL: Final = 3.0


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
        self.capacity = 0
        self.available = 0
        self._writable = True
        self.refresh()

    def refresh(self) -> None:
        try:
            st = self._statvfs(self._path)
        except OSError as e:
            log.error("cannot read free space of %s: %s", self._path, e)
            return
        frsize = st.f_frsize or st.f_bsize
        self.capacity = st.f_blocks * frsize
        self.available = st.f_bavail * frsize
        writable = self.available > self._stop_write_at
        if writable != self._writable:
            if writable:
                log.info("free space above the threshold again, writes accepted available=%d", self.available)
            else:
                log.error(
                    "free space at or below stop-write-at-available-space, refusing writes available=%d threshold=%d",
                    self.available,
                    self._stop_write_at,
                )
        self._writable = writable

    def writable(self) -> bool:
        return self._writable

    def message(self) -> str:
        return (
            f"no available space: {self.available} bytes free in {self._path}, "
            f"at or below stop-write-at-available-space {self._stop_write_at}"
        )
