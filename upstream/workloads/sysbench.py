"""``sysbench``: sbtest-like tables and an insert/update/delete mix, as sysbench's oltp_write_only.

Tables ``<db>.sbtest1 .. sbtest<--tables>``: ``id BIGINT PRIMARY KEY, k INT, c, pad`` with a
secondary index on ``k``, loaded with ``--table-size`` rows (ids 1..table-size).  ``c`` and
``pad`` are sized from ``--row-size`` (bytes of a row):

    row-size <= 192        c CHAR(120), pad CHAR(60) (sysbench's own layout)
    row-size <= 315        c VARCHAR(255)
    row-size <= 65,607     c TEXT
    larger                 c MEDIUMTEXT (up to 16 MiB)

A transaction does ``--rows-per-txn`` operations, each on a random id in 1..2*table-size of a
random table: an index update (k = k + 1), a non-index update (new c), a delete, or an insert
(new k, c, pad).  An insert of an id that exists replaces its values; any operation on an id that
does not exist inserts it; so the tables settle at about 80% of the id space (1.6 x table-size).

Invariant: per table, the row count and the sum of ``k`` equal the values at setup plus the
changes of every committed transaction.
"""

from __future__ import annotations

import logging
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from upstream.ddl import Column
from upstream.errors import WriterError
from upstream.workloads.base import TxnOutcome, Workload, WorkloadOptions, ensure_database, run_txn
from upstream.workloads.gen import sysbench_text

if TYPE_CHECKING:
    from upstream.database import Database
    from upstream.txn import Transaction

log = logging.getLogger(__name__)

PAD_LENGTH = 60
ROW_OVERHEAD = 12  # id (8 bytes) + k (4 bytes)
LOAD_BATCH = 500
K_RANGE = 1_000_000
OPS = ("update_index", "update_non_index", "delete", "insert")
OP_WEIGHTS = (1, 1, 1, 1)


@dataclass(frozen=True)
class RowLayout:
    """How long ``c`` and ``pad`` are, and the type of ``c``."""

    c_length: int
    pad_length: int
    c_type: str

    @property
    def row_size(self) -> int:
        return ROW_OVERHEAD + self.c_length + self.pad_length


def layout_for(row_size: int) -> RowLayout:
    """The column layout for rows of about ``row_size`` bytes (pure)."""
    if row_size < ROW_OVERHEAD:
        raise ValueError(f"row size must be at least {ROW_OVERHEAD} bytes, got {row_size}")
    pad = min(PAD_LENGTH, row_size - ROW_OVERHEAD)
    c = row_size - ROW_OVERHEAD - pad
    if c <= 120:
        c_type = "CHAR(120)"
    elif c <= 255:
        c_type = "VARCHAR(255)"
    elif c <= 65_535:
        c_type = "TEXT"
    elif c <= (1 << 24) - 1:
        c_type = "MEDIUMTEXT"
    else:
        raise ValueError(f"row size {row_size} is too large for sysbench (at most {(1 << 24) - 1 + 72} bytes)")
    return RowLayout(c, pad, c_type)


def table_columns(layout: RowLayout) -> list[Column]:
    return [
        Column("id", "BIGINT"),
        Column("k", "INT", nullable=False, default=0),
        Column("c", layout.c_type, nullable=False),
        Column("pad", "CHAR(60)", nullable=False, default=""),
    ]


def new_row(rng: random.Random, row_id: int, layout: RowLayout) -> dict[str, Any]:
    return {
        "id": row_id,
        "k": rng.randint(1, K_RANGE),
        "c": sysbench_text(rng, layout.c_length),
        "pad": sysbench_text(rng, layout.pad_length),
    }


@dataclass
class Tally:
    """Row count and sum of k of one table: at setup plus every committed change."""

    rows: int = 0
    k_sum: int = 0

    def add(self, rows: int, k_sum: int) -> None:
        self.rows += rows
        self.k_sum += k_sum


def tally_problems(table: str, expected: Tally, rows: int, k_sum: int, exact: bool) -> list[str]:
    """Differences between a table and its tally (pure); none when a commit outcome is unknown."""
    if not exact:
        return []
    problems = []
    if rows != expected.rows:
        problems.append(f"sysbench: {table} has {rows} rows, expected {expected.rows}")
    if k_sum != expected.k_sum:
        problems.append(f"sysbench: {table} has sum(k) = {k_sum}, expected {expected.k_sum}")
    return problems


