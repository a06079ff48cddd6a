"""Syncer: merger -> schema, filters, translation -> sink; checkpoint cadence, safe mode, fatal errors.

Fakes of our own interfaces only: a recording Sink that reports success at once or when the test
releases it, an in-memory Checkpoint (and the real FileCheckpoint), a DrainerSchema over a
MemoryJobSource, a real Merger fed binlogs built as the upstream writer builds them, a Filter
from a DrainerConfig, and a fake clock.

The fake clock only moves when a test advances it.  Its reads are counted per thread, so a test
can wait until the checkpoint saver (or the syncer loop) has looked at the clock a few times
since some point, that is, until it has had its chance to act on the state the test set up.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pytest

from common import tso
from common.errors import BinlogError
from common.events import DMLType, Txn
from common.pb import binlog_pb2
from common.schema.model import Job, JobState, TableInfo
from drainer.checkpoint import Checkpoint, CheckpointState, FileCheckpoint
from drainer.config import load_config
from drainer.config_syncer import syncer_filter
from drainer.merger import MergeItem, Merger
from drainer.metrics import DrainerMetrics
from drainer.schema import DrainerSchema, MemoryJobSource, UnknownTableError
from drainer.sinks.base import OnSuccess, Sink, SinkError
from drainer.syncer import Syncer, SyncerError
from tests.unit.test_drainer_schema import Writer, full_row
from upstream.ddl import Column
from upstream.mutation import MutationLog

DEADLINE: Final = 10.0
NODE: Final = "pump-1:8250"
SAVE_EVERY: Final = 0.05
"""save_interval of the rigs: fake seconds, and also how often (real seconds) the saver looks at the clock."""
SAVER: Final = "checkpoint-saver"
LOOP: Final = "syncer"


class FakeClock:
    """A monotonic clock that moves only on `advance`; counts reads per thread since `mark`."""

    def __init__(self, now: float = 1000.0) -> None:
        self._now = now
        self._cond = threading.Condition()
        self._reads: Counter[str] = Counter()

    def __call__(self) -> float:
        with self._cond:
            self._reads[threading.current_thread().name] += 1
            self._cond.notify_all()
            return self._now

    def advance(self, seconds: float) -> None:
        with self._cond:
            self._now += seconds

    def settle(self, thread: str, reads: int) -> None:
        """Wait until `thread` has read the clock `reads` times from now on.

        The saver decides whether to save between two reads, so three reads after the state is set
        up mean a decision on that state is made (and its save, if any, written).  The syncer loop
        reads the clock once per round (while safe mode is forced) and acts on it before the next."""
        with self._cond:
            self._reads[thread] = 0
            ok = self._cond.wait_for(lambda: self._reads[thread] >= reads, DEADLINE)
        assert ok, f"{thread} did not read the clock {reads} times"


class FakeSink(Sink):
    """Records what the syncer does; reports successes in order, at once (`auto`) or on `release`."""

    name = "fake"
    safe_mode_aware = True

    def __init__(self, *, auto: bool = True) -> None:
        self.auto = auto
        self.calls: list[str] = []
        self.safe_modes: list[bool] = []
        self.txns: list[Txn] = []
        self.acked: list[int] = []
        """commit_ts of every success reported, once the syncer's callback returned."""
        self.reported_max = 0
        """The highest commit_ts reported (set before the callback runs)."""
        self.fail_add: dict[int, BaseException] = {}
        self.flush_error: BaseException | None = None
        self.closed = False
        self._error: BaseException | None = None
        self._on_success: OnSuccess | None = None
        self._cond = threading.Condition()
        self._report = threading.Lock()
        self._next = 0

    def start(self, on_success: OnSuccess) -> None:
        self.calls.append("start")
        self._on_success = on_success

    def set_safe_mode(self, on: bool) -> None:
        with self._cond:
            self.calls.append(f"safe_mode={on}")
            self.safe_modes.append(on)
            self._cond.notify_all()

    def add(self, txn: Txn) -> None:
        assert self._on_success is not None, "add before start"
        if self._error is not None:
            raise SinkError(f"sink failed: {self._error}")
        exc = self.fail_add.get(txn.commit_ts)
        if exc is not None:
            self._error = exc
            raise exc
        with self._cond:
            assert not self.txns or self.txns[-1].commit_ts < txn.commit_ts, "added out of order"
            self.txns.append(txn)
            self._cond.notify_all()
        if self.auto:
            self.release()

    def release(self, upto: int | None = None) -> None:
        """Report every added txn up to commit_ts `upto` (all when None) that is not reported yet."""
        on_success = self._on_success
        assert on_success is not None
        with self._report:
            with self._cond:
                todo = [t.commit_ts for t in self.txns[self._next :] if upto is None or t.commit_ts <= upto]
                self._next += len(todo)
            for ts in todo:
                self.reported_max = ts
                on_success(ts)
                with self._cond:
                    self.acked.append(ts)
                    self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> None:
        self.calls.append("flush")
        if self.flush_error is not None:
            raise self.flush_error
        if self._error is not None:
            raise SinkError(f"sink failed: {self._error}")
        self.release()

    def close(self) -> None:
        self.closed = True

    def error(self) -> BaseException | None:
        return self._error

    def fail(self, exc: BaseException) -> None:
        self._error = exc

    def wait_txns(self, n: int) -> list[Txn]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.txns) >= n, DEADLINE)
            assert ok, f"sink got {len(self.txns)} txns, waited for {n}"
            return list(self.txns)

    def wait_acked(self, commit_ts: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: commit_ts in self.acked, DEADLINE)
        assert ok, f"success of commit_ts={commit_ts} not reported"

    def wait_safe_modes(self, n: int) -> list[bool]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.safe_modes) >= n, DEADLINE)
            assert ok, f"set_safe_mode called {len(self.safe_modes)} times, waited for {n}"
            return list(self.safe_modes)


