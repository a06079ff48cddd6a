"""The txn-status store on sqlite: DSN parsing, writer helpers, reader, WAL concurrency."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from common import tso
from common.dsn import MySQLDSN, SqliteDSN, parse_dsn
from common.errors import CodecError, ConfigError, StorageClosedError, UnavailableError
from common.txnstatus import (
    TABLE,
    StatusRowTooLateError,
    TxnState,
    TxnStatus,
    TxnStatusConflictError,
    TxnStatusStore,
    status_row_deadline_ms,
)

REPO = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000.0
NOW_MS = 1_700_000_000_000


class FakeClock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


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
def writer(store: TxnStatusStore, db_path: Path) -> Iterator[sqlite3.Connection]:
    """The upstream's own connection (default isolation: DML opens a transaction)."""
    conn = sqlite3.connect(db_path, timeout=5.0)
    yield conn
    conn.close()


def committed_write(store: TxnStatusStore, conn: sqlite3.Connection, op: str, *args: int) -> None:
    getattr(store, op)(conn, *args)
    conn.commit()


# ---------------------------------------------------------------- DSN


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        ("sqlite:///abs/path.db", SqliteDSN(Path("/abs/path.db"))),
        ("SQLite:///abs/path.db", SqliteDSN(Path("/abs/path.db"))),
        ("sqlite:relative.db", SqliteDSN(Path("relative.db"))),
        ("sqlite:dir/rel.db", SqliteDSN(Path("dir/rel.db"))),
        ("/var/lib/upstream/store.db", SqliteDSN(Path("/var/lib/upstream/store.db"))),
        ("data/store.db", SqliteDSN(Path("data/store.db"))),
        ("  store.db  ", SqliteDSN(Path("store.db"))),
        ("mysql://user:p%40ss@db.example:3307/upstream", MySQLDSN("db.example", 3307, "user", "p@ss", "upstream")),
        ("mysql://root@127.0.0.1/up", MySQLDSN("127.0.0.1", 3306, "root", "", "up")),
        ("mysql://h/up", MySQLDSN("h", 3306, "root", "", "up")),
    ],
)
def test_parse_dsn(dsn: str, expected: SqliteDSN | MySQLDSN) -> None:
    assert parse_dsn(dsn) == expected


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("sqlite:", "needs a database file path"),
        ("sqlite://", "needs a database file path"),
        ("sqlite::memory:", "needs a database file path"),
        ("sqlite://host/x.db", "takes no host"),
        ("postgres://u@h/db", "unsupported scheme 'postgres'"),
        ("mysql://u:secret@h:notaport/db", "bad port"),
        ("mysql://u@h:3306", "exactly one database name"),
        ("mysql://u@h:3306/", "exactly one database name"),
        ("mysql://u@h/db/extra", "exactly one database name"),
        ("mysql://u@h/db?charset=latin1", "query parameters are not supported"),
    ],
)
def test_parse_dsn_rejects(dsn: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_dsn(dsn)
    assert "secret" not in str(info.value)


def test_mysql_dsn_hides_password() -> None:
    dsn = parse_dsn("mysql://u:hunter2@h:3306/db")
    assert "hunter2" not in repr(dsn)
    assert "hunter2" not in dsn.describe()
    assert dsn.describe() == "mysql://u@h:3306/db"


def test_open_does_not_connect(tmp_path: Path) -> None:
    with TxnStatusStore.open(f"sqlite://{tmp_path}/never.db") as s:
        assert s.dsn == SqliteDSN(tmp_path / "never.db")
    assert not (tmp_path / "never.db").exists()


# ---------------------------------------------------------------- schema and rows


def test_ensure_schema_is_idempotent_and_sets_wal(store: TxnStatusStore, db_path: Path) -> None:
    store.ensure_schema()
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        cols = [row[1] for row in conn.execute(f"PRAGMA table_info({TABLE})")]
        assert cols == ["start_ts", "state", "commit_ts", "ttl_deadline", "pump_node_id"]
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            conn.execute(f"INSERT INTO {TABLE} VALUES (1, 'bogus', 0, 0, '')")
    finally:
        conn.close()


def test_a_table_without_pump_node_id_is_read_and_then_upgraded(db_path: Path, clock: FakeClock) -> None:
    """A table an older writer created: a pump reads it as it is, and the next ensure_schema adds the
    column, keeping the rows."""
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute(
                f"CREATE TABLE {TABLE} (start_ts INTEGER PRIMARY KEY, state VARCHAR(16) NOT NULL, "
                "commit_ts BIGINT NOT NULL DEFAULT 0, ttl_deadline BIGINT NOT NULL)"
            )
            conn.execute(f"INSERT INTO {TABLE} VALUES (100, 'committed', 105, 0)")
    finally:
        conn.close()
    with (
        TxnStatusStore(SqliteDSN(db_path), clock=clock) as reader,
        TxnStatusStore(SqliteDSN(db_path), clock=clock) as s,
    ):
        assert reader.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, 0, "")
        assert reader.rollback_abandoned(200, NOW_MS) == TxnStatus(200, TxnState.ROLLED_BACK)
        s.ensure_schema()
        s.ensure_schema()
        assert reader.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, 0, "")
        w = sqlite3.connect(db_path, isolation_level=None)
        try:
            w.execute("BEGIN")
            s.begin_pending(w, 300, 1000)
            s.mark_committed(w, 300, 305, pump_node_id="pump-2:8250")
            w.execute("COMMIT")
        finally:
            w.close()
        assert reader.get(300) == TxnStatus(300, TxnState.COMMITTED, 305, NOW_MS + 1000, "pump-2:8250")


