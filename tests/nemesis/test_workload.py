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


def test_a_writer_killed_inside_commit_leaves_its_attempt_unknown(tmp_path: Path) -> None:
    """The pending line written before commit() outlives a kill -9 inside commit(): read back, that attempt is
    unknown (it may have committed); attempts whose outcome was written are reported as written."""

    class Killed(BaseException):
        """Stands for the kill: nothing after it runs in the writer."""

    def killed(start_ts: int) -> int:
        raise Killed

    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as h:
        w = workload.Worker(FakeDB([ok, killed]), h, dbname="d", thread=0, seed=1, accounts=4)  # type: ignore[arg-type]
        first = w.insert()
        h.append(first)
        with pytest.raises(Killed):
            w.insert()
    raw = path.read_text().splitlines()
    assert [line.count('"outcome":"pending"') for line in raw] == [1, 0, 1]
    recs = list(read_history(path))
    assert [(r.start_ts, r.outcome) for r in recs] == [(1, "ok"), (2, "unknown")]
    assert recs[1].error == "the writer was killed inside commit()"
    assert recs[1].insert_id == workload.insert_id(1, 0, 2)


def test_a_restarted_generation_numbers_its_threads_after_the_earlier_ones(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as h:
        workload.run(FakeDB([ok]), h, dbname="d", threads=2, duration=0.2, seed=1, accounts=4)  # type: ignore[arg-type]
        workload.run(FakeDB([ok]), h, dbname="d", threads=2, duration=0.2, seed=1, accounts=4, generation=1)  # type: ignore[arg-type]
    recs = list(read_history(path))
    assert {r.thread for r in recs} == {0, 1, 2, 3}
    ids = [r.insert_id for r in recs if r.insert_id is not None]
    assert ids
    assert len(ids) == len(set(ids))  # no insert id used twice across the generations
