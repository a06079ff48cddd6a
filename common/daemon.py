"""What the pump and drainer mains and apps share: the run loop of a daemon and its shutdown steps.

`run_daemon` is the whole body of a daemon's `main` after its config is parsed: log set-up,
warnings for ignored keys, SIGTERM / SIGINT -> `app.request_pause()`, `start()` (a failure is
one line on stderr and exit status 1), then `run()` whose result is the exit status.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Protocol, TypeVar

from common.cli import fail
from common.config import dump
from common.errors import BinlogError, UnavailableError
from common.logsetup import setup_logging

log = logging.getLogger(__name__)
T = TypeVar("T")


class DaemonConfig(Protocol):
    @property
    def log_level(self) -> str: ...

    @property
    def log_file(self) -> str: ...

    def check_supported(self) -> None: ...

    def ignored_keys(self) -> Iterable[str]: ...


class DaemonApp(Protocol):
    def start(self) -> None: ...

    def run(self) -> int: ...

    def request_pause(self) -> None: ...


def run_daemon(prog: str, cfg: DaemonConfig, print_config: bool, make_app: Callable[[], DaemonApp]) -> int:
    if print_config:
        sys.stdout.write(dump(cfg))
        return 0
    cfg.check_supported()
    setup_logging(cfg.log_level, cfg.log_file)
    for warning in cfg.ignored_keys():
        log.warning("%s", warning)
    app = make_app()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: pausing", signal.Signals(signum).name)
        app.request_pause()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        app.start()
    except (BinlogError, OSError) as exc:
        log.error("%s failed to start: %s", prog, exc)
        return fail(prog, str(exc), status=1)
    return app.run()


def need(component: T | None, what: str = "the node") -> T:
    """`component`, or UnavailableError while it is not built (before start, after close)."""
    if component is None:
        raise UnavailableError(f"{what} is not started")
    return component


def shutdown_step(what: str, fn: Callable[[], T], default: T | None = None) -> T | None:
    """Run one shutdown step; a failure is logged and the shutdown goes on."""
    try:
        return fn()
    except Exception:
        log.exception("close: %s failed", what)
        return default
