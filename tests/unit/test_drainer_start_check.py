"""drainer/start_check.py: the present at start-up and the refusal of a checkpoint / initial-commit-ts beyond it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from common import tso
from common.errors import ClusterIDMismatchError, TSOError, UnavailableError
from common.tso_guard import AheadError, Present, ts_text
from drainer.checkpoint import CheckpointState, FileCheckpoint, SqliteCheckpoint
from drainer.start_check import (
    OFFLINE_CLOCK_ALLOWANCE,
    check_checkpoint,
    check_initial,
    offline_present,
    online_present,
)

NOW = tso.compose(1_796_333_000_000, 9)
BEYOND = 9223372036854775807
CURRENT = Present(NOW, "the current TSO")


def no_window() -> int | None:
    raise AssertionError("the window is read only when pd-server gives no TSO")


def unavailable() -> int:
    raise UnavailableError("no timestamp from pd-server before the deadline")


def test_online_present_is_a_fresh_tso() -> None:
    assert online_present(lambda: NOW, no_window) == CURRENT


def test_pd_server_unreachable_falls_back_to_its_saved_window(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="drainer.start_check"):
        p = online_present(unavailable, lambda: 1_796_333_003_000)
    assert p == Present(
        tso.compose(1_796_333_003_000, 0), "pd-server's saved TSO window (/pd/timestamp; pd-server unreachable)"
    )
    assert "no TSO from pd-server (no timestamp from pd-server before the deadline)" in caplog.text

    def closed() -> int:
        raise TSOError("TSO client is closed")

    assert online_present(closed, lambda: 7).ts == tso.compose(7, 0)


def test_no_tso_and_no_window_fails_the_start() -> None:
    with pytest.raises(
        UnavailableError, match=r"cannot check the start position: no TSO from pd-server \(no timestamp"
    ):
        online_present(unavailable, lambda: None)


def test_a_cluster_id_mismatch_is_not_hidden_by_the_fallback() -> None:
    def mismatch() -> int:
        raise ClusterIDMismatchError("cluster id 1 != 2")

    with pytest.raises(ClusterIDMismatchError):
        online_present(mismatch, no_window)


def test_offline_present_is_the_local_clock_plus_the_allowance(tmp_path: Path) -> None:
    before = tso.now_ms()
    p = offline_present("upstream unreachable: etcd down")
    after = tso.now_ms()
    allowance_ms = int(OFFLINE_CLOCK_ALLOWANCE * 1000)
    assert before + allowance_ms <= tso.physical(p.ts) <= after + allowance_ms
    assert p.what == f"the local clock + {OFFLINE_CLOCK_ALLOWANCE:g} s (upstream unreachable: etcd down)"
    with pytest.raises(AheadError):
        check_checkpoint(FileCheckpoint(tmp_path), CheckpointState(BEYOND, 0, False), p)


def test_file_checkpoint_ahead_names_the_file_and_the_fix(tmp_path: Path) -> None:
    cp = FileCheckpoint(tmp_path)
    check_checkpoint(cp, CheckpointState(NOW, 3, True), CURRENT)  # saved before the TSO was taken: fine
    with pytest.raises(AheadError) as info:
        check_checkpoint(cp, CheckpointState(BEYOND, 3, True), CURRENT)
    path = tmp_path / "savepoint"
    assert str(info.value) == (
        f"checkpoint (file, {path}) commitTS {ts_text(BEYOND)} is ahead of the current TSO {ts_text(NOW)}: "
        f"set commitTS in {path} to the last commit_ts applied downstream, or delete the file to start from "
        "initial-commit-ts"
    )


def test_sqlite_checkpoint_ahead_names_the_row_and_the_statement(tmp_path: Path) -> None:
    db = tmp_path / "downstream.db"
    cp = SqliteCheckpoint(db, 2**64 - 1)
    cp.save(BEYOND, 4, consistent=True)
    state = cp.load()
    assert state is not None
    with pytest.raises(AheadError) as info:
        check_checkpoint(cp, state, CURRENT)
    cp.close()
    assert str(info.value) == (
        f'checkpoint (sqlite, "tidb_binlog.checkpoint" clusterID={2**64 - 1} in {db}) commitTS {ts_text(BEYOND)} '
        f"is ahead of the current TSO {ts_text(NOW)}: set commitTS to the last commit_ts applied downstream: "
        'UPDATE "tidb_binlog.checkpoint" SET checkPoint = '
        '\'{"consistent":false,"commitTS":<ts>,"ts-map":{},"schema-version":4}\' WHERE clusterID = -1 '
        f"(sqlite3 {db}), or delete that row to start from initial-commit-ts"
    )


def test_initial_commit_ts_ahead() -> None:
    check_initial(0, CURRENT)
    check_initial(NOW, CURRENT)
    with pytest.raises(AheadError) as info:
        check_initial(NOW + 1, CURRENT)
    assert str(info.value) == (
        f"initial-commit-ts {ts_text(NOW + 1)} is ahead of the current TSO {ts_text(NOW)}: set initial-commit-ts "
        "to a commit_ts at or below it, or to -1 to start at the current TSO (drainer.toml, --initial-commit-ts "
        "or DRAINER_INITIAL_COMMIT_TS)"
    )