def test_get_missing_is_none(store: TxnStatusStore) -> None:
    assert store.get(42) is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ((5, "bogus", 0, 0), "unknown state 'bogus'"),
        ((5, "committed", 0, 0), "commit_ts=0 <= start_ts"),
        ((5, "pending", "soon", 0), "commit_ts must be a non-negative integer"),
        ((5, "pending", 0, -1), "ttl_deadline must be a non-negative integer"),
    ],
)
def test_malformed_rows_raise_codec_error(db_path: Path, row: tuple[object, ...], message: str) -> None:
    # A table created by someone else, without our CHECK constraint.
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            conn.execute(f"CREATE TABLE {TABLE} (start_ts INTEGER PRIMARY KEY, state TEXT, commit_ts, ttl_deadline)")
            conn.execute(f"INSERT INTO {TABLE} VALUES (?, ?, ?, ?)", row)
    finally:
        conn.close()
    with TxnStatusStore(SqliteDSN(db_path)) as s, pytest.raises(CodecError, match=message):
        s.get(5)


def test_from_row_validates() -> None:
    assert TxnStatus.from_row((7, "committed", 9, 0)) == TxnStatus(7, TxnState.COMMITTED, 9, 0)
    assert TxnStatus.from_row((7, "committed", 9, 0, "p1")) == TxnStatus(7, TxnState.COMMITTED, 9, 0, "p1")
    with pytest.raises(CodecError, match="expected 4 or 5 columns"):
        TxnStatus.from_row((7, "pending"))
    with pytest.raises(CodecError, match="pump_node_id must be a string"):
        TxnStatus.from_row((7, "committed", 9, 0, 3))
    with pytest.raises(CodecError, match="start_ts must be positive"):
        TxnStatus.from_row((0, "pending", 0, 0))
    with pytest.raises(CodecError, match="start_ts must be a non-negative integer"):
        TxnStatus.from_row((True, "pending", 0, 0))