class SysbenchWorkload(Workload):
    name = "sysbench"
    default_database = "sbtest"

    def __init__(self, options: WorkloadOptions) -> None:
        super().__init__(options)
        if options.tables < 1 or options.table_size < 1 or options.rows_per_txn < 1:
            raise ValueError("sysbench needs --tables, --table-size and --rows-per-txn of at least 1")
        self.layout = layout_for(options.row_size)
        self.names = [f"sbtest{i}" for i in range(1, options.tables + 1)]
        self.tallies = {name: Tally() for name in self.names}
        self._lock = threading.Lock()
        self._unknown = 0

    def setup(self, db: Database) -> None:
        ensure_database(db, self.db_name)
        for name in self.names:
            if not db.schema.has_table(self.db_name, name):
                db.create_table(self.db_name, name, table_columns(self.layout), primary_key=["id"], indexes=[["k"]])
            else:
                self._check_layout(db, name)
            rows = db.rows(self.db_name, name)
            tally = self.tallies[name]
            tally.rows, tally.k_sum = len(rows), sum(int(r["k"]) for _, r in rows)
            if rows:
                continue
            rng = random.Random(f"sysbench-load-{name}")
            for start in range(1, self.options.table_size + 1, LOAD_BATCH):
                ids = range(start, min(start + LOAD_BATCH, self.options.table_size + 1))
                batch = [new_row(rng, i, self.layout) for i in ids]

                def load(txn: Transaction, batch: list[dict[str, Any]] = batch, name: str = name) -> None:
                    for row in batch:
                        txn.insert(f"{self.db_name}.{name}", row)

                db.run(load)
                tally.add(len(batch), sum(int(r["k"]) for r in batch))
        log.info("sysbench: %d tables of about %d rows, row size %d", len(self.names), self.options.table_size,
                 self.layout.row_size)  # fmt: skip

    def _check_layout(self, db: Database, name: str) -> None:
        c = db.table(self.db_name, name).column("c")
        have = c.type_text.upper()
        if have.startswith(("CHAR", "VARCHAR")):
            size = int(have.split("(", 1)[1].rstrip(")"))
            if self.layout.c_length > size:
                raise WriterError(
                    f"{self.db_name}.{name} exists with c {c.type_text}, too small for --row-size "
                    f"{self.options.row_size}: use another --database"
                )

    def run_once(self, db: Database, rng: random.Random) -> TxnOutcome:
        n_ids = 2 * self.options.table_size
        plan = [
            (rng.choice(self.names), rng.randint(1, n_ids), rng.choices(OPS, OP_WEIGHTS)[0])
            for _ in range(self.options.rows_per_txn)
        ]
        seed = rng.getrandbits(64)

        def body(txn: Transaction) -> dict[str, tuple[int, int]]:
            vrng = random.Random(seed)  # the same values on every attempt
            delta: dict[str, tuple[int, int]] = {}
            for name, row_id, op in plan:
                table = f"{self.db_name}.{name}"
                rows, ks = delta.get(name, (0, 0))
                row = txn.get(table, row_id)
                if row is None:
                    fresh = new_row(vrng, row_id, self.layout)
                    txn.insert(table, fresh)
                    rows, ks = rows + 1, ks + int(fresh["k"])
                elif op == "update_index":
                    txn.update(table, row_id, {"k": int(row["k"]) + 1})
                    ks += 1
                elif op == "update_non_index":
                    txn.update(table, row_id, {"c": sysbench_text(vrng, self.layout.c_length)})
                elif op == "delete":
                    txn.delete(table, row_id)
                    rows, ks = rows - 1, ks - int(row["k"])
                else:  # insert of an existing id: replace its values
                    fresh = new_row(vrng, row_id, self.layout)
                    fresh.pop("id")
                    txn.update(table, row_id, fresh)
                    ks += int(fresh["k"]) - int(row["k"])
                delta[name] = (rows, ks)
            return delta

        outcome, delta = run_txn(db, body, attempts=self.options.attempts)
        with self._lock:
            if outcome.unknown:
                self._unknown += 1
            elif outcome.committed and delta:
                for name, (rows, ks) in delta.items():
                    self.tallies[name].add(rows, ks)
        return outcome

    def check(self, db: Database) -> list[str]:
        problems: list[str] = []
        for name in self.names:
            rows = db.rows(self.db_name, name)
            k_sum = sum(int(r["k"]) for _, r in rows)
            problems += tally_problems(name, self.tallies[name], len(rows), k_sum, exact=not self._unknown)
            for h, r in rows:
                if len(r["pad"]) > PAD_LENGTH or h != r["id"]:
                    problems.append(f"sysbench: {name} row {h} is malformed: id={r['id']} pad={len(r['pad'])} chars")
                    break
        return problems

    def describe(self) -> dict[str, object]:
        return {
            "tables": len(self.names),
            "rows": {n: t.rows for n, t in self.tallies.items()},
            "row_size": self.layout.row_size,
            "c_type": self.layout.c_type,
            "unknown_outcomes": self._unknown,
        }
