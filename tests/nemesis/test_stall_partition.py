"""A pump the drainer cannot hear from, across a real partition: the drainer's /status names it while the
partition holds, and stops naming it within seconds after the heal."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.harness.mysql import MySQLDSN
from tests.nemesis.cluster import nemesis_cluster
from tests.nemesis.nemesis import Partition
from tools.procs import wait_for

pytestmark = pytest.mark.functional

REPORTED_WITHIN = 30.0
CLEARED_WITHIN = 15.0


def stalled(status: dict[str, Any]) -> list[str]:
    return [s["node_id"] for s in status["stalled_pumps"]]


@pytest.mark.timeout(240)
@pytest.mark.usefixtures("netns")
def test_a_partitioned_pump_is_named_and_cleared_after_the_heal(tmp_path: Path, mysql_server: MySQLDSN) -> None:
    with nemesis_cluster(tmp_path, mysql_server) as c:
        drainer = c.drainer
        assert drainer is not None

        def status() -> dict[str, Any]:
            doc: dict[str, Any] = drainer.http_json("GET", "/status")
            return doc

        wait_for(lambda: len(status()["PumpPos"]) == 3, 30.0, "the drainer to pull from the three pumps")
        assert stalled(status()) == []
        cut = Partition(c.hosts["pump1"], c.hosts["drainer"])
        cut.start()
        try:
            wait_for(lambda: stalled(status()) == ["pump1"], REPORTED_WITHIN, "/status to name pump1 as stalled")
            doc = status()["stalled_pumps"][0]
            assert doc["addr"] == c.pumps[1].addr
            assert doc["seconds"] >= 3.0
            with urllib.request.urlopen(f"{drainer.status_url}/metrics", timeout=5) as resp:
                metrics = resp.read().decode()
            line = next(
                x for x in metrics.splitlines() if x.startswith('binlog_drainer_pump_stalled_seconds{nodeID="pump1"}')
            )
            assert float(line.split()[-1]) >= 3.0
        finally:
            cut.heal()
        healed = time.monotonic()
        wait_for(lambda: stalled(status()) == [], CLEARED_WITHIN, "/status to stop naming pump1 after the heal")
        assert time.monotonic() - healed < CLEARED_WITHIN
