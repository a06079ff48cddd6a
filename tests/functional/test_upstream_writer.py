"""The upstream writer with real etcd, pd-server, pumps, and sqlite or MariaDB stores (issue 4)."""

from __future__ import annotations

import datetime as dt
import gc
import random
import sqlite3
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from common.dsn import MySQLDSN
from common.errors import BinlogError
from common.etcd import EtcdClient
from common.pb import binlog_pb2
from common.pd_client import TSOClient, read_cluster_id
from common.schema.model import SchemaError
from common.schema.types import ValueCheckError
from pump_client import EncodedBinlog, PumpsClient
from pump_client.payload import MAX_HEADER_SIZE
from tests.functional.upstreamutil import pull_merged, replay
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.errors import DuplicateKeyError, TxnClosedError, TxnTooLargeError
from upstream.txn import Transaction, TxnState
from upstream.workloads import WorkloadOptions
from upstream.workloads.bigtxn import BigTxnWorkload

pytestmark = pytest.mark.functional

FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]


class RecordingClient:
    """Our PumpsClient, recording what the writer asked it to send (tp, start_ts)."""

    def __init__(self, inner: PumpsClient) -> None:
        self.inner = inner
        self.limit: int | None = None  # overrides max_binlog_size
        self.sent: list[tuple[int, int]] = []
        self._lock = threading.Lock()

    def _record(self, b: binlog_pb2.Binlog | EncodedBinlog) -> None:
        with self._lock:
            self.sent.append((b.tp, b.start_ts))

    def write_binlog(self, b: binlog_pb2.Binlog) -> None:
        self._record(b)
        self.inner.write_binlog(b)

    def write_binlog_async(self, b: binlog_pb2.Binlog) -> Future[None]:
        self._record(b)
        return self.inner.write_binlog_async(b)

    def write_encoded_binlog(self, b: EncodedBinlog) -> None:
        self._record(b)
        self.inner.write_encoded_binlog(b)

    @property
    def max_binlog_size(self) -> int:
        return self.inner.max_binlog_size if self.limit is None else self.limit

    def of(self, start_ts: int) -> list[int]:
        with self._lock:
            return [tp for tp, s in self.sent if s == start_ts]


@pytest.fixture
def cluster_id(etcd: EtcdClient, pd_server: PDProcess) -> int:
    cid = read_cluster_id(etcd)
    assert cid is not None
    return cid


def start_pumps(
    tmp_path: Path, etcd_server: EtcdProcess, request: pytest.FixtureRequest, n: int, *extra: str
) -> list[PumpProcess]:
    pumps = [PumpProcess(tmp_path, etcd_server.url, name=f"pump{i}", extra_args=[*FAST, *extra]) for i in range(n)]

    def stop() -> None:
        rep = getattr(request.node, "rep_call", None)
        for p in pumps:
            if rep is not None and rep.failed:
                print(f"\n===== {p.name} log =====\n{p.process.log_tail(60)}")
            p.stop()

    request.addfinalizer(stop)
    for p in pumps:
        p.start()
    return pumps


def store_dsn(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'upstream.db'}"
    dsn: MySQLDSN = request.getfixturevalue("mysql_db")
    return f"mysql://{dsn.user}:{dsn.password}@{dsn.host}:{dsn.port}/{dsn.database}"


def mysql_prefix(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1] + "_" if dsn.startswith("mysql") else ""


@pytest.fixture
def open_db(
    etcd_server: EtcdProcess, pd_server: PDProcess, request: pytest.FixtureRequest
) -> Iterator[Callable[..., tuple[Database, RecordingClient]]]:
    opened: list[tuple[Database, PumpsClient]] = []

    def make(store: str, **client_kw: Any) -> tuple[Database, RecordingClient]:
        client = PumpsClient(etcd_server.url, **client_kw)
        rec = RecordingClient(client)
        db = Database(etcd_server.url, store, client=rec, mysql_db_prefix=mysql_prefix(store))
        opened.append((db, client))
        return db, rec

    yield make
    for db, client in opened:
        db.close()
        client.close()
    for db, _ in opened:
        if db.store.kind == "mysql":
            m = db.store.mysql  # type: ignore[attr-defined]
            conn = pymysql.connect(host=m.host, port=m.port, user=m.user, password=m.password)
            cur = conn.cursor()
            for d in db.schema.databases():
                cur.execute(f"DROP DATABASE IF EXISTS `{mysql_prefix(db.store.dsn)}{d.name}`")
            conn.close()


