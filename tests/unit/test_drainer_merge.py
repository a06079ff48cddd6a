"""Merge by key (drainer/merge.py) against a model, the loader's merge path, and the DELETE .. IN rendering."""

from __future__ import annotations

import datetime as dt
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from common.events import DDL, DML, DMLType, Txn
from common.sql.render import Renderer
from drainer.loader import Executor, Loader
from drainer.merge import merge_by_key, merge_key
from tests.unit.test_drainer_causality import Table, random_dmls
from tests.unit.test_drainer_sql import Schema, dele, ins, upd
from upstream.ddl import Column

DEADLINE = 20.0
Row = tuple[Any, ...]


@pytest.fixture
def schema() -> Schema:
    s = Schema()
    s.create_db("d")
    s.create_table(
        "d", "t", [Column("id", "INT"), Column("u", "INT"), Column("v", "INT")], primary_key=["id"], unique_keys=[["u"]]
    )
    s.create_table("d", "c", [Column("a", "INT"), Column("b", "DATE"), Column("v", "INT")], primary_key=["a", "b"])
    s.create_table("d", "s", [Column("k", "VARCHAR(8)"), Column("v", "INT")], primary_key=["k"])
    s.create_table("d", "n", [Column("x", "INT"), Column("y", "INT")], unique_keys=[["x"]])
    return s


class SqlTable:
    """A downstream table with the semantics merged changes rely on: REPLACE removes every row that
    collides on the primary key or the unique key u, then writes; DELETE finds its row by primary key."""

    def __init__(self, rows: dict[int, Row] | None = None) -> None:
        self.rows: dict[int, Row] = dict(rows or {})

    def replace(self, row: Row) -> None:
        for rid in [rid for rid, r in self.rows.items() if rid == row[0] or (row[1] is not None and r[1] == row[1])]:
            del self.rows[rid]
        self.rows[row[0]] = row

    def apply_safe(self, d: DML) -> None:
        """Safe mode: INSERT = REPLACE, UPDATE = DELETE old + REPLACE new, DELETE by primary key."""
        if d.old_values is not None:
            self.rows.pop(d.old_values[0], None)
        if d.values is not None:
            self.replace(d.values)


# ----------------------------------------------------------------------------- merge_key


def test_merge_key_only_for_primary_keys_of_exact_types(schema: Schema) -> None:
    assert merge_key(schema.shape("d", "t")) == (0,)
    assert merge_key(schema.shape("d", "c")) == (0, 1)
    assert merge_key(schema.shape("d", "s")) is None  # a string key: downstream may fold case / spaces
    assert merge_key(schema.shape("d", "n")) is None  # no primary key (the original merges only those)


# ----------------------------------------------------------------------------- the rules, one by one


