"""``ddl``: DDL interleaved with DML on the same tables, plus a ``types`` table with every column type.

Tables of ``<db>`` (default ``ddltest``):

* ``t<n>`` (``--tables`` of them at first): ``id, k INT NOT NULL DEFAULT 0, v VARCHAR(64)`` with
  primary key ``id``, a BIGINT (the row handle) for even ``n`` and a DECIMAL(20,0) (a hidden row
  id handle, as TiDB) for odd ``n``.  DDL changes them while other threads write to them.
* ``types``: ``id BIGINT`` primary key and one column of each supported type (see
  :data:`upstream.workloads.gen.TYPES_COLUMNS`), NULLs included.  Only DML touches it.
* ``skey`` (``k VARCHAR(16)`` primary key, ``v INT``) and ``ckey`` (primary key ``a, b``, both
  ``VARCHAR(16)``, ``v INT``): string keys that differ only in case (``'a'``, ``'A'``) and, when
  the store compares strings exactly (``Store.exact_string_keys``: sqlite), only in trailing
  spaces (``'a'``, ``'a '``), so a downstream that folds them merges rows.  Only DML touches them.

``run_once`` runs one DDL with probability ``--ddl-ratio`` (one at a time per process), else one
transaction of ``--rows-per-txn`` operations: on a ``t`` table inserts, updates (also of the
columns DDL added) and deletes of ids in 1..``--table-size``; on ``types`` inserts, updates
and deletes of ids in 1..200; on ``skey`` / ``ckey`` inserts, updates and deletes of keys made
of :func:`string_keys`.

DDL operations: add a column (``x<n>_<kind>``, often NOT NULL with a default), drop one,
add / drop an index, truncate, rename (to a new ``t<n>``), create and drop ``t`` tables.
A transaction that overlaps a DDL fails with SchemaChangedError (retriable), or, when it read
a table that was renamed, dropped or altered under it, with a SchemaError or StoreError; both
are retried when the schema version moved since the attempt began.  A DuplicateKeyError is
retried too: a transaction inserts only ids it found missing, so another one inserted it first
(on a table with a hidden row id the unique index finds that only at commit, as in TiDB).

Invariants: every ``types`` row written in this run reads back exactly as its last committed
transaction left it; every table's rows have exactly the columns of its schema, no NULL in a
NOT NULL column; the schema version in etcd equals the writer's.
"""

from __future__ import annotations

import datetime as dt
import functools
import logging
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from common.errors import BinlogError
from common.schema.model import SchemaError, TableInfo
from common.sql.dialect import StoreError
from upstream.ddl import NO_DEFAULT, Column
from upstream.store.base import DuplicateKeyError
from upstream.workloads.base import TxnOutcome, Workload, WorkloadOptions, backoff, ensure_database, run_txn
from upstream.workloads.gen import (
    ascii_text,
    mixed_text,
    random_datetime,
    random_decimal,
    random_json,
    random_timestamp,
    types_changes,
    types_row,
    types_table_columns,
)

if TYPE_CHECKING:
    from upstream.database import Database
    from upstream.txn import Transaction

log = logging.getLogger(__name__)

TYPES_TABLE = "types"
TYPES_IDS = 200
MAX_EXTRA_COLUMNS = 6
MAX_INDEXES = 4
DDL_ATTEMPTS = 3
NULL_PROBABILITY = 0.1
STRING_KEY_TABLE = "skey"
COMPOSITE_KEY_TABLE = "ckey"
CASE_KEYS = ("a", "A", "b", "B", "ab", "aB", "Ab", "AB")
SPACE_KEYS = ("a ", "A ", "ab  ")
"""Keys that equal some of :data:`CASE_KEYS` but for trailing spaces (only where the store keeps them apart)."""


def string_keys(exact: bool) -> tuple[str, ...]:
    """The string key values: differing only in case, and with `exact` also only in trailing spaces."""
    return CASE_KEYS + SPACE_KEYS if exact else CASE_KEYS


