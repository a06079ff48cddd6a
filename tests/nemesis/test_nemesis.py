"""The short nemesis tier of `make test`: one cluster across namespaces, a few faults of every kind from a
fixed seed, then the independent checker (`make nemesis` runs the long campaigns)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness.mysql import MySQLDSN
from tests.nemesis.run import run, totals
from tests.nemesis.schedule import KINDS, make_schedule

pytestmark = pytest.mark.functional

SEED = 20261127
ROUNDS = 8


@pytest.mark.timeout(420)
@pytest.mark.usefixtures("netns")
def test_a_short_schedule_of_every_kind_loses_nothing(tmp_path: Path, mysql_server: MySQLDSN) -> None:
    schedule = make_schedule(SEED, ROUNDS, max_hold=3.0, max_freeze=4.0, recover=2.0)
    assert {s.kind for s in schedule} == set(KINDS)
    outcome = run(tmp_path, mysql_server, SEED, schedule)
    summary = totals(outcome)
    assert outcome.report is not None, outcome.error
    assert outcome.ok, f"seed {SEED}: {outcome.error or outcome.report.render()}"
    assert summary["faults_total"] == ROUNDS
    assert summary["acknowledged"] > 100
    assert summary["lost"] == 0
    assert summary["duplicated"] == 0
    assert set(summary["faults"]) == set(KINDS)