class MemoryCheckpoint(Checkpoint):
    """Keeps every save; `guard` returns a complaint about a save (kept in `violations`) or None."""

    kind = "memory"

    def __init__(self, guard: Callable[[CheckpointState], str | None] | None = None) -> None:
        super().__init__()
        self.saves: list[CheckpointState] = []
        self.violations: list[str] = []
        self._guard = guard
        self._cond = threading.Condition()

    def _read(self) -> CheckpointState | None:
        return None

    def _write(self, state: CheckpointState) -> None:
        complaint = None if self._guard is None else self._guard(state)
        with self._cond:
            if complaint is not None:
                self.violations.append(complaint)
            self.saves.append(state)
            self._cond.notify_all()

    def _close(self) -> None:
        pass

    def wait_saves(self, n: int) -> list[CheckpointState]:
        with self._cond:
            ok = self._cond.wait_for(lambda: len(self.saves) >= n, DEADLINE)
            assert ok, f"{len(self.saves)} checkpoint saves, waited for {n}: {self.saves}"
            return list(self.saves)


def state(ts: int, version: int, consistent: bool = False) -> CheckpointState:
    return CheckpointState(ts, version, consistent)


class WatchedSource(MemoryJobSource):
    """A MemoryJobSource that tells when a job id was looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []
        self._cond = threading.Condition()

    def job(self, job_id: int) -> Job | None:
        with self._cond:
            self.asked.append(job_id)
            self._cond.notify_all()
        return super().job(job_id)

    def wait_asked(self, job_id: int) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: job_id in self.asked, DEADLINE)
        assert ok, f"job {job_id} was never looked up"


class Rig:
    """One syncer over fakes.  Build tables with `w` first, then `start`, then `put` binlogs."""

    def __init__(self, *, auto: bool = True) -> None:
        self.w = Writer()
        self.source = self.w.source = WatchedSource()
        self.w.ddl(lambda p: p.create_database("d"))
        self.clock = FakeClock()
        self.sink = FakeSink(auto=auto)
        self.checkpoint: Checkpoint = MemoryCheckpoint(self._guard)
        self.fatal: list[BaseException] = []
        self._fatal_seen = threading.Event()
        self.merger = Merger(0)
        self.merger.add_source(NODE)
        self.schema: DrainerSchema | None = None
        self.syncer: Syncer | None = None
        self.metrics = DrainerMetrics()
        self.stopped = False

    def _guard(self, st: CheckpointState) -> str | None:
        if st.commit_ts > self.sink.reported_max:
            return f"saved commit_ts={st.commit_ts} ahead of the last success {self.sink.reported_max}"
        return None

    @property
    def saves(self) -> list[CheckpointState]:
        assert isinstance(self.checkpoint, MemoryCheckpoint)
        return list(self.checkpoint.saves)

    def wait_saves(self, n: int) -> list[CheckpointState]:
        assert isinstance(self.checkpoint, MemoryCheckpoint)
        return self.checkpoint.wait_saves(n)

    # ------------------------------------------------------------------ tables and binlogs
    def table(self, name: str) -> TableInfo:
        return self.w.create_table("d", name, [Column("id", "INT"), Column("v", "INT")], primary_key=["id"])

    def insert(self, *rows: tuple[TableInfo, int], schema_version: int | None = None) -> binlog_pb2.Binlog:
        """One txn inserting row (i, 10 * i) into each table, as the table is now (other columns default)."""
        log = MutationLog()
        for t, i in rows:
            log.insert(t, i, self.row(t, i))
        return self.w.commit(log, schema_version)

    def delete(self, t: TableInfo, i: int) -> binlog_pb2.Binlog:
        log = MutationLog()
        log.delete(t, i, self.row(t, i))
        return self.w.commit(log)

    def row(self, t: TableInfo, i: int) -> dict[str, Any]:
        return full_row(self.w.schema.table("d", t.name), {"id": i, "v": i * 10})

    def fake(self) -> binlog_pb2.Binlog:
        ts = self.w.next_ts()
        return binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=ts, commit_ts=ts)

    def ddl_binlog(self, job: Job) -> binlog_pb2.Binlog:
        start = self.w.next_ts()
        return binlog_pb2.Binlog(
            tp=binlog_pb2.Commit,
            start_ts=start,
            commit_ts=self.w.next_ts(),
            ddl_job_id=job.id,
            ddl_query=job.query.encode(),
        )

    # ------------------------------------------------------------------ syncer
    def start(self, flags: Mapping[str, object] | None = None, *, version: int | None = None) -> Syncer:
        """Start at schema `version` (default: the writer's current one), configured by drainer flags."""
        syncer = self.build(flags, version=version)
        syncer.start()
        return syncer

    def build(self, flags: Mapping[str, object] | None = None, *, version: int | None = None) -> Syncer:
        cfg = load_config(flags={"syncer.safe-mode-duration": "0s", **(flags or {})}, env={})
        v = self.w.schema.version if version is None else version
        self.schema = DrainerSchema(self.w.source)
        self.schema.load(v)
        self.syncer = Syncer(
            self.merger,
            self.schema,
            self.sink,
            self.checkpoint,
            syncer_filter(cfg.syncer),
            start_ts=0,
            schema_version=v,
            sync_ddl=cfg.syncer.sync_ddl,
            safe_mode=cfg.syncer.safe_mode,
            safe_mode_duration=cfg.syncer.safe_mode_duration,
            save_interval=SAVE_EVERY,
            on_fatal=self._on_fatal,
            metrics=self.metrics,
            clock=self.clock,
        )
        return self.syncer

    def _on_fatal(self, exc: BaseException) -> None:
        self.fatal.append(exc)
        self._fatal_seen.set()

    def wait_fatal(self) -> BaseException:
        assert self._fatal_seen.wait(DEADLINE), "on_fatal was not called"
        return self.fatal[0]

    def put(self, *binlogs: binlog_pb2.Binlog) -> None:
        for b in binlogs:
            assert self.merger.put(MergeItem(NODE, b, b.ByteSize()), timeout=DEADLINE)

    def stop(self) -> None:
        assert self.syncer is not None
        self.stopped = True
        self.syncer.stop(flush_timeout=DEADLINE)

    def periodic_save_due(self) -> None:
        """Move the fake clock past the save interval."""
        self.clock.advance(SAVE_EVERY)

    def saver_had_its_chance(self) -> None:
        self.clock.settle(SAVER, 3)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels or {})


