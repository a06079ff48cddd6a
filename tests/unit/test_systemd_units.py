"""deploy/systemd: the unit files say what the daemons do, their ExecStart runs, and systemd accepts them.

`systemd-analyze verify` exits 0 even for an unknown key or a bad value (it only prints a warning), so
any line it prints about our units is a failure here.  It also checks that ExecStart's binary exists:
the units are copied to a temp dir with /opt/tidb-binlog/bin/ pointed at this venv's console scripts.
Where systemd-analyze is not installed (Debian package `systemd`), those tests skip and say so; the
structural checks and the ExecStart check run everywhere.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT_DIR = ROOT / "deploy" / "systemd"
INSTALL_BIN = "/opt/tidb-binlog/bin/"
VENV_BIN = Path(sys.executable).parent
SAMPLE_CONFIG = {"pump": "pump.toml", "drainer": "drainer.toml", "pd-server": "pd-server.toml"}
UNITS = {f"{name}.service": name for name in SAMPLE_CONFIG}
MIN_STOP_TIMEOUT = {"pump": 300, "drainer": 180, "pd-server": 30}
"""Seconds: the pump's pause (gRPC grace 10 s, storage sync) and the drainer's final flush (60 s) with margin."""
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
SYSUSERS = shutil.which("systemd-sysusers")
NO_SYSTEMD = "systemd-analyze is not installed (Debian package 'systemd'): unit verification skipped"


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values (a key may repeat), as systemd reads it; no line continuations in ours."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"line {number}: continuation lines are not used in these units"
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        assert current is not None, f"line {number}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"line {number}: {line!r} is not key=value"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def unit(name: str) -> dict[str, dict[str, list[str]]]:
    return parse_unit((UNIT_DIR / name).read_text())


def one(sections: dict[str, dict[str, list[str]]], section: str, key: str) -> str:
    values = sections[section].get(key, [])
    assert len(values) == 1, f"[{section}] {key}: expected exactly one value, got {values}"
    return values[0]


def console_scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


# --------------------------------------------------------------------------------- structure


def test_the_three_units_and_the_sysusers_file_are_there() -> None:
    assert sorted(p.name for p in UNIT_DIR.glob("*.service")) == sorted(UNITS)
    assert (UNIT_DIR / "tidb-binlog.conf").is_file()


@pytest.mark.parametrize(("file", "command"), sorted(UNITS.items()))
def test_unit_runs_as_notify_service_with_restart_limits_and_hardening(file: str, command: str) -> None:
    u = unit(file)
    s = "Service"
    assert one(u, s, "Type") == "notify"
    assert one(u, s, "NotifyAccess") == "main"
    assert one(u, s, "User") == "tidb-binlog"
    assert one(u, s, "Group") == "tidb-binlog"
    assert one(u, s, "Restart") == "on-failure"
    assert int(one(u, s, "RestartSec")) > 0
    assert one(u, s, "RestartPreventExitStatus") == "2"  # a bad config is not restarted in a loop
    assert int(one(u, s, "WatchdogSec")) > 0
    assert int(one(u, s, "TimeoutStopSec")) >= MIN_STOP_TIMEOUT[command]
    assert int(one(u, s, "LimitNOFILE")) >= 16384
    for key, value in [
        ("ProtectSystem", "strict"),
        ("NoNewPrivileges", "yes"),
        ("PrivateTmp", "yes"),
        ("ProtectHome", "yes"),
        ("CapabilityBoundingSet", ""),
    ]:
        assert one(u, s, key) == value, key
    assert one(u, "Install", "WantedBy") == "multi-user.target"
    assert "network-online.target" in one(u, "Unit", "After").split()
    # MemoryMax is offered, commented, with a value (the right ceiling depends on the workload)
    assert re.search(r"^# MemoryMax=\d+[MG]$", (UNIT_DIR / file).read_text(), re.MULTILINE)


@pytest.mark.parametrize(("file", "command"), [("pump.service", "pump"), ("drainer.service", "drainer")])
def test_nodes_keep_their_data_in_their_state_directory(file: str, command: str) -> None:
    u = unit(file)
    assert one(u, "Service", "StateDirectory") == f"tidb-binlog/{command}"
    assert one(u, "Service", "WorkingDirectory") == f"%S/tidb-binlog/{command}"  # relative data-dir lands there


@pytest.mark.parametrize("file", sorted(UNITS))
def test_no_exec_reload_because_no_daemon_handles_sighup(file: str) -> None:
    assert "ExecReload" not in unit(file)["Service"]
    assert "No ExecReload: " in (UNIT_DIR / file).read_text()  # and the unit says why
    daemon_sources = [ROOT / "common" / "daemon.py", ROOT / "pd" / "main.py"]
    assert not any("SIGHUP" in p.read_text() for p in daemon_sources)  # if one ever does, add ExecReload


@pytest.mark.parametrize(("file", "command"), sorted(UNITS.items()))
def test_exec_start_is_a_console_script_with_flags_it_accepts(file: str, command: str) -> None:
    argv = shlex.split(one(unit(file), "Service", "ExecStart"))
    assert argv[0] == INSTALL_BIN + command
    assert command in console_scripts()
    assert argv[1:] == ["--config", f"/etc/tidb-binlog/{SAMPLE_CONFIG[command]}", "--log-format", "json"]
    # the same flags, with the repo's sample config in place of /etc: the daemon accepts them
    run = [str(VENV_BIN / command), "--config", str(ROOT / "deploy" / SAMPLE_CONFIG[command]), *argv[3:]]
    done = subprocess.run([*run, "--print-config"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert 'log-format = "json"' in done.stdout


@pytest.mark.skipif(SYSUSERS is None, reason="systemd-sysusers is not installed (Debian package 'systemd')")
def test_sysusers_creates_the_tidb_binlog_system_user(tmp_path: Path) -> None:
    assert SYSUSERS is not None
    (tmp_path / "etc").mkdir()
    done = subprocess.run(
        [SYSUSERS, f"--root={tmp_path}", str(UNIT_DIR / "tidb-binlog.conf")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    entry = next(line for line in (tmp_path / "etc" / "passwd").read_text().splitlines() if line.startswith("tidb-"))
    name, _, uid, _, _, home, shell = entry.split(":")
    assert (name, home, shell) == ("tidb-binlog", "/var/lib/tidb-binlog", "/usr/sbin/nologin")
    assert int(uid) < 1000  # a system user


# ---------------------------------------------------------------------------- systemd-analyze


def verify(tmp_path: Path, edit: dict[str, tuple[str, str]] | None = None) -> list[str]:
    """Lines systemd-analyze verify prints about our units (copied with ExecStart pointed at this venv)."""
    assert SYSTEMD_ANALYZE is not None
    paths = []
    for file in UNITS:
        text = (UNIT_DIR / file).read_text().replace(INSTALL_BIN, f"{VENV_BIN}/")
        if edit and file in edit:
            old, new = edit[file]
            assert old in text
            text = text.replace(old, new)
        path = tmp_path / file
        path.write_text(text)
        paths.append(str(path))
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", "--man=no", *paths], capture_output=True, text=True, timeout=120, check=False
    )
    lines = (done.stdout + done.stderr).splitlines()
    ours = [line for line in lines if str(tmp_path) in line or any(f in line for f in UNITS)]
    if done.returncode != 0 and not ours:
        ours = [f"systemd-analyze verify exited {done.returncode}", *lines]
    return ours


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD)
def test_systemd_analyze_verify_accepts_the_units(tmp_path: Path) -> None:
    assert verify(tmp_path) == []


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason=NO_SYSTEMD)
def test_systemd_analyze_verify_catches_a_bad_value(tmp_path: Path) -> None:
    problems = verify(tmp_path, {"drainer.service": ("Restart=on-failure", "Restart=sometimes")})
    assert len(problems) == 1
    assert "drainer.service" in problems[0]
    assert "sometimes" in problems[0]
