"""DrainerSchema: history jobs applied by version, pending jobs, DDL binlogs, shapes at a version (pure)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import pytest

from common.pb import binlog_pb2
from common.pb.gogo import marshal_prewrite_value
from common.schema.defaults import default_value
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobState, JobType, TableInfo
from common.schema.types import check_value
from drainer.schema import (
    DDLJobNotFoundError,
    DrainerSchema,
    MemoryJobSource,
    SchemaVersionMissingError,
    UnknownTableError,
)
from upstream.ddl import Column, Planner
from upstream.mutation import MutationLog


class Writer:
    """The upstream writer's DDL and binlog side without I/O: jobs go to a MemoryJobSource."""

    def __init__(self) -> None:
        self.schema = InfoSchema()
        self.source = MemoryJobSource()
        self._last_id = 100
        self._rowid = 0
        self.ts = 1000

    def alloc(self, n: int) -> int:
        first = self._last_id + 1
        self._last_id += n
        return first

    def ddl(self, fn: Callable[[Planner], Job], *, publish: bool = True) -> Job:
        job = fn(Planner(self.schema, self.alloc, self.next_ts()))
        new = self.schema.copy()
        new.apply(job)
        self.schema = new
        if publish:
            self.source.add(job)
        return job

    def create_table(self, db: str, name: str, columns: list[Column], **kw: Any) -> TableInfo:
        self.ddl(lambda p: p.create_table(db, name, columns, **kw))
        return self.schema.table(db, name)

    def next_ts(self) -> int:
        self.ts += 1
        return self.ts

    def rowid(self) -> int:
        self._rowid += 1
        return self._rowid

    def commit(self, log: MutationLog, schema_version: int | None = None) -> binlog_pb2.Binlog:
        pv = log.prewrite_value(self.schema.version if schema_version is None else schema_version)
        start = self.next_ts()
        return binlog_pb2.Binlog(
            tp=binlog_pb2.Commit, start_ts=start, commit_ts=self.next_ts(), prewrite_value=marshal_prewrite_value(pv)
        )


def full_row(t: TableInfo, given: Mapping[str, Any]) -> dict[str, Any]:
    """Every column of `t`: given values checked, the rest their default (as the writer does)."""
    return {c.lname: check_value(c, given[c.lname]) if c.lname in given else default_value(c) for c in t.columns}


@pytest.fixture
def w() -> Writer:
    w = Writer()
    w.ddl(lambda p: p.create_database("d"))
    return w


def loaded(w: Writer, upto: int | None = None, **kw: Any) -> DrainerSchema:
    s = DrainerSchema(w.source, **kw)
    s.load(w.schema.version if upto is None else upto)
    return s