@pytest.fixture
def rigs() -> Iterator[Callable[..., Rig]]:
    made: list[Rig] = []

    def make(**kw: Any) -> Rig:
        r = Rig(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        if r.syncer is not None and not r.stopped:
            r.stop()
        r.merger.close()
        r.checkpoint.close()


def values(txn: Txn) -> list[tuple[str, DMLType, Any]]:
    return [(d.shape.table, d.tp, d.values or d.old_values) for d in txn.dmls]


# ---------------------------------------------------------------------------------- empty txns


def test_fake_binlogs_and_ignored_commit_ts_become_empty_txns_that_move_the_checkpoint(
    rigs: Callable[..., Rig],
) -> None:
    r = rigs()
    t = r.table("t")
    version = r.w.schema.version
    fake1 = r.fake()
    ignored = r.insert((t, 1))
    ghost = r.w.ddl(lambda p: p.create_table("d", "ghost", [Column("id", "INT")]), publish=False).table
    assert ghost is not None
    log = MutationLog()
    log.insert(ghost, 1, {"id": 1})
    ignored_unknown = r.w.commit(log, schema_version=version)  # never decoded: an unknown table is no error
    fake2 = r.fake()
    r.start({"syncer.ignore-txn-commit-ts": [ignored.commit_ts, ignored_unknown.commit_ts]}, version=version)
    r.put(fake1, ignored, ignored_unknown, fake2)

    txns = r.sink.wait_txns(4)
    assert [(x.commit_ts, x.is_empty, x.binlog) for x in txns] == [
        (b.commit_ts, True, b) for b in (fake1, ignored, ignored_unknown, fake2)
    ]
    r.sink.wait_acked(fake2.commit_ts)
    assert r.saves == []  # successes alone do not save before the interval
    r.periodic_save_due()
    assert r.wait_saves(1) == [state(fake2.commit_ts, version)]
    assert r.fatal == []
    r.stop()
    assert r.saves[-1] == state(fake2.commit_ts, version, consistent=True)
    assert r.metric("binlog_drainer_event_total", {"type": "Insert"}) == 0


# ---------------------------------------------------------------------------------- DDL


def test_ddl_applies_its_job_and_the_checkpoint_is_saved_right_after_it_succeeds(rigs: Callable[..., Rig]) -> None:
    r = rigs(auto=False)
    r.start()
    before = r.w.schema.version
    job = r.w.ddl(lambda p: p.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"]))
    t = r.w.schema.table("d", "t")
    ddl_b = r.ddl_binlog(job)
    dml_b = r.insert((t, 7))
    r.put(ddl_b, dml_b)

    ddl_txn, dml_txn = r.sink.wait_txns(2)
    assert ddl_txn.ddl is not None
    assert (ddl_txn.commit_ts, ddl_txn.ddl.query, ddl_txn.ddl.skip) == (ddl_b.commit_ts, job.query, False)
    assert (ddl_txn.ddl.db, ddl_txn.ddl.table, ddl_txn.ddl.job.id, ddl_txn.schema_version) == ("d", "t", job.id, 2)
    assert not ddl_txn.ddl.before.has_table("d", "t")
    assert ddl_txn.dmls == []
    assert values(dml_txn) == [("t", DMLType.INSERT, (7, 70))]  # decoded with the table the DDL created
    assert r.schema is not None
    assert r.schema.version() == job.schema_version == before + 1

    # the DDL is a barrier: the sink applies it alone (flushed before and after) and the checkpoint is
    # saved right after it, with its schema version, with no clock movement
    assert r.wait_saves(1) == [state(ddl_b.commit_ts, job.schema_version)]
    assert ddl_b.commit_ts in r.sink.acked
    assert dml_b.commit_ts not in r.sink.acked
    r.sink.release()
    r.saver_had_its_chance()
    assert len(r.saves) == 1  # a DML's success waits for the interval
    r.periodic_save_due()
    assert r.wait_saves(2)[1] == state(dml_b.commit_ts, job.schema_version)
    assert r.metric("binlog_drainer_ddl_jobs_total") == 1
    assert r.metric("binlog_drainer_event_total", {"type": "DDL"}) == 1
    assert r.metric("binlog_drainer_event_total", {"type": "Insert"}) == 1
    assert r.metric("binlog_drainer_event_total", {"type": "savepoint"}) == 2
    assert r.metric("binlog_drainer_checkpoint_tso") == tso.physical(dml_b.commit_ts)


def test_cancelled_ddl_job_moves_the_checkpoint_but_executes_nothing(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    version = r.w.schema.version
    job = r.w.ddl(lambda p: p.create_table("d", "never", [Column("id", "INT")]), publish=False)
    cancelled = replace(job, state=JobState.CANCELLED)
    r.w.source.add(cancelled)
    r.start(version=version)
    ddl_b = r.ddl_binlog(cancelled)
    fake = r.fake()
    r.put(ddl_b, fake)

    txns = r.sink.wait_txns(2)
    assert [(x.commit_ts, x.is_empty) for x in txns] == [(ddl_b.commit_ts, True), (fake.commit_ts, True)]
    r.sink.wait_acked(fake.commit_ts)
    assert r.schema is not None
    assert r.schema.version() == version
    assert not r.schema.infoschema.has_table("d", "never")
    r.saver_had_its_chance()
    assert r.saves == []  # not a DDL that ran: no immediate save
    r.periodic_save_due()
    assert r.wait_saves(1) == [state(fake.commit_ts, version)]
    assert r.metric("binlog_drainer_event_total", {"type": "DDL"}) == 0


@pytest.mark.parametrize(
    "flags",
    [
        {"syncer.sync-ddl": False},
        {"syncer.event-filter": [{"schema-pattern": "d", "ignore-event": ["create table"]}]},
    ],
    ids=["sync-ddl-false", "ddl-event-rule"],
)
def test_ddl_not_executed_is_sent_with_skip_and_still_applied(
    rigs: Callable[..., Rig], flags: dict[str, object]
) -> None:
    r = rigs(auto=False)
    r.start(flags)
    job = r.w.ddl(lambda p: p.create_table("d", "t", [Column("id", "INT"), Column("v", "INT")], primary_key=["id"]))
    t = r.w.schema.table("d", "t")
    ddl_b = r.ddl_binlog(job)
    dml_b = r.insert((t, 1))
    r.put(ddl_b, dml_b)
    ddl_txn, dml_txn = r.sink.wait_txns(2)
    assert ddl_txn.ddl is not None
    assert ddl_txn.ddl.skip
    assert values(dml_txn) == [("t", DMLType.INSERT, (1, 10))]  # the job was applied all the same
    r.sink.release(ddl_b.commit_ts)
    assert r.wait_saves(1) == [state(ddl_b.commit_ts, job.schema_version)]  # saved at once, as any DDL
    assert r.metric("binlog_drainer_event_total", {"type": "DDL"}) == 0  # not executed


# ---------------------------------------------------------------------------------- filters


def test_filtered_tables_and_event_types_are_dropped_and_filtered_txns_move_the_checkpoint(
    rigs: Callable[..., Rig],
) -> None:
    r = rigs()
    keep, skip, noins = r.table("keep"), r.table("skip"), r.table("noins")
    r.start(
        {
            "syncer.ignore-table": [{"db-name": "d", "tbl-name": "~^skip"}],
            "syncer.event-filter": [{"schema-pattern": "d", "table-pattern": "noins", "ignore-event": ["insert"]}],
        }
    )
    mixed = r.insert((keep, 1), (skip, 1), (noins, 1), (keep, 2))
    gone = r.delete(noins, 5)
    only_filtered = r.insert((skip, 2), (noins, 3))
    job = r.w.ddl(lambda p: p.create_table("d", "skip_later", [Column("id", "INT")]))
    filtered_ddl = r.ddl_binlog(job)
    r.put(mixed, gone, only_filtered, filtered_ddl)

    txns = r.sink.wait_txns(4)
    assert [x.commit_ts for x in txns] == [b.commit_ts for b in (mixed, gone, only_filtered, filtered_ddl)]
    assert values(txns[0]) == [("keep", DMLType.INSERT, (1, 10)), ("keep", DMLType.INSERT, (2, 20))]
    assert values(txns[1]) == [("noins", DMLType.DELETE, (5, 50))]
    assert txns[2].is_empty
    assert txns[3].is_empty
    assert txns[3].ddl is None
    r.sink.wait_acked(filtered_ddl.commit_ts)
    r.periodic_save_due()
    # the checkpoint moves over the filtered txn and DDL, and takes the DDL's schema version along
    assert r.wait_saves(1) == [state(filtered_ddl.commit_ts, job.schema_version)]
    assert r.metric("binlog_drainer_event_total", {"type": "Insert"}) == 2
    assert r.metric("binlog_drainer_event_total", {"type": "Delete"}) == 1
    assert r.metric("binlog_drainer_event_total", {"type": "DDL"}) == 0


# ---------------------------------------------------------------------------------- checkpoint cadence


def test_checkpoint_is_never_saved_ahead_of_the_sinks_success_reports(rigs: Callable[..., Rig]) -> None:
    r = rigs(auto=False)
    t = r.table("t")
    r.start()
    b1 = r.insert((t, 1))
    b2 = r.fake()
    job = r.w.ddl(lambda p: p.add_column("d", "t", Column("n", "INT", default=3)))
    b3 = r.ddl_binlog(job)
    b4 = r.insert((t, 2))
    b5 = r.fake()
    r.put(b1, b2, b3, b4, b5)
    r.sink.wait_txns(5)

    # the DDL is a barrier: everything before it applied and saved, then the DDL applied and saved
    assert r.wait_saves(2) == [state(b2.commit_ts, 2), state(b3.commit_ts, job.schema_version)]
    for _ in range(3):  # intervals pass, nothing after the DDL has succeeded: nothing more to save
        r.periodic_save_due()
        r.saver_had_its_chance()
    assert len(r.saves) == 2
    r.sink.release(b4.commit_ts)
    r.periodic_save_due()
    assert r.wait_saves(3)[2] == state(b4.commit_ts, job.schema_version)
    assert r.syncer is not None
    st = r.syncer.status()
    assert (st.last_ts, st.saved_ts, st.schema_version) == (b4.commit_ts, b4.commit_ts, job.schema_version)
    r.stop()  # the flush lets the sink report b5
    assert r.saves[-1] == state(b5.commit_ts, job.schema_version, consistent=True)
    assert isinstance(r.checkpoint, MemoryCheckpoint)
    assert r.checkpoint.violations == []
    assert [s.commit_ts for s in r.saves] == sorted(s.commit_ts for s in r.saves)


def test_saves_every_interval_only_when_there_is_progress(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    t = r.table("t")
    r.start()
    version = r.w.schema.version
    r.periodic_save_due()
    r.saver_had_its_chance()
    assert r.saves == []  # no progress since start
    b1 = r.insert((t, 1))
    r.put(b1)
    r.sink.wait_acked(b1.commit_ts)
    r.saver_had_its_chance()
    assert r.saves == []  # progress, but the interval has not passed
    r.periodic_save_due()
    assert r.wait_saves(1) == [state(b1.commit_ts, version)]
    for _ in range(3):  # intervals without progress: no saves
        r.periodic_save_due()
        r.saver_had_its_chance()
    assert len(r.saves) == 1
    b2, b3 = r.insert((t, 2)), r.fake()
    r.put(b2, b3)
    r.sink.wait_acked(b3.commit_ts)
    r.periodic_save_due()
    assert r.wait_saves(2)[1] == state(b3.commit_ts, version)  # one save at the newest success
    r.saver_had_its_chance()
    assert len(r.saves) == 2


def test_clean_stop_saves_consistent_true_in_the_savepoint_file(rigs: Callable[..., Rig], tmp_path: Path) -> None:
    r = rigs(auto=False)
    r.checkpoint = FileCheckpoint(tmp_path)
    t = r.table("t")
    r.start()
    bs = [r.insert((t, i)) for i in range(1, 4)]
    r.put(*bs)
    r.sink.wait_txns(3)
    r.stop()
    assert r.sink.calls[-1] == "flush"
    assert r.sink.acked == [b.commit_ts for b in bs]
    stored = FileCheckpoint(tmp_path).load()
    assert stored == state(bs[-1].commit_ts, r.w.schema.version, consistent=True)
    assert (tmp_path / "savepoint").read_text() == (
        f"consistent = true\ncommitTS = {bs[-1].commit_ts}\nschema-version = {r.w.schema.version}\n"
    )


def test_stop_when_the_flush_times_out_saves_inconsistent_at_the_last_success(rigs: Callable[..., Rig]) -> None:
    r = rigs(auto=False)
    t = r.table("t")
    r.start()
    b1, b2 = r.insert((t, 1)), r.insert((t, 2))
    r.put(b1, b2)
    r.sink.wait_txns(2)
    r.sink.release(b1.commit_ts)
    r.sink.flush_error = TimeoutError("sink still busy")
    r.stop()
    assert r.saves == [state(b1.commit_ts, r.w.schema.version, consistent=False)]


# ---------------------------------------------------------------------------------- safe mode


@pytest.mark.parametrize("configured", [False, True])
def test_safe_mode_is_forced_at_start_then_follows_the_config(rigs: Callable[..., Rig], configured: bool) -> None:
    r = rigs()
    syncer = r.start({"syncer.safe-mode": configured, "syncer.safe-mode-duration": "5m"})
    assert syncer.safe_mode_duration == 300.0
    assert r.sink.calls[:2] == ["safe_mode=True", "start"]  # forced before the first txn can be added
    r.put(r.fake())  # the window counts from the first binlog
    r.sink.wait_txns(1)
    r.clock.advance(299.0)
    r.clock.settle(LOOP, 2)
    assert r.sink.safe_modes == [True]
    r.clock.advance(1.0)
    assert r.sink.wait_safe_modes(2) == [True, configured]
    r.clock.advance(1000.0)
    r.put(r.fake())
    r.sink.wait_txns(2)
    assert r.sink.safe_modes == [True, configured]  # switched once


def test_forced_safe_mode_counts_from_the_first_binlog(rigs: Callable[..., Rig]) -> None:
    """A merge blocked at start-up (a pump down) does not use up the window that covers the crash replay."""
    r = rigs()
    syncer = r.build({"syncer.safe-mode-duration": "5m"})
    r.clock.advance(200.0)  # built, started later
    syncer.start()
    r.clock.advance(600.0)  # no binlog yet: longer than the window, which has not begun
    r.put(r.fake())
    r.sink.wait_txns(1)
    assert r.sink.safe_modes == [True]
    r.clock.advance(299.0)
    r.clock.settle(LOOP, 2)
    assert r.sink.safe_modes == [True]
    r.clock.advance(1.0)
    assert r.sink.wait_safe_modes(2) == [True, False]


@pytest.mark.parametrize("configured", [False, True])
def test_safe_mode_is_never_forced_when_the_duration_is_0(rigs: Callable[..., Rig], configured: bool) -> None:
    r = rigs()
    r.start({"syncer.safe-mode": configured, "syncer.safe-mode-duration": "0s"})
    assert r.sink.calls[:2] == [f"safe_mode={configured}", "start"]
    r.clock.advance(1000.0)
    r.put(r.fake(), r.fake())
    r.sink.wait_txns(2)
    assert r.sink.safe_modes == [configured]


# ---------------------------------------------------------------------------------- failures


def test_unknown_table_id_stops_the_syncer_before_that_binlog(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    t = r.table("t")
    version = r.w.schema.version
    ghost = r.w.ddl(lambda p: p.create_table("d", "ghost", [Column("id", "INT")]), publish=False).table
    assert ghost is not None
    r.start(version=version)
    good = r.insert((t, 1), schema_version=version)
    log = MutationLog()
    log.insert(ghost, 1, {"id": 1})
    bad = r.w.commit(log, schema_version=version)
    after = [r.fake(), r.insert((t, 2), schema_version=version)]
    r.put(good, bad, *after)

    exc = r.wait_fatal()
    assert isinstance(exc, UnknownTableError)
    assert (exc.table_id, exc.commit_ts, exc.node_id) == (ghost.id, bad.commit_ts, NODE)
    msg = str(exc)
    assert f"unknown table id {ghost.id}" in msg
    assert f"commit_ts={bad.commit_ts}" in msg
    assert f"pump {NODE}" in msg
    assert r.syncer is not None
    assert r.syncer.error() is exc
    assert [x.commit_ts for x in r.sink.txns] == [good.commit_ts]  # nothing at or after it
    r.stop()
    assert r.saves[-1] == state(good.commit_ts, version, consistent=False)
    assert [x.commit_ts for x in r.sink.txns] == [good.commit_ts]
    assert len(r.fatal) == 1


def test_a_failed_sink_stops_the_syncer(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    t = r.table("t")
    r.start()
    b1 = r.insert((t, 1))
    r.put(b1)
    r.sink.wait_acked(b1.commit_ts)
    r.sink.fail(SinkError("disk full at commit_ts=123"))
    exc = r.wait_fatal()
    assert isinstance(exc, SyncerError)
    assert "sink failed: disk full at commit_ts=123" in str(exc)
    assert isinstance(exc.__cause__, SinkError)
    r.put(r.fake())
    r.stop()
    assert [x.commit_ts for x in r.sink.txns] == [b1.commit_ts]
    assert r.saves[-1] == state(b1.commit_ts, r.w.schema.version, consistent=False)


def test_a_sink_add_error_stops_the_syncer_at_that_txn(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    t = r.table("t")
    r.start()
    b1, b2, b3 = r.insert((t, 1)), r.insert((t, 2)), r.fake()
    r.sink.fail_add[b2.commit_ts] = SinkError(f"commit_ts={b2.commit_ts}: duplicate key")
    r.put(b1, b2, b3)
    exc = r.wait_fatal()
    assert isinstance(exc, SinkError)
    assert f"commit_ts={b2.commit_ts}" in str(exc)
    r.stop()
    assert [x.commit_ts for x in r.sink.txns] == [b1.commit_ts]
    assert r.saves[-1] == state(b1.commit_ts, r.w.schema.version, consistent=False)


def test_stop_while_a_ddl_job_is_awaited_is_prompt_and_clean(rigs: Callable[..., Rig]) -> None:
    r = rigs()
    threads_before = set(threading.enumerate())
    r.start()
    version = r.w.schema.version
    b1 = r.fake()
    start = r.w.next_ts()
    missing = binlog_pb2.Binlog(
        tp=binlog_pb2.Commit,
        start_ts=start,
        commit_ts=r.w.next_ts(),
        ddl_job_id=4242,
        ddl_query=b"CREATE TABLE x (a INT)",
    )
    r.put(b1, missing)
    r.source.wait_asked(4242)  # the job is not in the history (yet): the syncer waits for it
    r.sink.wait_acked(b1.commit_ts)
    began = time.monotonic()
    r.stop()
    assert time.monotonic() - began < DEADLINE / 2  # not the flush timeout nor the DDL job timeout
    assert [t for t in set(threading.enumerate()) - threads_before if t.name in (LOOP, SAVER)] == []
    assert r.fatal == []
    assert r.syncer is not None
    assert r.syncer.error() is None
    assert [x.commit_ts for x in r.sink.txns] == [b1.commit_ts]
    assert r.saves[-1] == state(b1.commit_ts, version, consistent=True)


def test_a_failed_checkpoint_save_stops_the_syncer(rigs: Callable[..., Rig]) -> None:
    class BrokenCheckpoint(MemoryCheckpoint):
        def _write(self, state: CheckpointState) -> None:
            raise BinlogError("checkpoint table is gone")

    r = rigs()
    r.checkpoint = BrokenCheckpoint()
    r.start()
    b = r.fake()
    r.put(b)
    r.sink.wait_acked(b.commit_ts)
    r.periodic_save_due()
    exc = r.wait_fatal()
    assert isinstance(exc, SyncerError)
    assert f"checkpoint save at commit_ts={b.commit_ts} failed: checkpoint table is gone" in str(exc)


# ---------------------------------------------------------------------------------- idle_for


def test_idle_for_counts_from_the_last_applied_dml_or_ddl_and_is_0_while_some_are_in_flight(
    rigs: Callable[..., Rig],
) -> None:
    r = rigs(auto=False)
    t = r.table("t")
    syncer = r.start()
    assert syncer.idle_for() == 0.0
    r.clock.advance(10.0)
    assert syncer.idle_for() == 10.0  # nothing applied since start
    dml = r.insert((t, 1))
    fake = r.fake()
    r.put(dml, fake)
    r.sink.wait_txns(2)
    assert syncer.idle_for() == 0.0  # a DML in flight
    r.clock.advance(5.0)
    assert syncer.idle_for() == 0.0
    r.sink.release()
    assert syncer.status().last_ts == fake.commit_ts
    assert syncer.status().last_progress == r.clock()
    assert syncer.idle_for() == 0.0  # just applied
    r.clock.advance(7.0)
    assert syncer.idle_for() == 7.0
    fake2 = r.fake()
    r.put(fake2)
    r.sink.wait_txns(3)
    assert syncer.idle_for() == 7.0  # fake binlogs are not data: in flight or applied
    r.sink.release()
    r.clock.advance(1.0)
    assert syncer.idle_for() == 8.0
    job = r.w.ddl(lambda p: p.create_table("d", "u", [Column("id", "INT")]))
    r.put(r.ddl_binlog(job))
    r.sink.wait_txns(4)
    assert syncer.idle_for() == 0.0  # a DDL counts as data
    r.sink.release()
    r.clock.advance(2.0)
    assert syncer.idle_for() == 2.0


# ------------------------------------------------------------------------------- consistent flag


def test_a_consistent_checkpoint_is_marked_inconsistent_before_anything_is_applied(rigs: Callable[..., Rig]) -> None:
    """After a clean stop the stored checkpoint says consistent=true; once this run applies past it, a
    kill -9 must not leave that claim behind: start() rewrites it as consistent=false first."""
    r = rigs()
    assert isinstance(r.checkpoint, MemoryCheckpoint)
    r.checkpoint.save(0, r.w.schema.version, consistent=True)  # what a clean stop left
    r.start()
    assert r.saves[-1] == state(0, r.w.schema.version, consistent=False)


def test_stop_without_start_leaves_the_checkpoint_alone(rigs: Callable[..., Rig]) -> None:
    """A drainer whose start failed half-way (e.g. its gRPC port taken) must not claim consistent=true."""
    r = rigs()
    assert isinstance(r.checkpoint, MemoryCheckpoint)
    r.checkpoint.save(0, r.w.schema.version, consistent=False)  # a kill -9 left this
    r.build()
    r.stop()
    assert r.saves == [state(0, r.w.schema.version, consistent=False)]


@pytest.mark.parametrize(
    ("duration", "safe", "warned"), [("0s", False, True), ("0s", True, False), ("5m", False, False)]
)
def test_an_unclean_stop_without_safe_mode_is_warned_about(
    rigs: Callable[..., Rig], caplog: pytest.LogCaptureFixture, duration: str, safe: bool, warned: bool
) -> None:
    """The nemesis suite ran with safe-mode-duration 0 and met what that means: a kill -9 after the sink
    applied binlogs past the saved checkpoint, and their replay stopped the drainer on a duplicate key.
    With safe mode off the start says so, naming the setting that replays them idempotently."""
    r = rigs()
    assert isinstance(r.checkpoint, MemoryCheckpoint)
    r.checkpoint.save(0, r.w.schema.version, consistent=False)  # a kill -9 left this
    with caplog.at_level("WARNING", logger="drainer.syncer"):
        r.start({"syncer.safe-mode": safe, "syncer.safe-mode-duration": duration})
    assert ("did not stop cleanly" in caplog.text and "safe-mode-duration" in caplog.text) is warned
