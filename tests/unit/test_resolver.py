"""The commit resolver against an sqlite txn-status store with a fake clock."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.dsn import SqliteDSN
from common.errors import CodecError
from common.pb import binlog_pb2
from common.txnstatus import DEFAULT_STATUS_ROW_TTL, TxnState, TxnStatus, TxnStatusConflictError, TxnStatusStore
from pump.resolver import NullResolver, ResolverStats, TxnStatusResolver, open_resolver
from pump.storage.api import CommitResolver, Resolution, Verdict
from upstream.commit import prewrite_key

NOW = 1_700_000_000.0
NOW_MS = 1_700_000_000_000
TTL_MS = 3000


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def prewrite(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_value=b"p")


_WAIT_NO_ROW = Resolution(Verdict.WAIT, reason="no transaction status yet")


def dml_prewrite(start_ts: int) -> binlog_pb2.Binlog:
    """A transaction's prewrite as the pump's resolve pass hands it over: start_ts and its primary key."""
    return binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=prewrite_key(1, 7))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "upstream.db"


@pytest.fixture
def store(db_path: Path, clock: FakeClock) -> Iterator[TxnStatusStore]:
    s = TxnStatusStore(SqliteDSN(db_path), clock=clock)
    s.ensure_schema()
    yield s
    s.close()


@pytest.fixture
def resolver(store: TxnStatusStore, clock: FakeClock) -> Iterator[TxnStatusResolver]:
    r = TxnStatusResolver(store, max_txn_timeout=600.0, clock=clock)
    yield r
    r.close()


@pytest.fixture
def writer(store: TxnStatusStore, db_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(db_path, timeout=5.0)
    yield conn
    conn.close()


def test_is_a_commit_resolver(resolver: TxnStatusResolver) -> None:
    implementations: list[CommitResolver] = [resolver, NullResolver()]
    assert len(implementations) == 2


def test_committed(resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105)
    writer.commit()
    res = resolver.resolve(prewrite(100), 1.0)
    assert res.verdict is Verdict.COMMITTED
    assert res.commit_ts == 105


def test_committed_through_another_pump_is_rolled_back_here(
    store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A copy of a prewrite from an attempt the client gave up on (it timed out, then the prewrite went to
    pump-2): pump-1 rolls its copy back; pump-2, and a resolver that does not know its node id, commit."""
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105, pump_node_id="pump-2:8250")
    writer.commit()
    verdicts = {}
    for node_id in ("pump-1:8250", "pump-2:8250", ""):
        r = TxnStatusResolver(store, max_txn_timeout=600.0, clock=clock, node_id=node_id)
        verdicts[node_id] = r.resolve(prewrite(100), 1.0)
    assert verdicts["pump-1:8250"] == Resolution(Verdict.ROLLED_BACK, reason="committed through pump pump-2:8250")
    assert verdicts["pump-2:8250"] == Resolution(Verdict.COMMITTED, 105, "committed in the txn-status store")
    assert verdicts[""].verdict is Verdict.COMMITTED
    assert "committed through pump pump-2:8250, not this one (pump-1:8250)" in caplog.text
    renamed = TxnStatusResolver(store, max_txn_timeout=600.0, clock=clock, node_id={"pump-3:8250", "pump-2:8250"})
    assert renamed.resolve(prewrite(100), 1.0).verdict is Verdict.COMMITTED  # pump-2 is an earlier id of its own