def string_key_tables() -> dict[str, tuple[list[Column], list[str]]]:
    """The string-key tables: name -> (columns, primary key)."""
    key = "VARCHAR(16)"
    return {
        STRING_KEY_TABLE: ([Column("k", key, nullable=False), Column("v", "INT")], ["k"]),
        COMPOSITE_KEY_TABLE: (
            [Column("a", key, nullable=False), Column("b", key, nullable=False), Column("v", "INT")],
            ["a", "b"],
        ),
    }


@dataclass(frozen=True)
class ExtraKind:
    """A kind of column the ddl workload adds: its type, default and values."""

    type: str
    nullable: bool
    default: object
    gen: Callable[[random.Random], Any]
    indexable: bool = True


EXTRA_KINDS: dict[str, ExtraKind] = {
    "int": ExtraKind("INT", True, 0, lambda r: r.randint(-1000, 1000)),
    "nn": ExtraKind("INT", False, 42, lambda r: r.randint(0, 10**6)),
    "str": ExtraKind("VARCHAR(32)", True, "x", lambda r: ascii_text(r, r.randint(0, 32))),
    "dec": ExtraKind("DECIMAL(12,2)", False, Decimal("1.50"), lambda r: random_decimal(r, 12, 2)),
    "dt": ExtraKind("DATETIME(3)", True, NO_DEFAULT, lambda r: random_datetime(r, 3)),
    "ts": ExtraKind("TIMESTAMP(3)", True, dt.datetime(2020, 1, 1, tzinfo=dt.UTC), lambda r: random_timestamp(r, 3)),
    "ubig": ExtraKind("BIGINT UNSIGNED", False, 7, lambda r: r.randint(0, 2**64 - 1)),
    "dbl": ExtraKind("DOUBLE", True, 0.5, lambda r: r.randint(-(10**6), 10**6) / 8),
    "enum": ExtraKind("ENUM('x','y','z')", False, "y", lambda r: r.choice("xyz")),
    "txt": ExtraKind("TEXT", True, NO_DEFAULT, lambda r: mixed_text(r, 300), indexable=False),
    "json": ExtraKind("JSON", True, NO_DEFAULT, random_json, indexable=False),
}

_EXTRA_NAME = re.compile(r"^x(\d+)_([a-z]+)$")
_TABLE_NAME = re.compile(r"^t(\d+)$")
_INDEX_NAME = re.compile(r"^ix(\d+)$")

DDL_OPS: dict[str, int] = {
    "add_column": 3,
    "drop_column": 2,
    "add_index": 2,
    "drop_index": 1,
    "truncate": 1,
    "rename": 1,
    "create": 1,
    "drop": 1,
}
"""DDL operations and their weights."""


def extra_kind(column_name: str) -> ExtraKind | None:
    m = _EXTRA_NAME.match(column_name)
    return EXTRA_KINDS.get(m.group(2)) if m else None


def base_columns(n: int) -> list[Column]:
    id_type = "BIGINT" if n % 2 == 0 else "DECIMAL(20,0)"
    return [Column("id", id_type), Column("k", "INT", nullable=False, default=0), Column("v", "VARCHAR(64)")]


def next_number(names: Sequence[str], pattern: re.Pattern[str]) -> int:
    """1 + the largest number in names matching ``pattern`` (group 1), or 0."""
    numbers = [int(m.group(1)) for m in map(pattern.match, names) if m]
    return max(numbers, default=-1) + 1


def feasible_ops(t: TableInfo, n_tables: int, min_tables: int, max_tables: int) -> dict[str, int]:
    """The DDL operations possible on table ``t`` right now, with their weights (pure)."""
    extras = [c for c in t.columns if extra_kind(c.name) is not None]
    indexed = {c.lower() for ix in t.indices for c in ix.columns}
    secondary = [ix for ix in t.indices if not ix.primary]
    ok = {
        "add_column": len(extras) < MAX_EXTRA_COLUMNS,
        "drop_column": any(c.lname not in indexed for c in extras),
        "add_index": len(secondary) < MAX_INDEXES and bool(index_candidates(t)),
        "drop_index": bool(secondary),
        "truncate": True,
        "rename": True,
        "create": n_tables < max_tables,
        "drop": n_tables > min_tables,
    }
    return {op: w for op, w in DDL_OPS.items() if ok[op]}


