"""Crash simulation: a child process writes through Storage and dies without close() (os._exit or
SIGKILL mid-write); the reopened storage serves every acknowledged commit once, in order, check() clean.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pump.storage.api import Resolution, Verdict
from pump.storage.storage import Storage
from tests.unit.storageutil import FAST_CHASER, FakeResolver, options, pull_upto

REPO = Path(__file__).resolve().parents[2]

# The child prints "p <start>" once a prewrite is acknowledged and "c <start> <commit>" once its
# commit is; in "exit" mode it leaves one prewrite pending and ends with os._exit (no close()).
CHILD = r"""
import os, sys, threading
from pathlib import Path
from pump.storage.storage import Storage
from tests.unit.storageutil import Tso, commit, options, prewrite, write

data, per_thread, mode = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
s = Storage(data, options(value_log_file_size=16384))
tso, tso_lock, out_lock = Tso(), threading.Lock(), threading.Lock()

def next_ts():
    with tso_lock:
        return tso.next()

def say(line):
    with out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

def worker():
    i = 0
    while mode == "kill" or i < per_thread:
        i += 1
        start = next_ts()
        write(s, prewrite(start, b"row" * 50))
        say(f"p {start}")
        c = next_ts()
        write(s, commit(start, c))
        say(f"c {start} {c}")

threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
pending = next_ts()
write(s, prewrite(pending))
say(f"p {pending}")
say("done")
os._exit(0)
"""


def run_child(data: Path, mode: str, kill_after: int = 0) -> list[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data), "60", mode],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    lines: list[str] = []
    commits = 0
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith("c "):
            commits += 1
        if mode == "kill" and commits >= kill_after:
            os.kill(proc.pid, signal.SIGKILL)
            break
    lines.extend(x.strip() for x in proc.stdout)  # acknowledged lines still in the pipe
    err = proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()
    code = proc.wait()
    assert code == (-signal.SIGKILL if mode == "kill" else 0), err
    return [x for x in lines if x]


def verify(data: Path, lines: list[str]) -> None:
    acked = {int(x.split()[1]): int(x.split()[2]) for x in lines if x.startswith("c ")}
    prewritten = {int(x.split()[1]) for x in lines if x.startswith("p ")}
    # Prewrites whose commit never came (killed in between, or never acknowledged) are rolled back
    # by the resolver, as the upstream's transaction status would say.
    resolver = FakeResolver()
    s = Storage(data, options(resolve_interval=0.02, value_log_file_size=16384), resolver, chaser_timings=FAST_CHASER)
    try:
        for start in prewritten - set(acked):
            resolver.set(start, Resolution(Verdict.ROLLED_BACK))
        resolver.default = Resolution(Verdict.ROLLED_BACK)
        assert s.wait_indexed(10)
        top = max(acked.values())
        served = pull_upto(s, 0, top, timeout=20)
        commit_ts = [b.commit_ts for b in served]
        assert commit_ts == sorted(set(commit_ts))  # strictly ascending: nothing duplicated
        assert set(acked.values()) <= set(commit_ts)  # every acknowledged commit is served
        for b in served:
            assert b.start_ts not in acked or acked[b.start_ts] == b.commit_ts
        assert s.check() == []
    finally:
        s.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("drop_kv", [False, True], ids=["kv-kept", "kv-deleted"])
def test_exit_without_close(tmp_path: Path, drop_kv: bool) -> None:
    data = tmp_path / "pump"
    lines = run_child(data, "exit")
    assert lines[-1] == "done"
    assert sum(1 for x in lines if x.startswith("c ")) == 240
    if drop_kv:
        shutil.rmtree(data / "kv")
    verify(data, lines)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("drop_kv", [False, True], ids=["kv-kept", "kv-deleted"])
def test_kill_9_while_writing(tmp_path: Path, drop_kv: bool) -> None:
    data = tmp_path / "pump"
    lines = run_child(data, "kill", kill_after=150)
    if drop_kv:
        shutil.rmtree(data / "kv")
    verify(data, lines)