def committed_in_store(store: str) -> set[tuple[int, int]]:
    sql = "SELECT start_ts, commit_ts FROM tidb_binlog_txn_status WHERE state = 'committed'"
    if store.startswith("sqlite"):
        with sqlite3.connect(store.removeprefix("sqlite://")) as lite:
            return {(int(a), int(b)) for a, b in lite.execute(sql)}
    user_pw, _, rest = store.removeprefix("mysql://").partition("@")
    user, _, pw = user_pw.partition(":")
    hostport, _, database = rest.partition("/")
    host, _, port = hostport.partition(":")
    conn = pymysql.connect(host=host, port=int(port), user=user, password=pw, database=database)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return {(int(a), int(b)) for a, b in cur.fetchall()}
    finally:
        conn.close()


def store_model(db: Database) -> dict[tuple[int, int], dict[str, Any]]:
    model = {}
    for ref in db.schema.tables():
        for h, row in db.store.scan(ref.db.name, ref.table):
            model[(ref.table.id, h)] = row
    return model


def bank_setup(db: Database, accounts: int = 20) -> None:
    db.create_database("bank")
    db.create_table(
        "bank",
        "accounts",
        [Column("id", "BIGINT"), Column("balance", "DECIMAL(20,2)", nullable=False, default=0)],
        primary_key=["id"],
    )
    db.create_table(
        "bank",
        "log",
        [Column("ref", "VARCHAR(32)", nullable=False), Column("amount", "DECIMAL(20,2)"), Column("at", "DATETIME(3)")],
        unique_keys=[["ref"]],
    )
    with db.begin() as txn:
        for i in range(accounts):
            txn.insert("bank.accounts", {"id": i, "balance": Decimal(1000)})


def transfer(db: Database, rng: random.Random, ref: str) -> None:
    a, b = rng.sample(range(20), 2)
    amount = Decimal(rng.randint(1, 5000)) / 100

    def body(txn: Transaction) -> None:
        ra, rb = txn.get("bank.accounts", a), txn.get("bank.accounts", b)
        assert ra is not None
        assert rb is not None
        txn.update("bank.accounts", a, {"balance": ra["balance"] - amount})
        txn.update("bank.accounts", b, {"balance": rb["balance"] + amount})
        txn.insert("bank.log", {"ref": ref, "amount": amount, "at": dt.datetime(2026, 1, 1, 12, 0, 0, 123000)})

    # 8 threads on 20 accounts conflict often, the more so on a loaded machine (each commit waits for its
    # prewrite binlog): more attempts than Database.run's default, so every transfer commits in the end
    db.run(body, attempts=50)