def test_missing_file_is_unavailable_and_not_created(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with TxnStatusStore(SqliteDSN(path)) as s, pytest.raises(UnavailableError, match="cannot connect") as info:
        s.get(1)
    assert info.value.retriable
    assert not path.exists()


def test_missing_table_is_unavailable(db_path: Path) -> None:
    sqlite3.connect(db_path).close()
    with TxnStatusStore(SqliteDSN(db_path)) as s, pytest.raises(UnavailableError, match="no such table"):
        s.get(1)


def test_not_a_database_is_unavailable(db_path: Path) -> None:
    db_path.write_bytes(b"this is not sqlite" * 100)
    with TxnStatusStore(SqliteDSN(db_path)) as s, pytest.raises(UnavailableError):
        s.get(1)


def test_close_is_idempotent_and_final(store: TxnStatusStore) -> None:
    store.get(1)
    store.close()
    store.close()
    with pytest.raises(StorageClosedError):
        store.get(1)


def test_bad_arguments(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    with pytest.raises(ValueError, match="start_ts must be positive"):
        store.get(0)
    with pytest.raises(ValueError, match="ttl_ms must be positive"):
        store.begin_pending(writer, 10, 0)
    with pytest.raises(ValueError, match="greater than start_ts"):
        store.mark_committed(writer, 10, 10)
    with pytest.raises(ValueError, match="more than 255"):
        store.mark_committed(writer, 10, 11, pump_node_id="p" * 256)
    with pytest.raises(ValueError, match="batch must be positive"):
        store.purge_before(10, batch=0)
    with pytest.raises(ConfigError, match="timeout"):
        TxnStatusStore(SqliteDSN(Path("x.db")), timeout=0)


def test_writer_helpers_need_a_connection_of_the_store_dialect(tmp_path: Path) -> None:
    with TxnStatusStore(MySQLDSN("h", 3306, "u", "", "db")) as s:
        conn = sqlite3.connect(tmp_path / "x.db")
        try:
            with pytest.raises(TypeError, match="needs a Connection"):
                s.begin_pending(conn, 10, 1000)
        finally:
            conn.close()


# ---------------------------------------------------------------- writer protocol


def test_begin_pending_sets_deadline(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    committed_write(store, writer, "begin_pending", 100, 3000)
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 3000)


def test_caller_rollback_undoes_the_status_row(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    writer.execute("CREATE TABLE data (id INTEGER PRIMARY KEY, v TEXT)")
    writer.commit()
    store.begin_pending(writer, 100, 3000)
    writer.execute("INSERT INTO data VALUES (1, 'a')")
    assert writer.in_transaction
    writer.rollback()
    assert store.get(100) is None

    committed_write(store, writer, "begin_pending", 100, 3000)
    writer.execute("INSERT INTO data VALUES (1, 'a')")
    store.mark_committed(writer, 100, 105)
    writer.rollback()  # data and commit mark go together
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 3000)
    assert writer.execute("SELECT COUNT(*) FROM data").fetchone() == (0,)

    writer.execute("INSERT INTO data VALUES (1, 'a')")
    store.mark_committed(writer, 100, 105)
    writer.commit()
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + 3000)
    assert writer.execute("SELECT COUNT(*) FROM data").fetchone() == (1,)


def test_extend_ttl_extends_and_never_shortens(
    store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock
) -> None:
    committed_write(store, writer, "begin_pending", 100, 3000)
    clock.now += 2
    committed_write(store, writer, "extend_ttl", 100, 3000)
    status = store.get(100)
    assert status is not None
    assert status.ttl_deadline_ms == NOW_MS + 5000
    committed_write(store, writer, "extend_ttl", 100, 10)  # earlier than the current deadline
    assert store.get(100) == status


def test_begin_pending_again_extends_a_pending_row(
    store: TxnStatusStore, writer: sqlite3.Connection, clock: FakeClock
) -> None:
    committed_write(store, writer, "begin_pending", 100, 3000)
    clock.now += 10
    committed_write(store, writer, "begin_pending", 100, 3000)
    assert store.get(100) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 13000)


def test_conflicts(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    with pytest.raises(TxnStatusConflictError, match="has no status row; cannot extend its lock"):
        store.extend_ttl(writer, 100, 1000)
    writer.rollback()

    committed_write(store, writer, "mark_committed", 100, 105)  # no begin: inserted directly
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, 0)
    committed_write(store, writer, "mark_committed", 100, 105)  # idempotent
    for op, args in [
        ("mark_committed", (100, 106)),
        ("mark_rolled_back", (100,)),
        ("extend_ttl", (100, 1000)),
        ("begin_pending", (100, 1000)),
    ]:
        with pytest.raises(TxnStatusConflictError, match="already committed") as info:
            getattr(store, op)(writer, *args)
        assert info.value.current == TxnStatus(100, TxnState.COMMITTED, 105, 0)
        writer.rollback()

    committed_write(store, writer, "begin_pending", 200, 1000)
    committed_write(store, writer, "mark_rolled_back", 200)
    committed_write(store, writer, "mark_rolled_back", 200)  # idempotent
    with pytest.raises(TxnStatusConflictError, match="was rolled back") as info:
        store.mark_committed(writer, 200, 205)
    assert info.value.start_ts == 200
    writer.rollback()
    committed_write(store, writer, "mark_rolled_back", 300)  # no begin: inserted directly
    assert store.get(200) == TxnStatus(200, TxnState.ROLLED_BACK, 0, NOW_MS + 1000)
    assert store.get(300) == TxnStatus(300, TxnState.ROLLED_BACK, 0, 0)


# ---------------------------------------------------------------- reader side


