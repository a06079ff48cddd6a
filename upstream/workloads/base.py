"""What every workload shares: its options, the outcome of one transaction, and the retry loop.

A workload is a class with

    setup(db)            create its database and tables (skipped when they exist) and load rows
    run_once(db, rng)    one transaction (or one DDL) -> TxnOutcome; never raises a BinlogError
    check(db)            its invariants after the run -> list of problems (empty = fine)

Many threads call ``run_once`` on one instance at the same time, each with its own ``rng``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from common.errors import BinlogError
from upstream.database import retry_backoff
from upstream.errors import CommitUnknownError

if TYPE_CHECKING:
    import random

    from upstream.database import Database
    from upstream.txn import Transaction

log = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 10
"""Attempts of one transaction before it counts as failed (as ``Database.run``)."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class WorkloadOptions:
    """Every workload option; each workload reads the ones it understands."""

    database: str = ""
    """Logical database of the workload's tables ("" = the workload's own default name)."""
    accounts: int = 100
    initial_balance: int = 1000
    tables: int = 2
    table_size: int = 1000
    rows_per_txn: int = 4
    row_size: int = 192
    txn_size: int = 16 << 20
    blob_size: int = 1 << 20
    keep_batches: int = 4
    ddl_ratio: float = 0.1
    attempts: int = DEFAULT_ATTEMPTS


@dataclass(frozen=True, slots=True)
class TxnOutcome:
    """What one ``run_once`` did."""

    committed: bool
    retries: int = 0
    commit_ts: int = 0
    commit_latency: float = 0.0
    """Seconds spent in ``commit()`` by the attempt that committed (0 for DDL and failures)."""
    kind: str = "dml"
    """"dml" or "ddl"."""
    error: str = ""
    """Why it failed (empty when committed)."""
    unknown: bool = False
    """The store's commit failed in a way that leaves the outcome unknown (CommitUnknownError)."""
    nbytes: int = 0
    """Payload bytes the transaction wrote (bigtxn)."""


class Workload:
    """Base of the workloads (see the module docstring)."""

    name = ""
    default_database = ""

    def __init__(self, options: WorkloadOptions) -> None:
        self.options = options
        self.db_name = options.database or self.default_database

    def setup(self, db: Database) -> None:
        raise NotImplementedError

    def run_once(self, db: Database, rng: random.Random) -> TxnOutcome:
        raise NotImplementedError

    def check(self, db: Database) -> list[str]:
        raise NotImplementedError

    def describe(self) -> dict[str, object]:
        """Workload-specific numbers for the final summary."""
        return {}


def ensure_database(db: Database, name: str) -> None:
    if not db.schema.has_db(name):
        db.create_database(name)


def run_txn(
    db: Database,
    body: Callable[[Transaction], _T],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    retry_if: Callable[[BinlogError, int], bool] | None = None,
) -> tuple[TxnOutcome, _T | None]:
    """Run ``body`` in a transaction and commit it, retrying retriable errors; never raises a BinlogError.

    Like ``Database.run`` but it counts the retries and times ``commit()``.  ``retry_if(error,
    schema_version_at_begin)`` may declare more errors worth another attempt (the ddl workload
    retries a "no such table" that a concurrent DDL caused).  Returns the outcome and the
    body's result of the attempt that committed (None when it failed).
    """
    last = ""
    waits = retry_backoff()
    for attempt in range(1, attempts + 1):
        version = db.schema.version
        txn: Transaction | None = None
        try:
            txn = db.begin()
            result = body(txn)
            if txn.state.value != "active":  # the body ended the transaction itself
                done = txn.state.value == "committed"
                return TxnOutcome(done, attempt - 1, txn.commit_ts, error="" if done else "rolled back"), result
            t0 = time.perf_counter()
            commit_ts = txn.commit()
            latency = time.perf_counter() - t0
            return TxnOutcome(True, attempt - 1, commit_ts, latency), result
        except CommitUnknownError as exc:
            return TxnOutcome(False, attempt - 1, error=_describe(exc), unknown=True), None
        except BinlogError as exc:
            if txn is not None:
                txn.rollback()
            last = _describe(exc)
            again = exc.retriable or (retry_if is not None and retry_if(exc, version))
            if not again:
                return TxnOutcome(False, attempt - 1, error=last), None
            log.debug("attempt %s failed, retrying: %s", attempt, last)
            if attempt < attempts:
                waits.wait()  # backoff(attempt)
        except BaseException:
            if txn is not None:
                txn.rollback()
            raise
    return TxnOutcome(False, attempts - 1, error=f"gave up after {attempts} attempts: {last}"), None


def backoff(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1`` (4 ms doubling, at most 200 ms; as Database.run)."""
    return retry_backoff().nth(attempt - 1)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
