"""DDL job JSON (docs/formats.md#ddl-history) and the InfoSchema built from jobs."""

from __future__ import annotations

import json

import pytest

from common.codec.flatten import ColumnType, MySQLType
from common.schema.infoschema import InfoSchema
from common.schema.model import (
    ColumnInfo,
    DBInfo,
    IndexInfo,
    Job,
    JobState,
    JobType,
    SchemaError,
    TableInfo,
    history_key,
)


def col(cid: int, name: str, offset: int, tp: MySQLType = MySQLType.LONGLONG, **kw: object) -> ColumnInfo:
    return ColumnInfo(cid, name, offset, "bigint(20)", ColumnType(tp, 20, 0), **kw)  # type: ignore[arg-type]


def table(tid: int = 10, name: str = "t", extra: int = 0) -> TableInfo:
    cols = [col(1, "id", 0, nullable=False), col(2, "v", 1, default="5")]
    cols += [col(3 + i, f"c{i}", 2 + i) for i in range(extra)]
    return TableInfo(
        tid,
        name,
        tuple(cols),
        (IndexInfo(1, "PRIMARY", ("id",), unique=True, primary=True),),
        pk_is_handle=True,
        max_column_id=len(cols),
        max_index_id=1,
    )


def job(jid: int, jtype: JobType, version: int, tbl: TableInfo | None = None, **kw: object) -> Job:
    return Job(
        id=jid,
        type=jtype,
        schema_id=2,
        schema_name="d",
        table_id=kw.pop("table_id", tbl.id if tbl else 0),  # type: ignore[arg-type]
        table_name=tbl.name if tbl else "",
        schema_version=version,
        query="q",
        table=tbl,
        **kw,  # type: ignore[arg-type]
    )


