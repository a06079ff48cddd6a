"""Causality keys, grouping and conflicts (drainer/causality.py), and a random test against a sequential model."""

from __future__ import annotations

import random
import zlib
from collections import defaultdict
from typing import Any

import pytest

from common.events import DML, DMLType, TableShape
from drainer.causality import Causality, dml_keys, worker_of
from tests.unit.test_drainer_sql import Schema, dele, ins, upd
from upstream.ddl import Column


@pytest.fixture
def schema() -> Schema:
    s = Schema()
    s.create_db("d")
    s.create_table(
        "d", "t", [Column("id", "INT"), Column("u", "INT"), Column("v", "INT")], primary_key=["id"], unique_keys=[["u"]]
    )
    s.create_table("d", "n", [Column("x", "INT"), Column("y", "VARCHAR(8)")])
    s.create_table(
        "d", "c", [Column("a", "INT"), Column("b", "VARCHAR(4)"), Column("v", "INT")], primary_key=["a", "b"]
    )
    return s


def test_keys_of_insert_delete_update(schema: Schema) -> None:
    t = schema.shape("d", "t")
    assert dml_keys(ins(t, 1, 7, 0)) == ["(id: 1)d.t", "(u: 7)d.t"]
    assert dml_keys(dele(t, 1, None, 0)) == ["(id: 1)d.t"]
    assert dml_keys(upd(t, (1, 7, 0), (2, 8, 0))) == ["(id: 2)d.t", "(u: 8)d.t", "(id: 1)d.t", "(u: 7)d.t"]


def test_composite_key_format(schema: Schema) -> None:
    c = schema.shape("d", "c")
    assert dml_keys(ins(c, 1, "x", 5)) == ["(a: 1)(b: x)d.c"]


def test_no_key_hashes_all_values_per_image(schema: Schema) -> None:
    n = schema.shape("d", "n")
    k1 = dml_keys(ins(n, 1, "a"))
    assert len(k1) == 1
    assert k1[0].startswith("#")
    assert k1[0].endswith("d.n")
    assert k1 == dml_keys(dele(n, 1, "a"))
    assert k1 != dml_keys(ins(n, 1, "b"))
    # an update: the new image's hash and the old image's hash
    assert dml_keys(upd(n, (1, "a"), (2, "b"))) == dml_keys(ins(n, 2, "b")) + k1


def test_update_to_null_unique_key_still_links_later_changes(schema: Schema) -> None:
    """t's only unique key besides the PK... make a table whose only key is nullable."""
    s = Schema()
    s.create_db("d")
    s.create_table("d", "q", [Column("u", "INT"), Column("v", "INT")], unique_keys=[["u"]])
    q = s.shape("d", "q")
    first = dml_keys(upd(q, (5, 1), (None, 2)))  # the row now has no key
    later = dml_keys(upd(q, (None, 2), (None, 3)))  # found only by all its values
    assert set(first) & set(later)


def test_group_and_conflict() -> None:
    c = Causality()
    assert c.add(["a", "b"]) == "a"
    assert c.add(["c"]) == "c"
    assert c.add(["x", "b"]) == "a"  # joins the group of its first known key
    assert c.get("x") == "a"
    assert not c.detect_conflict(["a", "x", "new"])
    assert c.detect_conflict(["x", "c"])
    assert c.add(["x", "c"]) is None  # conflict: nothing changes
    assert c.get("x") == "a"
    assert len(c) == 4
    c.reset()
    assert len(c) == 0
    assert c.add(["x", "c"]) == "x"
    with pytest.raises(ValueError, match="at least one"):
        c.add([])


def test_worker_of_is_crc32_mod_n() -> None:
    assert worker_of("(id: 1)d.t", 16) == zlib.crc32(b"(id: 1)d.t") % 16
    assert worker_of("anything", 1) == 0
    spread = {worker_of(f"(id: {i})d.t", 16) for i in range(200)}
    assert spread == set(range(16))


# ----------------------------------------------------------------------------- random model test


