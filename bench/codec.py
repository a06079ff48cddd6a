"""Benchmark of the TiDB row codec: rows/s to encode and decode a 10-column mixed-type row.

Measured in the same run, with the same values:

* ``codec_encode``: ``flatten`` every value + ``encode_row``        (what the upstream writer does)
* ``codec_decode``: ``decode_row`` + ``unflatten`` every value       (what the drainer does)
* ``codec_encode_datums`` / ``codec_decode_datums``: the row bytes only, no flatten/unflatten
* baselines: ``struct`` pack/unpack of a fixed layout holding the same values pre-converted to
  primitives (a C-speed floor), and ``pickle`` dumps/loads of the row tuple of Python values.

Runs are interleaved (each run times every function back to back); rates are medians over runs and
ratios medians of the per-run ratios.  One JSON object goes to stdout: ``<op>_ratio_vs_<baseline>``
is codec rows/s over baseline rows/s for that op, and ``ratio_vs_struct`` / ``ratio_vs_pickle`` the
mean of the encode and decode ratios.

Usage: ``python bench/codec.py [--quick] [--runs N]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pickle
import platform
import statistics
import struct
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from common.codec import ColumnType, Datum, MySQLType, decode_row, encode_row, flatten, unflatten
from common.codec.json_binary import json_to_text
from common.codec.mytime import duration_to_ns, pack_time

T = MySQLType
COLUMNS: list[tuple[int, ColumnType]] = [
    (1, ColumnType(T.LONG)),
    (2, ColumnType(T.LONGLONG, unsigned=True)),
    (3, ColumnType(T.VARCHAR, flen=64)),
    (4, ColumnType(T.NEW_DECIMAL, flen=12, decimal=2)),
    (5, ColumnType(T.DATETIME, decimal=6)),
    (6, ColumnType(T.DOUBLE)),
    (7, ColumnType(T.JSON)),
    (8, ColumnType(T.VARCHAR, flen=255)),
    (9, ColumnType(T.DATE)),
    (10, ColumnType(T.DURATION)),
]
COL_IDS = [cid for cid, _ in COLUMNS]
TYPES = [ct for _, ct in COLUMNS]
VALUES: list[Any] = [
    123456,
    18_000_000_000_000_000_000,
    "a varchar value of moderate length, héllo",
    Decimal("12345.67"),
    dt.datetime(2019, 1, 2, 3, 4, 5, 6),
    3.14159,
    {"id": 7, "tags": ["a", "b"], "ok": True},
    None,
    dt.date(2020, 2, 29),
    dt.timedelta(hours=12, minutes=34, seconds=56),
]

# Fixed layout for the struct baseline: the same values as primitives (decimal scaled, times packed,
# JSON as text, NULL as a flag byte).
STRUCT_LAYOUT = struct.Struct(">iQ64sqQd64s?Qq")
STRUCT_TUPLE = (
    VALUES[0],
    VALUES[1],
    VALUES[2].encode(),
    1234567,
    pack_time(VALUES[4]),
    VALUES[5],
    json_to_text(VALUES[6]).encode(),
    True,
    pack_time(VALUES[8]),
    duration_to_ns(VALUES[9]),
)


def codec_encode() -> bytes:
    return encode_row(COL_IDS, [flatten(v, ct) for v, ct in zip(VALUES, TYPES, strict=True)])


ROW_BYTES = codec_encode()
DATUMS: list[Datum] = [flatten(v, ct) for v, ct in zip(VALUES, TYPES, strict=True)]
STRUCT_BYTES = STRUCT_LAYOUT.pack(*STRUCT_TUPLE)
PICKLE_BYTES = pickle.dumps(tuple(VALUES), protocol=pickle.HIGHEST_PROTOCOL)


def codec_decode() -> list[Any]:
    row = decode_row(ROW_BYTES)
    return [unflatten(row[cid], ct) for cid, ct in COLUMNS]


def codec_encode_datums() -> bytes:
    return encode_row(COL_IDS, DATUMS)


def codec_decode_datums() -> dict[int, Datum]:
    return decode_row(ROW_BYTES)


def struct_encode() -> bytes:
    return STRUCT_LAYOUT.pack(*STRUCT_TUPLE)


def struct_decode() -> tuple[Any, ...]:
    return STRUCT_LAYOUT.unpack(STRUCT_BYTES)


def pickle_encode() -> bytes:
    return pickle.dumps(tuple(VALUES), protocol=pickle.HIGHEST_PROTOCOL)


def pickle_decode() -> Any:
    return pickle.loads(PICKLE_BYTES)


def time_rows(fn: Callable[[], object], iterations: int) -> float:
    """Rows per second of ``iterations`` calls of ``fn``."""
    start = time.perf_counter()
    for _ in range(iterations):
        fn()
    return iterations / (time.perf_counter() - start)


def check() -> None:
    """The codec round trip must hold before we time it."""
    got = codec_decode()
    assert got[:6] == VALUES[:6], got
    assert got[7:] == VALUES[7:], got
    assert got[6] == {"id": 7, "ok": True, "tags": ["a", "b"]}


BENCHES: dict[str, Callable[[], object]] = {
    "codec_encode": codec_encode,
    "codec_decode": codec_decode,
    "codec_encode_datums": codec_encode_datums,
    "codec_decode_datums": codec_decode_datums,
    "struct_encode": struct_encode,
    "struct_decode": struct_decode,
    "pickle_encode": pickle_encode,
    "pickle_decode": pickle_decode,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run (a few seconds)")
    parser.add_argument("--runs", type=int, default=None, help="timed runs per measurement (median taken)")
    args = parser.parse_args(argv)
    iterations = 1_000 if args.quick else 5_000
    runs = args.runs or (3 if args.quick else 11)
    check()

    started = time.perf_counter()
    # Interleave: every run times every function back to back, so a noisy neighbour slows the codec and
    # its baselines alike; ratios are medians of the per-run ratios, rates medians of the runs.
    samples: dict[str, list[float]] = {name: [] for name in BENCHES}
    for fn in BENCHES.values():
        fn()
    for _ in range(runs):
        for name, fn in BENCHES.items():
            samples[name].append(time_rows(fn, iterations))
    result: dict[str, Any] = {
        "bench": "codec",
        "columns": len(COLUMNS),
        "row_bytes": len(ROW_BYTES),
        "struct_bytes": len(STRUCT_BYTES),
        "pickle_bytes": len(PICKLE_BYTES),
        "iterations": iterations,
        "runs": runs,
        "python": platform.python_version(),
    }
    result.update({f"{name}_rows_per_s": round(statistics.median(rates)) for name, rates in samples.items()})

    def ratio(codec: str, base: str) -> float:
        return round(statistics.median(c / b for c, b in zip(samples[codec], samples[base], strict=True)), 4)

    for op in ("encode", "decode"):
        for base in ("struct", "pickle"):
            result[f"{op}_ratio_vs_{base}"] = ratio(f"codec_{op}", f"{base}_{op}")
            result[f"{op}_datums_ratio_vs_{base}"] = ratio(f"codec_{op}_datums", f"{base}_{op}")
    for base in ("struct", "pickle"):
        result[f"ratio_vs_{base}"] = round(
            statistics.fmean([result[f"encode_ratio_vs_{base}"], result[f"decode_ratio_vs_{base}"]]), 4
        )
    result["elapsed_s"] = round(time.perf_counter() - started, 2)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
