"""`check`: the storage consistency check reports a commit whose prewrite is not indexed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from common import tso
from common.pb import binlog_pb2
from common.vlog_record import ValuePointer
from pump.storage import diskguard
from pump.storage.api import Resolution, Verdict
from pump.storage.index import ts_key
from pump.storage.storage import GC_KEEP_TSO, Storage
from tests.unit.storageutil import (
    FAST_CHASER,
    FakeResolver,
    Tso,
    commit,
    fake,
    open_storage,
    options,
    prewrite,
    pull_upto,
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
