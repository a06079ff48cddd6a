"""Loaded by `site` at start-up into a process the nemesis suite runs with a skewed wall clock (this
directory on PYTHONPATH, libfaketime preloaded with FAKETIME_DONT_FAKE_MONOTONIC=1; see
`tests.nemesis.nemesis.skew_prefix`).

libfaketime shifts CLOCK_REALTIME for the whole process (Python and grpc's C core alike, as on a host
whose clock is wrong) and leaves CLOCK_MONOTONIC true, but its `clock_nanosleep` then fails, so
`time.sleep` raises EINVAL.  Here `time.sleep` waits on the monotonic clock through a lock instead,
which libfaketime leaves alone."""

import os
import threading
import time

if os.environ.get("NEMESIS_SKEWED"):
    _never = threading.Lock()
    _never.acquire()

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        _never.acquire(timeout=seconds)

    time.sleep = _sleep  # type: ignore[assignment]
