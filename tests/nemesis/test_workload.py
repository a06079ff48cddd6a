"""The nemesis workload's threads against a fake database: what each kind of outcome is recorded as."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from tests.nemesis import workload
from tests.nemesis.history import HistoryWriter, read_history
from upstream.errors import CommitUnknownError, StoreError, WriteConflictError


class FakeTxn:
    def __init__(self, start_ts: int, commit: Any) -> None:
        self.start_ts = start_ts
        self._commit = commit

    def get(self, table: str, key: int) -> dict[str, Any]:
        return {"id": key, "balance": 100}

    def insert(self, table: str, row: dict[str, Any]) -> int:
        return int(row["id"])

    def update(self, table: str, key: int, changes: dict[str, Any]) -> None:
        pass

    def commit(self) -> int:
        result: int = self._commit(self.start_ts)
        return result

    def rollback(self) -> None:
        pass


class FakeDB:
    """begin() hands out start_ts 1, 2, ...; the commits do what `script` says, in turn."""

    def __init__(self, script: list[Any], block: threading.Event | None = None) -> None:
        self.script = script
        self.block = block
        self.ts = 0

    def begin(self) -> FakeTxn:
        if self.block is not None:
            self.block.wait()
        self.ts += 1
        step = self.script[(self.ts - 1) % len(self.script)]
        return FakeTxn(self.ts, step)


def ok(start_ts: int) -> int:
    return start_ts + 1000


def raiser(exc: BaseException) -> Any:
    def go(start_ts: int) -> int:
        raise exc

    return go


def test_outcomes_follow_the_writer_exceptions(tmp_path: Path) -> None:
    script = [
        ok,
        raiser(WriteConflictError("conflict")),
        raiser(CommitUnknownError("lost connection at commit")),
        raiser(RuntimeError("after the storage commit")),
    ]
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as h:
        w = workload.Worker(FakeDB(script), h, dbname="d", thread=0, seed=1, accounts=4)  # type: ignore[arg-type]
        recs = [w.transfer() if i % 2 else w.insert() for i in range(8)]
    by_ts = {r.start_ts: r for r in recs}
    assert by_ts[1].outcome == "ok"
    assert by_ts[1].commit_ts == 1001
    assert by_ts[2].outcome == "fail"
    assert by_ts[3].outcome == "unknown"
    assert by_ts[4].outcome == "unknown"
    assert by_ts[4].commit_ts is None
    assert by_ts[6].rows["balances"]  # a transfer records its new balances


def test_begin_failure_is_a_failure_without_start_ts(tmp_path: Path) -> None:
    class NoTSO(FakeDB):
        def begin(self) -> FakeTxn:
            raise StoreError("pd unreachable")

    with HistoryWriter(tmp_path / "h.jsonl") as h:
        w = workload.Worker(NoTSO([ok]), h, dbname="d", thread=0, seed=1, accounts=4)  # type: ignore[arg-type]
        rec = w.insert()
    assert (rec.outcome, rec.start_ts) == ("fail", None)


def test_run_records_every_attempt_and_abandons_a_stuck_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload, "EXIT_GRACE", 0.3)
    block = threading.Event()
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as h:
        counts, abandoned = workload.run(
            FakeDB([ok], block),  # type: ignore[arg-type]
            h,
            dbname="d",
            threads=2,
            duration=0.2,
            seed=1,
            accounts=4,
        )
    block.set()
    assert abandoned == 2
    recs = list(read_history(path))
    assert [r.outcome for r in recs] == ["unknown", "unknown"]
    assert all(r.error == "still running when the workload exited" for r in recs)
    assert counts["unknown"] == 2


def test_run_until_duration(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as h:
        counts, abandoned = workload.run(
            FakeDB([ok, raiser(WriteConflictError("c"))]),  # type: ignore[arg-type]
            h,
            dbname="d",
            threads=1,
            duration=0.3,
            seed=1,
            accounts=4,
        )
    recs = list(read_history(path))
    assert abandoned == 0
    assert len(recs) == counts["ok"] + counts["fail"]
    assert counts["ok"] > 0
    assert counts["fail"] > 0