# every strategy on sqlite; MariaDB with the default strategy (the strategies do not depend on the store)
@pytest.mark.parametrize(
    ("kind", "strategy"), [("sqlite", "range"), ("sqlite", "hash"), ("sqlite", "score"), ("mysql", "range")]
)
def test_binlogs_equal_the_store_transaction_for_transaction(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    open_db: Callable[..., tuple[Database, RecordingClient]],
    kind: str,
    strategy: str,
    request: pytest.FixtureRequest,
) -> None:
    store = store_dsn(kind, request, tmp_path)
    pumps = start_pumps(tmp_path, etcd_server, request, 2)
    db, rec = open_db(store, strategy=strategy)
    bank_setup(db)
    errors: list[BaseException] = []
    dup_refs: list[int] = []
    aborted: list[int] = []

    def worker(i: int) -> None:
        rng = random.Random(i)
        try:
            for n in range(25):
                transfer(db, rng, f"w{i}-{n}")
                if n % 10 == 3:  # a duplicate unique key found only at prewrite: rollback binlog
                    txn = db.begin()
                    txn.insert("bank.log", {"ref": f"w{i}-0", "amount": 1})
                    with pytest.raises(DuplicateKeyError):
                        txn.commit()
                    dup_refs.append(txn.start_ts)
                if n % 10 == 7:  # rolled back by the application before commit: no binlog at all
                    txn = db.begin()
                    txn.update("bank.accounts", 0, {"balance": 0})
                    txn.rollback()
                    aborted.append(txn.start_ts)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors, errors
    upto = tso_client.get_ts()
    pulled = pull_merged(pumps, cluster_id, upto)
    dml = {(b.start_ts, b.commit_ts) for b in pulled if not b.ddl_job_id}
    assert dml == committed_in_store(store)
    assert len(dml) == 8 * 25 + 1
    assert len([b for b in pulled if b.ddl_job_id]) == 3
    assert replay(pulled, db.schema) == store_model(db)
    total = sum(r["balance"] for _, r in db.rows("bank", "accounts"))
    assert total == Decimal(20 * 1000)
    for start_ts in dup_refs:
        assert rec.of(start_ts) == [binlog_pb2.Prewrite, binlog_pb2.Rollback]
        assert all(b.start_ts != start_ts for b in pulled)
    for start_ts in aborted:
        assert rec.of(start_ts) == []
    per_pump = [len(pull_merged([p], cluster_id, upto)) for p in pumps]
    assert all(n > 0 for n in per_pump), per_pump
    assert sum(per_pump) == len(pulled), per_pump  # no pump died: every transaction is on exactly one pump


