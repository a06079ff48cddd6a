"""The workload's history: one JSON line per transaction attempt, appended, flushed, fsynced now and then.

A record (:class:`Record`) says what the writer *saw*: ``ok`` only when ``commit()`` returned, ``fail``
only when the writer's exception semantics say nothing was committed, ``unknown`` for anything else.
Right before ``commit()`` the writer appends a ``pending`` record of the attempt: a writer killed inside
``commit()`` leaves it without its outcome, and :func:`read_history` reports such an attempt ``unknown``
(it may have committed).  The checker reads the file back with :func:`read_history` and trusts nothing
else the system reports.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, TextIO

OUTCOMES: Final = ("ok", "fail", "unknown")
PENDING: Final = "pending"
"""The outcome of the line written right before ``commit()`` (never returned by read_history)."""
KINDS: Final = ("transfer", "insert")
FSYNC_INTERVAL: Final = 1.0
"""Seconds between two fsyncs of the history file while it is written."""


@dataclass(frozen=True, slots=True)
class Record:
    """One transaction attempt as the writer saw it.

    `rows` for a transfer: ``{"from": id, "to": id, "balances": {"<id>": "<new balance>", ...}}``; for an
    insert: ``{"id": n}``.  `start_ts` is None when the attempt failed before it had one."""

    thread: int
    kind: str
    start_ts: int | None
    outcome: str
    commit_ts: int | None
    rows: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    t: float = 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                "thread": self.thread,
                "kind": self.kind,
                "start_ts": self.start_ts,
                "outcome": self.outcome,
                "commit_ts": self.commit_ts,
                "rows": dict(self.rows),
                "error": self.error,
                "t": self.t,
            },
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(line: str) -> Record:
        d = json.loads(line)
        if (d["outcome"] not in OUTCOMES and d["outcome"] != PENDING) or d["kind"] not in KINDS:
            raise ValueError(f"not a history record: {line!r}")
        return Record(
            thread=int(d["thread"]),
            kind=str(d["kind"]),
            start_ts=None if d["start_ts"] is None else int(d["start_ts"]),
            outcome=str(d["outcome"]),
            commit_ts=None if d["commit_ts"] is None else int(d["commit_ts"]),
            rows=dict(d.get("rows") or {}),
            error=d.get("error"),
            t=float(d.get("t", 0.0)),
        )

    @property
    def insert_id(self) -> int | None:
        """The id an insert wrote (None for a transfer)."""
        return int(self.rows["id"]) if self.kind == "insert" else None


class HistoryWriter:
    """Appends records to a file from many threads: each line flushed at once, fsynced every
    FSYNC_INTERVAL seconds and at close."""

    def __init__(self, path: str | Path) -> None:
        self._f: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        self._lock = threading.Lock()
        self._synced = time.monotonic()

    def append(self, record: Record) -> None:
        line = record.to_json() + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            now = time.monotonic()
            if now - self._synced >= FSYNC_INTERVAL:
                os.fsync(self._f.fileno())
                self._synced = now

    def close(self) -> None:
        with self._lock:
            if self._f.closed:
                return
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_history(path: str | Path) -> Iterator[Record]:
    """The outcomes of a history file in order; a torn last line (the writer was killed) is skipped.

    A ``pending`` record is dropped once its attempt's outcome follows; one whose outcome never came (the
    writer was killed inside ``commit()``) is reported ``unknown`` at the end."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    pending: dict[tuple[int, int | None], Record] = {}
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = Record.from_json(line)
        except (ValueError, KeyError):
            if n == len(lines) - 1:
                break  # an unterminated last line
            raise
        if rec.outcome == PENDING:
            pending[(rec.thread, rec.start_ts)] = rec
            continue
        pending.pop((rec.thread, rec.start_ts), None)
        yield rec
    for rec in pending.values():
        yield replace(rec, outcome="unknown", error="the writer was killed inside commit()")
