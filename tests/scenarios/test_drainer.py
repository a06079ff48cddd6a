"""The drainer killed -9 while it catches up a backlog from three pumps with 16 workers.

`tests/functional/test_drainer_e2e.py` kills a drainer that keeps up with two pumps and 8 workers.
Here the drainer starts late, so it is always behind: each kill hits a drainer busy applying many
batches in parallel, one of them right after a start, before it can have saved a checkpoint.
After each kill every ledger row at or below the saved checkpoint is downstream (the checkpoint is
never ahead of the data); the replay after each restart is idempotent (safe mode, forced for 5
minutes after every start, the default).
"""

from __future__ import annotations

import random
import threading

import pytest

from tests.functional.drainerutil import Cluster
from tests.scenarios.helpers import STEP_TIMEOUT
from tests.scenarios.load import Load, finish

pytestmark = [pytest.mark.scenario, pytest.mark.timeout(300)]

KILLS = 3
BACKLOG = 100
"""Ledger commits made before the drainer first starts."""


def saved_commit_ts(cluster: Cluster) -> int:
    cp = cluster.checkpoint_row()
    return 0 if cp is None else int(cp["commitTS"])


def test_drainer_kill9_while_catching_up(cluster: Cluster, load: Load) -> None:
    load.sysbench(threads=3, table_size=300)
    load.start()
    load.wait_commits(BACKLOG, "the backlog", timeout=120)
    drainer = cluster.drainer("--syncer.worker-count", "16", "--syncer.safe-mode-duration", "5m", start=False)
    rng = random.Random(11)
    for i in range(KILLS):
        before = saved_commit_ts(cluster)
        drainer.start()
        if i > 0:  # the first kill comes right after the start; the others once the checkpoint moved

            def moved(before: int = before) -> bool:
                return saved_commit_ts(cluster) > before

            load.wait_until(moved, STEP_TIMEOUT, f"the checkpoint moves after start {i + 1}")
            threading.Event().wait(rng.uniform(0.0, 1.0))  # a random point of the run, not a condition
        drainer.kill9()
        ts = saved_commit_ts(cluster)
        assert ts >= before, f"the checkpoint went back from {before} to {ts}"
        missing = load.ledger.missing_downstream(cluster, up_to_ts=ts)
        assert missing == [], f"kill {i + 1}: checkpoint {ts} is ahead of the data: missing {missing[:10]}"
        load.wait_commits(10, f"after kill {i + 1}")
    drainer.start()
    finish(cluster, drainer, load)
