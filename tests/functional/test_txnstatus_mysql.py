"""The txn-status store and the commit resolver on a real MariaDB/MySQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

import pymysql
import pytest

from common.errors import CodecError, UnavailableError
from common.pb import binlog_pb2
from common.txnstatus import TABLE, StatusRowTooLateError, TxnState, TxnStatus, TxnStatusConflictError, TxnStatusStore
from pump.resolver import TxnStatusResolver
from pump.storage.api import Resolution, Verdict
from tests.harness.mysql import MySQLDSN
from tools.procs import free_port
from upstream.commit import prewrite_key

pytestmark = pytest.mark.functional

NOW = 1_700_000_000.0
NOW_MS = 1_700_000_000_000
TTL_MS = 3000

MySQLConn: TypeAlias = "pymysql.connections.Connection[Any]"


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def prewrite(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts)


def dml_prewrite(start_ts: int) -> binlog_pb2.Binlog:
    """A transaction's prewrite as the pump's resolve pass hands it over: start_ts and its primary key."""
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=prewrite_key(1, 7))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(mysql_db: MySQLDSN, clock: FakeClock) -> Iterator[TxnStatusStore]:
    s = TxnStatusStore.open(mysql_db.url(), timeout=2.0, clock=clock)
    s.ensure_schema()
    yield s
    s.close()


@pytest.fixture
def writer(store: TxnStatusStore, mysql_db: MySQLDSN) -> Iterator[MySQLConn]:
    """The upstream's own connection; tests open transactions with begin()."""
    conn = mysql_db.connect()
    yield conn
    conn.close()


def run(conn: MySQLConn, sql: str, args: tuple[object, ...] = ()) -> tuple[tuple[Any, ...], ...]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return tuple(cur.fetchall())


def test_schema_is_idempotent(store: TxnStatusStore, writer: MySQLConn) -> None:
    store.ensure_schema()
    cols = run(writer, f"SHOW COLUMNS FROM {TABLE}")
    assert [(c[0], c[1].lower(), c[3]) for c in cols] == [
        ("start_ts", "bigint(20)", "PRI"),
        ("state", "varchar(16)", ""),
        ("commit_ts", "bigint(20)", ""),
        ("ttl_deadline", "bigint(20)", ""),
        ("pump_node_id", "varchar(255)", ""),
    ]
    with pytest.raises(pymysql.err.OperationalError, match="CONSTRAINT"):
        run(writer, f"INSERT INTO {TABLE} VALUES (1, 'bogus', 0, 0, '')")


def test_a_table_without_pump_node_id_is_read_and_then_upgraded(
    store: TxnStatusStore, writer: MySQLConn, mysql_db: MySQLDSN
) -> None:
    """A table an older writer created: pumps read it as it is; the next ensure_schema adds the column
    and keeps the rows."""
    run(writer, f"DROP TABLE {TABLE}")
    run(
        writer,
        f"CREATE TABLE {TABLE} (start_ts BIGINT NOT NULL PRIMARY KEY, state VARCHAR(16) NOT NULL, "
        "commit_ts BIGINT NOT NULL DEFAULT 0, ttl_deadline BIGINT NOT NULL)",
    )
    run(writer, f"INSERT INTO {TABLE} VALUES (100, 'committed', 105, 0)")
    reader = TxnStatusStore(store.dsn)
    try:
        assert reader.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, 0, "")
        assert reader.rollback_abandoned(200, NOW_MS) == TxnStatus(200, TxnState.ROLLED_BACK)  # a tombstone
        store.ensure_schema()
        store.ensure_schema()  # idempotent
        assert [c[0] for c in run(writer, f"SHOW COLUMNS FROM {TABLE}")][-1] == "pump_node_id"
        assert reader.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, 0, "")
        writer.begin()
        store.begin_pending(writer, 300, TTL_MS)
        store.mark_committed(writer, 300, 305, pump_node_id="pump-2:8250")
        writer.commit()
        assert reader.get(300) == TxnStatus(300, TxnState.COMMITTED, 305, NOW_MS + TTL_MS, "pump-2:8250")
    finally:
        reader.close()


def test_writer_helpers_join_the_callers_transaction(store: TxnStatusStore, writer: MySQLConn) -> None:
    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    writer.rollback()
    assert store.get(100) is None

    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + TTL_MS)

    writer.begin()
    store.extend_ttl(writer, 100, TTL_MS * 2)
    store.extend_ttl(writer, 100, TTL_MS)  # never shortens, and is no conflict
    store.mark_committed(writer, 100, 105)
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + TTL_MS)  # not visible yet
    writer.rollback()
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + TTL_MS)

    writer.begin()
    store.mark_committed(writer, 100, 105)
    store.mark_committed(writer, 100, 105)
    writer.commit()
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + TTL_MS)

    writer.begin()
    with pytest.raises(TxnStatusConflictError, match="already committed"):
        store.mark_rolled_back(writer, 100)
    writer.rollback()