def test_job_json_round_trip_and_key_order() -> None:
    j = job(7, JobType.CREATE_TABLE, 3, table(), start_ts=99)
    text = j.to_json()
    assert Job.from_json(text) == j
    assert list(json.loads(text)) == [
        "id",
        "type",
        "schema_id",
        "schema_name",
        "table_id",
        "table_name",
        "schema_version",
        "query",
        "state",
        "schema_state",
        "start_ts",
        "db",
        "table",
        "old_schema_name",
        "old_table_name",
    ]
    assert j.key() == "/tidb/ddl/history/00000000000000000007"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(extra=1), "unknown key(s) extra"),
        (lambda d: d.pop("query"), "missing key 'query'"),
        (lambda d: d.update(id="7"), "job.id: expected an integer"),
        (lambda d: d.update(id=True), "job.id: expected an integer"),
        (lambda d: d.update(type="alter everything"), "alter everything"),
        (lambda d: d["table"]["columns"][0].update(tp=3.5), "job.table.columns[0].tp"),
        (lambda d: d["table"]["columns"][1].update(offset=0), "offset 0, expected 1"),
        (lambda d: d["table"]["indices"][0].update(columns=["nope"]), "unknown column nope"),
    ],
)
def test_malformed_job_is_a_clear_error(mutate: object, message: str) -> None:
    doc = json.loads(job(7, JobType.CREATE_TABLE, 3, table()).to_json())
    mutate(doc)  # type: ignore[operator]
    with pytest.raises(SchemaError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        Job.from_json(json.dumps(doc))


def test_not_json() -> None:
    with pytest.raises(SchemaError, match="not JSON"):
        Job.from_json(b"{", "k")
    with pytest.raises(SchemaError, match="positive"):
        history_key(0)


def test_table_rules() -> None:
    with pytest.raises(SchemaError, match="duplicate column"):
        TableInfo(1, "t", (col(1, "a", 0), col(2, "A", 1)))
    with pytest.raises(SchemaError, match="integer primary key"):
        TableInfo(
            1,
            "t",
            (ColumnInfo(1, "a", 0, "varchar(3)", ColumnType(MySQLType.VARCHAR, 3)),),
            (IndexInfo(1, "PRIMARY", ("a",), unique=True, primary=True),),
            pk_is_handle=True,
        )
    t = table()
    assert t.handle_column is not None
    assert t.handle_column.name == "id"
    assert t.column("ID").id == 1
    with pytest.raises(SchemaError, match="no column 'x'"):
        t.column("x")


def _history() -> InfoSchema:
    s = InfoSchema()
    s.apply(job(1, JobType.CREATE_SCHEMA, 1, db=DBInfo(2, "d")))
    s.apply(job(3, JobType.CREATE_TABLE, 2, table()))
    s.apply(job(4, JobType.ADD_COLUMN, 3, table(extra=1)))
    return s


def test_table_at_version_keeps_old_layouts() -> None:
    s = _history()
    assert s.table_at(10, 1) is None
    v2 = s.table_at(10, 2)
    assert v2 is not None
    assert len(v2.columns) == 2
    v3 = s.table_at(10, 3)
    assert v3 is not None
    assert len(v3.columns) == 3
    assert s.table_at(10, 100) == v3
    s.apply(job(5, JobType.DROP_TABLE, 4, table(extra=1)))
    assert s.table_at(10, 4) is None
    assert s.table_at(10, 3) == v3
    assert not s.has_table("d", "t")


def test_truncate_rename_drop_schema() -> None:
    s = _history()
    s.apply(job(5, JobType.TRUNCATE_TABLE, 4, table(tid=11, extra=1), table_id=10))
    assert s.table("d", "t").id == 11
    assert s.table_by_id(10) is None
    s.apply(job(6, JobType.RENAME_TABLE, 5, table(tid=11, name="u", extra=1)))
    assert s.has_table("d", "u")
    assert not s.has_table("d", "t")
    s.apply(job(7, JobType.DROP_SCHEMA, 6, db=DBInfo(2, "d")))
    assert not s.has_db("d")
    assert s.tables() == []
    assert s.table_at(11, 5) is not None
    assert s.table_at(11, 6) is None


def test_jobs_that_do_not_fit_are_refused() -> None:
    s = _history()
    with pytest.raises(SchemaError, match="not above"):
        s.apply(job(9, JobType.ADD_COLUMN, 3, table(extra=2)))
    with pytest.raises(SchemaError, match="already exists"):
        s.apply(job(9, JobType.CREATE_TABLE, 4, table(tid=12)))
    with pytest.raises(SchemaError, match="unknown table id 99"):
        s.apply(job(9, JobType.DROP_TABLE, 4, table(tid=99)))
    with pytest.raises(SchemaError, match="unknown database id"):
        s.apply(Job(9, JobType.CREATE_TABLE, 5, "x", 13, "t", 4, "q", table=table(tid=13)))
    with pytest.raises(SchemaError, match=r"unknown table d\.nope"):
        s.table("d", "nope")
    with pytest.raises(SchemaError, match="unknown database 'zz'"):
        s.table("zz", "t")
    cancelled = Job(9, JobType.DROP_TABLE, 2, "d", 10, "t", 4, "q", state=JobState.CANCELLED, table=table())
    s.apply(cancelled)
    assert s.has_table("d", "t")


def test_from_jobs_upto_version_and_copy_is_independent() -> None:
    s = _history()
    jobs = [
        job(1, JobType.CREATE_SCHEMA, 1, db=DBInfo(2, "d")),
        job(4, JobType.ADD_COLUMN, 3, table(extra=1)),
        job(3, JobType.CREATE_TABLE, 2, table()),
    ]
    at2 = InfoSchema.from_jobs(jobs, upto_version=2)
    assert at2.version == 2
    assert len(at2.table("d", "t").columns) == 2
    c = s.copy()
    c.apply(job(5, JobType.DROP_TABLE, 4, table(extra=1)))
    assert s.has_table("d", "t")
    assert not c.has_table("d", "t")


def test_table_charset_and_collation_round_trip_and_old_history_loads() -> None:
    from dataclasses import replace

    t = replace(table(), charset="utf8mb4", collate="utf8mb4_bin")
    doc = json.loads(job(7, JobType.CREATE_TABLE, 3, t).to_json())
    assert list(doc["table"])[-2:] == ["charset", "collate"]
    assert (doc["table"]["charset"], doc["table"]["collate"]) == ("utf8mb4", "utf8mb4_bin")
    back = Job.from_json(json.dumps(doc))
    assert back.table is not None
    assert (back.table.charset, back.table.collate) == ("utf8mb4", "utf8mb4_bin")
    assert back == job(7, JobType.CREATE_TABLE, 3, t)
    del doc["table"]["charset"], doc["table"]["collate"]  # history written before they were recorded
    old = Job.from_json(json.dumps(doc))
    assert old.table is not None
    assert (old.table.charset, old.table.collate) == ("", "")
    doc["table"]["collate"] = 5
    with pytest.raises(SchemaError, match=r"job\.table\.collate: expected a string"):
        Job.from_json(json.dumps(doc))
