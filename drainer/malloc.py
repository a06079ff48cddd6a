"""glibc malloc settings for the drainer process: give freed memory back instead of keeping it.

The drainer's large objects are short-lived and made on many threads: a received binlog
(grpc), decoded row values, rendered SQL texts (one per worker).  With glibc's defaults

* every thread that allocates may get its own arena (up to 8 per core), each growing in 64 MiB
  heaps that only shrink from the top, and
* the mmap threshold rises to the size of the largest block freed so far (up to 32 MiB), so after
  the first 2 MiB SQL text is freed, every later one comes from an arena instead of its own mapping,

so RSS keeps the high-water mark of every arena: measured on the 1 GB catch-up of `bench/memory.py`
it was about 175 MB above the same run with the settings below.  They are the same as the
environment variables ``MALLOC_ARENA_MAX`` and ``MALLOC_MMAP_THRESHOLD_``, which win when set.

Receiving a large message costs grpcio about three times its size for a moment (the transport's
buffers, a list of chunks, their join), and the chunks are small blocks that leave the heap full of
holes; :func:`trim` (``malloc_trim``: free pages go back to the system, about 15 ms) after each
large binlog keeps that from adding up.  Elsewhere than glibc both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Final

log = logging.getLogger(__name__)

ARENA_MAX: Final = 2
"""Arenas for all threads (glibc default: 8 per core)."""
MMAP_THRESHOLD: Final = 128 << 10
"""Blocks of at least this many bytes get their own mapping, returned to the system when freed (glibc:
128 KiB at start, then rising); setting it also turns off glibc's dynamic threshold."""
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _libc()


def trim() -> None:
    """Give the free pages of every malloc arena back to the system (glibc ``malloc_trim(0)``)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def tune_malloc() -> bool:
    """Apply the settings above unless the environment sets them; True when glibc took them.
    Call it first thing in ``main``, before threads start."""
    if _LIBC is None:
        return False
    mallopt = _LIBC.mallopt
    mallopt.restype = ctypes.c_int
    ok = True
    if "MALLOC_ARENA_MAX" not in os.environ:
        ok = bool(mallopt(_M_ARENA_MAX, ARENA_MAX)) and ok
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok = bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and ok
    return ok
