"""The structured DDL planner: ids, table info, MySQL text and the rules it enforces (pure)."""

from __future__ import annotations

import itertools

import pytest

from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobType, SchemaError
from upstream.ddl import Column, Planner


class Env:
    def __init__(self) -> None:
        self.schema = InfoSchema()
        self.ids = itertools.count(1)

    def plan(self) -> Planner:
        return Planner(self.schema, lambda n: next(self.ids), start_ts=100)

    def run(self, fn: str, *args: object, **kw: object) -> Job:
        job: Job = getattr(self.plan(), fn)(*args, **kw)
        self.schema.apply(job)
        return job


@pytest.fixture
def env() -> Env:
    e = Env()
    e.run("create_database", "d")
    return e


def test_create_table_int_pk_is_handle_and_text(env: Env) -> None:
    job = env.run(
        "create_table",
        "d",
        "t",
        [Column("id", "bigint unsigned"), Column("v", "varchar(10)", nullable=False, default="x")],
        primary_key=["id"],
        unique_keys=[["v"]],
        indexes=[["v", "id"]],
    )
    t = env.schema.table("d", "t")
    assert t.pk_is_handle
    assert [c.id for c in t.columns] == [1, 2]
    assert [(ix.name, ix.unique, ix.primary) for ix in t.indices] == [
        ("PRIMARY", True, True),
        ("uk_v", True, False),
        ("idx_v_id", False, False),
    ]
    assert job.query == (
        "CREATE TABLE `t` (\n  `id` bigint(20) unsigned NOT NULL,\n  `v` varchar(10) NOT NULL DEFAULT 'x',\n"
        "  PRIMARY KEY (`id`),\n  UNIQUE KEY `uk_v` (`v`),\n  KEY `idx_v_id` (`v`,`id`)\n)"
    )
    assert job.schema_version == 2
    assert job.start_ts == 100


@pytest.mark.parametrize(
    ("columns", "pk"),
    [
        ([Column("a", "INT"), Column("b", "INT")], ["a", "b"]),
        ([Column("a", "VARCHAR(5)")], ["a"]),
        ([Column("a", "INT")], []),
    ],
)
def test_other_tables_get_a_hidden_handle(env: Env, columns: list[Column], pk: list[str]) -> None:
    env.run("create_table", "d", "t", columns, primary_key=pk)
    assert not env.schema.table("d", "t").pk_is_handle


def test_column_jobs_keep_ids_and_history(env: Env) -> None:
    env.run("create_table", "d", "t", [Column("id", "INT"), Column("a", "INT")], primary_key=["id"])
    env.run("add_column", "d", "t", Column("b", "INT", default=3))
    env.run("drop_column", "d", "t", "a")
    env.run("add_column", "d", "t", Column("a", "INT"))
    t = env.schema.table("d", "t")
    assert [(c.name, c.id, c.offset) for c in t.columns] == [("id", 1, 0), ("b", 3, 1), ("a", 4, 2)]
    v2 = env.schema.table_at(t.id, 2)
    assert v2 is not None
    assert [c.name for c in v2.columns] == ["id", "a"]


def test_truncate_gives_a_new_id_and_rename_keeps_it(env: Env) -> None:
    env.run("create_database", "e")
    env.run("create_table", "d", "t", [Column("id", "INT")], primary_key=["id"])
    old = env.schema.table("d", "t").id
    job = env.run("truncate_table", "d", "t")
    new = env.schema.table("d", "t").id
    assert new != old
    assert job.table_id == old
    job = env.run("rename_table", "d", "t", "u", new_db="e")
    assert env.schema.table("e", "u").id == new
    assert (job.old_schema_name, job.old_table_name) == ("d", "t")
    assert job.query == "RENAME TABLE `d`.`t` TO `e`.`u`"
    assert job.type is JobType.RENAME_TABLE


def test_index_jobs(env: Env) -> None:
    env.run("create_table", "d", "t", [Column("id", "INT"), Column("a", "INT")], primary_key=["id"])
    job = env.run("add_index", "d", "t", "ia", ["A"], unique=True)
    assert job.query == "CREATE UNIQUE INDEX `ia` ON `t` (`a`)"
    env.run("drop_index", "d", "t", "ia")
    assert [ix.name for ix in env.schema.table("d", "t").indices] == ["PRIMARY"]


@pytest.mark.parametrize(
    ("fn", "args", "message"),
    [
        ("create_database", ("d",), "already exists"),
        ("create_table", ("d", "t", []), "at least one column"),
        ("create_table", ("nodb", "t", [Column("a", "INT")]), "unknown database 'nodb'"),
        ("create_table", ("d", "t", [Column("a", "INT"), Column("A", "INT")]), "duplicate column"),
        ("create_table", ("d", "t", [Column("a", "NOTATYPE")]), "NOTATYPE"),
        ("create_table", ("d", "t", [Column("_tidb_rowid", "INT")]), "reserved"),
        ("create_table", ("d", "t", [Column("a", "INT", auto_increment=True)]), "AUTO_INCREMENT"),
        ("create_table", ("d", "t", [Column("a", "INT", nullable=False, default=None)]), "cannot default to NULL"),
        ("create_table", ("d", "t", [Column("a", "TINYINT", default=1000)]), "a"),
        ("add_column", ("d", "x", Column("c", "INT")), r"unknown table d\.x"),
        ("add_column", ("d", "x0", Column("id", "INT")), "already exists"),
        ("add_column", ("d", "x0", Column("c", "INT", nullable=False)), "needs a default"),
        ("drop_column", ("d", "x0", "id"), "part of index PRIMARY"),
        ("drop_column", ("d", "x0", "zz"), "no column 'zz'"),
        ("add_index", ("d", "x0", "PRIMARY", ["v"]), "already exists"),
        ("add_index", ("d", "x0", "i", ["zz"]), "no column 'zz'"),
        ("drop_index", ("d", "x0", "PRIMARY"), "cannot drop the primary key"),
        ("drop_index", ("d", "x0", "nope"), "does not exist"),
        ("rename_table", ("d", "x0", "x0"), "already exists"),
    ],
)
def test_refused_requests(env: Env, fn: str, args: tuple[object, ...], message: str) -> None:
    env.run("create_table", "d", "x0", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    version = env.schema.version
    with pytest.raises(SchemaError, match=message):
        env.run(fn, *args)
    assert env.schema.version == version


def test_cannot_drop_the_only_column(env: Env) -> None:
    env.run("create_table", "d", "one", [Column("a", "INT")])
    with pytest.raises(SchemaError, match="only column"):
        env.run("drop_column", "d", "one", "a")


def test_tables_record_utf8mb4_bin_and_every_job_keeps_it(env: Env) -> None:
    env.run("create_database", "e")
    job = env.run("create_table", "d", "t", [Column("id", "VARCHAR(8)"), Column("v", "INT")], primary_key=["id"])
    assert job.table is not None
    assert (job.table.charset, job.table.collate) == ("utf8mb4", "utf8mb4_bin")
    jobs = [
        env.run("add_column", "d", "t", Column("w", "INT")),
        env.run("drop_column", "d", "t", "w"),
        env.run("add_index", "d", "t", "iv", ["v"]),
        env.run("drop_index", "d", "t", "iv"),
        env.run("truncate_table", "d", "t"),
        env.run("rename_table", "d", "t", "u", new_db="e"),
    ]
    for j in jobs:
        assert j.table is not None
        assert (j.table.charset, j.table.collate) == ("utf8mb4", "utf8mb4_bin"), j.type
    assert env.schema.table("e", "u").collate == "utf8mb4_bin"
