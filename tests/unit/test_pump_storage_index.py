"""The LevelDB index's reopen after a failed write (pump/storage/index.py)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from common.errors import StorageError
from common.vlog_record import ValuePointer
from pump.storage import index as index_module
from pump.storage.api import LevelDBOptions
from pump.storage.index import TS_PREFIX, Index, ts_key


@pytest.fixture
def index(tmp_path: Path) -> Index:
    idx = Index(tmp_path / "kv", options=LevelDBOptions(write_buffer_size=64 << 10))
    idx.write([(ts_key(t), ValuePointer(0, t)) for t in range(1, 11)])
    return idx


def test_recover_after_reopens_only_for_an_io_error_and_keeps_the_data(index: Index) -> None:
    try:
        assert not index.recover_after(ValueError("not LevelDB's"))
        assert index.reopens == 0
        assert index.recover_after(StorageError("the index is not open"))
        assert index.reopens == 1
        assert [ts for ts, _ in index.range(0, 100, 100)] == list(range(1, 11))
        index.write([(ts_key(11), ValuePointer(0, 11))])
        assert index.get(11) == ValuePointer(0, 11)
    finally:
        index.close()


def test_a_reopen_waits_for_calls_in_progress_and_gives_up_after_a_while(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "REOPEN_WAIT", 0.2)
    scan = index.iter_prefix(TS_PREFIX)
    try:
        assert next(scan) == (1, ValuePointer(0, 1))  # holds the database until the scan ends
        assert not index.recover_after(StorageError("x"))
        assert index.reopens == 0
        assert next(scan) == (2, ValuePointer(0, 2))  # the scan was not disturbed
    finally:
        scan.close()
    assert index.recover_after(StorageError("x"))
    index.close()


def test_a_failed_reopen_makes_calls_fail_clearly_until_the_next_one_succeeds(
    index: Index, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = index._open

    def broken() -> object:
        raise StorageError("cannot open the index: disk on fire")

    monkeypatch.setattr(index, "_open", broken)
    assert not index.recover_after(StorageError("x"))
    with pytest.raises(StorageError, match="not open"):
        index.get(1)
    monkeypatch.setattr(index, "_open", real_open)
    assert index.recover_after(StorageError("the index is not open"))
    assert index.get(1) == ValuePointer(0, 1)
    index.close()


def test_a_reopen_waits_for_free_space(index: Index, monkeypatch: pytest.MonkeyPatch) -> None:
    class Usage:
        free = 1000

    monkeypatch.setattr("pump.storage.index.shutil.disk_usage", lambda _path: Usage())
    assert not index.recover_after(StorageError("x"))
    assert index.reopens == 0
    index.close()


def test_a_closed_index_is_never_reopened(index: Index) -> None:
    index.close()
    assert not index.recover_after(StorageError("the index is not open"))
    with pytest.raises(StorageError, match="not open"):
        index.get(1)


@pytest.mark.parametrize(("max_file_size", "small"), [(1 << 20, True), (64 << 20, False)])
def test_leveldb_options_reach_the_database(tmp_path: Path, max_file_size: int, small: bool) -> None:
    """`[storage.kv] compaction-table-size` is LevelDB's max_file_size: a full compaction of 8 MiB of
    incompressible values cuts its output at 1 MiB, or writes it as one table at the original's 64 MiB."""
    idx = Index(tmp_path / "kv", options=LevelDBOptions(write_buffer_size=256 << 10, max_file_size=max_file_size))
    try:
        db = idx._db
        for i in random.Random(7).sample(range(2048), 2048):  # flushes overlap: compaction rewrites them
            db.put(ts_key(i), os.urandom(4096))
        db.compact_range()
        tables = sorted(p.stat().st_size for p in (tmp_path / "kv").glob("*.ldb"))
    finally:
        idx.close()
    assert sum(tables) > 8 << 20
    if small:
        assert len(tables) >= 6, tables
        assert tables[-1] < 2 << 20, tables
    else:
        assert tables[-1] > 4 << 20, tables