def test_reader_does_not_block_on_the_writers_row_lock(store: TxnStatusStore, writer: MySQLConn) -> None:
    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()
    writer.begin()
    store.mark_committed(writer, 100, 105)  # row locked until commit
    with ThreadPoolExecutor(max_workers=1) as pool:
        seen = pool.submit(store.get, 100).result(timeout=5)
    assert seen is not None
    assert seen.state is TxnState.PENDING
    writer.commit()
    status = store.get(100)
    assert status is not None
    assert status.state is TxnState.COMMITTED


def test_giving_up_serializes_with_the_writer(store: TxnStatusStore, writer: MySQLConn) -> None:
    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()

    writer.begin()
    store.mark_committed(writer, 100, 105)  # holds the row lock
    with pytest.raises(UnavailableError, match="Lock wait timeout"):
        store.rollback_abandoned(100, NOW_MS + 10**6)
    writer.commit()
    assert store.rollback_abandoned(100, NOW_MS + 10**6) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + TTL_MS)

    # The pump gives up first: a late writer is refused.
    assert store.rollback_abandoned(200, NOW_MS) == TxnStatus(200, TxnState.ROLLED_BACK)
    writer.begin()
    with pytest.raises(TxnStatusConflictError, match="was rolled back"):
        store.mark_committed(writer, 200, 205)
    writer.rollback()


def test_purge_and_malformed_rows(store: TxnStatusStore, writer: MySQLConn) -> None:
    writer.begin()
    for ts in range(10, 80, 10):
        store.begin_pending(writer, ts, TTL_MS)
        if ts != 40:
            store.mark_committed(writer, ts, ts + 1)
    writer.commit()
    assert store.purge_before(60, batch=2) == 4
    assert [ts for ts in range(10, 80, 10) if store.get(ts) is not None] == [40, 60, 70]

    run(writer, f"INSERT INTO {TABLE} VALUES (90, 'committed', 0, 0, '')")
    with pytest.raises(CodecError, match="commit_ts=0"):
        store.get(90)


def test_resolver_verdicts(store: TxnStatusStore, writer: MySQLConn, clock: FakeClock) -> None:
    resolver = TxnStatusResolver(store, max_txn_timeout=600.0, status_row_ttl=3600.0, clock=clock)
    try:
        writer.begin()
        for ts in (100, 200, 300, 400):
            store.begin_pending(writer, ts, TTL_MS)
        store.mark_committed(writer, 100, 105)
        store.mark_rolled_back(writer, 200)
        writer.commit()
        store.extend_ttl(writer, 400, 60_000)  # autocommit: visible at once

        clock.now += 10  # 300's lock expired, 400's is alive
        assert resolver.resolve(prewrite(100), 10.0) == Resolution(
            Verdict.COMMITTED, 105, "committed in the txn-status store"
        )
        assert resolver.resolve(prewrite(200), 10.0).verdict is Verdict.ROLLED_BACK
        assert resolver.resolve(prewrite(300), 10.0) == Resolution(Verdict.ROLLED_BACK, reason="lock expired")
        assert resolver.resolve(prewrite(400), 10_000.0).verdict is Verdict.WAIT
        assert resolver.resolve(prewrite(500), 599.0).verdict is Verdict.WAIT
        assert resolver.resolve(prewrite(500), 600.0).verdict is Verdict.ROLLED_BACK
        for ts in (300, 500):
            status = store.get(ts)
            assert status is not None
            assert status.state is TxnState.ROLLED_BACK
        assert resolver.stats.lookups == 6
    finally:
        resolver.close()


def test_status_row_ttl_tombstone_first_then_the_writer_fails(
    store: TxnStatusStore, writer: MySQLConn, clock: FakeClock
) -> None:
    """Default settings: no row 10 s after start_ts -> rolled back; the late writer can neither begin nor commit."""
    resolver = TxnStatusResolver(store, clock=clock)  # closing it would close the store
    assert resolver.resolve(dml_prewrite(100), 9.9).verdict is Verdict.WAIT
    gave_up = resolver.resolve(dml_prewrite(100), 10.0)
    assert gave_up == Resolution(Verdict.ROLLED_BACK, reason="no transaction status after 10s")
    writer.begin()
    with pytest.raises(TxnStatusConflictError, match="already rolled_back") as info:
        store.begin_pending(writer, 100, TTL_MS)
    assert info.value.retriable
    writer.rollback()
    writer.begin()
    with pytest.raises(TxnStatusConflictError, match="was rolled back"):
        store.mark_committed(writer, 100, 105)
    writer.rollback()
    assert store.get(100) == TxnStatus(100, TxnState.ROLLED_BACK)


