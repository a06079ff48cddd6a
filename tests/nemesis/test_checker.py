"""The nemesis checker's rules on synthetic data: each passes on clean data and fails on a crafted violation."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from common.pb import binlog_pb2
from tests.nemesis.checker import (
    Samples,
    Tables,
    check,
    check_checkpoints,
    check_effects,
    check_rows,
    check_streams,
    recovery_times,
)
from tests.nemesis.history import HistoryWriter, Record, read_history
from tests.nemesis.streams import StreamEntry
from tests.nemesis.workload import classify_commit_error, insert_id
from upstream.errors import BinlogWriteError, CommitUnknownError, WriteConflictError

C, R = binlog_pb2.Commit, binlog_pb2.Rollback


def ins(start: int, outcome: str, i: int, commit: int | None = None) -> Record:
    return Record(0, "insert", start, outcome, commit, {"id": i}, None if outcome == "ok" else "boom", 0.0)


def xfer(start: int, outcome: str, commit: int | None = None) -> Record:
    rows = {"from": 1, "to": 2, "balances": {"1": "90.00", "2": "110.00"}}
    return Record(0, "transfer", start, outcome, commit, rows, None, 0.0)


HISTORY = [ins(10, "ok", 1, 11), xfer(12, "ok", 13), ins(14, "fail", 2), ins(16, "unknown", 3), ins(18, "unknown", 4)]
UP = Tables({1: Decimal("90.00"), 2: Decimal("110.00")}, frozenset({1, 3}))
DOWN = Tables({1: Decimal("90.00"), 2: Decimal("110.00")}, frozenset({1, 3}))
STREAMS = {
    "p1": [StreamEntry(11, 10, C), StreamEntry(15, 15, R), StreamEntry(17, 16, C)],
    "p2": [StreamEntry(13, 12, C), StreamEntry(20, 20, R)],
}


def samples(*points: tuple[float, int, set[int]]) -> Samples:
    s = Samples()
    for t, cp, ids in points:
        s.add(t, cp, ids)
    return s


# ------------------------------------------------------------------------------ rule a


def test_effects_clean() -> None:
    assert check_effects(HISTORY, UP, DOWN, final_checkpoint=20) == []


def test_effects_lost_ok_insert() -> None:
    down = Tables(DOWN.accounts, frozenset({3}))
    v = check_effects(HISTORY, UP, down, final_checkpoint=20)
    assert [x.rule for x in v] == ["a"]
    assert "lost: ok insert id=1" in v[0].message


def test_effects_ok_above_final_checkpoint() -> None:
    v = check_effects(HISTORY, UP, DOWN, final_checkpoint=12)
    assert len(v) == 1
    assert "commit_ts=13 is above the final checkpoint 12" in v[0].message


def test_effects_failed_insert_present() -> None:
    up = Tables(UP.accounts, UP.inserts | {2})
    v = check_effects(HISTORY, up, DOWN, final_checkpoint=20)
    assert len(v) == 1
    assert "failed insert id=2" in v[0].message
    assert "upstream" in v[0].message


def test_effects_unknown_disagrees() -> None:
    down = Tables(DOWN.accounts, frozenset({1}))
    v = check_effects(HISTORY, UP, down, final_checkpoint=20)
    assert len(v) == 1
    assert "unknown insert id=3" in v[0].message


# ------------------------------------------------------------------------------ rule b


def test_rows_clean() -> None:
    assert check_rows(UP, DOWN, Decimal("200.00")) == []


def test_rows_balance_differs() -> None:
    down = Tables({1: Decimal("90.00"), 2: Decimal("111.00")}, DOWN.inserts)
    msgs = [v.message for v in check_rows(UP, down, Decimal("200.00"))]
    assert "account 2: upstream balance 110.00, downstream 111.00" in msgs
    assert any("total upstream 200.00 != downstream 201.00" in m for m in msgs)
    assert any("bank total downstream is 201.00, expected 200.00" in m for m in msgs)


def test_rows_insert_missing_or_extra() -> None:
    v = check_rows(UP, Tables(DOWN.accounts, frozenset({1, 9})))
    assert [x.message for x in v] == [
        "1 insert ids upstream but not downstream, first [3]",
        "1 insert ids downstream but not upstream, first [9]",
    ]


def test_rows_total_broken_on_both_sides() -> None:
    both = Tables({1: Decimal("90.00"), 2: Decimal("100.00")}, frozenset())
    v = check_rows(both, both, Decimal("200.00"))
    assert len(v) == 2
    assert all("expected 200.00" in x.message for x in v)


# ------------------------------------------------------------------------------ rule c


def test_streams_clean() -> None:
    v, counts = check_streams(HISTORY, STREAMS, UP)
    assert v == []
    assert counts["duplicated"] == 0


def test_streams_not_ascending() -> None:
    bad = {**STREAMS, "p2": [StreamEntry(13, 12, C), StreamEntry(13, 13, R)]}  # a fake at an equal ts
    v, _ = check_streams(HISTORY, bad, UP)
    assert len(v) == 1
    assert "not strictly ascending" in v[0].message


def test_streams_duplicated_commit() -> None:
    bad = {**STREAMS, "p2": [StreamEntry(11, 10, C), *STREAMS["p2"]]}
    v, counts = check_streams(HISTORY, bad, UP)
    assert counts["duplicated"] == 1
    assert "start_ts=10 appears as a commit 2 times" in v[0].message


def test_streams_missing_commit() -> None:
    bad = {"p1": STREAMS["p1"], "p2": [StreamEntry(20, 20, R)]}
    v, counts = check_streams(HISTORY, bad, UP)
    assert counts["missing_commit"] == 1
    assert "ok transfer start_ts=12 has no commit binlog" in v[0].message


def test_streams_missing_unknown_that_committed() -> None:
    bad = {"p1": STREAMS["p1"][:2], "p2": STREAMS["p2"]}
    v, _ = check_streams(HISTORY, bad, UP)
    assert len(v) == 1
    assert "unknown insert start_ts=16 has no commit binlog" in v[0].message


def test_streams_failed_txn_committed() -> None:
    bad = {**STREAMS, "p2": [StreamEntry(13, 12, C), StreamEntry(19, 14, C), StreamEntry(20, 20, R)]}
    v, _ = check_streams(HISTORY, bad, UP)
    assert len(v) == 1
    assert "failed insert start_ts=14" in v[0].message


def test_streams_wrong_commit_ts() -> None:
    bad = {**STREAMS, "p2": [StreamEntry(14, 12, C), StreamEntry(20, 20, R)]}
    v, _ = check_streams(HISTORY, bad, UP)
    assert len(v) == 1
    assert "writer saw commit_ts 13" in v[0].message


def test_streams_upto_skips_later_transactions() -> None:
    v, _ = check_streams([*HISTORY, ins(30, "ok", 5, 31)], STREAMS, UP, upto=20)
    assert v == []


# ------------------------------------------------------------------------------ rule d


def test_checkpoints_clean() -> None:
    s = samples((1.0, 5, set()), (1.5, 11, {1}), (2.0, 17, {1, 3}))
    assert check_checkpoints(HISTORY, s) == []


def test_checkpoints_backwards() -> None:
    s = samples((1.0, 5, set()), (1.5, 11, {1}), (2.0, 9, {1}))
    v = check_checkpoints(HISTORY, s)
    assert len(v) == 1
    assert "moved backwards from 11 to 9" in v[0].message


def test_checkpoints_pass_missing_insert() -> None:
    s = samples((1.0, 11, set()), (1.5, 12, {1}))  # checkpoint 11 >= commit_ts 11 of id 1, not downstream yet
    v = check_checkpoints(HISTORY, s)
    assert len(v) == 1
    assert "passed ok insert id=1 commit_ts=11" in v[0].message


def test_checkpoints_pass_never_seen_insert() -> None:
    v = check_checkpoints(HISTORY, samples((1.0, 12, set())))
    assert len(v) == 1
    assert "id=1" in v[0].message


# ------------------------------------------------------------------------------ rule e


def test_recovery_measured() -> None:
    s = samples((1.0, 5, set()), (2.0, 5, set()), (3.5, 8, set()))
    times, v = recovery_times([1.5], s, recovery_bound=10)
    assert v == []
    assert times == [2.0]


def test_recovery_never() -> None:
    s = samples((1.0, 5, set()), (2.0, 5, set()), (3.5, 5, set()))
    times, v = recovery_times([1.5], s, recovery_bound=10)
    assert times == [None]
    assert len(v) == 1
    assert v[0].rule == "e"


def test_recovery_too_slow() -> None:
    s = samples((1.0, 5, set()), (30.0, 6, set()))
    times, v = recovery_times([1.5], s, recovery_bound=10)
    assert times == [28.5]
    assert len(v) == 1


# ------------------------------------------------------------------------------ the report


def test_check_clean_and_render() -> None:
    s = samples((1.0, 5, set()), (1.5, 11, {1}), (2.0, 17, {1, 3}))
    report = check(HISTORY, UP, DOWN, STREAMS, s, final_checkpoint=20, heals=[1.2], expected_total=Decimal(200))
    assert report.ok, report.render()
    assert report.counts["acknowledged_ok"] == 2
    assert report.counts["lost"] == 0
    assert report.recovery == [pytest.approx(0.3)]
    assert report.render().startswith("nemesis check: OK")


def test_check_reports_lost_row() -> None:
    down = Tables(DOWN.accounts, frozenset({3}))
    report = check(HISTORY, UP, down, STREAMS, Samples(), final_checkpoint=20)
    assert not report.ok
    assert report.counts["lost"] == 1
    assert {v.rule for v in report.violations} == {"a", "b"}
    assert "lost: ok insert id=1" in report.render()


# ------------------------------------------------------------------------------ workload pieces


def test_history_round_trip_and_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as w:
        for r in HISTORY:
            w.append(r)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"thread": 0, "kind": "ins')  # the writer was killed mid-line
    assert list(read_history(path)) == HISTORY


def test_commit_errors_classified() -> None:
    assert classify_commit_error(WriteConflictError("x")) == "fail"
    assert classify_commit_error(BinlogWriteError("x")) == "fail"
    assert classify_commit_error(CommitUnknownError("x")) == "unknown"
    assert classify_commit_error(RuntimeError("executor shut down")) == "unknown"


def test_insert_ids_unique() -> None:
    ids = {insert_id(seed, t, c) for seed in (1, 2) for t in range(3) for c in range(1, 50)}
    assert len(ids) == 2 * 3 * 49
