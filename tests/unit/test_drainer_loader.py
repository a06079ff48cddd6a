"""The loader (drainer/loader.py) with a fake in-memory executor: order, barriers, budget, retries, failures."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from common.events import DDL, DML, Txn, dml_memory
from drainer.loader import ExecError, Executor, Loader
from drainer.sinks.base import SinkError
from tests.unit.test_drainer_causality import Table, random_dmls
from tests.unit.test_drainer_sql import Schema, ins, upd
from upstream.ddl import Column

DEADLINE = 20.0


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


@dataclass
class Call:
    worker: int
    kind: str
    commit_ts: list[int]
    safe: bool


@dataclass
class FakeDB:
    """What every fake executor writes to: the model table, the calls, and knobs to block or fail."""

    table: Table = field(default_factory=Table)
    lock: threading.Lock = field(default_factory=threading.Lock)
    calls: list[Call] = field(default_factory=list)
    committed: list[int] = field(default_factory=list)
    gate: threading.Event = field(default_factory=threading.Event)
    failures: list[ExecError] = field(default_factory=list)
    """Raised (first one first) by the next execute calls."""
    closed: list[int] = field(default_factory=list)
    in_call: int = 0

    def __post_init__(self) -> None:
        self.gate.set()


class FakeExecutor:
    def __init__(self, db: FakeDB, index: int) -> None:
        self.db = db
        self.index = index

    def _enter(self) -> None:
        with self.db.lock:
            self.db.in_call += 1
        self.db.gate.wait()
        with self.db.lock:
            self.db.in_call -= 1
            if self.db.failures:
                raise self.db.failures.pop(0)

    def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        self._enter()
        with self.db.lock:
            self.db.calls.append(Call(self.index, "dml", [d.commit_ts for d in dmls], safe_mode))
            for d in dmls:
                self.db.table.apply(d)
            self.db.committed.extend(d.commit_ts for d in dmls)

    def execute_ddl(self, ddl: DDL, commit_ts: int) -> None:
        self._enter()
        with self.db.lock:
            self.db.calls.append(Call(self.index, "ddl", [commit_ts], False))

    def close(self) -> None:
        self.db.closed.append(self.index)


@pytest.fixture
def schema() -> Schema:
    s = Schema()
    s.create_db("d")
    s.create_table(
        "d", "t", [Column("id", "INT"), Column("u", "INT"), Column("v", "INT")], primary_key=["id"], unique_keys=[["u"]]
    )
    return s


@pytest.fixture
def db() -> FakeDB:
    return FakeDB()


@pytest.fixture
def make_loader(db: FakeDB) -> Iterator[Callable[..., Loader]]:
    loaders: list[Loader] = []

    def make(**kw: object) -> Loader:
        kw.setdefault("backoff", (0.001, 0.002))

        def factory(i: int) -> Executor:
            return FakeExecutor(db, i)

        loader = Loader(factory, **kw)  # type: ignore[arg-type]
        loaders.append(loader)
        return loader

    yield make
    db.gate.set()
    for loader in loaders:
        loader.close()


def txns_of(dmls: list[DML], rng: random.Random, start_ts: int = 100) -> list[Txn]:
    out: list[Txn] = []
    i = 0
    ts = start_ts
    while i < len(dmls):
        n = rng.randint(0, 12)
        out.append(Txn(commit_ts=ts, dmls=dmls[i : i + n], size=50 * n))
        i += n
        ts += rng.randint(1, 5)
    return out


# ----------------------------------------------------------------------------- order and correctness


@pytest.mark.parametrize("seed", range(6))
def test_random_load_keeps_per_key_order_and_reports_in_order(
    schema: Schema, db: FakeDB, make_loader: Callable[..., Loader], seed: int
) -> None:
    rng = random.Random(seed)
    dmls, expected = random_dmls(rng, schema.shape("d", "t"), 1500)
    txns = txns_of(dmls, rng)
    reported: list[int] = []
    loader = make_loader(worker_count=rng.choice([1, 4, 16]), txn_batch=rng.choice([1, 5, 20]))
    loader.start(reported.append)
    for txn in txns:
        loader.add(txn)
    loader.flush(DEADLINE)
    assert db.table.rows == expected
    assert reported == [t.commit_ts for t in txns]
    assert all(len(c.commit_ts) <= loader.txn_batch for c in db.calls)
    assert loader.inflight_bytes == 0


def test_success_only_after_commit(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    reported: list[int] = []
    committed_at_report: list[list[int]] = []

    def on_success(ts: int) -> None:
        with db.lock:
            committed_at_report.append(list(db.committed))
        reported.append(ts)

    loader = make_loader(worker_count=4, txn_batch=2)
    loader.start(on_success)
    db.gate.clear()
    loader.add(Txn(commit_ts=10, dmls=[ins(t, 1, None, 0), ins(t, 2, None, 0), ins(t, 3, None, 0)]))
    loader.add(Txn(commit_ts=11))  # empty: waits for the txn before it
    wait_until(lambda: db.in_call > 0, "a worker to start executing")
    assert reported == []
    with pytest.raises(TimeoutError):
        loader.flush(0.01)
    db.gate.set()
    loader.flush(DEADLINE)
    assert reported == [10, 11]
    assert sorted(committed_at_report[0]) == [10, 10, 10]


def test_empty_txns_reported_in_order(schema: Schema, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    reported: list[int] = []
    loader = make_loader(worker_count=3)
    loader.start(reported.append)
    loader.add(Txn(commit_ts=1))
    loader.add(Txn(commit_ts=2, dmls=[ins(t, 1, None, 0)]))
    loader.add(Txn(commit_ts=3))
    loader.add(Txn(commit_ts=4))
    loader.flush(DEADLINE)
    assert reported == [1, 2, 3, 4]


def test_ddl_is_a_barrier(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    ddl = schema.ddl(lambda p: p.add_column("d", "t", Column("w", "INT")))
    reported: list[int] = []
    loader = make_loader(worker_count=8, txn_batch=3)
    loader.start(reported.append)
    before = [Txn(commit_ts=10 + i, dmls=[ins(t, i, None, 0)]) for i in range(20)]
    after = [Txn(commit_ts=100 + i, dmls=[ins(t, 50 + i, None, 0)]) for i in range(20)]
    for txn in [*before, Txn(commit_ts=50, ddl=ddl), *after]:
        loader.add(txn)
    loader.flush(DEADLINE)
    kinds = [(c.kind, ts) for c in db.calls for ts in c.commit_ts]
    pos = kinds.index(("ddl", 50))
    assert all(ts < 50 for _, ts in kinds[:pos])
    assert all(ts > 50 for _, ts in kinds[pos + 1 :])
    assert [c.worker for c in db.calls if c.kind == "ddl"] == [0]
    assert reported == [*range(10, 30), 50, *range(100, 120)]


def test_skipped_ddl_is_not_executed_but_reported(
    schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]
) -> None:
    ddl = schema.ddl(lambda p: p.add_column("d", "t", Column("w", "INT")))
    skipped = DDL(ddl.db, ddl.table, ddl.query, ddl.job, ddl.before, skip=True)
    reported: list[int] = []
    loader = make_loader()
    loader.start(reported.append)
    loader.add(Txn(commit_ts=7, ddl=skipped))
    loader.flush(DEADLINE)
    assert reported == [7]
    assert db.calls == []


def test_chunks_and_per_txn_mode(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=16, txn_batch=2, enable_dispatch=False)
    assert loader.worker_count == 1
    loader.start(lambda ts: None)
    db.gate.clear()  # let the txns pile up: they must still run one downstream txn each
    for i in range(5):
        loader.add(Txn(commit_ts=10 + i, dmls=[ins(t, 10 * i + j, None, 0) for j in range(i + 1)]))
    db.gate.set()
    loader.flush(DEADLINE)
    assert [c.commit_ts for c in db.calls] == [[10 + i] * (i + 1) for i in range(5)]


def test_detect_off_uses_one_worker(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=8, enable_detect=False)
    loader.start(lambda ts: None)
    for i in range(50):
        loader.add(Txn(commit_ts=10 + i, dmls=[ins(t, i, None, 0)]))
    loader.flush(DEADLINE)
    assert {c.worker for c in db.calls} == {0}
    assert len(db.table.rows) == 50


def test_safe_mode_reaches_the_executor(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=2, safe_mode=True)
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=1, dmls=[ins(t, 1, None, 0)]))
    loader.flush(DEADLINE)
    loader.set_safe_mode(False)
    loader.add(Txn(commit_ts=2, dmls=[ins(t, 2, None, 0)]))
    loader.flush(DEADLINE)
    assert [c.safe for c in db.calls] == [True, False]


# ----------------------------------------------------------------------------- budget


def test_byte_budget_blocks_add(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=2, max_inflight_bytes=1000)
    loader.start(lambda ts: None)
    db.gate.clear()
    first, then = ins(t, 1, None, 0), ins(t, 2, None, 0)
    first.size = then.size = 900  # a DML's cost is what its objects take: its row bytes and overheads
    assert dml_memory(first) > 900
    loader.add(Txn(commit_ts=1, dmls=[first]))  # admitted: the budget was empty
    done = threading.Event()

    def second() -> None:
        loader.add(Txn(commit_ts=2, dmls=[then]))
        done.set()

    th = threading.Thread(target=second)
    th.start()
    wait_until(lambda: loader.blocked_adds == 1, "add() to block on the byte budget")
    assert not done.is_set()
    assert loader.inflight_bytes >= 900
    db.gate.set()
    th.join(DEADLINE)
    assert done.is_set()
    loader.flush(DEADLINE)
    assert loader.inflight_bytes == 0


def test_a_txn_in_parts_is_reported_once_after_its_last_part(
    schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]
) -> None:
    """Parts of one txn are work in flight (flush waits for them) but never a success of their own: the
    commit_ts is reported once, when the last part and everything before it are applied."""
    t = schema.shape("d", "t")
    reported: list[int] = []
    loader = make_loader(worker_count=4, txn_batch=2)
    loader.start(reported.append)
    loader.add(Txn(commit_ts=5, dmls=[ins(t, 1, 1, 0)]))
    loader.flush(DEADLINE)
    db.gate.clear()
    for part in range(3):
        rows = [100 + 10 * part + i for i in range(5)]
        loader.add(Txn(commit_ts=7, dmls=[ins(t, r, r, 0) for r in rows], partial=True))
    with pytest.raises(TimeoutError):
        loader.flush(0.05)  # the parts are in flight
    db.gate.set()
    wait_until(lambda: len(db.committed) == 16, "the parts to be applied")
    time.sleep(0.05)
    assert reported == [5]  # applied, but the txn is not complete
    loader.flush(DEADLINE)  # parts count as added work, so flush waited for all of them
    loader.add(Txn(commit_ts=7, dmls=[ins(t, 99, 99, 0)]))  # the last part
    loader.add(Txn(commit_ts=9))
    loader.flush(DEADLINE)
    assert reported == [5, 7, 9]
    assert sorted(db.committed) == [5] + [7] * 16
    assert loader.inflight_bytes == 0


def test_a_part_that_conflicts_with_an_earlier_part_waits_for_it(
    schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]
) -> None:
    """Causality spans parts: a row changed in two parts is changed in order."""
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=4, txn_batch=1)
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=3, dmls=[ins(t, i, i, 0) for i in range(8)], partial=True))
    loader.add(Txn(commit_ts=3, dmls=[upd(t, (i, i, 0), (i, i, 1)) for i in range(8)]))
    loader.flush(DEADLINE)
    assert db.table.rows == {i: (i, i, 1) for i in range(8)}


def test_one_huge_txn_is_admitted(schema: Schema, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(max_inflight_bytes=10)
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=1, dmls=[ins(t, 1, None, 0)], size=10_000))
    loader.flush(DEADLINE)


# ----------------------------------------------------------------------------- errors


def test_retriable_errors_are_retried_in_safe_mode(
    schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]
) -> None:
    t = schema.shape("d", "t")
    db.failures = [ExecError("lost connection", retriable=True), ExecError("deadlock", retriable=True)]
    reported: list[int] = []
    loader = make_loader(worker_count=1)
    loader.start(reported.append)
    loader.add(Txn(commit_ts=5, dmls=[ins(t, 1, None, 0)]))
    loader.flush(DEADLINE)
    assert reported == [5]
    assert [c.safe for c in db.calls] == [True]  # the try that succeeded was the third, in safe mode
    assert loader.error() is None


def test_retries_give_up(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    db.failures = [ExecError("lock wait timeout", retriable=True) for _ in range(3)]
    loader = make_loader(worker_count=1, dml_retries=3)
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=5, dmls=[ins(t, 1, None, 0)]))
    with pytest.raises(SinkError, match=r"commit_ts 5\.\.5: gave up after 3 tries: lock wait timeout"):
        loader.flush(DEADLINE)


def test_fatal_error_stops_the_loader(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    reported: list[int] = []
    loader = make_loader(worker_count=4)
    loader.start(reported.append)
    loader.add(Txn(commit_ts=1, dmls=[ins(t, 1, None, 0)]))
    loader.flush(DEADLINE)
    db.failures = [ExecError("MySQL error 1146: Table 'd.t' doesn't exist")]
    loader.add(Txn(commit_ts=2, dmls=[ins(t, 2, None, 0)]))
    with pytest.raises(SinkError, match=r"commit_ts 2\.\.2: MySQL error 1146"):
        loader.flush(DEADLINE)
    err = loader.error()
    assert isinstance(err, SinkError)
    with pytest.raises(SinkError, match="1146"):
        loader.add(Txn(commit_ts=3))
    assert reported == [1]


def test_executor_bug_becomes_a_sink_error(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    loader = make_loader(worker_count=1)
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=1, dmls=[ins(t, 1, None, 0)]))
    loader.add(Txn(commit_ts=2, dmls=[ins(t, 1, None, 0)]))  # the model table raises AssertionError
    with pytest.raises(SinkError, match="AssertionError: duplicate id 1"):
        loader.flush(DEADLINE)


def test_ddl_error_names_commit_ts(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    ddl = schema.ddl(lambda p: p.add_column("d", "t", Column("w", "INT")))
    db.failures = [ExecError("'ALTER ...' failed: MySQL error 1064: syntax")]
    loader = make_loader()
    loader.start(lambda ts: None)
    loader.add(Txn(commit_ts=42, ddl=ddl))
    with pytest.raises(SinkError, match=r"DDL at commit_ts 42: 'ALTER \.\.\.' failed: MySQL error 1064"):
        loader.flush(DEADLINE)


# ----------------------------------------------------------------------------- lifecycle


def test_start_failure_closes_what_was_opened(db: FakeDB) -> None:
    def factory(i: int) -> Executor:
        if i == 2:
            raise SinkError("cannot connect")
        return FakeExecutor(db, i)

    loader = Loader(factory, worker_count=4)
    with pytest.raises(SinkError, match="cannot connect"):
        loader.start(lambda ts: None)
    assert sorted(db.closed) == [0, 1]


def test_close_is_idempotent_and_add_after_close_fails(db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    loader = make_loader(worker_count=3)
    with pytest.raises(SinkError, match="before start"):
        loader.add(Txn(commit_ts=1))
    loader.start(lambda ts: None)
    loader.close()
    loader.close()
    assert sorted(db.closed) == [0, 1, 2]
    with pytest.raises(SinkError, match="closed"):
        loader.add(Txn(commit_ts=1))


def test_close_does_not_report_unfinished_work(schema: Schema, db: FakeDB, make_loader: Callable[..., Loader]) -> None:
    t = schema.shape("d", "t")
    reported: list[int] = []
    loader = make_loader(worker_count=2)
    loader.start(reported.append)
    db.gate.clear()
    loader.add(Txn(commit_ts=1, dmls=[ins(t, 1, None, 0)]))
    wait_until(lambda: db.in_call > 0, "the worker to start")
    closer = threading.Thread(target=loader.close)
    closer.start()
    wait_until(lambda: loader.error() is None and loader._closed, "close to begin")
    db.gate.set()
    closer.join(DEADLINE)
    assert not closer.is_alive()
    assert reported == []


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        Loader(lambda i: FakeExecutor(FakeDB(), i), worker_count=0)
