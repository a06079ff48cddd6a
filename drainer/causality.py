"""Causality: which DMLs must run on the same worker, in order (pure; docs/architecture.md#loader-and-causality).

Every DML gets keys that name the rows it touches:

* for each row image (the new row of an insert/update, the old row of an update/delete), each
  unique key of ``shape.unique_keys`` (primary key first) whose values are all non-NULL gives
  ``"(col: v)(col: v)" + "db.table"``;
* an image with no such key gives ``"#<crc32 of all its values>" + "db.table"``.

Text values are case-folded and stripped of trailing spaces first: a downstream table with
MySQL's default collation treats 'abc', 'ABC' and 'abc ' as one key, so they must be one key here.

The original hashes all values only when the *whole* DML has no key; we do it per image, so
an update that sets a table's only unique key to NULL still shares a key with the later
changes of that row (which can only find it by all its values).

:class:`Causality` groups keys: a DML whose keys are unknown starts a group named by its first
key; keys seen before put the DML (and all its keys) into their group.  Keys in **two
different groups** are a conflict: the caller runs everything dispatched so far, calls
:meth:`Causality.reset` and adds the DML again.  A group's worker is
``crc32(group key) % worker_count``, so DMLs on the same row go to one worker and keep their order.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from common.events import DML, Row, TableShape

__all__ = ["Causality", "dml_keys", "worker_of"]


def _fold(v: object) -> object:
    """Text as a case-insensitive, PAD SPACE collation compares it: downstream tables usually have one
    (MySQL's default), so 'abc', 'ABC' and 'abc ' are one key there.  Folding can only add conflicts."""
    return v.casefold().rstrip(" ") if isinstance(v, str) else v


def _image_keys(shape: TableShape, row: Row, table: str, out: list[str]) -> None:
    names = shape.names
    found = False
    for key in shape.unique_keys:
        parts = []
        for i in key:
            v = row[i]
            if v is None:
                break
            parts.append(f"({names[i]}: {_fold(v)})")
        else:
            out.append("".join(parts) + table)
            found = True
    if not found:
        folded = tuple(_fold(v) for v in row)
        out.append(f"#{zlib.crc32(repr(folded).encode('utf-8', 'surrogatepass')):08x}{table}")


def dml_keys(dml: DML) -> list[str]:
    """The causality keys of one DML (new row's keys first, then the old row's)."""
    shape = dml.shape
    table = f"{shape.db}.{shape.table}"
    keys: list[str] = []
    if dml.values is not None:
        _image_keys(shape, dml.values, table, keys)
    if dml.old_values is not None:
        _image_keys(shape, dml.old_values, table, keys)
    return keys


def worker_of(group: str, worker_count: int) -> int:
    """The worker of a group: crc32 (IEEE) of its key modulo the worker count."""
    return zlib.crc32(group.encode("utf-8", "surrogatepass")) % worker_count


class Causality:
    """Key -> group key, for the DMLs dispatched since the last :meth:`reset`."""

    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._groups)

    def detect_conflict(self, keys: Sequence[str]) -> bool:
        """True when ``keys`` already belong to two different groups."""
        group: str | None = None
        groups = self._groups
        for k in keys:
            g = groups.get(k)
            if g is None:
                continue
            if group is None:
                group = g
            elif g != group:
                return True
        return False

    def add(self, keys: Sequence[str]) -> str | None:
        """Put ``keys`` in one group and return its key; None (and no change) on a conflict."""
        groups = self._groups
        group: str | None = None
        for k in keys:
            g = groups.get(k)
            if g is None:
                continue
            if group is None:
                group = g
            elif g != group:
                return None
        if group is None:
            if not keys:
                raise ValueError("a DML needs at least one causality key")
            group = keys[0]
        for k in keys:
            groups[k] = group
        return group

    def get(self, key: str) -> str | None:
        """The group of a key, or None."""
        return self._groups.get(key)

    def reset(self) -> None:
        self._groups.clear()
