"""The nemesis workload: bank transfers and unique inserts from several threads, every attempt in a history.

    python -m tests.nemesis.workload --etcd URL --store DSN --history FILE --threads N --duration S --seed K
        [--generation G]

Tables (created when missing, in logical database ``--db``, default ``nemesis``):
``accounts (id BIGINT PRIMARY KEY, balance DECIMAL(20,2))`` with ``--accounts`` rows of 1000.00, and
``inserts (id BIGINT PRIMARY KEY, thread BIGINT)``.  Each thread picks, per attempt, a transfer between two
random accounts (the total never changes) or an insert of an id unique to (seed, thread, counter).

A writer killed with kill -9 is started again with the next ``--generation``: its threads are numbered
from ``generation x threads`` on, so its insert ids and random choices differ from the earlier run's, and
it appends to the same history (the ``pending`` line each attempt writes before ``commit()`` makes an
attempt the kill cut short ``unknown``).

Each attempt is run once (no retry inside an attempt) and recorded (tests.nemesis.history).  How the
writer's exceptions are classified (upstream/commit.py): an error before ``commit()`` is called sent
nothing, so ``fail``; inside ``commit()``, everything raised before the storage commit rolls the data back
(``_abort``), and the errors that can only come from there are listed in :data:`DEFINITE_FAILURES`; the
storage commit's own failure is CommitUnknownError; anything else raised by ``commit()`` (e.g. from the
C-binlog's asynchronous send after the data committed) is ``unknown`` too.  ``ok`` only when ``commit()``
returned its commit_ts (``Transaction.commit``'s return value; nothing in upstream was changed for this).

One attempt's time is bounded by the writer's own timeouts (TSO 10 s per timestamp, the pump client's
``write_timeout`` of WRITE_TIMEOUT, sqlite's busy timeout); a thread still inside an attempt EXIT_GRACE
seconds after the duration (a MySQL store connection has no read timeout) is abandoned: that attempt is
recorded ``unknown`` and the process exits at once after the summary.  SIGTERM ends the run early, the same
way as the end of the duration.  Exit status 0 with ``nemesis workload: ok=N fail=N unknown=N ...`` on stdout.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from decimal import Decimal
from typing import Any, Final

from common.errors import BinlogError
from common.txnstatus import TxnStatusConflictError
from tests.nemesis.history import PENDING, HistoryWriter, Record
from upstream import Database
from upstream.ddl import Column
from upstream.errors import (
    BinlogWriteError,
    SchemaChangedError,
    TxnClosedError,
    TxnTooLargeError,
    WriteConflictError,
)
from upstream.txn import Transaction

log = logging.getLogger("tests.nemesis.workload")

DEFAULT_DB: Final = "nemesis"
ACCOUNTS: Final = "accounts"
INSERTS: Final = "inserts"
INITIAL_BALANCE: Final = Decimal("1000.00")
INSERT_RATIO: Final = 0.5
ID_THREAD_SPAN: Final = 10**8
ID_SEED_SPAN: Final = 10**11
SETUP_TIMEOUT: Final = 60.0
WRITE_TIMEOUT: Final = 5.0
"""Seconds the pump client tries one binlog (bounds one attempt's commit)."""
ERROR_PAUSE: Final = 0.05
"""Seconds a thread waits after a failed attempt (the cluster may be partitioned)."""
EXIT_GRACE: Final = 30.0
"""Seconds after the duration that threads get to finish their attempt; a thread still stuck then (e.g. on a
store connection without a read timeout) is abandoned: its attempt is recorded ``unknown``."""

DEFINITE_FAILURES: Final = (
    WriteConflictError,
    SchemaChangedError,
    BinlogWriteError,
    TxnTooLargeError,
    TxnClosedError,
    TxnStatusConflictError,
)
"""Errors ``commit()`` raises only before the storage commit, after rolling the data back."""


def insert_id(seed: int, thread: int, counter: int) -> int:
    """A BIGINT unique to (seed mod 10^6, thread < 1000, counter < 10^8)."""
    return (seed % 10**6) * ID_SEED_SPAN + thread * ID_THREAD_SPAN + counter


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def classify_commit_error(exc: BaseException) -> str:
    """``fail`` for an error of ``commit()`` that means nothing was committed, else ``unknown``."""
    return "fail" if isinstance(exc, DEFINITE_FAILURES) else "unknown"


def setup(db: Database, dbname: str, accounts: int) -> None:
    """Create the tables and load the accounts that are missing (retried until SETUP_TIMEOUT)."""
    deadline = time.monotonic() + SETUP_TIMEOUT
    while True:
        try:
            if not db.schema.has_db(dbname):
                db.create_database(dbname)
            if not db.schema.has_table(dbname, ACCOUNTS):
                db.create_table(
                    dbname,
                    ACCOUNTS,
                    [Column("id", "BIGINT"), Column("balance", "DECIMAL(20,2)", nullable=False, default=0)],
                    primary_key=["id"],
                )
            if not db.schema.has_table(dbname, INSERTS):
                db.create_table(
                    dbname, INSERTS, [Column("id", "BIGINT"), Column("thread", "BIGINT")], primary_key=["id"]
                )
            have = {h for h, _ in db.rows(dbname, ACCOUNTS)}
            missing = [i for i in range(1, accounts + 1) if i not in have]
            if missing:

                def load(txn: Transaction, missing: list[int] = missing) -> None:
                    for i in missing:
                        txn.insert(f"{dbname}.{ACCOUNTS}", {"id": i, "balance": INITIAL_BALANCE})

                db.run(load)
            return
        except BinlogError as exc:
            if time.monotonic() > deadline:
                raise
            log.warning("setup failed, retrying: %s", exc)
            time.sleep(0.5)


class Worker:
    """One thread's attempts until the deadline."""

    def __init__(
        self, db: Database, history: HistoryWriter, *, dbname: str, thread: int, seed: int, accounts: int
    ) -> None:
        self.db = db
        self.history = history
        self.dbname = dbname
        self.thread = thread
        self.seed = seed
        self.rng = random.Random(seed * 1000 + thread)
        self.accounts = accounts
        self.counter = 0
        self.outcomes: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._current: Record | None = None
        self._abandoned = False

    def run(self, deadline: float, stop: threading.Event) -> None:
        while time.monotonic() < deadline and not stop.is_set():
            rec = self.insert() if self.rng.random() < INSERT_RATIO else self.transfer()
            with self._lock:
                self._current = None
                if self._abandoned:
                    return
                self.history.append(rec)
                self.outcomes[rec.outcome] += 1
            if rec.outcome != "ok":
                stop.wait(ERROR_PAUSE)

    def abandon(self) -> None:
        """Give up on a stuck thread: its attempt in progress is recorded ``unknown`` (it may still commit)."""
        with self._lock:
            self._abandoned = True
            rec, self._current = self._current, None
            if rec is not None:
                self.history.append(rec)
                self.outcomes[rec.outcome] += 1

    def _in_progress(self, kind: str, rows: dict[str, Any], start_ts: int | None) -> None:
        with self._lock:
            self._current = Record(
                self.thread,
                kind,
                start_ts,
                "unknown",
                None,
                rows,
                "still running when the workload exited",
                time.time(),
            )

    def _attempt(self, kind: str, rows: dict[str, Any], body: Any) -> Record:
        self._in_progress(kind, rows, None)
        try:
            txn = self.db.begin()
        except Exception as exc:  # no start_ts: nothing was sent
            return Record(self.thread, kind, None, "fail", None, rows, describe(exc), time.time())
        start_ts = txn.start_ts
        self._in_progress(kind, rows, start_ts)
        try:
            body(txn)
        except Exception as exc:  # before commit(): nothing was sent
            txn.rollback()
            return Record(self.thread, kind, start_ts, "fail", None, rows, describe(exc), time.time())
        with self._lock:
            if not self._abandoned:  # an abandoned attempt's record (unknown) is written already
                self.history.append(Record(self.thread, kind, start_ts, PENDING, None, rows, None, time.time()))
        try:
            commit_ts = txn.commit()
        except Exception as exc:
            return Record(
                self.thread, kind, start_ts, classify_commit_error(exc), None, rows, describe(exc), time.time()
            )
        return Record(self.thread, kind, start_ts, "ok", commit_ts, rows, None, time.time())

    def insert(self) -> Record:
        self.counter += 1
        n = insert_id(self.seed, self.thread, self.counter)
        table = f"{self.dbname}.{INSERTS}"
        return self._attempt("insert", {"id": n}, lambda txn: txn.insert(table, {"id": n, "thread": self.thread}))

    def transfer(self) -> Record:
        src, dst = self.rng.sample(range(1, self.accounts + 1), 2)
        amount = Decimal(self.rng.randint(1, 10_000)).scaleb(-2)
        table = f"{self.dbname}.{ACCOUNTS}"
        rows: dict[str, Any] = {"from": src, "to": dst, "balances": {}}

        def body(txn: Transaction) -> None:
            a, b = txn.get(table, src), txn.get(table, dst)
            if a is None or b is None:
                raise LookupError(f"account {src if a is None else dst} is missing")
            new_a, new_b = a["balance"] - amount, b["balance"] + amount
            txn.update(table, src, {"balance": new_a})
            txn.update(table, dst, {"balance": new_b})
            rows["balances"] = {str(src): str(new_a), str(dst): str(new_b)}

        return self._attempt("transfer", rows, body)


def run(
    db: Database,
    history: HistoryWriter,
    *,
    dbname: str,
    threads: int,
    duration: float,
    seed: int,
    accounts: int,
    stop: threading.Event | None = None,
    generation: int = 0,
) -> tuple[Counter[str], int]:
    """Run the threads for `duration` seconds (or until `stop` is set); the counts per outcome and the number
    of threads abandoned (stuck EXIT_GRACE seconds past the end).  Threads are numbered from
    `generation` x `threads` on."""
    stop = stop or threading.Event()
    deadline = time.monotonic() + duration
    first = generation * threads
    workers = [
        Worker(db, history, dbname=dbname, thread=first + i, seed=seed, accounts=accounts) for i in range(threads)
    ]
    running = [
        threading.Thread(target=w.run, args=(deadline, stop), name=f"nemesis-{w.thread}", daemon=True) for w in workers
    ]
    for t in running:
        t.start()
    while not stop.wait(0.2) and time.monotonic() < deadline:
        pass
    give_up = time.monotonic() + EXIT_GRACE
    abandoned = 0
    for w, t in zip(workers, running, strict=True):
        t.join(max(0.0, give_up - time.monotonic()))
        if t.is_alive():
            log.warning("thread %d is stuck in an attempt: abandoned, its attempt recorded unknown", w.thread)
            w.abandon()
            abandoned += 1
    total: Counter[str] = Counter()
    for w in workers:
        total.update(w.outcomes)
    return total, abandoned


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.nemesis.workload", description=__doc__.split("\n")[0])
    p.add_argument("--etcd", required=True, help="etcd URL(s), comma separated")
    p.add_argument("--store", required=True, help="upstream store DSN (sqlite:///path or mysql://...)")
    p.add_argument("--history", required=True, help="history file (JSON lines, appended)")
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--duration", type=float, default=30.0, help="seconds")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--accounts", type=int, default=10)
    p.add_argument("--db", default=DEFAULT_DB, help="logical database of the tables")
    p.add_argument("--generation", type=int, default=0, help="how many runs of this writer came before")
    args = p.parse_args(argv)
    if args.accounts < 2 or args.threads < 1 or args.generation < 0 or (args.generation + 1) * args.threads > 1000:
        p.error("need --accounts >= 2, --threads >= 1, --generation >= 0 and (generation + 1) x threads <= 1000")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    db = Database(args.etcd.split(","), args.store, write_timeout=WRITE_TIMEOUT)
    try:
        setup(db, args.db, args.accounts)
        with HistoryWriter(args.history) as history:
            counts, abandoned = run(
                db,
                history,
                dbname=args.db,
                threads=args.threads,
                duration=args.duration,
                seed=args.seed,
                accounts=args.accounts,
                stop=stop,
                generation=args.generation,
            )
        total = INITIAL_BALANCE * args.accounts
        print(
            f"nemesis workload: ok={counts['ok']} fail={counts['fail']} unknown={counts['unknown']} "
            f"abandoned={abandoned} accounts={args.accounts} total={total}",
            flush=True,
        )
        if abandoned:
            sys.stderr.flush()
            os._exit(0)  # a stuck thread would hang the database's close; the history is fsynced
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
