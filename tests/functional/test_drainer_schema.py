"""Schema tracking and translation against the real writer: etcd, pd-server, a pump, upstream.Database.

The writer changes tables while threads write to them; every binlog the pump serves is then
translated (DDL binlogs through ``handle_ddl``, the job read from the etcd history) and applied to
a dict model, which must equal the writer's store, row for row.
"""

from __future__ import annotations

import copy
import datetime as dt
import random
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common.etcd import EtcdClient
from common.events import DDL, DML
from common.pb import binlog_pb2
from common.pd_client import TSOClient, read_cluster_id
from common.schema.defaults import default_value
from common.schema.model import JobType
from drainer.schema import DrainerSchema, EtcdJobSource
from drainer.translator import translate
from tests.functional.upstreamutil import pull_merged
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import Transaction

pytestmark = pytest.mark.functional

Model = dict[str, list[dict[str, Any]]]
"""'db.table' -> rows (column name -> value), as a downstream would hold them."""


@pytest.fixture
def pump(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, request: pytest.FixtureRequest
) -> Iterator[PumpProcess]:
    p = PumpProcess(
        tmp_path, etcd_server.url, name="pump0", extra_args=["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
    )
    p.start()
    yield p
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(f"\n===== {p.name} log =====\n{p.process.log_tail(60)}")
    p.stop()


def apply_ddl(model: Model, ddl: DDL) -> None:
    job = ddl.job
    if job.type in (JobType.CREATE_SCHEMA, JobType.ADD_INDEX, JobType.DROP_INDEX):
        return
    if job.type == JobType.DROP_SCHEMA:
        for key in [k for k in model if k.startswith(job.schema_name + ".")]:
            del model[key]
        return
    assert job.table is not None
    if job.type == JobType.CREATE_TABLE:
        model[f"{job.schema_name}.{job.table.name}"] = []
        return
    old = ddl.before.table_by_id(job.table_id)
    assert old is not None
    rows = model.pop(f"{old.db.name}.{old.table.name}")
    if job.type == JobType.DROP_TABLE:
        return
    if job.type == JobType.TRUNCATE_TABLE:
        rows = []
    cols = job.table.columns
    model[f"{job.schema_name}.{job.table.name}"] = [
        {c.lname: r[c.lname] if c.lname in r else default_value(c) for c in cols} for r in rows
    ]


def apply_dml(model: Model, d: DML) -> None:
    rows = model[f"{d.shape.db}.{d.shape.table}"]
    names = [c.lname for c in d.shape.columns]
    if d.old_values is not None:
        rows.remove(dict(zip(names, d.old_values, strict=True)))  # ValueError: the old row is not there
    if d.values is not None:
        rows.append(dict(zip(names, d.values, strict=True)))


def store_contents(db: Database) -> Model:
    return {
        f"{r.db.name}.{r.table.name}": [row for _, row in db.rows(r.db.name, r.table.name)] for r in db.schema.tables()
    }


def canonical(model: Model) -> dict[str, list[str]]:
    return {k: sorted(repr(sorted(r.items())) for r in rows) for k, rows in model.items()}


def writer(db: Database, i: int, stop: threading.Event, done: list[int], errors: list[BaseException]) -> None:
    rng = random.Random(i)
    mine: list[int] = []
    handles: list[int] = []
    n = 0
    try:
        while not stop.is_set():
            n += 1
            key = i * 1_000_000 + n

            def body(txn: Transaction, key: int = key) -> int:
                txn.insert("d.t", {"id": key, "v": f"v{key}"})
                txn.insert("d.c", {"a": f"k{i}", "b": key, "v": Decimal(key) / 100})
                if mine and rng.random() < 0.5:
                    txn.update("d.t", rng.choice(mine), {"v": f"u{key}"})
                    txn.update("d.c", (f"k{i}", rng.choice(mine)), {"v": Decimal(-1)})
                if handles and rng.random() < 0.3:
                    txn.update("d.n", rng.choice(handles), {"v": f"n{key}"})
                return txn.insert("d.n", {"v": f"n{key}"})

            handles.append(db.run(body))
            mine.append(key)
            if len(mine) > 5 and rng.random() < 0.3:
                gone = mine.pop(rng.randrange(len(mine)))
                hgone = handles.pop(rng.randrange(len(handles)))

                def delete(txn: Transaction, gone: int = gone, hgone: int = hgone) -> None:
                    txn.delete("d.t", gone)
                    txn.delete("d.c", (f"k{i}", gone))
                    txn.delete("d.n", hgone)

                db.run(delete)
            done[i] += 1
    except BaseException as exc:
        errors.append(exc)


def translate_all(binlogs: list[binlog_pb2.Binlog], schema: DrainerSchema, model: Model, db: Database) -> list[DML]:
    dmls: list[DML] = []
    for b in binlogs:
        if b.ddl_job_id:
            ddl = schema.handle_ddl(b.ddl_job_id, b.commit_ts, timeout=10)
            assert ddl is not None
            assert ddl.job == db.history.get(b.ddl_job_id)
            assert ddl.query == b.ddl_query.decode()
            apply_ddl(model, ddl)
            continue
        version, got = translate(b, schema, node_id="pump0")
        assert version <= schema.version()
        for d in got:
            apply_dml(model, d)
        dmls += got
    return dmls


def test_binlogs_translate_to_the_writers_store_while_columns_change(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, tso_client: TSOClient, pump: PumpProcess
) -> None:
    cluster_id = read_cluster_id(etcd)
    assert cluster_id is not None
    with Database(etcd_server.url, f"sqlite:///{tmp_path / 'up.db'}") as db:
        db.create_database("d")
        db.create_table(
            "d",
            "t",
            [Column("id", "INT"), Column("v", "VARCHAR(20)"), Column("x", "INT", default=3)],
            primary_key=["id"],
        )
        db.create_table(
            "d",
            "c",
            [Column("a", "VARCHAR(8)"), Column("b", "INT"), Column("v", "DECIMAL(12,2)")],
            primary_key=["a", "b"],
        )
        db.create_table("d", "n", [Column("v", "VARCHAR(20)")])
        stop = threading.Event()
        done = [0, 0, 0]
        errors: list[BaseException] = []
        threads = [threading.Thread(target=writer, args=(db, i, stop, done, errors)) for i in range(3)]
        for th in threads:
            th.start()

        def enough(n: int) -> Callable[[], bool]:
            return lambda: sum(done) >= n or bool(errors)

        ddls: list[Callable[[], object]] = [
            lambda: db.add_column("d", "t", Column("w", "INT", nullable=False, default=5)),
            lambda: db.add_column("d", "c", Column("z", "VARCHAR(4)")),
            lambda: db.drop_column("d", "t", "x"),
            lambda: db.add_column("d", "n", Column("m", "DATETIME", default=dt.datetime(2020, 1, 2, 3, 4, 5))),
            lambda: db.drop_column("d", "c", "z"),
        ]
        try:
            for k, ddl in enumerate(ddls, 1):
                wait_for(enough(20 * k), 60, f"{20 * k} transactions")
                ddl()
            wait_for(enough(20 * (len(ddls) + 1)), 60, "transactions after the DDLs")
        finally:
            stop.set()
            for th in threads:
                th.join(timeout=60)
        assert not errors, errors
        # a few more DDLs with rows around them: truncate, rename across databases, drop
        db.truncate_table("d", "c")
        db.run(lambda txn: txn.insert("d.c", {"a": "after", "b": 1, "v": 1}))
        db.create_database("e")
        db.rename_table("d", "t", "t2", new_db="e")
        some = db.rows("e", "t2")[0][1]["id"]
        db.run(lambda txn: txn.update("e.t2", some, {"v": "renamed"}))
        db.create_table("d", "tmp", [Column("id", "INT")], primary_key=["id"])
        db.run(lambda txn: txn.insert("d.tmp", {"id": 1}))
        db.drop_table("d", "tmp")
        binlogs = pull_merged([pump], cluster_id, tso_client.get_ts())
        expected = canonical(store_contents(db))

        schema = DrainerSchema(EtcdJobSource(etcd))
        schema.load(0)
        model: Model = {}
        half = len(binlogs) // 2
        dmls = translate_all(binlogs[:half], schema, model, db)
        checkpoint_version, checkpoint_model = schema.version(), copy.deepcopy(model)
        dmls += translate_all(binlogs[half:], schema, model, db)
        assert canonical(model) == expected
        assert schema.version() == db.schema.version
        assert len([b for b in binlogs if b.ddl_job_id]) == len(db.history.load())
        # rows of d.t were read with four different tables (before/after w, x) and d.n with two
        t_id = db.table("e", "t2").id
        assert len({d.shape.names for d in dmls if d.shape.info.id == t_id}) >= 3
        assert len({d.shape.names for d in dmls if d.shape.table == "n"}) == 2

        # a restarted drainer: schema loaded up to the checkpoint's version, the rest from the binlogs
        again = DrainerSchema(EtcdJobSource(etcd))
        again.load(checkpoint_version)
        model = checkpoint_model
        translate_all(binlogs[half:], again, model, db)
        assert canonical(model) == expected
