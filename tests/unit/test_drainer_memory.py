"""What the drainer's translation path holds in memory, measured with tracemalloc.

* ``dml_memory`` (the unit of the loader's byte budget) stays close to what decoded DMLs take;
* a large transaction read in place and translated lazily holds about one part of DMLs at a time,
  not all of them (decoded rows take about 1.5x their binlog bytes, and more for narrow rows);
* the syncer hands a large transaction to a sink that takes parts in parts of about
  ``TXN_PART_BYTES``, the last one not partial, and the checkpoint passes it only after the last.
"""

from __future__ import annotations

import datetime as dt
import gc
import random
import tracemalloc
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest

from common.events import DML, Txn, dml_memory
from common.pb import binlog_pb2
from common.pb.wire import split_binlog
from common.schema.model import TableInfo
from common.sql.render import Renderer
from drainer.merger import MergeItem
from drainer.schema import DrainerSchema
from drainer.translator import translate, translate_iter
from tests.unit.test_drainer_schema import Writer, full_row
from tests.unit.test_drainer_syncer import DEADLINE, NODE, FakeSink, MemoryCheckpoint, Rig
from upstream.ddl import Column
from upstream.mutation import MutationLog

SYSBENCH = [
    Column("id", "BIGINT"),
    Column("k", "INT", nullable=False, default=0),
    Column("c", "CHAR(120)", nullable=False, default=""),
    Column("pad", "CHAR(60)", nullable=False, default=""),
]
WIDE = [Column("id", "BIGINT"), *(Column(f"i{n}", "INT") for n in range(10)), Column("d", "DECIMAL(20,4)"),
        Column("t", "DATETIME(3)"), Column("s", "VARCHAR(20)")]  # fmt: skip
BLOBS = [Column("id", "BIGINT"), Column("b", "LONGBLOB")]


def text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefghij-0123456789") for _ in range(n))


def sysbench_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {"id": i, "k": rng.randrange(1 << 20), "c": text(rng, 119), "pad": text(rng, 59)}