def test_rollback_abandoned(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    committed_write(store, writer, "begin_pending", 100, 1000)
    committed_write(store, writer, "begin_pending", 200, 1000)
    committed_write(store, writer, "mark_committed", 200, 205)

    live = store.rollback_abandoned(100, NOW_MS + 1000)  # deadline not passed: left alone
    assert live == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 1000)
    assert store.rollback_abandoned(100, NOW_MS + 1001).state is TxnState.ROLLED_BACK
    assert store.get(100) == TxnStatus(100, TxnState.ROLLED_BACK, 0, NOW_MS + 1000)
    assert store.rollback_abandoned(200, NOW_MS + 10**9) == TxnStatus(200, TxnState.COMMITTED, 205, NOW_MS + 1000)
    assert store.rollback_abandoned(300, NOW_MS) == TxnStatus(300, TxnState.ROLLED_BACK)
    assert store.get(300) == TxnStatus(300, TxnState.ROLLED_BACK, 0, 0)

    # The writer comes back after the pump gave up: it must not commit.
    for start_ts in (100, 300):
        with pytest.raises(TxnStatusConflictError, match="was rolled back"):
            store.mark_committed(writer, start_ts, start_ts + 5)
        writer.rollback()
        with pytest.raises(TxnStatusConflictError, match="was rolled back"):
            store.extend_ttl(writer, start_ts, 1000)
        writer.rollback()


def test_purge_before_keeps_pending_rows(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    for ts in range(1, 8):
        store.begin_pending(writer, ts * 10, 1000)
        if ts != 4:
            store.mark_committed(writer, ts * 10, ts * 10 + 1)
    writer.commit()
    assert store.purge_before(60, batch=2) == 4  # 10, 20, 30, 50; 40 is pending
    assert [ts for ts in range(10, 80, 10) if store.get(ts) is not None] == [40, 60, 70]
    assert store.purge_before(60) == 0


def test_readers_on_many_threads(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    for ts in range(1, 51):
        store.begin_pending(writer, ts, 1000)
    writer.commit()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(store.get, range(1, 51)))
    assert [r.start_ts if r else None for r in results] == list(range(1, 51))


def test_reader_is_not_blocked_by_an_open_writer_transaction(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    committed_write(store, writer, "begin_pending", 100, 3000)
    store.mark_committed(writer, 100, 105)  # write transaction left open
    store.begin_pending(writer, 200, 3000)
    assert writer.in_transaction

    with ThreadPoolExecutor(max_workers=1) as pool:
        before = pool.submit(lambda: (store.get(100), store.get(200))).result(timeout=2)
    assert before == (TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 3000), None)

    writer.commit()
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + 3000)
    assert store.get(200) == TxnStatus(200, TxnState.PENDING, 0, NOW_MS + 3000)


def test_rollback_abandoned_racing_the_writers_commit_sees_the_commit(
    store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    committed_write(store, writer, "begin_pending", 100, 1000)
    store.mark_committed(writer, 100, 105)  # holds sqlite's write lock
    started = threading.Event()

    def give_up() -> TxnStatus:
        started.set()
        return store.rollback_abandoned(100, NOW_MS + 10**6)

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(give_up)
        assert started.wait(5)
        writer.commit()
        assert future.result(timeout=10) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + 1000)


