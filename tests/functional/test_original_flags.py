"""The original's command lines, as real processes: a pump and a drainer started with nothing but the
original's single-dash Go flags come online, and `-V` of every console script prints the version lines."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tools.localcluster import DrainerProcess, EtcdProcess, PDProcess, PumpProcess
from tools.procs import free_ports, python_module_argv, wait_for

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60


def test_pump_and_drainer_start_with_only_the_originals_single_dash_flags(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess
) -> None:
    """Was: `drainer -config f.toml` parsed as `-c onfig`.  status-addr (ours: no such flag in the original)
    comes from the config file, so the command lines hold only the original's flags."""
    pump_ports, drainer_ports = free_ports(2), free_ports(2)
    pump = PumpProcess(tmp_path, etcd_server.url, name="pump1", grpc_port=pump_ports[0], status_port=pump_ports[1])
    (tmp_path / "pump.toml").write_text(f'status-addr = "{pump.status_addr}"\n', encoding="utf-8")
    pump_log = tmp_path / "pump-own.log"
    pump.process.argv = python_module_argv(
        "pump.main",
        "-config", str(tmp_path / "pump.toml"),
        "-addr", pump.addr,
        "-pd-urls", etcd_server.url,
        "-data-dir", str(pump.data_dir),
        "-node-id", pump.name,
        "-L", "debug",
        "-log-file", str(pump_log),
        "-fake-binlog-interval=1",
        "-heartbeat-interval", "1",
        "-gc", "1",
        "-enable-debug",
        "-binlog-file-size", "1024",
    )  # fmt: skip
    drainer = DrainerProcess(
        tmp_path, etcd_server.url, name="drainer1", grpc_port=drainer_ports[0], status_port=drainer_ports[1]
    )
    (tmp_path / "drainer.toml").write_text(f'status-addr = "{drainer.status_addr}"\n', encoding="utf-8")
    drainer_log = tmp_path / "drainer-own.log"
    drainer.process.argv = python_module_argv(
        "drainer.main",
        "-config", str(tmp_path / "drainer.toml"),
        "-addr", drainer.addr,
        "-pd-urls", etcd_server.url,
        "-data-dir", str(drainer.data_dir),
        "-node-id", drainer.name,
        "-L", "debug",
        "-log-file", str(drainer_log),
        "-dest-db-type", "file",
        "-c", "2",
        "-txn-batch", "5",
        "-safe-mode",
        "-sync-ddl=true",
        "-enable-dispatch=false",
        "-detect-interval", "1",
        "-ignore-schemas", "a,b",
        "-initial-commit-ts", "-1",
        "-compressor", "gzip",
        "-synced-check-time", "1",
        "-log-rotate", "daily",
    )  # fmt: skip
    pump.start()
    try:
        drainer.start()  # both wait until registered online with -node-id at -addr
        try:
            # The drainer registers as online in etcd just before it logs so: wait for the line.
            online = "drainer drainer1 is online"
            wait_for(lambda: online in drainer_log.read_text(encoding="utf-8"), TIMEOUT, f"{online!r} in the log")
            drainer_text = drainer_log.read_text(encoding="utf-8")
            assert "config key 'log-rotate' is ignored (deprecated)" in drainer_text
            assert " DEBUG common.daemon: drainer: logging at level debug to " in drainer_text
            pump_text = pump_log.read_text(encoding="utf-8")
            assert "config key 'binlog-file-size' is ignored (deprecated)" in pump_text
            assert " DEBUG common.daemon: pump: logging at level debug to " in pump_text
        finally:
            assert drainer.stop() == 0
    finally:
        assert pump.stop() == 0


def pyproject() -> dict[str, Any]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def console_scripts() -> dict[str, str]:
    """pyproject's [project.scripts]: name -> the module whose `main` it runs."""
    scripts: dict[str, str] = pyproject()["project"]["scripts"]
    return {name: target.partition(":")[0] for name, target in scripts.items()}


@pytest.mark.parametrize("script", sorted(console_scripts()))
@pytest.mark.parametrize("word", ["-V", "--version"])
def test_every_console_script_prints_its_version_and_exits_0(script: str, word: str) -> None:
    module = console_scripts()[script]
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import main; sys.exit(main())", word],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=ROOT,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == f"Release Version: {pyproject()['project']['version']}"
    assert lines[1].startswith("Git Commit Hash: ")
    assert lines[1] != "Git Commit Hash: "
    assert lines[2].startswith("Build TS: ")
    assert lines[3].startswith("Python Version: ")