def test_load_applies_up_to_the_checkpoint_version_and_keeps_later_jobs_pending(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    w.ddl(lambda p: p.add_column("d", "t", Column("n", "INT", default=3)))
    w.ddl(lambda p: p.create_table("d", "u", [Column("x", "INT")]))
    s = loaded(w, upto=2)
    assert s.version() == 2
    assert s.infoschema.has_table("d", "t")
    assert s.shape(t.id, 2).names == ("id", "v")
    with pytest.raises(UnknownTableError):
        s.shape(t.id + 100, 2)
    s.apply_upto(3)
    assert s.version() == 3
    assert s.shape(t.id, 3).names == ("id", "v", "n")
    assert s.shape(t.id, 2).names == ("id", "v")  # older versions stay readable
    assert not s.infoschema.has_table("d", "u")
    s.apply_upto(2)  # never backwards
    assert s.version() == 3
    s.apply_upto(4)
    assert s.infoschema.has_table("d", "u")


def test_load_zero_applies_nothing_and_skips_cancelled_and_failed_jobs(w: Writer) -> None:
    w.create_table("d", "t", [Column("id", "INT")])
    w.source.add(replace(w.source.all_jobs()[-1], id=999, state=JobState.CANCELLED, schema_version=3))
    w.source.add(replace(w.source.all_jobs()[-1], id=998, schema_version=0))
    s = loaded(w, upto=0)
    assert s.version() == 0
    s.apply_upto(2)
    assert s.version() == 2
    with pytest.raises(SchemaVersionMissingError, match="schema version 3 is not in the DDL history"):
        s.apply_upto(3)
    assert s.handle_ddl(999, commit_ts=5) is None
    assert s.handle_ddl(998, commit_ts=6) is None
    assert s.version() == 2


def test_apply_upto_refetches_the_history_when_a_version_is_unknown(w: Writer) -> None:
    s = loaded(w)
    t = w.create_table("d", "t", [Column("id", "INT")])  # published after load
    s.apply_upto(w.schema.version)
    assert s.shape(t.id, w.schema.version).table == "t"


def test_ddl_binlog_applies_its_job_and_returns_the_event_with_the_schema_before(w: Writer) -> None:
    s = loaded(w)
    job = w.ddl(lambda p: p.create_table("d", "t", [Column("id", "INT")], primary_key=["id"]))
    before_version = s.version()
    ddl = s.handle_ddl(job.id, commit_ts=77)
    assert ddl is not None
    assert (ddl.db, ddl.table, ddl.query, ddl.job) == ("d", "t", job.query, job)
    assert ddl.before.version == before_version
    assert not ddl.before.has_table("d", "t")
    assert s.infoschema.has_table("d", "t")
    assert s.version() == job.schema_version
    # the same DDL binlog again (replayed after a restart): same event, not applied twice
    again = s.handle_ddl(job.id, commit_ts=77)
    assert again is not None
    assert not again.before.has_table("d", "t")
    assert again.before.version == before_version


def test_ddl_binlog_of_a_job_a_dml_already_applied(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    s = loaded(w)
    add = w.ddl(lambda p: p.add_column("d", "t", Column("n", "INT")))
    drop = w.ddl(lambda p: p.drop_column("d", "t", "v"))
    s.apply_upto(drop.schema_version)  # a DML written after both DDLs came first
    ddl = s.handle_ddl(add.id, commit_ts=50)
    assert ddl is not None
    assert [c.name for c in ddl.before.table("d", "t").columns] == ["id", "v"]
    ddl2 = s.handle_ddl(drop.id, commit_ts=51)
    assert ddl2 is not None
    assert [c.name for c in ddl2.before.table("d", "t").columns] == ["id", "v", "n"]
    assert s.shape(t.id, s.version()).names == ("id", "n")


def test_ddl_job_published_after_its_binlog_arrives_is_waited_for(w: Writer) -> None:
    job = w.ddl(lambda p: p.create_table("d", "t", [Column("id", "INT")]), publish=False)
    calls: list[int] = []

    class Late(MemoryJobSource):
        def job(self, job_id: int) -> Job | None:
            calls.append(job_id)
            if len(calls) == 3:
                self.add(job)
            return super().job(job_id)

    src = Late(w.source.all_jobs())
    s = DrainerSchema(src, retry_interval=0.01)
    s.load(0)
    ddl = s.handle_ddl(job.id, commit_ts=9)
    assert ddl is not None
    assert ddl.job == job
    assert calls == [job.id] * 3
    assert s.version() == job.schema_version


def test_ddl_job_that_never_appears_fails_naming_job_and_commit_ts(w: Writer) -> None:
    s = loaded(w, retry_interval=0.01)
    with pytest.raises(DDLJobNotFoundError, match=r"DDL job 4242 of the binlog at commit_ts=31 .*after \d+ look"):
        s.handle_ddl(4242, commit_ts=31, timeout=0.05)


def test_close_stops_waiting_for_a_ddl_job(w: Writer) -> None:
    s = loaded(w, retry_interval=30)
    threading.Timer(0.05, s.close).start()
    with pytest.raises(DDLJobNotFoundError):
        s.handle_ddl(4242, commit_ts=31, timeout=60)


def test_ddl_targets_per_job_type(w: Writer) -> None:
    w.ddl(lambda p: p.create_database("e"))
    w.create_table("d", "t", [Column("id", "INT")])
    s = loaded(w)
    jobs = [
        w.ddl(lambda p: p.create_database("f")),
        w.ddl(lambda p: p.add_index("d", "t", "i", ["id"])),
        w.ddl(lambda p: p.rename_table("d", "t", "t2", new_db="e")),
        w.ddl(lambda p: p.truncate_table("e", "t2")),
        w.ddl(lambda p: p.drop_table("e", "t2")),
        w.ddl(lambda p: p.drop_database("f")),
    ]
    got = []
    for j in jobs:
        ddl = s.handle_ddl(j.id, commit_ts=j.schema_version)
        assert ddl is not None
        got.append((ddl.job.type, ddl.db, ddl.table))
    assert got == [
        (JobType.CREATE_SCHEMA, "", ""),
        (JobType.ADD_INDEX, "d", "t"),
        (JobType.RENAME_TABLE, "e", "t2"),
        (JobType.TRUNCATE_TABLE, "e", "t2"),
        (JobType.DROP_TABLE, "e", "t2"),
        (JobType.DROP_SCHEMA, "f", ""),
    ]


def test_shapes_follow_rename_truncate_drop_table_and_drop_database(w: Writer) -> None:
    w.ddl(lambda p: p.create_database("e"))
    t = w.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    u = w.create_table("d", "u", [Column("a", "INT"), Column("b", "INT")], unique_keys=[["b"]])
    v0 = w.schema.version
    w.ddl(lambda p: p.rename_table("d", "t", "t2", new_db="e"))
    v_rename = w.schema.version
    w.ddl(lambda p: p.truncate_table("e", "t2"))
    v_trunc = w.schema.version
    t_new = w.schema.table("e", "t2")
    w.ddl(lambda p: p.drop_table("e", "t2"))
    v_drop = w.schema.version
    w.ddl(lambda p: p.drop_database("d"))
    v_dropdb = w.schema.version
    s = loaded(w)

    assert (s.shape(t.id, v0).db, s.shape(t.id, v0).table) == ("d", "t")
    assert (s.db_name_of(t.id, v_rename), s.shape(t.id, v_rename).table) == ("e", "t2")
    assert s.shape(t.id, v0).unique_keys == ((0,),)
    # truncate: the old id is gone from that version on, the new id takes over
    with pytest.raises(UnknownTableError):
        s.shape(t.id, v_trunc)
    assert s.was_truncated(t.id, v_trunc)
    assert not s.was_truncated(t.id, v_rename)
    assert s.shape(t_new.id, v_trunc).table == "t2"
    with pytest.raises(UnknownTableError):
        s.shape(t_new.id, v_rename)
    # drop table, drop database
    with pytest.raises(UnknownTableError):
        s.shape(t_new.id, v_drop)
    assert not s.was_truncated(t_new.id, v_drop)
    assert s.shape(u.id, v_drop).unique_keys == ((1,),)
    with pytest.raises(UnknownTableError, match=rf"unknown table id {u.id} at schema version {v_dropdb}"):
        s.shape(u.id, v_dropdb)
    assert s.infoschema.databases() == [s.infoschema.db("e")]


def test_unknown_table_error_names_id_version_commit_ts_and_pump(w: Writer) -> None:
    s = loaded(w)
    with pytest.raises(UnknownTableError) as info:
        s.shape(12345, 1, commit_ts=424242, node_id="pump-1")
    assert str(info.value) == "unknown table id 12345 at schema version 1 commit_ts=424242 from pump pump-1"
    assert (info.value.table_id, info.value.commit_ts, info.value.node_id) == (12345, 424242, "pump-1")


def test_shapes_are_shared_between_versions_of_the_same_table_info(w: Writer) -> None:
    t = w.create_table("d", "t", [Column("id", "INT")])
    v = w.schema.version
    w.ddl(lambda p: p.create_table("d", "other", [Column("id", "INT")]))
    s = loaded(w)
    assert s.shape(t.id, v) is s.shape(t.id, s.version())
