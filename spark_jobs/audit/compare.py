"""The comparison as DataFrame transforms: chunk checksums first, rows only where they differ (pure).

Inputs are what the readers produce (``read.py``), one DataFrame per pass:

    CHUNK_DDL   table, chunk, side ('up'|'down'), rows, checksum, error
                one row per chunk and side: row count and order-free checksum (``hashing.ChunkSum``),
                or the error that kept the chunk from being read
    ROW_DDL     table, chunk, side, key_id, key_text, row_hash, cells, cell_hashes
                one row per row of a chunk whose checksums differ; `key_id` is what rows are
                matched by (the canonical key's hash, or the whole row's for tables without a usable
                key), `cells` the row's values as shown in examples (cut at SHOW_CHARS), `cell_hashes`
                each whole value's hash (which columns differ, where the shown text cannot tell)

:func:`chunk_status` joins the two sides' chunk sums; :func:`row_differences` joins the rows of the
differing chunks by key into missing / extra / different; :func:`difference_counts` and
:func:`difference_examples` summarize them per table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "CHUNK_DDL",
    "DOWN",
    "KINDS",
    "ROW_DDL",
    "UP",
    "chunk_status",
    "difference_counts",
    "difference_examples",
    "row_differences",
]

UP: Final = "up"
DOWN: Final = "down"
KINDS: Final = ("missing", "extra", "different")
"""missing: upstream only; extra: downstream only; different: both, other values."""

CHUNK_DDL: Final = "table STRING, chunk INT, side STRING, rows LONG, checksum LONG, error STRING"
ROW_DDL: Final = (
    "table STRING, chunk INT, side STRING, key_id STRING, key_text STRING, row_hash LONG, cells ARRAY<STRING>, "
    "cell_hashes ARRAY<LONG>"
)


def _side(df: DataFrame, side: str, keys: list[str], renames: dict[str, str]) -> DataFrame:
    from pyspark.sql import functions as fn

    return df.filter(fn.col("side") == side).select(*keys, *(fn.col(c).alias(a) for c, a in renames.items()))


def chunk_status(sums: DataFrame) -> DataFrame:
    """Per (table, chunk): both sides' rows and checksums, errors, and `differs`.

    A chunk that only one side reported (it cannot happen when both sides ran the same plan, but
    a reader could fail in between) differs.  Columns: table, chunk, up_rows, down_rows, up_checksum,
    down_checksum, up_error, down_error, differs."""
    from pyspark.sql import functions as fn

    keys = ["table", "chunk"]
    up = _side(sums, UP, keys, {"rows": "up_rows", "checksum": "up_checksum", "error": "up_error"})
    down = _side(sums, DOWN, keys, {"rows": "down_rows", "checksum": "down_checksum", "error": "down_error"})
    joined = up.join(down, keys, "full_outer")
    differs = (
        (
            fn.col("up_checksum").isNull()
            | fn.col("down_checksum").isNull()
            | (fn.col("up_rows") != fn.col("down_rows"))
            | (fn.col("up_checksum") != fn.col("down_checksum"))
        )
        & fn.col("up_error").isNull()
        & fn.col("down_error").isNull()
    )
    return joined.select(
        *keys,
        fn.coalesce("up_rows", fn.lit(0)).alias("up_rows"),
        fn.coalesce("down_rows", fn.lit(0)).alias("down_rows"),
        "up_checksum",
        "down_checksum",
        "up_error",
        "down_error",
        differs.alias("differs"),
    )


def row_differences(rows: DataFrame) -> DataFrame:
    """Rows of differing chunks joined by key: one row per key that is missing, extra or different.

    Columns: table, chunk, key_id, key_text, kind, n, up_cells, down_cells, up_hashes, down_hashes.  `n`
    is how many rows the key stands for: 1, except for whole-row keys (no usable key, or a NULL in it)
    that one side has more often than the other."""
    from pyspark.sql import functions as fn

    keys = ["table", "chunk", "key_id"]
    grouped = rows.groupBy("table", "chunk", "side", "key_id").agg(
        fn.count(fn.lit(1)).alias("n"),
        fn.min("row_hash").alias("lo"),
        fn.max("row_hash").alias("hi"),
        fn.first("key_text").alias("key_text"),
        fn.first("cells").alias("cells"),
        fn.first("cell_hashes").alias("hashes"),
    )
    cols = {"n": "up_n", "lo": "up_lo", "hi": "up_hi", "key_text": "up_key", "cells": "up_cells", "hashes": "up_hashes"}
    up = _side(grouped, UP, keys, cols)
    down = _side(grouped, DOWN, keys, {c: a.replace("up_", "down_") for c, a in cols.items()})
    j = up.join(down, keys, "full_outer")
    up_n, down_n = fn.col("up_n"), fn.col("down_n")
    same_rows = (fn.col("up_lo") == fn.col("down_lo")) & (fn.col("up_hi") == fn.col("down_hi"))
    kind = (
        fn.when(down_n.isNull(), fn.lit("missing"))
        .when(up_n.isNull(), fn.lit("extra"))
        .when(~same_rows, fn.lit("different"))
        .when(up_n > down_n, fn.lit("missing"))
        .when(down_n > up_n, fn.lit("extra"))
    )
    n = (
        fn.when(down_n.isNull(), up_n)
        .when(up_n.isNull(), down_n)
        .when(~same_rows, fn.lit(1))
        .otherwise(fn.abs(up_n - down_n))
    )
    return j.select(
        *keys,
        fn.coalesce("up_key", "down_key").alias("key_text"),
        kind.alias("kind"),
        n.cast("long").alias("n"),
        "up_cells",
        "down_cells",
        "up_hashes",
        "down_hashes",
    ).filter(fn.col("kind").isNotNull())


def difference_counts(diffs: DataFrame) -> DataFrame:
    """table, kind, n: rows per kind of difference and table."""
    from pyspark.sql import functions as fn

    return diffs.groupBy("table", "kind").agg(fn.sum("n").alias("n"))


def difference_examples(diffs: DataFrame, per_kind: int) -> DataFrame:
    """The first `per_kind` differences of each kind per table, by chunk and key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as fn

    order: list[Column] = [fn.col("chunk"), fn.col("key_text"), fn.col("key_id")]
    w = Window.partitionBy("table", "kind").orderBy(*order)
    return diffs.withColumn("_rank", fn.row_number().over(w)).filter(fn.col("_rank") <= per_kind).drop("_rank")