def test_rolled_back(resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_rolled_back(writer, 100)
    writer.commit()
    assert resolver.resolve(prewrite(100), 1.0).verdict is Verdict.ROLLED_BACK


def test_pending_with_live_lock_waits_however_long_it_takes(
    resolver: TxnStatusResolver,
    store: TxnStatusStore,
    writer: sqlite3.Connection,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()
    waited = 1.0
    for _ in range(5):  # an hour-long transaction that keeps its lock alive
        assert resolver.resolve(prewrite(100), waited).verdict is Verdict.WAIT
        clock.now += 720
        waited += 720
        store.extend_ttl(writer, 100, TTL_MS)
        writer.commit()
    assert resolver.resolve(prewrite(100), waited).verdict is Verdict.WAIT
    assert "still pending with a live lock" in caplog.text
    store.mark_committed(writer, 100, 105)
    writer.commit()
    assert resolver.resolve(prewrite(100), waited) == Resolution(
        Verdict.COMMITTED, 105, "committed in the txn-status store"
    )


def test_pending_with_expired_lock_is_rolled_back_and_written_back(
    resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock
) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()
    clock.now += TTL_MS / 1000  # deadline == now: still alive
    assert resolver.resolve(prewrite(100), 3.0).verdict is Verdict.WAIT
    clock.now += 0.001
    assert resolver.resolve(prewrite(100), 3.001) == Resolution(Verdict.ROLLED_BACK, reason="lock expired")
    status = store.get(100)
    assert status is not None
    assert status.state is TxnState.ROLLED_BACK
    with pytest.raises(TxnStatusConflictError):  # the writer may not commit what pump dropped
        store.mark_committed(writer, 100, 105)
    writer.rollback()


def test_no_record_waits_then_rolls_back_at_max_txn_timeout(
    store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """max-txn-timeout bounds the wait for a status row when it is shorter than status-row-ttl."""
    resolver = TxnStatusResolver(store, max_txn_timeout=600.0, status_row_ttl=3600.0, clock=clock)
    for waited in (1.0, 300.0, 599.9):
        assert resolver.resolve(prewrite(100), waited) == Resolution(Verdict.WAIT, reason="no transaction status yet")
    assert store.get(100) is None
    with caplog.at_level(logging.WARNING, logger="pump.resolver"):
        res = resolver.resolve(prewrite(100), 600.0)
    assert res == Resolution(Verdict.ROLLED_BACK, reason="no transaction status after 600s")
    assert "start_ts=100: no transaction status after 600s" in caplog.text
    assert store.get(100) == TxnStatus(100, TxnState.ROLLED_BACK)  # tombstone
    with pytest.raises(TxnStatusConflictError):
        store.mark_committed(writer, 100, 105)
    writer.rollback()


def test_no_record_is_rolled_back_once_older_than_the_status_row_ttl(
    resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """Default settings: a transaction with no status row 10 s after its start_ts is rolled back (not after
    max-txn-timeout), and its writer, if alive, can neither write its row nor commit."""
    assert DEFAULT_STATUS_ROW_TTL == 10.0
    for waited in (0.5, 5.0, 9.99):
        assert resolver.resolve(dml_prewrite(100), waited) == _WAIT_NO_ROW
    assert store.get(100) is None
    with caplog.at_level(logging.WARNING, logger="pump.resolver"):
        res = resolver.resolve(dml_prewrite(100), 10.0)
    assert res == Resolution(Verdict.ROLLED_BACK, reason="no transaction status after 10s")
    assert "start_ts=100: no transaction status after 10s (limit 10.0s" in caplog.text
    assert store.get(100) == TxnStatus(100, TxnState.ROLLED_BACK)  # tombstone
    with pytest.raises(TxnStatusConflictError, match="already rolled_back") as info:
        store.begin_pending(writer, 100, TTL_MS)
    assert info.value.retriable
    writer.rollback()
    with pytest.raises(TxnStatusConflictError, match="was rolled back"):
        store.mark_committed(writer, 100, 105)
    writer.rollback()


def test_status_row_ttl_is_configurable(store: TxnStatusStore, clock: FakeClock) -> None:
    r = TxnStatusResolver(store, status_row_ttl=2.0, clock=clock)
    assert r.resolve(dml_prewrite(100), 1.9).verdict is Verdict.WAIT
    assert r.resolve(dml_prewrite(100), 2.0).verdict is Verdict.ROLLED_BACK
    with pytest.raises(ValueError, match="status_row_ttl must be positive"):
        TxnStatusResolver(store, status_row_ttl=0)


def test_keyless_prewrite_a_ddl_still_waits_max_txn_timeout(
    resolver: TxnStatusResolver, store: TxnStatusStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A DDL's prewrite has no prewrite_key and the writer writes no status row for a DDL."""
    ddl = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=100, ddl_job_id=3)
    for waited in (10.0, 599.9):
        assert resolver.resolve(ddl, waited).verdict is Verdict.WAIT
    with caplog.at_level(logging.WARNING, logger="pump.resolver"):
        assert resolver.resolve(ddl, 600.0).verdict is Verdict.ROLLED_BACK
    assert "(limit 600.0s: max-txn-timeout, no prewrite_key)" in caplog.text


def test_writer_row_in_time_then_the_ttl_passes_the_pump_waits_for_its_lock(
    resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock
) -> None:
    """The writer's row won the race: past the status-row TTL the pump follows the row's lock, not the TTL."""
    store.begin_pending(writer, 100, 30_000)
    writer.commit()
    clock.now += 20
    assert resolver.resolve(dml_prewrite(100), 20.0).verdict is Verdict.WAIT
    store.mark_committed(writer, 100, 105)
    writer.commit()
    assert resolver.resolve(dml_prewrite(100), 21.0) == Resolution(
        Verdict.COMMITTED, 105, "committed in the txn-status store"
    )


def test_no_record_then_status_appears(
    resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    assert resolver.resolve(prewrite(100), 1.0).verdict is Verdict.WAIT
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105)
    writer.commit()
    assert resolver.resolve(prewrite(100), 2.0).commit_ts == 105


class StaleStore(TxnStatusStore):
    """Answers get() with what it saw before the writer's last move."""

    def __init__(self, path: Path, stale: TxnStatus | None) -> None:
        super().__init__(SqliteDSN(path))
        self.stale = stale

    def get(self, start_ts: int) -> TxnStatus | None:
        return self.stale


@pytest.mark.parametrize("stale", [None, TxnStatus(100, TxnState.PENDING, 0, 1)])
def test_writer_that_commits_while_we_give_up_wins(
    store: TxnStatusStore, writer: sqlite3.Connection, db_path: Path, clock: FakeClock, stale: TxnStatus | None
) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105)
    writer.commit()
    r = TxnStatusResolver(StaleStore(db_path, stale), clock=clock)
    try:
        assert r.resolve(prewrite(100), 601.0).verdict is Verdict.COMMITTED
    finally:
        r.close()


def test_writer_that_extends_while_we_give_up_keeps_waiting(
    store: TxnStatusStore, writer: sqlite3.Connection, db_path: Path, clock: FakeClock
) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    writer.commit()
    r = TxnStatusResolver(StaleStore(db_path, TxnStatus(100, TxnState.PENDING, 0, 1)), clock=clock)
    try:
        assert r.resolve(prewrite(100), 10.0).verdict is Verdict.WAIT
    finally:
        r.close()
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + TTL_MS)


def test_unreachable_store_waits_with_rate_limited_warning(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    r = TxnStatusResolver(TxnStatusStore(SqliteDSN(tmp_path / "absent.db")), clock=clock)
    try:
        with caplog.at_level(logging.WARNING, logger="pump.resolver"):
            for _ in range(3):
                res = r.resolve(prewrite(100), 700.0)
                assert res.verdict is Verdict.WAIT
                assert "unreachable" in res.reason
                clock.now += 1
            assert len(caplog.records) == 1
            assert "start_ts=100: txn-status store unreachable" in caplog.records[0].getMessage()
            clock.now += 10
            assert r.resolve(prewrite(100), 710.0).verdict is Verdict.WAIT
        assert len(caplog.records) == 2
        assert "(2 similar suppressed)" in caplog.records[1].getMessage()
        assert r.stats == ResolverStats(lookups=4, waits=4, errors=4)
    finally:
        r.close()


class BrokenStore(TxnStatusStore):
    def __init__(self, path: Path) -> None:
        super().__init__(SqliteDSN(path))

    def get(self, start_ts: int) -> TxnStatus | None:
        raise CodecError("tidb_binlog_txn_status: start_ts=100 has unknown state 'bogus'")


def test_malformed_row_waits_and_logs_an_error(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    r = TxnStatusResolver(BrokenStore(tmp_path / "x.db"), clock=clock)
    try:
        with caplog.at_level(logging.ERROR, logger="pump.resolver"):
            assert r.resolve(prewrite(100), 1.0).verdict is Verdict.WAIT
            assert r.resolve(prewrite(100), 2.0).verdict is Verdict.WAIT
        assert len(caplog.records) == 1
        assert "unknown state 'bogus'" in caplog.text
    finally:
        r.close()


def test_closed_resolver_waits_instead_of_raising(resolver: TxnStatusResolver) -> None:
    resolver.close()
    resolver.close()
    assert resolver.resolve(prewrite(100), 1.0).verdict is Verdict.WAIT


def test_stats_count_lookups_and_outcomes(
    resolver: TxnStatusResolver, store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock
) -> None:
    store.begin_pending(writer, 100, TTL_MS)
    store.mark_committed(writer, 100, 105)
    store.begin_pending(writer, 200, TTL_MS)
    writer.commit()
    resolver.resolve(prewrite(100), 1.0)
    resolver.resolve(prewrite(200), 1.0)
    resolver.resolve(prewrite(300), 1.0)
    resolver.resolve(prewrite(300), 600.0)
    assert resolver.stats == ResolverStats(lookups=4, committed=1, rolled_back=1, waits=2, errors=0)


def test_null_resolver_waits_forever_and_says_why(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="pump.resolver"):
        r = NullResolver()
        for waited in (1.0, 600.0, 10**6):
            assert r.resolve(prewrite(100), waited).verdict is Verdict.WAIT
        r.close()
    assert len(caplog.records) == 1
    assert "txn-status-dsn" in caplog.text
    assert "wait forever" in caplog.text


def test_open_resolver(tmp_path: Path) -> None:
    assert isinstance(open_resolver(None), NullResolver)
    assert isinstance(open_resolver("  "), NullResolver)
    r = open_resolver(f"sqlite://{tmp_path}/up.db", max_txn_timeout=5.0)
    try:
        assert isinstance(r, TxnStatusResolver)
        assert r.resolve(prewrite(1), 1.0).verdict is Verdict.WAIT  # file absent: unreachable
    finally:
        r.close()
