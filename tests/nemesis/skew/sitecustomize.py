"""Clock skew for a Python process of the nemesis suite: with NEMESIS_CLOCK_OFFSET=<seconds> in its
environment, `time.time()` and `time.time_ns()` read that far off; the monotonic clock, sleeps and timed
waits are untouched, as on a host whose wall clock is wrong.  Loaded by `site` at start-up when this
directory is on PYTHONPATH (see `tests.nemesis.nemesis.faketime_prefix`)."""

import os
import time

_offset = os.environ.get("NEMESIS_CLOCK_OFFSET")
if _offset:
    _shift = float(_offset)
    _shift_ns = int(_shift * 1_000_000_000)
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _shift
    time.time_ns = lambda: _time_ns() + _shift_ns