def test_insert_then_update_is_one_insert_of_the_new_row(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = merge_by_key([ins(t, 1, 5, 0), upd(t, (1, 5, 0), (1, 6, 1))])
    assert [(d.tp, d.values, d.old_values) for d in out] == [(DMLType.INSERT, (1, 6, 1), None)]


def test_insert_then_delete_is_a_delete(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = merge_by_key([ins(t, 1, 5, 0), dele(t, 1, 5, 0)])
    assert [(d.tp, d.old_values) for d in out] == [(DMLType.DELETE, (1, 5, 0))]


def test_updates_merge_into_one_replace_and_delete_wins(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = merge_by_key([upd(t, (1, 5, 0), (1, 5, 1)), upd(t, (1, 5, 1), (1, 7, 2))])
    assert [(d.tp, d.values) for d in out] == [(DMLType.INSERT, (1, 7, 2))]
    out = merge_by_key([upd(t, (1, 5, 0), (1, 5, 1)), dele(t, 1, 5, 1)])
    assert [(d.tp, d.old_values) for d in out] == [(DMLType.DELETE, (1, 5, 1))]


def test_delete_then_insert_is_an_insert(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = merge_by_key([dele(t, 1, 5, 0), ins(t, 1, 6, 3)])
    assert [(d.tp, d.values) for d in out] == [(DMLType.INSERT, (1, 6, 3))]


def test_update_of_the_key_is_a_delete_and_an_insert(schema: Schema) -> None:
    t = schema.shape("d", "t")
    out = merge_by_key([upd(t, (1, 5, 0), (2, 5, 0))])
    assert [(d.tp, d.values, d.old_values) for d in out] == [
        (DMLType.DELETE, None, (1, 5, 0)),
        (DMLType.INSERT, (2, 5, 0), None),
    ]
    # then the old key comes back: no delete left for it, deletes first in the result
    out = merge_by_key([upd(t, (1, 5, 0), (2, 5, 0)), ins(t, 1, 6, 9), dele(t, 3, None, 0)])
    assert [(d.tp, d.values or d.old_values) for d in out] == [
        (DMLType.DELETE, (3, None, 0)),
        (DMLType.INSERT, (1, 6, 9)),
        (DMLType.INSERT, (2, 5, 0)),
    ]


def test_composite_keys_and_input_untouched(schema: Schema) -> None:
    c = schema.shape("d", "c")
    day, next_day = dt.date(2024, 1, 1), dt.date(2024, 1, 2)
    first = ins(c, 1, day, 0)
    later = upd(c, (1, day, 0), (1, day, 5))
    other = ins(c, 1, next_day, 7)
    out = merge_by_key([first, later, other])
    assert [d.values for d in out] == [(1, day, 5), (1, next_day, 7)]
    assert (first.tp, first.values, later.tp, later.old_values) == (
        DMLType.INSERT,
        (1, day, 0),
        DMLType.UPDATE,
        (1, day, 0),
    )


def test_unmergeable_table_and_bad_dmls_raise(schema: Schema) -> None:
    with pytest.raises(ValueError, match=r"d\.s has no primary key to merge by"):
        merge_by_key([ins(schema.shape("d", "s"), "a", 1)])
    t = schema.shape("d", "t")
    with pytest.raises(ValueError, match="has no values"):
        merge_by_key([DML(DMLType.INSERT, t)])
    with pytest.raises(ValueError, match="lacks its old or new values"):
        merge_by_key([DML(DMLType.UPDATE, t, values=(1, None, 0))])


# ----------------------------------------------------------------------------- random histories vs the model


@pytest.mark.parametrize("seed", range(60))
def test_merged_random_history_in_any_order_equals_one_by_one(schema: Schema, seed: int) -> None:
    """Random valid histories on a few keys (key-changing updates, a unique key u that rows swap):
    the merged changes, applied in any order with REPLACE semantics, give the one-by-one result."""
    rng = random.Random(seed)
    t = schema.shape("d", "t")
    dmls, expected = random_dmls(rng, t, rng.randint(5, 300))
    cut = rng.randint(0, len(dmls) - 1)
    before = Table()
    for d in dmls[:cut]:
        before.apply(d)
    batch = dmls[cut:]
    merged = merge_by_key(batch)
    assert len(merged) <= len(batch) * 2
    assert len({d.values[0] if d.values else d.old_values[0] for d in merged}) == len(merged)  # type: ignore[index]
    for _ in range(4):
        order = list(merged)
        rng.shuffle(order)
        table = SqlTable(before.rows)
        for d in order:
            table.apply_safe(d)
        assert table.rows == expected


# ----------------------------------------------------------------------------- the loader's merge path


class ModelExecutor:
    """Applies chunks to a shared SqlTable: strictly (as SQL without safe mode) or in safe mode."""

    def __init__(self, table: SqlTable, lock: threading.Lock, log: list[tuple[bool, int]], rng: random.Random) -> None:
        self.table, self.lock, self.log, self.rng = table, lock, log, rng
        self.slow = rng.choice([0.0, 0.0005, 0.002])

    def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
        time.sleep(self.rng.random() * self.slow)  # jitter: workers interleave differently per run
        with self.lock:
            self.log.append((safe_mode, len(dmls)))
            strict = Table()
            strict.rows = self.table.rows
            for d in dmls:
                if safe_mode:
                    self.table.apply_safe(d)
                else:
                    strict.apply(d)

    def execute_ddl(self, ddl: DDL, commit_ts: int) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.fixture
def model_loader() -> Iterator[Callable[..., tuple[Loader, SqlTable, list[tuple[bool, int]]]]]:
    loaders: list[Loader] = []

    def make(rng: random.Random, **kw: Any) -> tuple[Loader, SqlTable, list[tuple[bool, int]]]:
        table, lock, log = SqlTable(), threading.Lock(), []  # type: ignore[var-annotated]

        def factory(i: int) -> Executor:
            return ModelExecutor(table, lock, log, random.Random(rng.random()))

        loader = Loader(factory, backoff=(0.001, 0.002), merge=True, **kw)
        loaders.append(loader)
        return loader, table, log

    yield make
    for loader in loaders:
        loader.close()


def _txns(dmls: list[DML], rng: random.Random) -> list[Txn]:
    out, i, ts = [], 0, 100
    while i < len(dmls):
        n = rng.randint(0, 12)
        out.append(Txn(commit_ts=ts, dmls=dmls[i : i + n], size=50 * n))
        i += n
        ts += rng.randint(1, 5)
    return out


@pytest.mark.parametrize("seed", range(12))
def test_loader_with_merge_equals_one_by_one(
    schema: Schema, model_loader: Callable[..., tuple[Loader, SqlTable, list[tuple[bool, int]]]], seed: int
) -> None:
    """Many batches in flight on several workers: causality on the merged changes keeps them after the
    earlier batches' changes of the same rows (or unique values)."""
    rng = random.Random(seed)
    dmls, expected = random_dmls(rng, schema.shape("d", "t"), 2000)
    txns = _txns(dmls, rng)
    loader, table, log = model_loader(rng, worker_count=rng.choice([1, 4, 16]), txn_batch=rng.choice([1, 5, 20]))
    reported: list[int] = []
    loader.start(reported.append)
    for txn in txns:
        loader.add(txn)
    loader.flush(DEADLINE)
    assert table.rows == expected
    assert reported == [t.commit_ts for t in txns]
    assert all(safe for safe, _ in log)  # every change of a mergeable table went the merged (safe) way
    assert sum(n for _, n in log) < len(dmls)  # and merging removed some
    assert loader.inflight_bytes == 0


def test_loader_merges_only_mergeable_tables(
    schema: Schema, model_loader: Callable[..., tuple[Loader, SqlTable, list[tuple[bool, int]]]]
) -> None:
    t, n = schema.shape("d", "t"), schema.shape("d", "n")
    seen: list[tuple[str, DMLType, bool]] = []

    class Recorder(ModelExecutor):
        def execute_dmls(self, dmls: Sequence[DML], safe_mode: bool) -> None:
            seen.extend((d.shape.table, d.tp, safe_mode) for d in dmls)

    loader = Loader(lambda i: Recorder(SqlTable(), threading.Lock(), [], random.Random(0)), worker_count=1, merge=True)
    try:
        loader.start(lambda ts: None)
        loader.add(Txn(1, [ins(t, 1, None, 0), upd(t, (1, None, 0), (1, None, 1)), ins(n, 1, 1)]))
        loader.add(Txn(2, [upd(n, (1, 1), (1, 2))]))
        loader.flush(DEADLINE)
    finally:
        loader.close()
    assert sorted(seen) == [
        ("n", DMLType.INSERT, False),
        ("n", DMLType.UPDATE, False),
        ("t", DMLType.INSERT, True),
    ]


# ----------------------------------------------------------------------------- DELETE .. IN


def test_deletes_by_primary_key_become_one_statement(schema: Schema) -> None:
    t, c, n = schema.shape("d", "t"), schema.shape("d", "c"), schema.shape("d", "n")
    r = Renderer("mysql", delete_in=True, max_rows=3)
    out = r.render([dele(t, 1, 5, 0), dele(t, 2, None, 0), dele(t, 3, 6, 0), dele(t, 4, 7, 0), ins(t, 9, 9, 9)], True)
    assert out == [
        ("DELETE FROM `d`.`t` WHERE `id` IN (%s,%s,%s)", [1, 2, 3]),
        ("DELETE FROM `d`.`t` WHERE `id` IN (%s)", [4]),
        ("REPLACE INTO `d`.`t` (`id`,`u`,`v`) VALUES (%s,%s,%s)", [9, 9, 9]),
    ]
    out = r.render([dele(c, 1, dt.date(2024, 1, 1), 0), dele(c, 2, dt.date(2024, 1, 2), 0)])
    assert out[0][0] == "DELETE FROM `d`.`c` WHERE (`a`=%s AND `b`=%s) OR (`a`=%s AND `b`=%s)"
    assert len(out) == 1
    # no primary key: one statement per row, as without delete_in; sqlite and the default: unchanged
    assert len(r.render([dele(n, 1, 1), dele(n, 2, 2)])) == 2
    assert Renderer("mysql").render([dele(t, 1, 5, 0), dele(t, 2, 5, 0)]) == [
        ("DELETE FROM `d`.`t` WHERE `id`=%s LIMIT 1", [1]),
        ("DELETE FROM `d`.`t` WHERE `id`=%s LIMIT 1", [2]),
    ]
    assert not Renderer("sqlite", delete_in=True).delete_in
