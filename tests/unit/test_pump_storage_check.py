"""`check`: the storage consistency check reports a commit whose prewrite is not indexed."""

from __future__ import annotations

from pathlib import Path

from tests.unit.storageutil import (
    Tso,
    commit,
    open_storage,
    write,
)


def test_check_reports_a_commit_whose_prewrite_is_not_indexed(tmp_path: Path) -> None:
    clock = Tso()
    with open_storage(tmp_path) as s:
        start = clock.next()
        c = clock.next()
        write(s, commit(start, c))  # its prewrite went elsewhere
        assert s.wait_indexed(10)
        assert s.check() == [f"ts:{c} -> commit start_ts={start}: prewrite missing from the index"]
