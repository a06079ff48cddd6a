"""Canonical row bytes and 64-bit row hashes, the same whichever store a row was read from (pure).

A value is first made canonical by the store's own reader (``Dialect.from_store``:
``common/sql/values.py``'s ``from_sqlite`` / ``from_mysql`` with the column's type, as
``common/audit.py`` reads), so an sqlite TEXT ``'1.50'`` and a MySQL ``Decimal('1.50')`` are both
``Decimal('1.50')`` here.  When neither side knows the column types (two sqlite stores) the raw
sqlite values are used: the writer's sqlite store keeps exactly one stored form per value.

Canonical bytes of one value, a tag byte then text:

    ======================  ===  =========================================================
    value                   tag  text
    ======================  ===  =========================================================
    NULL                    N    (none)
    int                     i    decimal digits
    float                   f    ``float.hex()`` (exact; -0.0 is written as 0.0)
    Decimal                 d    plain text as quantized to the column's scale
    str                     s    UTF-8
    bytes                   b    the bytes
    date                    D    ``YYYY-MM-DD``
    datetime                t    ``isoformat()`` (TIMESTAMP values are aware UTC: ``+00:00``)
    timedelta (TIME)        T    whole microseconds, signed
    any value, JSON column  j    ``json_to_text`` (canonical JSON: object keys in byte order)
    anything else           r    ``repr``
    ======================  ===  =========================================================

A row is the concatenation over its columns of ``u32 big-endian length ‖ value bytes``, so
``("ab", "c")`` and ``("a", "bc")`` differ.  Its hash is the first 8 bytes of BLAKE2b read as a
signed big-endian int64 (Spark's LongType).  A chunk's checksum is the sum of its row hashes
modulo 2**64 (again signed) next to its row count: independent of row order, and a duplicated
row counts twice (XOR would cancel it).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, cast

from common.codec.flatten import MySQLType
from common.codec.json_binary import JsonValue, json_to_text
from common.schema.model import ColumnInfo

__all__ = [
    "SHOW_CHARS",
    "ChunkSum",
    "canonical_value",
    "cell_hashes",
    "key_id",
    "key_text",
    "row_bytes",
    "row_hash",
    "show",
]

SHOW_CHARS: Final = 40
"""Characters of one value in an example (longer ones are cut with an ellipsis), as common/audit.py."""

_LEN: Final = struct.Struct(">I")
_U64: Final = 1 << 64
_I64_MAX: Final = (1 << 63) - 1


def _is_json(col: ColumnInfo | None) -> bool:
    return col is not None and col.ctype.tp == MySQLType.JSON


def canonical_value(value: object, col: ColumnInfo | None = None) -> bytes:
    """The canonical bytes of one value (`col`: its column when typed; only JSON columns need it)."""
    if value is None:
        return b"N"
    if _is_json(col):
        return b"j" + json_to_text(cast("JsonValue", value)).encode("utf-8", "surrogatepass")
    if isinstance(value, bool):
        return b"i" + str(int(value)).encode()
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, float):
        return b"f" + (0.0 if value == 0.0 else value).hex().encode()
    if isinstance(value, Decimal):
        return b"d" + format(value, "f").encode()
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    if isinstance(value, bytes | bytearray | memoryview):
        return b"b" + bytes(value)
    if isinstance(value, _dt.datetime):
        return b"t" + value.isoformat().encode()
    if isinstance(value, _dt.date):
        return b"D" + value.isoformat().encode()
    if isinstance(value, _dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return b"T" + str(micros).encode()
    return b"r" + repr(value).encode("utf-8", "backslashreplace")


def row_bytes(values: Sequence[object], columns: Sequence[ColumnInfo | None]) -> bytes:
    """The canonical bytes of a row (or of a key: the key's values and columns)."""
    out = bytearray()
    for v, c in zip(values, columns, strict=True):
        b = canonical_value(v, c)
        out += _LEN.pack(len(b))
        out += b
    return bytes(out)


def row_hash(data: bytes) -> int:
    """The 64-bit hash of canonical row bytes, as a signed int64."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big", signed=True)


def cell_hashes(values: Sequence[object], columns: Sequence[ColumnInfo | None]) -> list[int]:
    """Each value's 64-bit hash (of its canonical bytes): which columns of a differing row differ, even
    where the shown text is cut before the difference."""
    return [row_hash(canonical_value(v, c)) for v, c in zip(values, columns, strict=True)]


def key_id(data: bytes) -> str:
    """What rows are matched by: 128 bits of BLAKE2b of the canonical key bytes, in hex (never cut short)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _signed(u: int) -> int:
    return u - _U64 if u > _I64_MAX else u


@dataclass
class ChunkSum:
    """Row count and order-free checksum of one chunk of one side."""

    rows: int = 0
    checksum: int = 0
    """Sum of the row hashes modulo 2**64, kept signed (int64)."""

    def add(self, h: int) -> None:
        self.rows += 1
        self.checksum = _signed((self.checksum + h) % _U64)

    @classmethod
    def of(cls, hashes: Iterable[int]) -> ChunkSum:
        s = cls()
        for h in hashes:
            s.add(h)
        return s


def show(value: object, col: ColumnInfo | None = None) -> str:
    """A value as an example shows it: SQL-like text, cut at SHOW_CHARS characters."""
    if value is None:
        text = "NULL"
    elif _is_json(col):
        text = json_to_text(cast("JsonValue", value))
    elif isinstance(value, _dt.datetime | _dt.date | _dt.timedelta | Decimal):
        text = str(value)
    else:
        text = repr(value)
    return text if len(text) <= SHOW_CHARS else text[: SHOW_CHARS - 1] + "…"


def key_text(names: Sequence[str], values: Sequence[object], columns: Sequence[ColumnInfo | None]) -> str:
    """``a=1, b='x'``: how a key is shown (values may be cut; rows are matched by :func:`key_id`)."""
    return ", ".join(f"{n}={show(v, c)}" for n, v, c in zip(names, values, columns, strict=True))
