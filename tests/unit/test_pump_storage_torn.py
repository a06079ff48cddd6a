"""Storage: index entries left pointing past a cut value-log tail are dropped once, at open."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from common.vlog_record import HEADER_SIZE
from pump.storage.api import NullObserver
from pump.storage.index import Index
from pump.storage.storage import Storage
from pump.storage.vlog import file_name
from tests.unit.storageutil import FAST_CHASER, Tso, commit, options, prewrite, pull_upto, write


class Errors(NullObserver):
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, kind: str) -> None:
        self.errors.append(kind)


def open_storage(path: Path, observer: Errors | None = None) -> Storage:
    return Storage(path, options(), chaser_timings=FAST_CHASER, observer=observer)


def txns(s: Storage, clock: Tso, n: int) -> list[tuple[int, int]]:
    out = []
    for i in range(n):
        start = clock.next()
        write(s, prewrite(start, b"rows-%d" % i))
        c = clock.next()
        write(s, commit(start, c))
        out.append((start, c))
    assert s.wait_indexed(10)
    return out


@pytest.mark.parametrize("cut", ["mid-record", "whole records"])
def test_entries_past_a_cut_tail_are_dropped_once(tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: str) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    written = txns(s, clock, 10)
    s.close()
    idx = Index(tmp_path / "kv")
    if cut == "mid-record":  # inside the last commit's record: one transaction's commit is lost
        ptr = idx.get(written[-1][1])
        assert ptr is not None
        size = ptr.offset + HEADER_SIZE + 3
        kept = written[:-1]
        dropped = 2  # ts:<commit_ts> and the transaction's decision
    else:  # at the start of txn 7's prewrite: three whole transactions are lost
        ptr = idx.get(written[7][0])
        assert ptr is not None
        size = ptr.offset
        kept = written[:7]
        dropped = 3 * 3  # prewrite, commit, decision of each
    idx.close()
    path = tmp_path / "value" / file_name(ptr.fid)
    os.truncate(path, size)

    obs = Errors()
    with caplog.at_level(logging.WARNING, logger="pump.storage"):
        s = open_storage(tmp_path, obs)
    try:
        notes = [r.getMessage() for r in caplog.records if "past the end of the value log" in r.getMessage()]
        assert len(notes) == 1, notes
        assert f"dropped={dropped}" in notes[0]
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="pump.storage"):
            for _ in range(3):  # repeated pulls: nothing unreadable, nothing counted
                got = pull_upto(s, 0, kept[-1][1])
                assert [(b.start_ts, b.commit_ts) for b in got] == kept
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert obs.errors == []
        assert s.check() == []
        more = txns(s, clock, 2)  # writes go on after the cut
        if cut == "mid-record":  # the transaction whose commit was lost may be committed again
            lost = written[-1][0]
            c = clock.next()
            write(s, commit(lost, c))
            more.append((lost, c))
        assert s.wait_indexed(10)
        got = pull_upto(s, kept[-1][1], more[-1][1])
        assert [(b.start_ts, b.commit_ts) for b in got] == more
    finally:
        s.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pump.storage"):
        s = open_storage(tmp_path)  # once: a clean reopen drops nothing
    s.close()
    assert not [r for r in caplog.records if "past the end of the value log" in r.getMessage()]


def test_index_that_never_went_past_the_end_is_not_scanned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    txns(s, clock, 3)
    s.close()
    with caplog.at_level(logging.INFO, logger="pump.storage"):
        s = open_storage(tmp_path)
    s.close()
    assert not [r for r in caplog.records if "past the end" in r.getMessage()]
