"""Chunk planning: a table's key space cut into ranges of about `chunk_size` rows (pure).

As sync-diff-inspector does, both sides are compared chunk by chunk: a chunk is a range of
the chunk key (``meta.AuditTable.chunk_key``) and one SQL predicate selects it on either side.

* one integer column: ``[min, max]`` of the upstream cut into ``ceil(rows / chunk_size)``
  ranges of equal width (no sampling; skewed keys give uneven chunks);
* any other chunk key (strings, composite keys): ordered boundaries picked from a sample of
  the upstream's keys, sorted by the store itself (``ORDER BY``), at equal distances.

The first chunk has no lower bound and the last no upper bound, so a downstream row outside
the upstream's key range still falls in a chunk and is reported as extra.  Bounds are tuples
of canonical values (``hashing.py``'s domain); a lower bound is inclusive, an upper bound
exclusive.  :func:`range_predicate` writes a chunk's SQL with row-value comparison expanded
(``(a, b) >= (x, y)`` is ``a > x OR (a = x AND b >= y)``), which sqlite and MySQL both evaluate
the same way, with an index range where the store can use one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "SAMPLES_PER_CHUNK",
    "Chunk",
    "Param",
    "boundary_chunks",
    "chunk_count",
    "int_chunks",
    "range_predicate",
    "sample_fraction",
    "single_chunk",
]

DEFAULT_CHUNK_SIZE: Final = 10_000
"""Rows per chunk (sync-diff-inspector's default chunk-size is 50,000; smaller chunks re-read less on a difference)."""
SAMPLES_PER_CHUNK: Final = 32
"""Keys sampled per planned chunk: enough that a chunk's size stays within a small factor of chunk_size."""


@dataclass(frozen=True, slots=True)
class Chunk:
    index: int
    lower: tuple[object, ...] | None = None
    """Inclusive lower bound (canonical values of the chunk key), None: unbounded."""
    upper: tuple[object, ...] | None = None
    """Exclusive upper bound, None: unbounded."""

    def describe(self) -> str:
        lo = "-inf" if self.lower is None else repr(self.lower)
        hi = "+inf" if self.upper is None else repr(self.upper)
        return f"chunk {self.index} [{lo}, {hi})"


Param = tuple[int, object]
"""A predicate parameter: (position in the chunk key, canonical value); the reader converts it per store."""


def chunk_count(rows: int, chunk_size: int) -> int:
    """How many chunks `rows` rows make (at least one)."""
    if chunk_size <= 0:
        raise ValueError(f"chunk size must be positive, got {chunk_size}")
    return max(1, math.ceil(rows / chunk_size))


def single_chunk() -> list[Chunk]:
    return [Chunk(0)]


def _from_bounds(bounds: Sequence[tuple[object, ...]]) -> list[Chunk]:
    edges: list[tuple[object, ...] | None] = [None, *bounds, None]
    return [Chunk(i, edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


def int_chunks(lo: int, hi: int, rows: int, chunk_size: int) -> list[Chunk]:
    """Ranges of equal width over the integer keys ``lo..hi`` for `rows` rows."""
    if hi < lo:
        raise ValueError(f"empty key range {lo}..{hi}")
    n = min(chunk_count(rows, chunk_size), hi - lo + 1)
    step = math.ceil((hi - lo + 1) / n)
    bounds = [(lo + i * step,) for i in range(1, n) if lo + i * step <= hi]
    return _from_bounds(bounds)


def boundary_chunks(sample: Sequence[tuple[object, ...]], rows: int, chunk_size: int) -> list[Chunk]:
    """Chunks between boundaries taken at equal distances from `sample` (keys in the store's order).

    Repeated keys in the sample are dropped first (a boundary never appears twice, so no chunk is
    empty by construction)."""
    distinct: list[tuple[object, ...]] = []
    for k in sample:
        if not distinct or distinct[-1] != k:
            distinct.append(k)
    n = min(chunk_count(rows, chunk_size), len(distinct))
    if n <= 1:
        return single_chunk()
    bounds: list[tuple[object, ...]] = []
    for i in range(1, n):
        b = distinct[i * len(distinct) // n]
        if not bounds or bounds[-1] != b:
            bounds.append(b)
    return _from_bounds(bounds)


def sample_fraction(rows: int, chunks: int) -> float:
    """The share of rows to sample for `chunks` chunks (1.0: read every key)."""
    if rows <= 0:
        return 1.0
    return min(1.0, chunks * SAMPLES_PER_CHUNK / rows)


def _compare(exprs: Sequence[str], values: tuple[object, ...], op: str, ph: str) -> tuple[str, list[Param]]:
    """``(exprs) op (values)`` for op ``>=`` or ``<``, row-value comparison written out."""
    strict = ">" if op == ">=" else "<"
    k = len(values)
    sql = f"{exprs[k - 1]} {op} {ph}"
    params: list[Param] = [(k - 1, values[k - 1])]
    for i in range(k - 2, -1, -1):
        sql = f"{exprs[i]} {strict} {ph} OR ({exprs[i]} = {ph} AND ({sql}))"
        params = [(i, values[i]), (i, values[i]), *params]
    return f"({sql})", params


def range_predicate(chunk: Chunk, exprs: Sequence[str], placeholder: str) -> tuple[str, list[Param]]:
    """The WHERE text selecting `chunk` over the chunk key expressions `exprs` ("" for all rows), and its params."""
    parts: list[str] = []
    params: list[Param] = []
    for bound, op in ((chunk.lower, ">="), (chunk.upper, "<")):
        if bound is None:
            continue
        if len(bound) != len(exprs):
            raise ValueError(f"{chunk.describe()}: bound has {len(bound)} values for {len(exprs)} key columns")
        sql, ps = _compare(exprs, bound, op, placeholder)
        parts.append(sql)
        params += ps
    return " AND ".join(parts), params
