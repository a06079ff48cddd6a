"""Compaction (pure DataFrame transform): the history of row changes -> the final image of every row.

Rules, per (table_id, key):

* only changes in the window (start-ts, stop-ts] count;
* an update that changed the key is two events: a delete of the old key and an upsert of the new
  one, both at the update's (commit_ts, seq);
* the last event by (commit_ts, seq) wins; on a tie (the same transaction and position: a
  duplicated record) a delete wins;
* a key whose last event is a delete is a tombstone: kept, so the writer deletes it downstream
  (that is what makes a replay over a downstream filled by an earlier replay correct);
* rows of a table that no longer exists at stop-ts (dropped, or its old id after a truncate) and
  rows of tables not wanted are left out (`keep_tables`).

Output (`FINAL_DDL`): table_id LONG, key STRING, commit_ts LONG, seq INT, deleted BOOLEAN, values STRING
(NULL for a tombstone).  One row per key.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FINAL_COLUMNS", "compact", "events"]

FINAL_COLUMNS: Final = ("table_id", "key", "commit_ts", "seq", "deleted", "values")


def events(changes: DataFrame, start_ts: int | None = None, stop_ts: int | None = None) -> DataFrame:
    """Changes in the window as key events: table_id, key, commit_ts, seq, deleted, values.

    One pass over `changes` (an explode, not a union of two projections: a union would compute the
    changes, i.e. read and decode the whole history, twice).
    """
    from pyspark.sql import functions as f

    c = changes
    if start_ts is not None:
        c = c.filter(f.col("commit_ts") > f.lit(start_ts))
    if stop_ts is not None:
        c = c.filter(f.col("commit_ts") <= f.lit(stop_ts))
    no_values = f.lit(None).cast("string")
    is_delete = f.col("op") == f.lit("delete")
    this = f.struct(
        f.col("key").alias("key"),
        is_delete.alias("deleted"),
        f.when(is_delete, no_values).otherwise(f.col("values")).alias("values"),
    )
    moved = f.col("old_key").isNotNull() & (f.col("op") == f.lit("update"))
    old = f.when(
        moved, f.struct(f.col("old_key").alias("key"), f.lit(True).alias("deleted"), no_values.alias("values"))
    )
    exploded = c.select("table_id", "commit_ts", "seq", f.explode(f.array(this, old)).alias("e"))
    return exploded.filter(f.col("e").isNotNull()).select(
        "table_id", "e.key", "commit_ts", "seq", "e.deleted", "e.values"
    )


def compact(
    changes: DataFrame,
    *,
    start_ts: int | None = None,
    stop_ts: int | None = None,
    keep_tables: Iterable[int] | None = None,
) -> DataFrame:
    """The final image per (table_id, key) as of stop-ts, tombstones included (see the module doc)."""
    from pyspark.sql import functions as f

    ev = events(changes, start_ts, stop_ts)
    if keep_tables is not None:
        ev = ev.filter(f.col("table_id").isin(sorted(set(keep_tables))))
    # max over a struct compares its fields in order: commit_ts, then seq, then deleted (true > false).
    last = f.max(f.struct("commit_ts", "seq", "deleted", "values")).alias("last")
    return ev.groupBy("table_id", "key").agg(last).select("table_id", "key", "last.*")
