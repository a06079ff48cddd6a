"""Random values for the workloads (pure: everything comes from the ``rng`` passed in).

Values are chosen so that every store keeps them exactly: FLOAT values fit in a float32, DOUBLE
values have few significant digits, CHAR values have no trailing spaces, DATETIME values have
no more fractional digits than the column keeps.  What the writer normalizes (e.g. BINARY
padding) the workloads read back through ``txn.get`` rather than predict.
"""

from __future__ import annotations

import datetime as dt
import random
import string
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from upstream.ddl import Column

_LETTERS = string.ascii_letters + string.digits
_UNICODE = "äöüßéèçñ中文字日本語한국어ЖЯ€✓"
_UTC = dt.UTC

NULL_PROBABILITY = 0.15


def ascii_text(rng: random.Random, length: int) -> str:
    """``length`` letters and digits."""
    return "".join(rng.choices(_LETTERS, k=length))


def mixed_text(rng: random.Random, max_length: int) -> str:
    """Up to ``max_length`` characters, some outside ASCII (multi-byte in utf8mb4), no trailing space."""
    n = rng.randint(0, max_length)
    alphabet = _LETTERS + _UNICODE + " "
    return "".join(rng.choices(alphabet, k=n)).rstrip(" ")


def sysbench_text(rng: random.Random, length: int) -> str:
    """sysbench's ``c``/``pad`` shape: groups of 11 digits joined by '-', cut to ``length`` characters.

    Long values repeat a random 4 KiB block, so multi-megabyte rows cost little CPU."""
    block = min(length, 4096)
    groups = block // 12 + 1
    text = "-".join("".join(rng.choices(string.digits, k=11)) for _ in range(groups))[:block]
    if length > block:
        text = (text * (length // block + 1))[:length]
    return text


def payload(rng: random.Random, size: int) -> bytes:
    """``size`` bytes for a BLOB: a random 64 KiB block repeated (cheap even for hundreds of MB)."""
    block = rng.randbytes(min(size, 1 << 16))
    if size <= len(block):
        return block
    return (block * (size // len(block) + 1))[:size]


def random_date(rng: random.Random) -> dt.date:
    return dt.date.fromordinal(rng.randint(dt.date(1000, 1, 1).toordinal(), dt.date(9999, 12, 31).toordinal()))


def random_datetime(rng: random.Random, fsp: int) -> dt.datetime:
    day = dt.date.fromordinal(rng.randint(dt.date(1900, 1, 1).toordinal(), dt.date(2200, 12, 31).toordinal()))
    unit = 10 ** (6 - fsp)
    micro = rng.randrange(0, 1_000_000, unit)
    return dt.datetime(day.year, day.month, day.day, rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59), micro)


def random_timestamp(rng: random.Random, fsp: int) -> dt.datetime:
    """An aware UTC datetime inside TIMESTAMP's range (1970-01-01 00:00:01 .. 2038-01-19 03:14:07)."""
    seconds = rng.randint(1, 2**31 - 1)
    unit = 10 ** (6 - fsp)
    return dt.datetime.fromtimestamp(seconds, _UTC).replace(microsecond=rng.randrange(0, 1_000_000, unit))


def random_time(rng: random.Random, fsp: int) -> dt.timedelta:
    """A TIME value in -838:59:59 .. 838:59:59."""
    unit = 10 ** (6 - fsp)
    micro = rng.randrange(0, 1_000_000, unit)
    limit = 838 * 3600 + 59 * 60 + 59
    seconds = rng.randint(-limit + 1, limit - 1)
    return dt.timedelta(seconds=seconds, microseconds=micro if seconds >= 0 else -micro)


def random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 2 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(2**40), 2**40)
    if kind == 3:
        return mixed_text(rng, 12)
    if kind == 4:
        return rng.randint(-1000, 1000) / 4
    if kind == 5:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {ascii_text(rng, rng.randint(1, 6)): random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def random_decimal(rng: random.Random, precision: int, scale: int) -> Decimal:
    digits = rng.randint(1, precision)
    unscaled = rng.randint(-(10**digits) + 1, 10**digits - 1)
    return Decimal(unscaled).scaleb(-scale)


def _int_range(bits: int, unsigned: bool) -> Callable[[random.Random], int]:
    low, high = (0, (1 << bits) - 1) if unsigned else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)

    def gen(rng: random.Random) -> int:
        r = rng.random()
        if r < 0.05:
            return low
        if r < 0.1:
            return high
        return rng.randint(low, high)

    return gen


# ------------------------------------------------------------------------- the `types` table
ENUM_VALUES = ("red", "green", "blue")
SET_VALUES = ("a", "b", "c", "d")
BIT_WIDTH = 12


def _set_value(rng: random.Random) -> str:
    return ",".join(v for v in SET_VALUES if rng.random() < 0.5)


TypeGen = Callable[[random.Random], Any]

TYPES_COLUMNS: tuple[tuple[Column, TypeGen], ...] = (
    (Column("c_tinyint", "TINYINT"), _int_range(8, False)),
    (Column("c_utinyint", "TINYINT UNSIGNED"), _int_range(8, True)),
    (Column("c_smallint", "SMALLINT"), _int_range(16, False)),
    (Column("c_usmallint", "SMALLINT UNSIGNED"), _int_range(16, True)),
    (Column("c_mediumint", "MEDIUMINT"), _int_range(24, False)),
    (Column("c_umediumint", "MEDIUMINT UNSIGNED"), _int_range(24, True)),
    (Column("c_int", "INT"), _int_range(32, False)),
    (Column("c_uint", "INT UNSIGNED"), _int_range(32, True)),
    (Column("c_bigint", "BIGINT"), _int_range(64, False)),
    (Column("c_ubigint", "BIGINT UNSIGNED"), _int_range(64, True)),
    (Column("c_float", "FLOAT"), lambda r: r.randint(-9999, 9999) / 4),  # <= 6 digits: MySQL prints FLOAT so
    (Column("c_double", "DOUBLE"), lambda r: r.randint(-(10**7), 10**7) / 8),
    (Column("c_decimal", "DECIMAL(20,6)"), lambda r: random_decimal(r, 20, 6)),
    (Column("c_char", "CHAR(16)"), lambda r: mixed_text(r, 16)),
    (Column("c_varchar", "VARCHAR(255)"), lambda r: mixed_text(r, 255)),
    (Column("c_text", "TEXT"), lambda r: mixed_text(r, 2000)),
    (Column("c_binary", "BINARY(8)"), lambda r: r.randbytes(8)),
    (Column("c_varbinary", "VARBINARY(64)"), lambda r: r.randbytes(r.randint(0, 64))),
    (Column("c_blob", "BLOB"), lambda r: r.randbytes(r.randint(0, 4000))),
    (Column("c_date", "DATE"), random_date),
    (Column("c_datetime", "DATETIME(3)"), lambda r: random_datetime(r, 3)),
    (Column("c_timestamp", "TIMESTAMP(6)"), lambda r: random_timestamp(r, 6)),
    (Column("c_time", "TIME(2)"), lambda r: random_time(r, 2)),
    (Column("c_year", "YEAR"), lambda r: r.randint(1901, 2155)),
    (Column("c_json", "JSON"), random_json),
    (Column("c_enum", "ENUM('red','green','blue')"), lambda r: r.choice(ENUM_VALUES)),
    (Column("c_set", "SET('a','b','c','d')"), _set_value),
    (Column("c_bit", f"BIT({BIT_WIDTH})"), lambda r: r.randrange(2**BIT_WIDTH).to_bytes(2, "big")),
    (Column("c_required", "VARCHAR(16)", nullable=False, default="dflt"), lambda r: ascii_text(r, r.randint(0, 16))),
)
"""Every column type the writer supports, with a generator of values each store keeps exactly."""


def types_table_columns() -> list[Column]:
    return [Column("id", "BIGINT"), *(c for c, _ in TYPES_COLUMNS)]


def types_row(rng: random.Random, row_id: int) -> dict[str, Any]:
    """A row of the ``types`` table: every nullable column NULL with probability 0.15; some left to default."""
    row: dict[str, Any] = {"id": row_id}
    for col, gen in TYPES_COLUMNS:
        if col.nullable and rng.random() < NULL_PROBABILITY:
            row[col.name] = None
        elif not col.nullable and rng.random() < NULL_PROBABILITY:
            continue  # NOT NULL with a default: leave it out, the default applies
        else:
            row[col.name] = gen(rng)
    return row


def types_changes(rng: random.Random) -> dict[str, Any]:
    """New values for 1-4 random columns of a ``types`` row."""
    out: dict[str, Any] = {}
    for col, gen in rng.sample(TYPES_COLUMNS, rng.randint(1, 4)):
        out[col.name] = None if col.nullable and rng.random() < NULL_PROBABILITY else gen(rng)
    return out