def test_status_row_ttl_writer_row_first_then_the_pump_waits_and_sees_the_commit(
    store: TxnStatusStore, writer: MySQLConn, clock: FakeClock
) -> None:
    """The writer's uncommitted row locks its key: the pump's tombstone waits for it (here past the
    store's lock-wait timeout), then finds the live row and leaves it; the commit wins."""
    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    assert store.get(100) is None  # not committed yet
    with pytest.raises(UnavailableError, match="Lock wait timeout"):
        store.rollback_abandoned(100, NOW_MS + 1)
    writer.commit()
    assert store.rollback_abandoned(100, NOW_MS + 1) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + TTL_MS)
    resolver = TxnStatusResolver(store, clock=clock)
    try:
        assert resolver.resolve(dml_prewrite(100), 11.0).verdict is Verdict.WAIT  # past the TTL: the lock decides
        writer.begin()
        store.mark_committed(writer, 100, 105)
        writer.commit()
        assert resolver.resolve(dml_prewrite(100), 12.0) == Resolution(
            Verdict.COMMITTED, 105, "committed in the txn-status store"
        )
    finally:
        resolver.close()


def test_begin_pending_refuses_a_late_row(store: TxnStatusStore, writer: MySQLConn) -> None:
    writer.begin()
    with pytest.raises(StatusRowTooLateError) as info:
        store.begin_pending(writer, 100, TTL_MS, not_after_ms=NOW_MS - 1)
    assert info.value.retriable
    writer.commit()
    assert store.get(100) is None


def _store_connection_ids(admin: MySQLConn, database: str) -> set[int]:
    rows = run(
        admin,
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
        (database,),
    )
    return {int(row[0]) for row in rows}


def test_reader_survives_a_killed_connection(
    store: TxnStatusStore, writer: MySQLConn, mysql_server: MySQLDSN, mysql_db: MySQLDSN
) -> None:
    assert mysql_db.database is not None
    writer.begin()
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105)
    writer.commit()
    writer_id = int(run(writer, "SELECT CONNECTION_ID()")[0][0])
    admin = mysql_server.connect()
    try:
        assert store.get(100) is not None
        before = _store_connection_ids(admin, mysql_db.database) - {writer_id}
        assert len(before) == 1
        run(admin, f"KILL {before.pop()}")
        assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + TTL_MS)
        assert len(_store_connection_ids(admin, mysql_db.database) - {writer_id}) == 1

        # Killed again, this time under the resolver.
        resolver = TxnStatusResolver(store, clock=FakeClock())
        run(admin, f"KILL {(_store_connection_ids(admin, mysql_db.database) - {writer_id}).pop()}")
        assert resolver.resolve(prewrite(100), 2.0).commit_ts == 105
        assert resolver.stats.errors == 0
    finally:
        admin.close()


def test_unreachable_server_is_unavailable_and_the_resolver_waits(clock: FakeClock) -> None:
    port = free_port()
    with TxnStatusStore.open(f"mysql://root@127.0.0.1:{port}/nowhere", timeout=1.0) as s:
        with pytest.raises(UnavailableError, match="cannot connect") as info:
            s.get(1)
        assert info.value.retriable
        resolver = TxnStatusResolver(s, clock=clock)
        assert resolver.resolve(prewrite(1), 10_000.0).verdict is Verdict.WAIT


def test_concurrent_readers_and_a_writer(store: TxnStatusStore, mysql_db: MySQLDSN) -> None:
    stop = threading.Event()
    committed: list[int] = []

    def write() -> None:
        conn = mysql_db.connect()
        try:
            for ts in range(1, 201):
                conn.begin()
                store.begin_pending(conn, ts, TTL_MS)
                store.mark_committed(conn, ts, ts + 1)
                conn.commit()
                committed.append(ts)
        finally:
            conn.close()
            stop.set()

    def read() -> int:
        seen = 0
        while True:
            done = stop.is_set()
            last = committed[-1] if committed else None
            if last is not None:
                status = store.get(last)
                assert status is not None
                assert status.state is TxnState.COMMITTED
                seen += 1
            if done:
                return seen

    with ThreadPoolExecutor(max_workers=4) as pool:
        readers = [pool.submit(read) for _ in range(3)]
        pool.submit(write).result(timeout=60)
        assert all(f.result(timeout=10) >= 1 for f in readers)
    assert store.get(200) == TxnStatus(200, TxnState.COMMITTED, 201, NOW_MS + TTL_MS)
