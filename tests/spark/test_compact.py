"""Compaction rules on small inline DataFrames of row changes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from spark_jobs.readers.changes import CHANGE_DDL
from spark_jobs.replay.compact import compact

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def ins(ts: int, key: str, v: str, seq: int = 0, tid: int = 1) -> tuple[Any, ...]:
    return ("db", "t", tid, ts, seq, "insert", key, v, None)


def upd(ts: int, key: str, v: str, seq: int = 0, old_key: str | None = None, tid: int = 1) -> tuple[Any, ...]:
    return ("db", "t", tid, ts, seq, "update", key, v, old_key)


def dele(ts: int, key: str, seq: int = 0, tid: int = 1) -> tuple[Any, ...]:
    return ("db", "t", tid, ts, seq, "delete", key, '{"old":1}', None)


def final(spark: SparkSession, rows: list[tuple[Any, ...]], **kw: Any) -> dict[tuple[int, str], str | None]:
    """(table_id, key) -> values of the final image (None for a tombstone)."""
    df = spark.createDataFrame(rows, CHANGE_DDL)
    out = {}
    for r in compact(df, **kw).collect():
        assert r["deleted"] == (r["values"] is None)
        out[(r["table_id"], r["key"])] = r["values"]
    return out


def test_insert_update_delete_chains(spark: SparkSession) -> None:
    rows = [
        ins(10, "[1]", "a1"),
        upd(20, "[1]", "a2"),
        upd(30, "[1]", "a3"),
        ins(10, "[2]", "b1"),
        upd(15, "[2]", "b2"),
        dele(25, "[2]"),
        ins(12, "[3]", "c1"),
    ]
    assert final(spark, rows) == {(1, "[1]"): "a3", (1, "[2]"): None, (1, "[3]"): "c1"}


def test_order_is_commit_ts_then_seq_not_input_order(spark: SparkSession) -> None:
    rows = [
        upd(30, "[1]", "late"),
        ins(10, "[1]", "first"),
        upd(30, "[1]", "later in txn", seq=4),
        upd(30, "[1]", "x", seq=2),
    ]
    assert final(spark, rows) == {(1, "[1]"): "later in txn"}


def test_pk_change_is_delete_of_old_key_and_insert_of_new(spark: SparkSession) -> None:
    rows = [ins(10, "[1]", "v1"), upd(20, "[9]", "moved", old_key="[1]")]
    assert final(spark, rows) == {(1, "[1]"): None, (1, "[9]"): "moved"}
    # moved back later: the old key lives again, the new one is a tombstone
    rows += [upd(30, "[1]", "back", old_key="[9]")]
    assert final(spark, rows) == {(1, "[1]"): "back", (1, "[9]"): None}


def test_delete_then_reinsert(spark: SparkSession) -> None:
    rows = [ins(10, "[1]", "v1"), dele(20, "[1]"), ins(30, "[1]", "v2")]
    assert final(spark, rows) == {(1, "[1]"): "v2"}
    # the same within one transaction, by seq
    rows = [ins(10, "[5]", "v1"), dele(20, "[5]", seq=0), ins(20, "[5]", "again", seq=1)]
    assert final(spark, rows) == {(1, "[5]"): "again"}


def test_same_key_in_many_transactions(spark: SparkSession) -> None:
    rows = [upd(ts, "[7]", f"v{ts}") for ts in range(1000, 1, -7)]
    rows.append(ins(1, "[7]", "v0"))
    assert final(spark, rows) == {(1, "[7]"): "v1000"}


def test_tie_on_commit_ts_and_seq_a_delete_wins(spark: SparkSession) -> None:
    rows = [ins(10, "[1]", "v"), upd(20, "[1]", "w", seq=3), dele(20, "[1]", seq=3)]
    assert final(spark, rows) == {(1, "[1]"): None}


def test_tables_are_separate_and_filtered(spark: SparkSession) -> None:
    rows = [ins(10, "[1]", "t1", tid=1), ins(11, "[1]", "t2", tid=2), ins(12, "[1]", "t3", tid=3)]
    assert final(spark, rows) == {(1, "[1]"): "t1", (2, "[1]"): "t2", (3, "[1]"): "t3"}
    assert final(spark, rows, keep_tables=[2, 3]) == {(2, "[1]"): "t2", (3, "[1]"): "t3"}


def test_window(spark: SparkSession) -> None:
    rows = [ins(10, "[1]", "v10"), upd(20, "[1]", "v20"), upd(30, "[1]", "v30"), dele(40, "[1]")]
    assert final(spark, rows, stop_ts=25) == {(1, "[1]"): "v20"}
    assert final(spark, rows, stop_ts=39) == {(1, "[1]"): "v30"}
    assert final(spark, rows) == {(1, "[1]"): None}
    assert final(spark, rows, start_ts=20, stop_ts=35) == {(1, "[1]"): "v30"}
    assert final(spark, rows, start_ts=40) == {}