def test_rollback_abandoned_is_unavailable_while_the_writer_holds_the_lock_too_long(
    db_path: Path, store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    committed_write(store, writer, "begin_pending", 100, 1000)
    store.extend_ttl(writer, 100, 1000)  # write lock held, never released during the call
    with TxnStatusStore(SqliteDSN(db_path), timeout=0.2) as impatient, pytest.raises(UnavailableError, match="locked"):
        impatient.rollback_abandoned(100, NOW_MS + 10**6)
    writer.rollback()


def test_second_process_reads_the_same_file(store: TxnStatusStore, writer: sqlite3.Connection, db_path: Path) -> None:
    committed_write(store, writer, "begin_pending", 100, 3000)
    committed_write(store, writer, "mark_committed", 100, 105)
    store.begin_pending(writer, 200, 3000)  # uncommitted: the other process must not see it or block
    script = textwrap.dedent(
        """
        import json, sys
        from common.txnstatus import TxnStatusStore
        with TxnStatusStore.open(sys.argv[1]) as store:
            out = {}
            for ts in (100, 200):
                s = store.get(ts)
                out[ts] = None if s is None else [s.state.value, s.commit_ts]
        print(json.dumps(out))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, f"sqlite://{db_path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"100": ["committed", 105], "200": None}
    writer.commit()


# ---------------------------------------------------------------- status-row TTL: writer's row vs pump's tombstone


def test_status_row_deadline_is_start_ts_physical_time_plus_the_ttl() -> None:
    start_ts = tso.compose(NOW_MS, 7)
    assert status_row_deadline_ms(start_ts, 10.0) == NOW_MS + 10_000
    assert status_row_deadline_ms(start_ts, 0.25) == NOW_MS + 250
    with pytest.raises(ValueError, match="start_ts must be positive"):
        status_row_deadline_ms(0, 10.0)


def test_begin_pending_refuses_a_row_later_than_the_status_row_deadline(
    store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    with pytest.raises(StatusRowTooLateError, match="1 ms after the status-row TTL") as info:
        store.begin_pending(writer, 100, 3000, not_after_ms=NOW_MS - 1)
    assert info.value.retriable
    assert info.value.start_ts == 100
    writer.rollback()
    assert store.get(100) is None  # nothing written
    committed_write(store, writer, "begin_pending", 100, 3000)  # no deadline: written
    store.begin_pending(writer, 200, 3000, not_after_ms=NOW_MS)  # at the deadline: still in time
    writer.commit()
    assert store.get(200) == TxnStatus(200, TxnState.PENDING, 0, NOW_MS + 3000)


def test_pump_tombstone_first_then_the_writers_row_and_commit_fail(
    store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    assert store.rollback_abandoned(100, NOW_MS) == TxnStatus(100, TxnState.ROLLED_BACK)
    with pytest.raises(TxnStatusConflictError, match="already rolled_back; cannot begin it again") as info:
        store.begin_pending(writer, 100, 3000)
    assert info.value.retriable  # rolled back: run the transaction again with a new start_ts
    writer.rollback()
    with pytest.raises(TxnStatusConflictError, match="was rolled back") as info:
        store.mark_committed(writer, 100, 105)
    assert info.value.retriable
    writer.rollback()
    assert store.get(100) == TxnStatus(100, TxnState.ROLLED_BACK)


def test_conflict_with_a_committed_row_is_not_retriable(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    committed_write(store, writer, "mark_committed", 100, 105)
    with pytest.raises(TxnStatusConflictError, match="already committed") as info:
        store.begin_pending(writer, 100, 3000)
    assert not info.value.retriable
    writer.rollback()


def test_writers_row_first_then_the_pump_finds_it_and_leaves_it(
    store: TxnStatusStore, writer: sqlite3.Connection
) -> None:
    """The writer's uncommitted row holds sqlite's write lock: the pump's tombstone waits for it,
    then finds the row (a live lock) and writes nothing; the writer then commits."""
    store.begin_pending(writer, 100, 3000)  # transaction left open: the row is not visible yet
    assert store.get(100) is None
    started = threading.Event()

    def give_up() -> TxnStatus:
        started.set()
        return store.rollback_abandoned(100, NOW_MS + 1)

    with ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(give_up)
        assert started.wait(5)
        writer.commit()
        assert future.result(timeout=10) == TxnStatus(100, TxnState.PENDING, 0, NOW_MS + 3000)
    committed_write(store, writer, "mark_committed", 100, 105)
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + 3000)


def test_a_row_that_lands_late_is_marked_rolled_back(db_path: Path, writer: sqlite3.Connection) -> None:
    """The write itself may wait for a lock past the deadline: the row is then rolled back at once."""
    readings = iter([NOW, NOW + 1.0])  # before the write: in time; after it: 500 ms late
    with TxnStatusStore(SqliteDSN(db_path), clock=lambda: next(readings)) as slow:
        slow.ensure_schema()
        with pytest.raises(StatusRowTooLateError, match=r"500 ms after the status-row TTL.*marked rolled back"):
            slow.begin_pending(writer, 100, 3000, not_after_ms=NOW_MS + 500)
        writer.commit()
        assert slow.get(100) == TxnStatus(100, TxnState.ROLLED_BACK, 0, NOW_MS + 3000)


def test_a_column_the_operator_added_is_ignored(store: TxnStatusStore, writer: sqlite3.Connection) -> None:
    writer.execute(f"ALTER TABLE {TABLE} ADD COLUMN audited_at TEXT")
    store.begin_pending(writer, 100, 1000)
    store.mark_committed(writer, 100, 105, pump_node_id="pump-1")
    writer.commit()
    assert store.get(100) == TxnStatus(100, TxnState.COMMITTED, 105, NOW_MS + 1000, "pump-1")
