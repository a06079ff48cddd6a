"""Storage GC: a long transaction's prewrite survives GC; close does not wait for a long GC pass."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from common.pb import binlog_pb2
from pump.storage.storage import GC_KEEP_TSO
from tests.unit.storageutil import (
    Tso,
    commit,
    fake,
    open_storage,
    prewrite,
    pull_upto,
    write,
)

ELEVEN_MIN_MS = 11 * 60 * 1000


def test_gc_keeps_the_prewrite_of_a_long_transaction_committed_above_the_gc_ts(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    try:
        start = clock.next()
        write(s, prewrite(start, b"long-rows"))
        clock.jump_ms(ELEVEN_MIN_MS)
        f = clock.next()
        write(s, fake(f))  # behind the waiting prewrite: the watermark stays below
        c = clock.next()
        write(s, commit(start, c))
        f2 = clock.next()
        write(s, fake(f2))
        assert s.wait_indexed(10)
        assert s.max_commit_ts() == f2
        assert f - GC_KEEP_TSO > start  # the plain 10-minute margin would delete the prewrite
        s.gc(f)
        assert s.check() == []
        got = pull_upto(s, f, f2)
        assert [(b.start_ts, b.commit_ts) for b in got] == [(start, c), (f2, f2)]
        assert binlog_pb2.Binlog.FromString(got[0].payload).prewrite_value == b"long-rows"
    finally:
        s.close()
    s = open_storage(tmp_path)  # the long-transaction entry is durable
    try:
        clock.jump_ms(ELEVEN_MIN_MS)
        top = clock.next()
        write(s, fake(top))
        assert s.wait_indexed(10)
        assert s._index.long_txns_above(f) == [(c, start)]
        assert [b.commit_ts for b in pull_upto(s, f, f2)] == [c, f2]
        s.gc(f2)  # the commit is at or below the gc ts now: the prewrite may go
        assert s.get_binlog(start) is None
        assert s._index.long_txns_above(0) == [(c, start)]  # commit above the cutoff: kept a while
        s.gc(top - 1)
        assert s._index.long_txns_above(0) == []  # at or below the cutoff now: deleted
        assert s.check() == []
    finally:
        s.close()


def test_close_does_not_wait_for_a_long_gc_pass(tmp_path: Path) -> None:
    clock = Tso()
    s = open_storage(tmp_path)
    start = clock.next()
    write(s, prewrite(start))
    write(s, commit(start, clock.next()))
    clock.jump_ms(ELEVEN_MIN_MS)
    write(s, fake(clock.next()))
    top = clock.next()
    write(s, fake(top))
    assert s.wait_indexed(10)
    calls: list[int] = []
    real = s._index.delete_batch_upto

    def slow_batch(ts: int, *, batch: int = 1024) -> int:
        calls.append(ts)
        time.sleep(0.05)
        return 1 if len(calls) < 200 else real(ts, batch=batch)  # a 10 s pass

    s._index.delete_batch_upto = slow_batch  # type: ignore[method-assign]
    gc = threading.Thread(target=s.gc, args=(top - 1,))
    gc.start()
    while not calls:
        time.sleep(0.01)
    began = time.monotonic()
    s.close()
    assert time.monotonic() - began < 2.0
    gc.join(5)
    assert not gc.is_alive()
    assert len(calls) < 100
