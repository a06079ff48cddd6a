"""The sd_notify client and run_daemon's notify wiring, against a real datagram socket (no ports, no servers).

The functional tier (tests/functional/test_sdnotify.py) runs the real daemons; here a fake app shows the
ordering that run_daemon guarantees: nothing before start() returns, READY=1 after, STOPPING=1 on SIGTERM,
no READY at all when start-up fails or a signal interrupts it, and the watchdog thread gone at the end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common.daemon import run_daemon
from common.errors import UnavailableError
from common.sdnotify import Notifier, socket_address, watchdog_interval


class Ear:
    """A bound AF_UNIX datagram socket: what systemd listens on."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(b"\0" + address[1:].encode() if address.startswith("@") else address)

    def get(self, timeout: float = 5.0) -> str | None:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(4096).decode()
        except (TimeoutError, BlockingIOError):  # timeout 0 makes the socket non-blocking
            return None

    def drain(self) -> list[str]:
        out: list[str] = []
        while (message := self.get(0.0 if out else 0.05)) is not None:
            out.append(message)
        return out


@pytest.fixture
def ear() -> Iterator[Ear]:
    e = Ear(f"@tidb-binlog-unit-{os.getpid()}-{threading.get_ident()}-{id(object())}")
    yield e
    e.sock.close()


@pytest.fixture
def restore_process_state() -> Iterator[None]:
    """run_daemon installs signal handlers and replaces the root logger's handlers: put both back."""
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    yield
    for s, h in handlers.items():
        signal.signal(s, h)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved_handlers:
        root.addHandler(handler)
    root.setLevel(saved_level)


# ------------------------------------------------------------------------------------ pure parts


def test_socket_address_forms() -> None:
    assert socket_address("") is None
    assert socket_address("@systemd/notify") == b"\0systemd/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"
    assert socket_address("run/notify") is None  # relative: not an address systemd hands out
    assert socket_address("vsock:2:1234") is None  # systemd 253+ VM form: not ours to reach
    assert socket_address("/" + "x" * 200) is None  # longer than sun_path


def test_watchdog_interval_is_half_of_watchdog_usec_for_our_pid_only() -> None:
    assert watchdog_interval({}, 10) is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}, 10) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "10"}, 10) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "11"}, 10) is None  # meant for another
    with pytest.raises(ValueError, match="WATCHDOG_USEC='30s'"):
        watchdog_interval({"WATCHDOG_USEC": "30s"}, 10)
    with pytest.raises(ValueError, match="WATCHDOG_USEC='0' must be > 0"):
        watchdog_interval({"WATCHDOG_USEC": "0"}, 10)
    with pytest.raises(ValueError, match="WATCHDOG_PID='me'"):
        watchdog_interval({"WATCHDOG_USEC": "1", "WATCHDOG_PID": "me"}, 10)


# ------------------------------------------------------------------------------------- Notifier


def test_without_notify_socket_every_call_is_a_no_op() -> None:
    notifier = Notifier({})  # no socket to close
    assert not notifier.enabled
    assert not notifier.ready("x")
    assert notifier.start_watchdog() is None


def test_messages_reach_an_abstract_socket(ear: Ear) -> None:
    notifier = Notifier({"NOTIFY_SOCKET": ear.address})
    assert notifier.ready("serving\non two lines")
    assert notifier.status("busy")
    assert notifier.stopping()
    assert ear.drain() == ["READY=1\nSTATUS=serving on two lines", "STATUS=busy", "STOPPING=1"]
    notifier.close()
    assert not notifier.stopping()  # closed: a no-op


def test_messages_reach_a_filesystem_socket() -> None:
    with tempfile.TemporaryDirectory(prefix="sd") as d:  # short: sun_path holds 108 bytes
        path = str(Path(d) / "notify")
        ear = Ear(path)
        try:
            with contextlib.closing(Notifier({"NOTIFY_SOCKET": path})) as notifier:
                assert notifier.ready()
            assert ear.get() == "READY=1"
        finally:
            ear.sock.close()


def test_nobody_listening_is_one_warning_and_never_an_error(caplog: pytest.LogCaptureFixture) -> None:
    with (
        contextlib.closing(Notifier({"NOTIFY_SOCKET": "@tidb-binlog-unit-nobody-listens"})) as notifier,
        caplog.at_level(logging.WARNING, logger="common.sdnotify"),
    ):
        assert not notifier.ready()
        assert not notifier.stopping()
    warnings = [r.getMessage() for r in caplog.records if r.name == "common.sdnotify"]
    assert len(warnings) == 1
    assert "cannot notify systemd" in warnings[0]


