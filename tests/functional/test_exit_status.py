"""Exit statuses of every command, as real processes: 2 when the operator must change the command line or
config, 1 when the environment failed at run time (etcd unreachable, a port taken, no permission).

Each failure is one line on stderr naming what failed (the daemons log to a file here, so stderr
holds only that line).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import free_port

pytestmark = pytest.mark.functional

TIMEOUT = 120


def commands(etcd_url: str, tmp: Path) -> dict[str, list[str]]:
    """Every command that talks to etcd, pointed at `etcd_url`; their files under `tmp`."""
    tmp.mkdir(parents=True, exist_ok=True)
    node = ["--pd-urls", etcd_url, "--addr", "127.0.0.1:0", "--status-addr", "127.0.0.1:0"]
    return {
        "pump": ["pump.main", *node, "--data-dir", str(tmp / "pump"), "--log-file", str(tmp / "pump.log")],
        "drainer": [
            "drainer.main", *node, "--data-dir", str(tmp / "drainer"), "--log-file", str(tmp / "drainer.log"),
            "--syncer.db-type", "sqlite",
        ],
        "pd-server": ["pd.main", "--pd-urls", etcd_url, "--addr", "127.0.0.1:0", "--etcd-retry", "1s"],
        "binlogctl": ["tools.binlogctl", "pumps", "--pd-urls", etcd_url, "--timeout", "1"],
        "binlog-workload": [
            "upstream.workload_cli", "--workload", "bank", "--etcd", etcd_url, "--txns", "1", "--quiet",
            "--store", f"sqlite:///{tmp / 'upstream.db'}",
        ],
        "binlog-spark": ["spark_jobs.cli", "export-ddl", "--pd-urls", etcd_url, "--out", str(tmp / "ddl.json")],
    }  # fmt: skip


def run_all(argvs: dict[str, list[str]]) -> dict[str, tuple[int, str]]:
    """Run the commands side by side (each waits out its own etcd retry); (exit status, stderr) by name."""
    procs = {
        name: subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, argv in argvs.items()
    }
    done: dict[str, tuple[int, str]] = {}
    try:
        for name, p in procs.items():
            _, err = p.communicate(timeout=TIMEOUT)
            done[name] = (p.returncode, err)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    return done


def test_unreachable_etcd_exits_1_with_one_line_naming_etcd(tmp_path: Path) -> None:
    """README, "Configuration, for every command": etcd unreachable is a run-time failure (pd-server said 2)."""
    port = free_port()  # nothing listens there
    results = run_all(commands(f"http://127.0.0.1:{port}", tmp_path))
    for name, (code, err) in results.items():
        lines = err.strip().splitlines()
        assert (name, code) == (name, 1), err
        assert len(lines) == 1, (name, err)
        assert lines[0].startswith(f"{name}"), (name, err)
        assert f"etcd at 127.0.0.1:{port} unreachable" in lines[0], (name, err)


def test_a_directory_option_that_cannot_be_a_directory_exits_2_naming_it(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess
) -> None:
    """Was: exit 1 and "pump: [Errno 2] No such file or directory: '/proc/nope'" naming no option."""
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    nope = "cannot be created: No such file or directory (at '/proc/nope')"
    cases = [  # (command, flag, value, extra flags, the one line after "<command>: config error: ")
        ("pump", "--data-dir", "/proc/nope/x", [], f"data-dir: directory '/proc/nope/x' {nope}"),
        ("drainer", "--data-dir", "/proc/nope/x", [], f"data-dir: directory '/proc/nope/x' {nope}"),
        ("pump", "--data-dir", f"{afile}/x", [], f"data-dir: directory '{afile}/x' cannot be created: Not a directory"),
        (
            "drainer", "--data-dir", str(afile), [],
            f"data-dir: directory '{afile}' cannot be created: it exists and is not a directory",
        ),
        (
            "drainer", "--syncer.to.dir", "/proc/nope/x", ["--syncer.db-type", "file"],
            f"syncer.to.dir: directory '/proc/nope/x' {nope}",
        ),
        (
            "drainer", "--syncer.to.path", f"{afile}/x/down.db", [],
            f"syncer.to.path: directory of the sqlite file '{afile}/x' cannot be created: Not a directory",
        ),
    ]  # fmt: skip
    argvs = {}
    for i, (name, flag, value, extra, _) in enumerate(cases):
        argv = commands(etcd_server.url, tmp_path / str(i))[name]
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
        argvs[str(i)] = [*argv, *extra]  # the last --syncer.db-type wins
    results = run_all(argvs)
    for i, (name, _, _, _, message) in enumerate(cases):
        code, err = results[str(i)]
        assert err.strip() == f"{name}: config error: {message}", err  # one line
        assert code == 2, err
    assert afile.read_text() == "keep me"


def test_a_taken_status_addr_exits_1(tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess) -> None:
    """A port another program listens on is the environment's fault: exit status 1, as for pd-server's addr."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        argvs = {}
        for name in ("pump", "drainer"):
            argv = commands(etcd_server.url, tmp_path / name)[name]
            argv[argv.index("--status-addr") + 1] = f"127.0.0.1:{port}"
            argvs[name] = argv
        results = run_all(argvs)
    for code, err in results.values():
        assert code == 1, err
        assert f"cannot listen on status-addr 127.0.0.1:{port}" in err, err
