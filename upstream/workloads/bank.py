"""``bank``: transfers between accounts; the sum of all balances never changes.

Table ``<db>.accounts (id BIGINT PRIMARY KEY, balance DECIMAL(20,2) NOT NULL)`` with
``--accounts`` rows of ``--initial-balance`` each.  A transaction reads two distinct random
accounts and moves a random amount (0.01 .. 100.00, balances may go negative) from one to the
other.  The invariant is checked against what the table held when ``setup`` finished, so it
also holds for a table left by an earlier run.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from decimal import Decimal
from typing import TYPE_CHECKING

from upstream.ddl import Column
from upstream.workloads.base import TxnOutcome, Workload, WorkloadOptions, ensure_database, run_txn

if TYPE_CHECKING:
    from upstream.database import Database
    from upstream.txn import Transaction

log = logging.getLogger(__name__)

TABLE = "accounts"
LOAD_BATCH = 500
MAX_AMOUNT_CENTS = 10_000


def transfer_amount(rng: random.Random) -> Decimal:
    return Decimal(rng.randint(1, MAX_AMOUNT_CENTS)).scaleb(-2)


def pick_accounts(rng: random.Random, ids: list[int]) -> tuple[int, int]:
    a, b = rng.sample(ids, 2)
    return a, b


def balance_problems(balances: Iterable[Decimal], expected_count: int, expected_total: Decimal) -> list[str]:
    """What is wrong with the accounts' balances (pure)."""
    values = list(balances)
    problems = []
    if len(values) != expected_count:
        problems.append(f"bank: {len(values)} accounts, expected {expected_count}")
    total = sum(values, Decimal(0))
    if total != expected_total:
        problems.append(
            f"bank: sum of balances is {total}, expected {expected_total} (off by {total - expected_total})"
        )
    return problems


class BankWorkload(Workload):
    name = "bank"
    default_database = "bank"

    def __init__(self, options: WorkloadOptions) -> None:
        super().__init__(options)
        if options.accounts < 2:
            raise ValueError(f"bank needs at least 2 accounts, got {options.accounts}")
        self.table = f"{self.db_name}.{TABLE}"
        self.ids: list[int] = []
        self.expected_total = Decimal(0)

    def setup(self, db: Database) -> None:
        ensure_database(db, self.db_name)
        if not db.schema.has_table(self.db_name, TABLE):
            db.create_table(
                self.db_name,
                TABLE,
                [Column("id", "BIGINT"), Column("balance", "DECIMAL(20,2)", nullable=False, default=0)],
                primary_key=["id"],
            )
        have = {h: row["balance"] for h, row in db.rows(self.db_name, TABLE)}
        missing = [i for i in range(1, self.options.accounts + 1) if i not in have]
        initial = Decimal(self.options.initial_balance)
        for start in range(0, len(missing), LOAD_BATCH):
            chunk = missing[start : start + LOAD_BATCH]

            def load(txn: Transaction, chunk: list[int] = chunk) -> None:
                for i in chunk:
                    txn.insert(self.table, {"id": i, "balance": initial})

            db.run(load)
            have.update(dict.fromkeys(chunk, initial))
        self.ids = sorted(have)
        self.expected_total = sum(have.values(), Decimal(0))
        log.info("bank: %d accounts, total %s", len(self.ids), self.expected_total)

    def run_once(self, db: Database, rng: random.Random) -> TxnOutcome:
        src, dst = pick_accounts(rng, self.ids)
        amount = transfer_amount(rng)

        def body(txn: Transaction) -> None:
            a, b = txn.get(self.table, src), txn.get(self.table, dst)
            if a is None or b is None:
                raise LookupError(f"account {src if a is None else dst} vanished")
            txn.update(self.table, src, {"balance": a["balance"] - amount})
            txn.update(self.table, dst, {"balance": b["balance"] + amount})

        outcome, _ = run_txn(db, body, attempts=self.options.attempts)
        return outcome

    def check(self, db: Database) -> list[str]:
        balances = [row["balance"] for _, row in db.rows(self.db_name, TABLE)]
        return balance_problems(balances, len(self.ids), self.expected_total)

    def describe(self) -> dict[str, object]:
        return {"accounts": len(self.ids), "total": str(self.expected_total)}
