"""A pump that stops answering (SIGSTOP) is named as the one holding the drainer's merge back (issue 18).

Real etcd, pd-server, 2 pumps and a drainer (file sink, `--pump-stall-report-after 2s`) on loopback:
the frozen pump shows up in the drainer's /status `stalled_pumps`, in `binlog_drainer_pump_stalled_seconds`
and in `binlogctl drainers`, and nowhere once it runs again (SIGCONT, always sent).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.functional.drainerutil import Cluster
from tools.localcluster import DrainerProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional

REPO = Path(__file__).resolve().parents[2]
STALL_AFTER = 2.0
REPORT_DEADLINE = 30.0
"""Seconds the report may take to name the frozen pump: 2 s of silence plus a check (a second at most)."""
CLEAR_BOUND = 15.0
"""Seconds after SIGCONT by which the report must be gone (the pump's stream resumes at once)."""


@pytest.fixture
def file_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    c = Cluster(tmp_path, None, pumps=2)
    yield c
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(c.logs())
    c.close()


def stalled(drainer: DrainerProcess) -> list[dict[str, Any]]:
    return list(drainer.http_json("GET", "/status")["stalled_pumps"])


def stalled_names(drainer: DrainerProcess) -> list[str]:
    return [p["node_id"] for p in stalled(drainer)]


def stalled_seconds(drainer: DrainerProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"{drainer.status_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    found = re.findall(r'^binlog_drainer_pump_stalled_seconds\{nodeID="([^"]+)"\} (\S+)$', text, re.MULTILINE)
    return {node_id: float(v) for node_id, v in found}


def drainers_listing(url: str) -> str:
    p = subprocess.run(
        [sys.executable, "-m", "tools.binlogctl", "drainers", "--pd-urls", url],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_a_frozen_pump_is_reported_and_the_report_clears_when_it_runs_again(file_cluster: Cluster) -> None:
    c = file_cluster
    drainer = c.drainer("--syncer.db-type", "file", "--pump-stall-report-after", f"{STALL_AFTER}s", sink="file")
    healthy, victim = c.pumps

    def both_delivered() -> bool:
        pos = drainer.http_json("GET", "/status")["PumpPos"]
        return len(pos) == 2 and all(ts > 0 for ts in pos.values())

    wait_for(both_delivered, 60, "the drainer received binlogs from both pumps")
    assert stalled(drainer) == []
    pid = victim.process.pid
    assert pid is not None
    try:
        os.killpg(pid, signal.SIGSTOP)
        wait_for(lambda: stalled_names(drainer) == [victim.node_id], REPORT_DEADLINE, "the frozen pump reported")
        (report,) = stalled(drainer)
        assert report["addr"] == victim.addr
        assert report["seconds"] > STALL_AFTER
        assert abs(report["since"] + report["seconds"] - time.time()) < 5
        assert report["last_ts"] > 0
        seconds = stalled_seconds(drainer)
        assert seconds[victim.node_id] > 0
        assert seconds[healthy.node_id] == 0
        listing = drainers_listing(c.etcd_server.url)
        (note,) = [ln for ln in listing.splitlines() if ln.startswith(f"(drainer {drainer.node_id}: ")]
        assert note.startswith(f"(drainer {drainer.node_id}: stalled: {victim.node_id} at {victim.addr} for "), note
        assert ";" not in note, note  # one pump named: the healthy one is not
        assert "holds the merge back" in drainer.process.log_since_start()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
    thawed = time.monotonic()
    wait_for(lambda: stalled(drainer) == [], CLEAR_BOUND, "the report cleared after SIGCONT")
    cleared_after = time.monotonic() - thawed
    assert all(v == 0 for v in stalled_seconds(drainer).values())
    assert f"(drainer {drainer.node_id}: no stalled pump)" in drainers_listing(c.etcd_server.url)
    assert "no longer holds the merge back" in drainer.process.log_since_start()
    print(f"stall report cleared {cleared_after:.2f}s after SIGCONT")