def index_candidates(t: TableInfo) -> list[str]:
    """Columns that may get a one-column index: ``k`` and indexable added columns without one."""
    single = {ix.columns[0].lower() for ix in t.indices if len(ix.columns) == 1}
    out = []
    for c in t.columns:
        kind = extra_kind(c.name)
        if (c.lname == "k" or (kind is not None and kind.indexable)) and c.lname not in single:
            out.append(c.name)
    return out


def row_values(rng: random.Random, t: TableInfo) -> dict[str, Any]:
    """Values for ``k``, ``v`` and some of the added columns of ``t`` (others keep their default)."""
    row: dict[str, Any] = {
        "k": rng.randint(0, 10**6),
        "v": None if rng.random() < NULL_PROBABILITY else ascii_text(rng, 20),
    }
    for c in t.columns:
        kind = extra_kind(c.name)
        if kind is None or rng.random() < 0.3:
            continue
        row[c.name] = None if c.nullable and rng.random() < NULL_PROBABILITY else kind.gen(rng)
    return row


def row_problems(table: str, t: TableInfo, rows: Sequence[tuple[int, Mapping[str, Any]]]) -> list[str]:
    """Rows whose columns differ from the schema, or with NULL in a NOT NULL column (pure)."""
    want = [c.lname for c in t.columns]
    required = [c.lname for c in t.columns if not c.nullable]
    for h, row in rows:
        if sorted(row) != sorted(want):
            return [f"ddl: {table} row {h} has columns {sorted(row)}, the schema has {sorted(want)}"]
        nulls = [c for c in required if row[c] is None]
        if nulls:
            return [f"ddl: {table} row {h} has NULL in NOT NULL column(s) {', '.join(nulls)}"]
    return []


def model_problems(
    model: Mapping[int, tuple[int, dict[str, Any] | None]], stored: Mapping[int, Mapping[str, Any]], limit: int = 5
) -> list[str]:
    """Differences between the last committed ``types`` rows and what the store holds (pure)."""
    problems = []
    for row_id in sorted(model):
        want = model[row_id][1]
        have = stored.get(row_id)
        if want is None and have is not None:
            problems.append(f"ddl: types row {row_id} was deleted but is in the store")
        elif want is not None and have is None:
            problems.append(f"ddl: types row {row_id} is missing from the store")
        elif want is not None and have is not None and dict(have) != want:
            diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
            detail = ", ".join(f"{k}: wrote {want.get(k)!r}, read {have.get(k)!r}" for k in diff[:3])
            problems.append(f"ddl: types row {row_id} differs in {', '.join(diff)} ({detail})")
        if len(problems) >= limit:
            problems.append("ddl: (more differences not listed)")
            break
    return problems


