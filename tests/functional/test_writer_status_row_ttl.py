"""The writer keeps the status-row TTL: no transaction's P-binlog waits on a pump longer than it without a row.

Real etcd, pd-server and a pump; the writer in this process on sqlite (and MariaDB for the ordering).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pymysql
import pytest

from common.pb import binlog_pb2
from common.txnstatus import StatusRowTooLateError, TxnState, TxnStatus, status_row_deadline_ms
from pump_client import EncodedBinlog, PumpsClient
from tests.harness.mysql import MySQLDSN
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.txn import TxnState as WriterTxnState

pytestmark = pytest.mark.functional

FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]


class StatusAtSend:
    """A pump client that notes, when a P-binlog leaves, what the txn-status store says of its transaction."""

    def __init__(self, inner: PumpsClient) -> None:
        self.inner = inner
        self.db: Database | None = None
        self.at_prewrite: dict[int, TxnStatus | None] = {}
        self.sent: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def write_encoded_binlog(self, b: EncodedBinlog) -> None:
        assert self.db is not None
        if b.tp == binlog_pb2.Prewrite:
            status = self.db.status.get(b.start_ts)
            with self._lock:
                self.at_prewrite[b.start_ts] = status
        with self._lock:
            self.sent.append((b.tp, b.start_ts))
        self.inner.write_encoded_binlog(b)

    def write_binlog(self, b: binlog_pb2.Binlog) -> None:
        with self._lock:
            self.sent.append((b.tp, b.start_ts))
        self.inner.write_binlog(b)

    def write_binlog_async(self, b: binlog_pb2.Binlog) -> Future[None]:
        with self._lock:
            self.sent.append((b.tp, b.start_ts))
        return self.inner.write_binlog_async(b)

    @property
    def max_binlog_size(self) -> int:
        return self.inner.max_binlog_size

    def of(self, start_ts: int) -> list[int]:
        with self._lock:
            return [tp for tp, s in self.sent if s == start_ts]


@pytest.fixture
def pump(tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess) -> Iterator[PumpProcess]:
    """One pump without a resolver: nothing but the writer decides these transactions."""
    p = PumpProcess(tmp_path, etcd_server.url, name="pump0", extra_args=FAST)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def open_db(etcd_server: EtcdProcess, pump: PumpProcess) -> Iterator[Any]:
    opened: list[tuple[Database, PumpsClient]] = []

    def make(store: str, **kw: Any) -> tuple[Database, StatusAtSend]:
        inner = PumpsClient(etcd_server.url)
        client = StatusAtSend(inner)
        prefix = store.rsplit("/", 1)[1] + "_" if store.startswith("mysql") else ""
        db = Database(etcd_server.url, store, client=client, mysql_db_prefix=prefix, **kw)
        client.db = db
        opened.append((db, inner))
        db.create_database("d")
        db.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
        return db, client

    yield make
    for db, inner in opened:
        db.close()
        inner.close()
        if db.store.kind == "mysql":  # the tables' database, beside the mysql_db fixture's
            m = db.store.mysql  # type: ignore[attr-defined]
            conn = pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password)
            try:
                with conn.cursor() as cur:
                    cur.execute(f"DROP DATABASE IF EXISTS `{m.database}_d`")
            finally:
                conn.close()


@pytest.mark.parametrize("kind", ["sqlite", "mysql"])
def test_a_transaction_half_its_status_row_ttl_old_writes_its_row_before_its_prewrite_binlog(
    kind: str, tmp_path: Path, open_db: Any, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        store = f"sqlite:///{tmp_path / 'upstream.db'}"
    else:
        m: MySQLDSN = request.getfixturevalue("mysql_db")
        store = f"mysql://{m.user}:{m.password}@{m.host}:{m.port}/{m.database}"
    db, client = open_db(store, status_row_ttl=0.4)
    txn = db.begin()
    txn.insert("d.t", {"id": 1, "v": 1})
    wait_for(lambda: db.status_row_first(txn.start_ts), 5, "the transaction to be 0.2 s old")
    commit_ts = txn.commit()
    status = client.at_prewrite[txn.start_ts]
    assert status is not None
    assert status.state is TxnState.PENDING  # the row was there before the pump could have the prewrite
    assert db.status.get(txn.start_ts) == TxnStatus(txn.start_ts, TxnState.COMMITTED, commit_ts, status.ttl_deadline_ms)
    assert client.of(txn.start_ts) == [binlog_pb2.Prewrite, binlog_pb2.Commit]


def test_a_status_row_that_lands_after_the_ttl_fails_the_transaction_retriably(tmp_path: Path, open_db: Any) -> None:
    """sqlite's write lock held elsewhere delays the row past start_ts + TTL: the transaction is rolled back
    (row, data, binlog) and db.run would retry it; the next attempt commits."""
    path = tmp_path / "upstream.db"
    db, client = open_db(f"sqlite:///{path}", status_row_ttl=1.0)
    txn = db.begin()
    txn.insert("d.t", {"id": 1, "v": 1})
    holder = sqlite3.connect(path, timeout=5, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the writer's status row waits for this lock
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            committing = pool.submit(txn.commit)
            wait_for(lambda: client.of(txn.start_ts) == [binlog_pb2.Prewrite], 10, "the P-binlog to leave")
            late = status_row_deadline_ms(txn.start_ts, 1.0)
            wait_for(lambda: time.time() * 1000 > late + 50, 5, "the status-row deadline to pass")
            assert not committing.done()
            holder.execute("ROLLBACK")
            with pytest.raises(StatusRowTooLateError, match="marked rolled back") as info:
                committing.result(timeout=30)
    finally:
        holder.close()
    assert info.value.retriable
    assert txn.state is WriterTxnState.ROLLED_BACK
    row = db.status.get(txn.start_ts)
    assert row is not None
    assert row.state is TxnState.ROLLED_BACK
    assert db.rows("d", "t") == []
    wait_for(lambda: client.of(txn.start_ts) == [binlog_pb2.Prewrite, binlog_pb2.Rollback], 10, "the rollback binlog")

    db.run(lambda t: t.insert("d.t", {"id": 1, "v": 1}))  # a new start_ts: in time
    assert [row for _, row in db.rows("d", "t")] == [{"id": 1, "v": 1}]
