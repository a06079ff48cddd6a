"""DDL ordering for replay (pure): apply order, effective times, the final schema at stop-ts, names over time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from common.schema.model import JobState
from spark_jobs.replay.ddl import (
    NameTimeline,
    effective_times,
    final_schema,
    match_ddl_queries,
    ordered_jobs,
    version_at,
)
from tests.spark.historyutil import HistoryBuilder
from upstream.ddl import Column

pytestmark = pytest.mark.spark

COLS = [Column("id", "BIGINT", nullable=False), Column("v", "VARCHAR(10)")]


def build() -> HistoryBuilder:
    h = HistoryBuilder()
    h.add(lambda p: p.create_database("d"), ts=10)
    h.add(lambda p: p.create_table("d", "a", COLS, primary_key=["id"]), ts=20)
    h.add(lambda p: p.add_column("d", "a", Column("x", "INT", default=5)), ts=30)
    h.add(lambda p: p.rename_table("d", "a", "b"), ts=40)
    h.add(lambda p: p.create_table("d", "a", COLS, primary_key=["id"]), ts=50)  # the name again, a new table
    h.add(lambda p: p.truncate_table("d", "b"), ts=60)
    h.add(lambda p: p.drop_table("d", "a"), ts=70)
    return h


def test_jobs_apply_by_schema_version_then_id_and_cancelled_or_failed_never() -> None:
    h = build()
    shuffled = list(reversed(h.jobs))
    cancelled = replace(h.jobs[2], id=999, state=JobState.CANCELLED)
    failed = replace(h.jobs[3], id=998, schema_version=0)
    order = ordered_jobs([*shuffled, cancelled, failed, h.jobs[1]])  # a duplicate id counts once
    assert [j.id for j in order] == [j.id for j in h.jobs]
    assert [j.schema_version for j in order] == list(range(1, 8))


def test_effective_times_prefer_the_ddl_binlog_commit_ts() -> None:
    h = build()
    commit = {h.jobs[1].id: 25, h.jobs[3].id: 45}
    sched = effective_times(h.jobs, commit)
    assert [(s.ts, s.exact) for s in sched][:4] == [(10, False), (25, True), (30, False), (45, True)]


def test_final_schema_at_stop_ts() -> None:
    h = build()
    sched = effective_times(h.jobs, {})
    assert version_at(sched, 35) == 3
    at35 = final_schema(sched, 35)
    assert [c.name for c in at35.table("d", "a").columns] == ["id", "v", "x"]
    assert not at35.has_table("d", "b")
    at55 = final_schema(sched, 55)
    assert at55.table("d", "b").id == h.jobs[1].table_id  # renamed, same id
    assert at55.table("d", "a").id == h.jobs[4].table_id
    end = final_schema(sched, None)
    assert [r.table.name for r in end.tables()] == ["b"]
    truncated = h.jobs[5].table
    assert truncated is not None
    assert end.table("d", "b").id == truncated.id != h.jobs[1].table_id  # truncate: a new id
    assert final_schema(sched, 5).tables() == []


def test_name_timeline_follows_renames_truncates_and_reused_names() -> None:
    h = build()
    first_a, second_a = h.jobs[1].table_id, h.jobs[4].table_id
    truncated_b = h.jobs[5].table
    assert truncated_b is not None
    tl = NameTimeline(effective_times(h.jobs, {}))
    assert tl.lookup("d", "a", 15) is None
    found = tl.lookup("d", "a", 21)
    assert found is not None
    assert found[0] == first_a
    assert [c.name for c in found[1].columns] == ["id", "v"]
    found = tl.lookup("D", "A", 31)  # names are case-insensitive
    assert found is not None
    assert [c.name for c in found[1].columns] == ["id", "v", "x"]
    assert tl.lookup("d", "b", 45) == (first_a, found[1].with_columns(found[1].columns, name="b"))
    assert tl.lookup("d", "a", 45) is None  # renamed away, not re-created yet
    a2 = tl.lookup("d", "a", 55)
    assert a2 is not None
    assert a2[0] == second_a
    b2 = tl.lookup("d", "b", 65)
    assert b2 is not None
    assert b2[0] == truncated_b.id
    assert tl.lookup("d", "a", 75) is None
    assert tl.lookup("d", "a", 70) is not None  # a row committed at 70 was written before the drop took effect


def test_file_sink_ddl_records_match_jobs_in_order() -> None:
    h = build()
    records = [
        (21, f"use `d`; {h.jobs[1].query};"),
        (41, f"use `d`; {h.jobs[3].query};"),
        (61, "use `d`; TRUNCATE TABLE `b`;"),
        (11, "CREATE DATABASE `d`;"),
        (99, "use `d`; CREATE TABLE `zz` (`id` int)"),  # a DDL of no job in the history: ignored
    ]
    matched = match_ddl_queries(h.jobs, records)
    assert matched == {h.jobs[0].id: 11, h.jobs[1].id: 21, h.jobs[3].id: 41, h.jobs[5].id: 61}
    # the same query text twice (create a, later create a again) matches in order
    again = match_ddl_queries(h.jobs, [(21, h.jobs[1].query), (51, h.jobs[4].query)])
    assert again == {h.jobs[1].id: 21, h.jobs[4].id: 51}