class Table:
    """A downstream table as SQL sees it: rows found by their first non-NULL unique key; keys enforced."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Any, ...]] = {}  # id -> (id, u, v)

    def _find(self, old: tuple[Any, ...]) -> int | None:
        if old[0] in self.rows:
            return int(old[0])
        return None

    def _check_unique(self, row: tuple[Any, ...], skip: int | None) -> None:
        for rid, r in self.rows.items():
            if rid == skip:
                continue
            assert r[0] != row[0], f"duplicate id {row[0]}"
            assert row[1] is None or r[1] != row[1], f"duplicate u {row[1]}"

    def apply(self, dml: DML) -> None:
        if dml.tp == DMLType.INSERT:
            assert dml.values is not None
            self._check_unique(dml.values, None)
            self.rows[dml.values[0]] = dml.values
            return
        assert dml.old_values is not None
        rid = self._find(dml.old_values)
        assert rid is not None, f"row {dml.old_values} is missing: executed out of order"
        if dml.tp == DMLType.DELETE:
            del self.rows[rid]
        else:
            assert dml.values is not None
            self._check_unique(dml.values, rid)
            del self.rows[rid]
            self.rows[dml.values[0]] = dml.values


def random_dmls(rng: random.Random, shape: TableShape, n: int) -> tuple[list[DML], dict[int, tuple[Any, ...]]]:
    """n valid DMLs (on a small key space, so keys collide) and the final table, applied in order."""
    model = Table()
    out: list[DML] = []
    while len(out) < n:
        used_ids = set(model.rows)
        used_u = {r[1] for r in model.rows.values()}

        def fresh_u(used_u: set[Any] = used_u) -> int | None:
            if rng.random() < 0.3:
                return None
            u = rng.randint(0, 30)
            return None if u in used_u else u

        op = rng.random()
        if op < 0.4 or not model.rows:
            rid = rng.randint(0, 40)
            if rid in used_ids:
                continue
            dml = DML(DMLType.INSERT, shape, values=(rid, fresh_u(), rng.randint(0, 9)))
        elif op < 0.8:
            old = model.rows[rng.choice(sorted(used_ids))]
            new_id = old[0] if rng.random() < 0.6 else rng.randint(0, 40)
            if new_id != old[0] and new_id in used_ids:
                continue
            new_u = old[1] if rng.random() < 0.5 else fresh_u()
            dml = DML(DMLType.UPDATE, shape, values=(new_id, new_u, rng.randint(0, 9)), old_values=old)
        else:
            dml = DML(DMLType.DELETE, shape, old_values=model.rows[rng.choice(sorted(used_ids))])
        model.apply(dml)
        out.append(dml)
    return out, model.rows


@pytest.mark.parametrize("seed", range(30))
def test_random_dispatch_keeps_per_key_order(schema: Schema, seed: int) -> None:
    rng = random.Random(seed)
    shape = schema.shape("d", "t")
    workers = rng.choice([2, 4, 16])
    dmls, expected = random_dmls(rng, shape, 400)

    down = Table()
    executed: list[int] = []
    queues: list[list[int]] = [[] for _ in range(workers)]

    def run_some(until_empty: bool) -> None:
        """Run queued DMLs in a random interleaving of the workers (each worker in its own order)."""
        while any(queues):
            busy = [q for q in queues if q]
            q = rng.choice(busy)
            i = q.pop(0)
            down.apply(dmls[i])
            executed.append(i)
            if not until_empty and rng.random() < 0.3:
                return

    causality = Causality()
    conflicts = 0
    for i, dml in enumerate(dmls):
        keys = dml_keys(dml)
        group = causality.add(keys)
        if group is None:  # conflict: flush every worker, reset, add again
            conflicts += 1
            run_some(until_empty=True)
            causality.reset()
            group = causality.add(keys)
            assert group is not None
        queues[worker_of(group, workers)].append(i)
        if rng.random() < 0.2:
            run_some(until_empty=False)  # workers progress while dispatching goes on
    run_some(until_empty=True)

    assert down.rows == expected
    # every key's DMLs ran in their original order
    by_key: dict[str, list[int]] = defaultdict(list)
    for i in executed:
        for k in dml_keys(dmls[i]):
            by_key[k].append(i)
    for k, order in by_key.items():
        assert order == sorted(order), k
    assert sorted(executed) == list(range(len(dmls)))
    assert conflicts < len(dmls)


def test_text_keys_fold_case_and_trailing_spaces_like_the_downstream_collation(schema: Schema) -> None:
    """'abc', 'ABC' and 'abc ' are one key in a MySQL table with the default collation: one key here too,
    so a delete of 'abc' and an insert of 'ABC' stay in order on one worker."""
    c = schema.shape("d", "c")
    assert dml_keys(dele(c, 1, "abc", 0)) == dml_keys(ins(c, 1, "ABC", 0)) == dml_keys(ins(c, 1, "abc ", 0))
    assert dml_keys(ins(c, 1, "abd", 0)) != dml_keys(ins(c, 1, "abc", 0))
    n = schema.shape("d", "n")
    assert dml_keys(dele(n, 1, "x")) == dml_keys(ins(n, 1, "X "))
    g = Causality()
    assert g.add(dml_keys(dele(c, 1, "abc", 0))) == g.add(dml_keys(ins(c, 1, "ABC", 0)))