def wide_row(rng: random.Random, i: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": i, **{f"i{n}": rng.randrange(-(1 << 31), 1 << 31) for n in range(10)}}
    row.update(d=Decimal(rng.randrange(10**8)) / 10000, t=dt.datetime(2024, 1, 2, 3, 4, 5, 6000), s=text(rng, 12))
    return row


def blob_row(rng: random.Random, i: int) -> dict[str, Any]:
    return {"id": i, "b": rng.randbytes(64 << 10)}


def commit(
    columns: list[Column], rows: int, make: Callable[[random.Random, int], dict[str, Any]], *, updates: bool = False
) -> tuple[Writer, binlog_pb2.Binlog]:
    w = Writer()
    w.ddl(lambda p: p.create_database("d"))
    t: TableInfo = w.create_table("d", "t", columns, primary_key=["id"])
    rng = random.Random(7)
    log = MutationLog()
    for i in range(rows):
        row = full_row(t, make(rng, i))
        log.insert(t, i, row)
        if updates:
            new = full_row(t, {**make(rng, i), "id": i})
            log.update(t, i, row, new)
            log.delete(t, i, new)
    return w, w.commit(log)


def schema_of(w: Writer) -> DrainerSchema:
    s = DrainerSchema(w.source)
    s.load(w.schema.version)
    return s


def traced(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """``fn()``, the bytes it left allocated and its peak above the start (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = fn()
        now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, now - before, peak - before


CASES = [(SYSBENCH, 3000, sysbench_row, False), (SYSBENCH, 1000, sysbench_row, True), (WIDE, 3000, wide_row, False),
         (BLOBS, 40, blob_row, False)]  # fmt: skip


@pytest.mark.parametrize(
    ("columns", "rows", "make", "updates"),
    CASES,
    ids=["sysbench inserts", "sysbench insert-update-delete", "wide int rows", "64 KiB blobs"],
)
def test_dml_memory_is_close_to_what_decoded_dmls_take(
    columns: list[Column], rows: int, make: Callable[[random.Random, int], dict[str, Any]], updates: bool
) -> None:
    w, b = commit(columns, rows, make, updates=updates)
    schema = schema_of(w)
    _, view = split_binlog(b.SerializeToString())
    (_, dmls), held, _ = traced(lambda: translate(b, schema, prewrite_value=view))
    estimate = sum(map(dml_memory, dmls))
    encoded = sum(d.size for d in dmls)
    assert 0.75 * held <= estimate <= 1.5 * held, (estimate, held)
    if columns is not BLOBS:
        assert held > 1.3 * encoded  # why the budget cannot count binlog bytes


def test_a_large_txn_translated_lazily_holds_one_part_not_all_of_it() -> None:
    w, b = commit(SYSBENCH, 30_000, sysbench_row)
    schema = schema_of(w)
    raw = b.SerializeToString()
    renderer = Renderer("mysql")
    part_bytes = 256 << 10

    def lazily() -> int:
        binlog, view = split_binlog(raw)  # as the puller does: the rows stay in `raw`
        _, dmls = translate_iter(binlog, schema, prewrite_value=view)
        part: list[DML] = []
        size = n = 0
        for d in dmls:
            part.append(d)
            size += dml_memory(d)
            if size >= part_bytes:
                n += len(renderer.render(part, False))
                part, size = [], 0
        return n + len(renderer.render(part, False))

    def eagerly() -> int:
        binlog, view = split_binlog(raw)
        _, dmls = translate(binlog, schema, prewrite_value=view)
        return len(renderer.render(dmls, False))

    _, _, lazy_peak = traced(lazily)
    _, _, eager_peak = traced(eagerly)
    assert len(raw) > 5 << 20
    assert eager_peak > 1.3 * len(raw)  # every row decoded at once
    assert lazy_peak < 4 * part_bytes  # a part, its statements, and the row being decoded
    assert lazy_peak < eager_peak / 10


# ------------------------------------------------------------------------------------------ syncer parts


class PartsSink(FakeSink):
    """A FakeSink that takes parts: it reports a commit_ts when its last (non-partial) part comes."""

    @property
    def takes_parts(self) -> bool:
        return True

    def add(self, txn: Txn) -> None:
        with self._cond:
            assert not self.txns or self.txns[-1].commit_ts < txn.commit_ts or self.txns[-1].partial
            self.txns.append(txn)
            self._cond.notify_all()
        if not txn.partial:
            self.release()

    def release(self, upto: int | None = None) -> None:
        on_success = self._on_success
        assert on_success is not None
        with self._report:
            with self._cond:
                todo = [t.commit_ts for t in self.txns[self._next :] if not t.partial]
                self._next = len(self.txns)
            for ts in todo:
                self.reported_max = ts
                on_success(ts)
                with self._cond:
                    self.acked.append(ts)
                    self._cond.notify_all()


def pulled(b: binlog_pb2.Binlog) -> MergeItem:
    """The MergeItem a puller makes: the binlog without its prewrite value, and that value in place."""
    raw = b.SerializeToString()
    binlog, view = split_binlog(raw)
    return MergeItem(NODE, binlog, len(raw), view)


@pytest.fixture
def parts_rig(monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.setattr("drainer.syncer.TXN_PART_BYTES", 64 << 10)
    r = Rig()
    r.sink = PartsSink()
    yield r
    if r.syncer is not None and not r.stopped:
        r.stop()
    r.merger.close()
    r.checkpoint.close()


def test_the_syncer_adds_a_large_txn_in_parts_and_reports_it_once(parts_rig: Rig) -> None:
    r = parts_rig
    t = r.w.create_table("d", "t", SYSBENCH, primary_key=["id"])
    rng = random.Random(3)
    log = MutationLog()
    for i in range(2000):
        log.insert(t, i, full_row(t, sysbench_row(rng, i)))
    big = r.w.commit(log)
    small = r.insert((t, 5000))
    r.start()
    assert r.merger.put(pulled(big), timeout=DEADLINE)
    assert r.merger.put(pulled(small), timeout=DEADLINE)
    r.sink.wait_acked(small.commit_ts)
    parts = [x for x in r.sink.txns if x.commit_ts == big.commit_ts]
    assert len(parts) > 5
    assert [p.partial for p in parts] == [True] * (len(parts) - 1) + [False]
    assert sum(len(p.dmls) for p in parts) == 2000
    assert [d.values[0] for p in parts for d in p.dmls if d.values] == list(range(2000))  # in order
    largest = max(map(dml_memory, (d for p in parts for d in p.dmls)))
    assert all(sum(map(dml_memory, p.dmls)) < (64 << 10) + largest for p in parts)
    assert r.sink.acked == [big.commit_ts, small.commit_ts]  # one success per txn, in order
    r.periodic_save_due()
    assert r.wait_saves(1)[-1].commit_ts == small.commit_ts
    assert isinstance(r.checkpoint, MemoryCheckpoint)
    assert r.checkpoint.violations == []