def test_an_unreachable_notify_socket_value_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="common.sdnotify"):
        notifier = Notifier({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert any("NOTIFY_SOCKET='vsock:2:1234'" in r.getMessage() for r in caplog.records)


def test_watchdog_pings_until_stopped(ear: Ear) -> None:
    with contextlib.closing(Notifier({"NOTIFY_SOCKET": ear.address, "WATCHDOG_USEC": "20000"})) as notifier:
        dog = notifier.start_watchdog()
        assert dog is not None
        assert dog.interval == 0.01
        pings = [ear.get() for _ in range(3)]
        assert pings == ["WATCHDOG=1"] * 3
        dog.stop()
    ear.drain()  # a ping sent while stopping
    assert ear.get(0.1) is None


def test_a_malformed_watchdog_usec_means_no_watchdog(ear: Ear, caplog: pytest.LogCaptureFixture) -> None:
    with (
        contextlib.closing(Notifier({"NOTIFY_SOCKET": ear.address, "WATCHDOG_USEC": "soon"})) as notifier,
        caplog.at_level(logging.WARNING, logger="common.sdnotify"),
    ):
        assert notifier.start_watchdog() is None
    assert any("no watchdog pings: WATCHDOG_USEC='soon'" in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------------- run_daemon


@dataclass(frozen=True)
class FakeConfig:
    log_level: str = "info"
    log_file: str = ""
    log_format: str = "text"
    log_file_max_size: int = 0
    log_file_max_backups: int = 1

    def check_supported(self) -> None:
        pass

    def ignored_keys(self) -> list[str]:
        return []


@dataclass
class FakeApp:
    """start() looks at the socket (nothing may have arrived yet); run() sends itself SIGTERM."""

    ear: Ear
    start_error: Exception | None = None
    signal_during_start: bool = False
    seen_during_start: list[str] = field(default_factory=list)
    paused: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.seen_during_start = self.ear.drain()
        if self.signal_during_start:
            os.kill(os.getpid(), signal.SIGTERM)
            assert self.paused.wait(5)
        if self.start_error is not None:
            raise self.start_error

    def run(self) -> int:
        if not self.paused.is_set():
            os.kill(os.getpid(), signal.SIGTERM)
        return 0 if self.paused.wait(5) else 3

    def request_pause(self) -> None:
        self.paused.set()


def _daemon(ear: Ear, app: FakeApp, env: dict[str, str] | None = None) -> int:
    notifier = Notifier({"NOTIFY_SOCKET": ear.address, **(env or {})})
    return run_daemon("fake", FakeConfig(), False, lambda: app, notifier=notifier)


def _watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sd-watchdog"]


@pytest.mark.usefixtures("restore_process_state")
def test_ready_only_after_start_returns_then_stopping_on_sigterm(ear: Ear) -> None:
    app = FakeApp(ear)
    assert _daemon(ear, app) == 0
    assert app.seen_during_start == []
    assert ear.drain() == ["READY=1\nSTATUS=fake: serving", "STOPPING=1\nSTATUS=fake: SIGTERM received, shutting down"]


@pytest.mark.usefixtures("restore_process_state")
def test_failed_start_sends_no_ready_and_exits_1(ear: Ear, capsys: pytest.CaptureFixture[str]) -> None:
    app = FakeApp(ear, start_error=UnavailableError("etcd is down"))
    assert _daemon(ear, app, {"WATCHDOG_USEC": "1000000"}) == 1
    assert capsys.readouterr().err.endswith("\nfake: etcd is down\n")  # after the log lines
    assert [m for m in ear.drain() if m != "WATCHDOG=1"] == []
    assert _watchdog_threads() == []


@pytest.mark.usefixtures("restore_process_state")
def test_a_signal_during_start_says_stopping_and_never_ready(ear: Ear) -> None:
    app = FakeApp(ear, signal_during_start=True)
    assert _daemon(ear, app) == 0
    messages = ear.drain()
    assert len(messages) == 1
    assert messages[0].startswith("STOPPING=1")


@pytest.mark.usefixtures("restore_process_state")
def test_watchdog_runs_through_start_and_is_gone_at_the_end(ear: Ear) -> None:
    app = FakeApp(ear)
    assert _daemon(ear, app, {"WATCHDOG_USEC": "20000"}) == 0
    assert "WATCHDOG=1" in app.seen_during_start  # pings from before start-up finished
    assert _watchdog_threads() == []
