"""The commit path (:class:`upstream.commit.Committer`) against fakes of its timestamp oracle and pump client.

The store and the txn-status table are the real sqlite ones in a temporary file (no server); the fakes
record, in one shared log, when each binlog is sent and when each commit timestamp is taken, together
with what another connection sees of the data and the status row at that moment.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from common import tso
from common.dsn import parse_dsn
from common.pb import binlog_pb2
from common.schema.infoschema import InfoSchema
from common.schema.model import Job
from common.txnstatus import TxnState as RowState
from common.txnstatus import TxnStatusStore
from pump_client.payload import EncodedBinlog
from upstream.commit import Committer, prewrite_key
from upstream.ddl import Column, Planner
from upstream.errors import BinlogWriteError, WriteConflictError
from upstream.store import Store, open_store
from upstream.txn import Transaction, TxnState


class FakeTSO:
    """Timestamps from the wall clock, strictly increasing; each call is logged."""

    def __init__(self, log: list[tuple[Any, ...]]) -> None:
        self.log = log
        self._next = itertools.count(1)

    def get_ts(self) -> int:
        ts = tso.compose(tso.now_ms(), next(self._next))
        self.log.append(("tso", ts))
        return ts


class FakePumpClient:
    """Records each binlog with what the world looked like when it was sent; can fail the prewrite."""

    def __init__(self, log: list[tuple[Any, ...]], look: Any) -> None:
        self.log = log
        self.look = look
        self.fail_prewrite: Exception | None = None
        self.async_sent = threading.Event()

    def write_encoded_binlog(self, binlog: EncodedBinlog) -> None:
        b = binlog_pb2.Binlog.FromString(binlog.join())
        self.log.append(("prewrite", b))
        if self.fail_prewrite is not None:
            raise self.fail_prewrite

    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        self.log.append(("sync", binlog))

    def write_binlog_async(self, binlog: binlog_pb2.Binlog) -> None:
        self.log.append(("async", binlog, self.look(binlog.start_ts)))
        self.async_sent.set()


class Host:
    """What a transaction needs of its database, around a real sqlite store and the committer under test."""

    def __init__(self, tmp: Path, *, binlog: bool = True) -> None:
        dsn = f"sqlite:///{tmp / 'up.db'}"
        self.store: Store = open_store(dsn)
        self.status = TxnStatusStore(parse_dsn(dsn))
        self.status.ensure_schema()
        self.schema = InfoSchema()
        ids = itertools.count(1)
        plans: list[Callable[[Planner], Job]] = [
            lambda p: p.create_database("d"),
            lambda p: p.create_table("d", "t", [Column("id", "BIGINT"), Column("v", "INT")], primary_key=["id"]),
        ]
        for plan in plans:
            job = plan(Planner(self.schema, lambda n: next(ids), start_ts=1))
            self.store.apply_ddl(job, self.schema)
            new = self.schema.copy()
            new.apply(job)
            self.schema = new
        self.log: list[tuple[Any, ...]] = []
        self.tso = FakeTSO(self.log)
        self.client = FakePumpClient(self.log, self.look)
        self.pool = ThreadPoolExecutor(4)
        self.guard_holds = 0
        self.binlog_enabled = binlog
        self.committer = Committer(
            store=self.store,
            status=self.status,
            tso=self.tso,
            client=self.client if binlog else None,
            pool=self.pool if binlog else None,
            schema_guard=self.guard,
            schema=lambda: self.schema,
            lock_ttl_ms=10_000,
            status_row_ttl=60.0,
        )
        self.released: list[Transaction] = []
        self.row_ids = self

    # RowIDs: this test's table addresses rows by their primary key.
    def next(self, table_id: int) -> int:
        raise AssertionError("no row ids are allocated")

    def rebase(self, table_id: int, value: int) -> None:
        raise AssertionError("no row ids are allocated")

    @property
    def max_binlog_size(self) -> int:
        return self.committer.max_binlog_size

    def release(self, txn: Transaction) -> None:
        self.released.append(txn)
        if txn.session.in_txn:
            txn.session.rollback()
        txn.session.close()

    def guard(self) -> Any:
        host = self

        class _Held:
            def __enter__(self) -> None:
                host.guard_holds += 1

            def __exit__(self, *exc: object) -> None:
                host.guard_holds -= 1

        return _Held()

    def look(self, start_ts: int) -> tuple[list[Any], RowState | None]:
        """The committed rows of d.t and the status row of `start_ts`, as another connection sees them."""
        rows = [r for _, r in self.store.scan("d", self.schema.table("d", "t"))]
        st = self.status.get(start_ts)
        return rows, None if st is None else st.state

    def begin(self) -> Transaction:
        return Transaction(self, self.tso.get_ts(), self.store.session())

    def close(self) -> None:
        self.pool.shutdown()
        self.committer.close_sessions()
        self.status.close()
        self.store.close()


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    yield h
    h.close()


def kinds(log: list[tuple[Any, ...]]) -> list[str]:
    return [e[0] for e in log]


def test_commit_sends_prewrite_binlog_then_takes_commit_ts_then_commit_binlog_after_storage_commit(
    host: Host,
) -> None:
    txn = host.begin()
    txn.insert("d.t", {"id": 7, "v": 1})
    host.log.clear()
    commit_ts = txn.commit()

    assert kinds(host.log) == ["prewrite", "tso", "async"]
    p = host.log[0][1]
    assert p.tp == binlog_pb2.Prewrite
    assert p.start_ts == txn.start_ts
    assert p.prewrite_key == prewrite_key(host.schema.table("d", "t").id, 7)
    assert host.log[1][1] == commit_ts
    _, c, (rows_at_c, state_at_c) = host.log[2]
    assert (c.tp, c.start_ts, c.commit_ts, c.prewrite_key) == (
        binlog_pb2.Commit,
        txn.start_ts,
        commit_ts,
        p.prewrite_key,
    )
    # The C-binlog goes only after the storage commit: data and status row are committed by then.
    assert [r["id"] for r in rows_at_c] == [7]
    assert state_at_c is RowState.COMMITTED
    assert txn.state is TxnState.COMMITTED
    assert txn.commit_ts == commit_ts
    assert host.released == [txn]
    assert host.guard_holds == 0


def test_failed_prewrite_binlog_rolls_back_storage_and_status_and_sends_rollback_binlog(host: Host) -> None:
    host.client.fail_prewrite = OSError("pump down")
    txn = host.begin()
    txn.insert("d.t", {"id": 1, "v": 1})
    host.log.clear()
    with pytest.raises(BinlogWriteError, match="pump down"):
        txn.commit()

    assert kinds(host.log) == ["prewrite", "async"]  # no commit_ts is taken
    _, r, (rows, state) = host.log[1]
    assert (r.tp, r.start_ts, r.prewrite_key) == (binlog_pb2.Rollback, txn.start_ts, host.log[0][1].prewrite_key)
    assert rows == []
    assert state is RowState.ROLLED_BACK
    assert txn.state is TxnState.ROLLED_BACK
    assert host.released == [txn]


def test_write_conflict_rolls_back_after_the_prewrite_binlog(host: Host) -> None:
    first = host.begin()
    first.insert("d.t", {"id": 1, "v": 1})
    first.commit()
    a, b = host.begin(), host.begin()
    a.update("d.t", 1, {"v": 2})
    b.update("d.t", 1, {"v": 3})
    a.commit()
    host.log.clear()
    with pytest.raises(WriteConflictError):
        b.commit()

    assert kinds(host.log) == ["prewrite", "async"]
    _, r, (rows, state) = host.log[1]
    assert r.tp == binlog_pb2.Rollback
    assert [row["v"] for row in rows] == [2]
    assert state is RowState.ROLLED_BACK
    assert b.state is TxnState.ROLLED_BACK


def test_nothing_written_commits_nothing(host: Host) -> None:
    txn = host.begin()
    assert txn.get("d.t", 1) is None
    host.log.clear()
    assert txn.commit() == 0
    assert host.log == []
    assert txn.state is TxnState.COMMITTED


def test_without_binlog_only_a_commit_ts_is_taken(tmp_path: Path) -> None:
    h = Host(tmp_path, binlog=False)
    try:
        txn = h.begin()
        txn.insert("d.t", {"id": 3, "v": 1})
        h.log.clear()
        commit_ts = txn.commit()
        assert h.log == [("tso", commit_ts)]
        rows, state = h.look(txn.start_ts)
        assert [r["id"] for r in rows] == [3]
        assert state is None  # no status row without binlog
    finally:
        h.close()
