"""Model-based random test of the storage against a plain in-memory model.

Operations: prewrite, commit (any pending transaction, so commits arrive in or out of order),
rollback, fake binlog, a commit whose prewrite is elsewhere (possibly below the watermark: late),
a 11-minute TSO jump, GC, close + reopen, reopen with `kv/` deleted.  After every step: the
storage's maxCommitTS equals the model's watermark (max commit_ts arrived before the first
unfinished prewrite), the binlogs pulled from 0 equal the model's commits + fakes above the gc ts
in ascending order (GC never removes the prewrite of a commit above the gc ts, however long the
transaction: the 11-minute jumps make some), and check() reports nothing but the orphan commits
(their prewrite went to another pump).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pump.storage.storage import GC_KEEP_TSO, Storage
from tests.unit.storageutil import (
    Tso,
    commit,
    fake,
    open_storage,
    prewrite,
    pull_upto,
    rollback,
    write,
)

JUMP_MS = 11 * 60 * 1000


class StorageModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="pump-model-"))
        self.storage: Storage = open_storage(self.dir, value_log_file_size=512)
        self.tso = Tso()
        # arrival log: (kind, start_ts, commit_ts) with kind in P, C, R, F, O (orphan commit)
        self.arrivals: list[tuple[str, int, int]] = []
        self.pending: list[int] = []  # prewrites without commit/rollback, in arrival order
        self.committed: dict[int, int] = {}
        self.gc_ts = 0
        self.reserved: list[int] = []

    def teardown(self) -> None:
        self.storage.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ------------------------------------------------------------------------------- model

    def watermark(self) -> int:
        first_pending = min(
            (i for i, a in enumerate(self.arrivals) if a[0] == "P" and a[1] in self.pending), default=None
        )
        upto = self.arrivals if first_pending is None else self.arrivals[:first_pending]
        return max((a[2] for a in upto if a[0] in "CFO"), default=0)

    def expected(self) -> list[int]:
        top = self.watermark()
        out = [a[2] for a in self.arrivals if a[0] == "F" and self.gc_ts < a[2] <= top]
        out += [c for c in self.committed.values() if self.gc_ts < c <= top]
        return sorted(out)

    # ------------------------------------------------------------------------------- rules

    @rule()
    def do_prewrite(self) -> None:
        start = self.tso.next()
        write(self.storage, prewrite(start))
        self.arrivals.append(("P", start, 0))
        self.pending.append(start)

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(min_value=0, max_value=1 << 16))
    def do_commit(self, pick: int) -> None:
        start = self.pending.pop(pick % len(self.pending))
        c = self.tso.next()
        write(self.storage, commit(start, c))
        self.arrivals.append(("C", start, c))
        self.committed[start] = c

    @precondition(lambda self: bool(self.pending))
    @rule(pick=st.integers(min_value=0, max_value=1 << 16))
    def do_rollback(self, pick: int) -> None:
        start = self.pending.pop(pick % len(self.pending))
        write(self.storage, rollback(start))
        self.arrivals.append(("R", start, 0))

    @rule()
    def do_fake(self) -> None:
        ts = self.tso.next()
        write(self.storage, fake(ts))
        self.arrivals.append(("F", ts, ts))

    @rule()
    def reserve_ts(self) -> None:
        self.reserved.append(self.tso.next())

    @precondition(lambda self: len(self.reserved) >= 2)
    @rule()
    def do_orphan_commit(self) -> None:
        """A commit whose prewrite went to another pump; often below the watermark by now."""
        start, c = self.reserved.pop(0), self.reserved.pop(0)
        write(self.storage, commit(start, c))
        self.arrivals.append(("O", start, c))

    @rule()
    def jump(self) -> None:
        self.tso.jump_ms(JUMP_MS)

    @rule(pick=st.integers(min_value=0, max_value=1 << 16))
    def do_gc(self, pick: int) -> None:
        top = self.watermark()
        oldest_pending = min(self.pending, default=1 << 63)
        choices = sorted(
            a[2]
            for a in self.arrivals
            if a[0] in "CF" and self.gc_ts < a[2] < top and a[2] - GC_KEEP_TSO < oldest_pending
        )
        assert self.storage.wait_indexed(10)
        if not choices:
            self.storage.gc(top)  # unsafe: ignored
            return
        ts = choices[pick % len(choices)]
        self.storage.gc(ts)
        self.gc_ts = ts

    @rule()
    def reopen(self) -> None:
        self.storage.close()
        self.storage = open_storage(self.dir, value_log_file_size=512)

    @precondition(lambda self: self.gc_ts == 0)
    @rule()
    def drop_kv_and_reopen(self) -> None:
        """The index is rebuilt from the vlog alone (GC state lives in the index, hence no GC before)."""
        self.storage.close()
        shutil.rmtree(self.dir / "kv")
        self.storage = open_storage(self.dir, value_log_file_size=512)

    # -------------------------------------------------------------------------- invariant

    @invariant()
    def storage_matches_model(self) -> None:
        s = self.storage
        assert s.wait_indexed(10)
        top = self.watermark()
        assert s.max_commit_ts() == top
        assert s.gc_ts() == self.gc_ts
        assert s.all_matched() == (not self.pending)
        got = list(s.commit_binlogs_between(self.gc_ts, top))
        assert [b.commit_ts for b in got] == self.expected()
        if got:  # the following puller sees the same, starting from 0 (below the gc ts)
            assert [b.commit_ts for b in pull_upto(s, 0, got[-1].commit_ts, timeout=5)] == self.expected()
        orphans = {
            f"ts:{a[2]} -> commit start_ts={a[1]}: prewrite missing from the index"
            for a in self.arrivals
            if a[0] == "O"
        }
        assert [p for p in s.check() if p not in orphans] == []


StorageModel.TestCase.settings = settings(max_examples=30, stateful_step_count=40, deadline=None)
test_storage_model = StorageModel.TestCase