class DDLWorkload(Workload):
    name = "ddl"
    default_database = "ddltest"

    def __init__(self, options: WorkloadOptions) -> None:
        super().__init__(options)
        if options.tables < 1 or options.table_size < 1 or options.rows_per_txn < 1:
            raise ValueError("ddl needs --tables, --table-size and --rows-per-txn of at least 1")
        if not 0 <= options.ddl_ratio <= 1:
            raise ValueError(f"--ddl-ratio must be between 0 and 1, got {options.ddl_ratio}")
        self.min_tables = 1
        self.max_tables = max(3, 2 * options.tables)
        self._ddl_lock = threading.Lock()
        self._lock = threading.Lock()
        self.ddl_done: Counter[str] = Counter()
        self.ddl_failed: Counter[str] = Counter()
        self.model: dict[int, tuple[int, dict[str, Any] | None]] = {}
        self.uncertain: set[int] = set()

    # ------------------------------------------------------------------ setup
    def setup(self, db: Database) -> None:
        ensure_database(db, self.db_name)
        if not self.dml_tables(db):
            for n in range(self.options.tables):
                db.create_table(self.db_name, f"t{n}", base_columns(n), primary_key=["id"])
        if not db.schema.has_table(self.db_name, TYPES_TABLE):
            db.create_table(self.db_name, TYPES_TABLE, types_table_columns(), primary_key=["id"])
        for name, (columns, pk) in string_key_tables().items():
            if not db.schema.has_table(self.db_name, name):
                db.create_table(self.db_name, name, columns, primary_key=pk)

    def dml_tables(self, db: Database) -> list[TableInfo]:
        return [r.table for r in db.schema.tables(self.db_name) if _TABLE_NAME.match(r.table.name)]

    # ------------------------------------------------------------------ one unit of work
    def run_once(self, db: Database, rng: random.Random) -> TxnOutcome:
        if rng.random() < self.options.ddl_ratio:
            return self._ddl(db, rng)
        r = rng.random()
        if r < 1 / 3:
            return self._types_txn(db, rng)
        if r < 1 / 2:
            return self._string_key_txn(db, rng)
        return self._table_txn(db, rng)

    def _retry_if(self, db: Database) -> Callable[[BinlogError, int], bool]:
        def retry(exc: BinlogError, version: int) -> bool:
            if isinstance(exc, DuplicateKeyError):
                return True  # bodies insert only ids they found missing: a concurrent insert won the race
            return isinstance(exc, SchemaError | StoreError) and db.schema.version != version

        return retry

    def _table_txn(self, db: Database, rng: random.Random) -> TxnOutcome:
        seed = rng.getrandbits(64)

        def body(txn: Transaction) -> None:
            r = random.Random(seed)
            tables = self.dml_tables(db)
            if not tables:
                return
            t = r.choice(tables)
            name = f"{self.db_name}.{t.name}"
            for _ in range(self.options.rows_per_txn):
                row_id = r.randint(1, self.options.table_size)
                row = txn.get(name, row_id)
                if row is None:
                    txn.insert(name, {"id": row_id, **row_values(r, t)})
                elif r.random() < 0.7:
                    changes = row_values(r, t)
                    txn.update(name, row_id, dict(r.sample(sorted(changes.items()), r.randint(1, len(changes)))))
                else:
                    txn.delete(name, row_id)

        outcome, _ = run_txn(db, body, attempts=self.options.attempts, retry_if=self._retry_if(db))
        return outcome

    def _string_key_txn(self, db: Database, rng: random.Random) -> TxnOutcome:
        seed = rng.getrandbits(64)
        keys = string_keys(db.store.exact_string_keys)
        skey, ckey = f"{self.db_name}.{STRING_KEY_TABLE}", f"{self.db_name}.{COMPOSITE_KEY_TABLE}"

        def body(txn: Transaction) -> None:
            r = random.Random(seed)
            for _ in range(self.options.rows_per_txn):
                key: str | tuple[str, str]
                if r.random() < 0.5:
                    table, key = skey, r.choice(keys)
                    new: dict[str, Any] = {"k": key}
                else:
                    table, key = ckey, (r.choice(keys), r.choice(keys))
                    new = {"a": key[0], "b": key[1]}
                if txn.get(table, key) is None:
                    txn.insert(table, {**new, "v": r.randint(0, 10**6)})
                elif r.random() < 0.7:
                    txn.update(table, key, {"v": r.randint(0, 10**6)})
                else:
                    txn.delete(table, key)

        outcome, _ = run_txn(db, body, attempts=self.options.attempts, retry_if=self._retry_if(db))
        return outcome

    def _types_txn(self, db: Database, rng: random.Random) -> TxnOutcome:
        seed = rng.getrandbits(64)
        ids = sorted({rng.randint(1, TYPES_IDS) for _ in range(self.options.rows_per_txn)})
        table = f"{self.db_name}.{TYPES_TABLE}"

        def body(txn: Transaction) -> dict[int, dict[str, Any] | None]:
            r = random.Random(seed)
            for row_id in ids:
                if txn.get(table, row_id) is None:
                    txn.insert(table, types_row(r, row_id))
                elif r.random() < 0.7:
                    txn.update(table, row_id, types_changes(r))
                else:
                    txn.delete(table, row_id)
            return {row_id: txn.get(table, row_id) for row_id in ids}

        outcome, after = run_txn(db, body, attempts=self.options.attempts, retry_if=self._retry_if(db))
        with self._lock:
            if outcome.unknown:
                self.uncertain.update(ids)
            elif outcome.committed and after is not None:
                for row_id, row in after.items():
                    if row_id not in self.model or self.model[row_id][0] < outcome.commit_ts:
                        self.model[row_id] = (outcome.commit_ts, row)
        return outcome

    # ------------------------------------------------------------------ DDL
    def _ddl(self, db: Database, rng: random.Random) -> TxnOutcome:
        with self._ddl_lock:
            op = "?"
            for attempt in range(1, DDL_ATTEMPTS + 1):
                tables = self.dml_tables(db)
                if not tables:
                    op = "create"
                    plan: Callable[[], object] = functools.partial(self._create, db)
                else:
                    t = rng.choice(tables)
                    ops = feasible_ops(t, len(tables), self.min_tables, self.max_tables)
                    op = rng.choices(list(ops), list(ops.values()))[0]
                    plan = self._plan(db, rng, op, t)
                try:
                    plan()
                except BinlogError as exc:
                    if exc.retriable and attempt < DDL_ATTEMPTS:
                        log.debug("ddl %s failed, retrying: %s", op, exc)
                        time.sleep(backoff(attempt))
                        continue
                    self.ddl_failed[op] += 1
                    log.warning("ddl %s failed: %s", op, exc)
                    return TxnOutcome(False, attempt - 1, kind="ddl", error=f"{op}: {type(exc).__name__}: {exc}")
                self.ddl_done[op] += 1
                return TxnOutcome(True, attempt - 1, kind="ddl")
            raise AssertionError("unreachable")

    def _plan(self, db: Database, rng: random.Random, op: str, t: TableInfo) -> Callable[[], object]:
        d = self.db_name
        if op == "add_column":
            n = next_number([c.name for r in db.schema.tables(d) for c in r.table.columns], re.compile(r"^x(\d+)_"))
            kind_name = rng.choice(sorted(EXTRA_KINDS))
            kind = EXTRA_KINDS[kind_name]
            col = Column(f"x{n}_{kind_name}", kind.type, nullable=kind.nullable, default=kind.default)
            return lambda: db.add_column(d, t.name, col)
        if op == "drop_column":
            indexed = {c.lower() for ix in t.indices for c in ix.columns}
            victims = [c.name for c in t.columns if extra_kind(c.name) is not None and c.lname not in indexed]
            victim = rng.choice(victims)
            return lambda: db.drop_column(d, t.name, victim)
        if op == "add_index":
            names = [ix.name for r in db.schema.tables(d) for ix in r.table.indices]
            name = f"ix{next_number(names, _INDEX_NAME)}"
            column = rng.choice(index_candidates(t))
            return lambda: db.add_index(d, t.name, name, [column])
        if op == "drop_index":
            ix = rng.choice([ix for ix in t.indices if not ix.primary])
            return lambda: db.drop_index(d, t.name, ix.name)
        if op == "truncate":
            return lambda: db.truncate_table(d, t.name)
        if op == "rename":
            new = f"t{self._next_table(db)}"
            return lambda: db.rename_table(d, t.name, new)
        if op == "create":
            return lambda: self._create(db)
        if op == "drop":
            return lambda: db.drop_table(d, t.name)
        raise ValueError(f"unknown ddl operation {op!r}")

    def _next_table(self, db: Database) -> int:
        return next_number([r.table.name for r in db.schema.tables(self.db_name)], _TABLE_NAME)

    def _create(self, db: Database) -> None:
        n = self._next_table(db)
        db.create_table(self.db_name, f"t{n}", base_columns(n), primary_key=["id"])

    # ------------------------------------------------------------------ invariants
    def check(self, db: Database) -> list[str]:
        problems: list[str] = []
        for ref in db.schema.tables(self.db_name):
            problems += row_problems(ref.table.name, ref.table, db.rows(self.db_name, ref.table.name))
        stored = {int(row["id"]): row for _, row in db.rows(self.db_name, TYPES_TABLE)}
        with self._lock:
            model = {k: v for k, v in self.model.items() if k not in self.uncertain}
        problems += model_problems(model, stored)
        version = db.history.schema_version()
        if version != db.schema.version:
            problems.append(f"ddl: schema version in etcd is {version}, the writer has {db.schema.version}")
        return problems

    def describe(self) -> dict[str, object]:
        return {
            "ddl": dict(sorted(self.ddl_done.items())),
            "ddl_failed": dict(sorted(self.ddl_failed.items())),
            "types_rows_tracked": len(self.model),
        }