def test_writer_killed_after_storage_commit_is_resolved_by_the_pump(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    pd_server: PDProcess,
    cluster_id: int,
    tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:
    store = f"sqlite:///{tmp_path / 'upstream.db'}"
    pumps = start_pumps(
        tmp_path, etcd_server, request, 1,
        "--upstream.txn-status-dsn", store, "--storage.resolve-interval", "0.2",
    )  # fmt: skip
    with Database(etcd_server.url, store) as db:
        db.create_database("d")
        db.create_table("d", "t", [Column("id", "INT"), Column("v", "VARCHAR(10)")], primary_key=["id"])
    script = (
        "import sys; from upstream.database import Database\n"
        f"db = Database({etcd_server.url!r}, {store!r})\n"
        "txn = db.begin(); txn.insert('d.t', {'id': 1, 'v': 'kept'}); txn.commit()\n"
        "print('survived', flush=True)\n"
    )
    env = {**__import__("os").environ, "BINLOG_TEST_CRASH_AFTER_STORAGE_COMMIT": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", script], check=False, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 137, proc.stderr[-2000:]
    assert "survived" not in proc.stdout
    (committed,) = committed_in_store(store)
    start_ts, commit_ts = committed
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts())
    dml = [b for b in pulled if not b.ddl_job_id]
    assert [(b.start_ts, b.commit_ts) for b in dml] == [(start_ts, commit_ts)]
    with Database(etcd_server.url, store) as db:
        assert replay(pulled, db.schema) == store_model(db)


def test_bad_input_rolls_back_and_emits_nothing_but_a_rollback(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:
    pumps = start_pumps(tmp_path, etcd_server, request, 1)
    db, rec = open_db(f"sqlite:///{tmp_path / 'u.db'}")
    db.create_database("d")
    db.create_table("d", "t", [Column("id", "INT"), Column("small", "TINYINT UNSIGNED")], primary_key=["id"])
    with db.begin() as txn:
        txn.insert("d.t", {"id": 1, "small": 1})
    cases: list[tuple[Callable[[Transaction], object], type[BaseException], str]] = [
        (lambda t: t.insert("d.t", {"id": 2, "nope": 1}), SchemaError, "no column 'nope'"),
        (lambda t: t.insert("d.t", {"id": 2, "small": 256}), ValueCheckError, "small"),
        (lambda t: t.insert("d.t", {"id": 1}), DuplicateKeyError, "duplicate entry 1"),
        (lambda t: t.update("d.t", 99, {"small": 1}), SchemaError, "no row with key 99"),
        (lambda t: t.insert("d.missing", {"id": 1}), SchemaError, r"unknown table d\.missing"),
    ]
    for op, exc_type, message in cases:
        txn = db.begin()
        with pytest.raises(exc_type, match=message):
            op(txn)
        assert txn.state is TxnState.ROLLED_BACK
        with pytest.raises(TxnClosedError):
            txn.insert("d.t", {"id": 3})
        assert rec.of(txn.start_ts) == []
    jobs_before = len(db.history.load())
    with pytest.raises(SchemaError, match=r"unknown table d\.missing"):
        db.add_column("d", "missing", Column("c", "INT"))
    with pytest.raises(SchemaError, match="needs a default"):
        db.add_column("d", "t", Column("c", "INT", nullable=False))
    assert len(db.history.load()) == jobs_before
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts())
    assert [b.ddl_job_id > 0 for b in pulled] == [True, True, False]
    assert store_model(db) == replay(pulled, db.schema)


def status_rows(store: str, start_ts: Sequence[int]) -> list[tuple[int, str]]:
    with sqlite3.connect(store.removeprefix("sqlite://")) as lite:
        marks = ",".join("?" * len(start_ts))
        sql = f"SELECT start_ts, state FROM tidb_binlog_txn_status WHERE start_ts IN ({marks})"
        return [(int(a), str(b)) for a, b in lite.execute(sql, tuple(start_ts))]


def test_transaction_too_large_for_the_pumps_is_refused_before_anything_is_sent(
    tmp_path: Path, etcd_server: EtcdProcess, open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    start_pumps(tmp_path, etcd_server, request, 1)
    store = f"sqlite:///{tmp_path / 'u.db'}"
    db, rec = open_db(store, max_message_size=256 << 10)
    db.create_database("d")
    db.create_table("d", "t", [Column("id", "INT"), Column("v", "LONGBLOB")], primary_key=["id"])
    limit = db.max_binlog_size
    assert limit == (256 << 10) - MAX_HEADER_SIZE
    crossed = db.begin()  # refused by the statement that crosses the limit
    crossed.insert("d.t", {"id": 1, "v": bytes(100 << 10)})
    crossed.insert("d.t", {"id": 2, "v": bytes(100 << 10)})
    with pytest.raises(TxnTooLargeError, match=f"at most {limit} "):
        crossed.insert("d.t", {"id": 3, "v": bytes(100 << 10)})
    assert crossed.state is TxnState.ROLLED_BACK
    at_commit = db.begin()  # its rows fit, the whole binlog (with its headers) does not
    at_commit.insert("d.t", {"id": 4, "v": bytes(1000)})
    rec.limit = at_commit.mutations.size
    with pytest.raises(TxnTooLargeError, match="its prewrite binlog is"):
        at_commit.commit()
    rec.limit = None
    assert at_commit.state is TxnState.ROLLED_BACK
    for txn in (crossed, at_commit):
        assert rec.of(txn.start_ts) == []
    assert status_rows(store, [crossed.start_ts, at_commit.start_ts]) == []
    assert db.rows("d", "t") == []
    with db.begin() as ok:
        ok.insert("d.t", {"id": 5, "v": bytes(200 << 10)})
    assert [h for h, _ in db.rows("d", "t")] == [5]
    assert rec.of(ok.start_ts) == [binlog_pb2.Prewrite, binlog_pb2.Commit]


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {key} in /proc/self/status")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # resets VmHWM (Linux >= 4.0)
    except OSError:
        return False
    return True


def test_big_transaction_memory_is_bounded_by_its_size(
    tmp_path: Path, etcd_server: EtcdProcess, open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """A 32 MiB transaction of 1 MiB blobs costs the writer its rows, the request and gRPC's copy of it.

    Before: ~5x its size in Python objects (rows, mutation log, PrewriteValue message, its marshal,
    the Binlog and WriteBinlogReq messages, their serialization) and ~6x in peak RSS."""
    start_pumps(tmp_path, etcd_server, request, 1)
    db, rec = open_db(f"sqlite:///{tmp_path / 'u.db'}")
    size = 32 << 20
    small = BigTxnWorkload(WorkloadOptions(txn_size=1 << 20, blob_size=1 << 20, keep_batches=0))
    small.setup(db)
    assert small.run_once(db, random.Random(0)).committed  # channels and statements exist before measuring
    big = BigTxnWorkload(WorkloadOptions(txn_size=size, blob_size=1 << 20, keep_batches=0))
    gc.collect()
    rss_known = _reset_peak_rss()
    rss_before = _proc_status_bytes("VmRSS")
    tracemalloc.start()
    try:
        outcome = big.run_once(db, random.Random(1))
        _, traced_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_growth = _proc_status_bytes("VmHWM") - rss_before
    assert outcome.committed, outcome
    assert traced_peak < 2.5 * size, f"Python objects peaked at {traced_peak / size:.2f}x the transaction"
    if rss_known:
        assert rss_growth < 3.6 * size, f"peak RSS grew {rss_growth / size:.2f}x the transaction"
    assert big.check(db) == []
    last = [ts for tp, ts in rec.sent if tp == binlog_pb2.Prewrite][-1]
    assert rec.of(last) == [binlog_pb2.Prewrite, binlog_pb2.Commit]


def test_schema_change_during_transaction_is_retriable(
    tmp_path: Path, etcd_server: EtcdProcess, open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    start_pumps(tmp_path, etcd_server, request, 1)
    db, _ = open_db(f"sqlite:///{tmp_path / 'u.db'}")
    db.create_database("d")
    db.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])
    txn = db.begin()
    txn.insert("d.t", {"id": 1, "v": 1})
    db.add_column("d", "t", Column("w", "INT", default=7))
    with pytest.raises(BinlogError, match="changed by a DDL") as info:
        txn.commit()
    assert info.value.retriable
    db.run(lambda t: t.insert("d.t", {"id": 1, "v": 1}))
    assert db.rows("d", "t") == [(1, {"id": 1, "v": 1, "w": 7})]

    # a row read before a DDL and written after it: the DDL is named at once (it was a KeyError on the
    # new column, which crashed the ddl workload), retriable, and nothing is written
    txn = db.begin()
    assert txn.get("d.t", 1) == {"id": 1, "v": 1, "w": 7}
    db.add_column("d", "t", Column("x", "INT", default=9))
    with pytest.raises(BinlogError, match="changed by a DDL") as info:
        txn.update("d.t", 1, {"v": 2})
    assert info.value.retriable
    assert db.rows("d", "t") == [(1, {"id": 1, "v": 1, "w": 7, "x": 9})]


ALL_TYPES: list[tuple[str, str, list[Any]]] = [
    ("i8", "TINYINT", [-128, 127]),
    ("u8", "TINYINT UNSIGNED", [0, 255]),
    ("i16", "SMALLINT", [-32768, 32767]),
    ("u24", "MEDIUMINT UNSIGNED", [16777215, 0]),
    ("i32", "INT", [-(2**31), 2**31 - 1]),
    ("u64", "BIGINT UNSIGNED", [2**64 - 1, 0]),
    ("f32", "FLOAT", [1.5, -0.25]),
    ("f64", "DOUBLE", [1e300, -2.5e-300]),
    ("dec", "DECIMAL(30,10)", [Decimal("-12345678901234567890.0123456789"), Decimal("0.5")]),
    ("ch", "CHAR(5)", ["ab", "ñé"]),
    ("vc", "VARCHAR(40)", ["hello, 世界", ""]),
    ("tx", "TEXT", ["x" * 3000, "line\nbreak"]),
    ("bn", "BINARY(4)", [b"\x00\x01\x02\x03", b"ab\x00\x00"]),
    ("vb", "VARBINARY(10)", [b"\xff\x00", b""]),
    ("bl", "BLOB", [bytes(range(256)), b"z"]),
    ("d", "DATE", [dt.date(1000, 1, 1), dt.date(9999, 12, 31)]),
    ("dtm", "DATETIME(3)", [dt.datetime(2026, 11, 22, 1, 2, 3, 456000), dt.datetime(1970, 1, 1)]),
    (
        "ts",
        "TIMESTAMP(6)",
        [dt.datetime(2026, 1, 1, 0, 0, 1, 5, tzinfo=dt.UTC), dt.datetime(2000, 2, 29, tzinfo=dt.UTC)],
    ),
    ("tm", "TIME(2)", [dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(seconds=1.25)]),
    ("yr", "YEAR", [1901, 2155]),
    ("js", "JSON", [{"a": [1, 2.5, None, True], "b": "ü"}, [1, "x"]]),
    ("en", "ENUM('small','big')", ["big", "small"]),
    ("st", "SET('r','g','b')", ["r,b", ""]),
    ("bt", "BIT(12)", [b"\x0f\xff", b"\x00\x01"]),
]


def test_every_column_type_round_trips_through_the_binlog(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:
    pumps = start_pumps(tmp_path, etcd_server, request, 1)
    for kind in ("sqlite", "mysql"):  # one after the other on the same cluster and DDL history
        since = tso_client.get_ts()
        db, _ = open_db(store_dsn(kind, request, tmp_path))
        db.create_database("ty")
        cols = [Column("id", "INT")] + [Column(name, tp) for name, tp, _ in ALL_TYPES]
        db.create_table("ty", "t", cols, primary_key=["id"])
        db.create_table("ty", "nokey", [Column(name, tp) for name, tp, _ in ALL_TYPES])
        rows = [{"id": i, **{name: values[i] for name, _, values in ALL_TYPES}} for i in range(2)]
        rows.append({"id": 2})  # every other column NULL
        with db.begin() as txn:
            for r in rows:
                txn.insert("ty.t", r)
                txn.insert("ty.nokey", {k: v for k, v in r.items() if k != "id"})
        with db.begin() as txn:
            txn.update("ty.t", 0, {name: values[1] for name, _, values in ALL_TYPES})
            txn.delete("ty.t", 1)
        pulled = [b for b in pull_merged(pumps, cluster_id, tso_client.get_ts()) if b.commit_ts > since]
        model = replay(pulled, db.schema)
        assert model == store_model(db), kind
        t = db.table("ty", "t")
        expected_row0 = {"id": 0, **{name: values[1] for name, _, values in ALL_TYPES}}
        from common.schema.types import check_value

        assert model[(t.id, 0)] == {c.lname: check_value(c, expected_row0[c.lname]) for c in t.columns}
        assert model[(t.id, 2)] == {c.lname: (2 if c.lname == "id" else None) for c in t.columns}
        assert (t.id, 1) not in model
        db.drop_database("ty")


def test_pump_kill9_during_a_workload_then_rejoin(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    open_db: Callable[..., tuple[Database, RecordingClient]],
    request: pytest.FixtureRequest,
) -> None:
    store = f"sqlite:///{tmp_path / 'u.db'}"
    # with a resolver, as deployed: a prewrite the dead pump stored but never answered was written again
    # to another pump, and only the txn-status row can settle the dead pump's copy after its restart
    pumps = start_pumps(
        tmp_path, etcd_server, request, 3,
        "--upstream.txn-status-dsn", store, "--storage.resolve-interval", "0.2",
    )  # fmt: skip
    db, rec = open_db(store, probe_interval=0.5)
    client = rec.inner
    db.create_database("w")
    db.create_table("w", "t", [Column("id", "BIGINT"), Column("v", "VARCHAR(20)")], primary_key=["id"])
    stop = threading.Event()
    committed = [0]
    failures: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            try:
                with db.begin() as txn:
                    txn.insert("w.t", {"id": i * 1_000_000 + n, "v": f"{i}-{n}"})
                with lock:
                    committed[0] += 1
            except BinlogError as exc:
                with lock:
                    failures.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: committed[0] >= 100, 60, "100 commits before the kill")
        pumps[1].kill9()
        at_kill = committed[0]
        wait_for(lambda: committed[0] >= at_kill + 200, 60, "200 commits with a pump dead")
        pumps[1].start()
        writes_before = client.metrics.writes("pump1")
        wait_for(lambda: client.metrics.writes("pump1") > writes_before + 10, 30, "traffic to the restarted pump")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert len(failures) <= len(threads), failures  # at most the ones in flight on the dead pump
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts(), timeout=120)
    assert {(b.start_ts, b.commit_ts) for b in pulled if not b.ddl_job_id} == committed_in_store(store)
    assert replay(pulled, db.schema) == store_model(db)


@pytest.mark.parametrize("kind", ["sqlite", "mysql"])
def test_every_ddl_reaches_store_history_and_binlog(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    open_db: Callable[..., tuple[Database, RecordingClient]],
    kind: str,
    request: pytest.FixtureRequest,
) -> None:
    pumps = start_pumps(tmp_path, etcd_server, request, 1)
    db, rec = open_db(store_dsn(kind, request, tmp_path))
    jobs = [
        db.create_database("a"),
        db.create_database("b"),
        db.create_table("a", "t", [Column("id", "INT"), Column("v", "VARCHAR(8)")], primary_key=["id"]),
    ]
    db.run(lambda t: [t.insert("a.t", {"id": i, "v": str(i)}) for i in range(5)])
    jobs += [
        db.add_column("a", "t", Column("n", "INT", nullable=False, default=7)),
        db.add_index("a", "t", "uv", ["v"], unique=True),
    ]
    with pytest.raises(DuplicateKeyError):
        db.run(lambda t: t.insert("a.t", {"id": 9, "v": "1"}))
    jobs += [
        db.drop_index("a", "t", "uv"),
        db.drop_column("a", "t", "v"),
        db.rename_table("a", "t", "u", new_db="b"),
    ]
    assert db.rows("b", "u") == [(i, {"id": i, "n": 7}) for i in range(5)]
    jobs.append(db.truncate_table("b", "u"))
    assert db.rows("b", "u") == []
    db.run(lambda t: t.insert("b.u", {"id": 1}))
    jobs += [db.drop_table("b", "u"), db.drop_database("a")]
    # the history holds every job, in order, and rebuilds the same schema
    history = db.history.load()
    assert [j.id for j in history] == [j.id for j in jobs]
    assert [j.schema_version for j in history] == list(range(1, len(jobs) + 1))
    assert history == jobs
    # each DDL was a prewrite + commit binlog carrying the job id, in schema-version order
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts())
    ddl = [b for b in pulled if b.ddl_job_id]
    assert [b.ddl_job_id for b in ddl] == [j.id for j in jobs]
    assert [b.ddl_query.decode() for b in ddl] == [j.query for j in jobs]
    assert all(b.ddl_schema_state == 5 for b in ddl)
    for b in ddl:
        assert rec.of(b.start_ts) == [binlog_pb2.Prewrite, binlog_pb2.Commit]
    # a second writer on the same etcd sees the same schema; a DDL it publishes reaches the first
    other, _ = open_db(store_dsn(kind, request, tmp_path))
    assert [r.table.name for r in other.schema.tables()] == []
    assert other.schema.version == db.schema.version
    other.create_table("b", "w", [Column("id", "INT")], primary_key=["id"])
    wait_for(lambda: db.schema.has_table("b", "w"), 10, "the first writer to see the other's DDL")


def test_readme_writer_example_runs(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    import re

    pumps = start_pumps(tmp_path, etcd_server, request, 1)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```py\n(.*?)```", readme, re.DOTALL) if "Database(" in b]
    assert len(blocks) == 1
    store = f"sqlite:///{tmp_path / 'upstream.db'}"
    code = (
        blocks[0].replace('"http://127.0.0.1:2379"', repr(etcd_server.url)).replace('"sqlite:upstream.db"', repr(store))
    )
    exec(compile(code, "README.md upstream writer example", "exec"), {})
    with Database(etcd_server.url, store) as db:
        rows = dict(db.rows("bank", "accounts"))
    assert rows == {
        1: {"id": 1, "balance": Decimal("90.00"), "note": None},
        2: {"id": 2, "balance": Decimal("10.00"), "note": None},
    }
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts())
    assert len([b for b in pulled if not b.ddl_job_id]) == 2
