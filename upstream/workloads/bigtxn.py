"""``bigtxn``: transactions of ``--txn-size`` bytes (up to hundreds of MB) of BLOB payload.

Tables of ``<db>`` (default ``bigtxn``):

* ``blobs (batch BIGINT, seq INT, crc INT UNSIGNED, payload LONGBLOB)``, primary key
  ``(batch, seq)`` (not an integer handle: rows get hidden row ids, as in TiDB);
* ``batches (batch BIGINT PRIMARY KEY, nrows INT, nbytes BIGINT)``.

One transaction inserts a batch: ``ceil(txn-size / blob-size)`` rows of ``--blob-size`` bytes
(the last one shorter) and its ``batches`` row; the batch number is the transaction's start_ts.
Payloads are generated one row at a time while the transaction runs, so a thread holds only
its own transaction.  When more than ``--keep-batches`` batches of this run are stored
(0 = keep all), a ``run_once`` deletes the oldest instead, in a transaction of its own (as big
as the batch: deleted rows travel in the binlog too).

Invariant: every batch is whole: rows 0..nrows-1, ``nbytes`` bytes in all, each payload's CRC32
equal to its ``crc``; no row without its batch.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from upstream.ddl import Column
from upstream.workloads.base import TxnOutcome, Workload, WorkloadOptions, ensure_database, run_txn
from upstream.workloads.gen import payload

if TYPE_CHECKING:
    from upstream.database import Database
    from upstream.txn import Transaction

log = logging.getLogger(__name__)

BLOBS = "blobs"
BATCHES = "batches"
MAX_BLOB_SIZE = 256 << 20


def row_sizes(txn_size: int, blob_size: int) -> Iterator[int]:
    """Sizes of the rows of one batch: ``blob_size`` each, the last one what remains (pure)."""
    left = txn_size
    while left > 0:
        n = min(blob_size, left)
        yield n
        left -= n


def batch_problems(
    batches: Mapping[int, tuple[int, int]], rows: Iterable[tuple[int, int, int, int]], bad_crc: Iterable[str]
) -> list[str]:
    """Incomplete batches and orphan rows (pure).

    ``batches``: batch -> (nrows, nbytes); ``rows``: (batch, seq, crc, length) of every stored row;
    ``bad_crc``: descriptions of rows whose payload does not match their crc.
    """
    problems = list(bad_crc)
    seen: dict[int, list[int]] = collections.defaultdict(list)
    size: dict[int, int] = collections.defaultdict(int)
    for batch, seq, _crc, length in rows:
        seen[batch].append(seq)
        size[batch] += length
    for batch in sorted(set(seen) - set(batches)):
        problems.append(f"bigtxn: {len(seen[batch])} row(s) of batch {batch} without a batches row")
    for batch, (nrows, nbytes) in sorted(batches.items()):
        seqs = sorted(seen.get(batch, []))
        if seqs != list(range(nrows)):
            problems.append(f"bigtxn: batch {batch} has rows {_ranges(seqs)}, expected 0..{nrows - 1}")
        elif size[batch] != nbytes:
            problems.append(f"bigtxn: batch {batch} holds {size[batch]} bytes, expected {nbytes}")
    return problems


def _ranges(seqs: list[int]) -> str:
    if not seqs:
        return "none"
    if len(seqs) > 6:
        return f"{seqs[:3]}...{seqs[-3:]} ({len(seqs)} rows)"
    return str(seqs)


class BigTxnWorkload(Workload):
    name = "bigtxn"
    default_database = "bigtxn"

    def __init__(self, options: WorkloadOptions) -> None:
        super().__init__(options)
        if options.txn_size < 1:
            raise ValueError(f"--txn-size must be at least 1 byte, got {options.txn_size}")
        if not 1 <= options.blob_size <= MAX_BLOB_SIZE:
            raise ValueError(f"--blob-size must be between 1 byte and {MAX_BLOB_SIZE} bytes, got {options.blob_size}")
        if options.keep_batches < 0:
            raise ValueError(f"--keep-batches must be >= 0, got {options.keep_batches}")
        self.blobs = f"{self.db_name}.{BLOBS}"
        self.batches = f"{self.db_name}.{BATCHES}"
        self._lock = threading.Lock()
        self._kept: collections.deque[tuple[int, int]] = collections.deque()  # (batch, nrows), oldest first
        self.inserted = 0
        self.deleted = 0
        self.bytes_committed = 0

    def setup(self, db: Database) -> None:
        ensure_database(db, self.db_name)
        if not db.schema.has_table(self.db_name, BLOBS):
            db.create_table(
                self.db_name,
                BLOBS,
                [
                    Column("batch", "BIGINT", nullable=False),
                    Column("seq", "INT", nullable=False),
                    Column("crc", "INT UNSIGNED", nullable=False),
                    Column("payload", "LONGBLOB", nullable=False),
                ],
                primary_key=["batch", "seq"],
            )
        if not db.schema.has_table(self.db_name, BATCHES):
            db.create_table(
                self.db_name,
                BATCHES,
                [
                    Column("batch", "BIGINT"),
                    Column("nrows", "INT", nullable=False),
                    Column("nbytes", "BIGINT", nullable=False),
                ],
                primary_key=["batch"],
            )

    def run_once(self, db: Database, rng: random.Random) -> TxnOutcome:
        victim = None
        with self._lock:
            if self.options.keep_batches and len(self._kept) > self.options.keep_batches:
                victim = self._kept.popleft()
        if victim is not None:
            return self._delete(db, *victim)
        return self._insert(db, rng.getrandbits(64))

    def _insert(self, db: Database, seed: int) -> TxnOutcome:
        sizes = list(row_sizes(self.options.txn_size, self.options.blob_size))

        def body(txn: Transaction) -> int:
            r = random.Random(seed)
            batch = txn.start_ts
            for seq, size in enumerate(sizes):
                data = payload(r, size)
                txn.insert(self.blobs, {"batch": batch, "seq": seq, "crc": zlib.crc32(data), "payload": data})
                del data
            txn.insert(self.batches, {"batch": batch, "nrows": len(sizes), "nbytes": sum(sizes)})
            return batch

        outcome, batch = run_txn(db, body, attempts=self.options.attempts)
        if outcome.committed and batch is not None:
            with self._lock:
                self._kept.append((batch, len(sizes)))
                self.inserted += 1
                self.bytes_committed += sum(sizes)
            return replace(outcome, nbytes=sum(sizes))
        return outcome

    def _delete(self, db: Database, batch: int, nrows: int) -> TxnOutcome:
        def body(txn: Transaction) -> None:
            for seq in range(nrows):
                txn.delete(self.blobs, (batch, seq))
            txn.delete(self.batches, batch)

        outcome, _ = run_txn(db, body, attempts=self.options.attempts)
        with self._lock:
            if outcome.committed:
                self.deleted += 1
            elif not outcome.unknown:
                self._kept.appendleft((batch, nrows))
        return outcome

    def check(self, db: Database) -> list[str]:
        batches = {int(r["batch"]): (int(r["nrows"]), int(r["nbytes"])) for _, r in db.rows(self.db_name, BATCHES)}
        meta = self._row_meta(db)
        bad: list[str] = []
        for batch, seq, crc, _length in meta:
            txn = db.begin()  # one row per transaction: a transaction keeps every row it read
            try:
                row = txn.get(self.blobs, (batch, seq))
            finally:
                txn.rollback()
            if row is None or zlib.crc32(row["payload"]) != crc:
                bad.append(f"bigtxn: row {seq} of batch {batch}: payload does not match its crc")
                if len(bad) >= 5:
                    break
        return batch_problems(batches, meta, bad)

    def _row_meta(self, db: Database) -> list[tuple[int, int, int, int]]:
        """(batch, seq, crc, payload length) of every stored row, without reading the payloads."""
        d = db.store.dialect()
        q = d.quote
        sql = f"SELECT {q('batch')}, {q('seq')}, {q('crc')}, LENGTH({q('payload')}) FROM {d.table(self.db_name, BLOBS)}"
        s = db.store.session()
        try:
            return [(int(a), int(b), int(c), int(n)) for a, b, c, n in s.query_all(sql)]
        finally:
            s.close()

    def describe(self) -> dict[str, object]:
        with self._lock:
            return {
                "batches_inserted": self.inserted,
                "batches_deleted": self.deleted,
                "bytes_committed": self.bytes_committed,
                "txn_size": self.options.txn_size,
                "blob_size": self.options.blob_size,
            }
