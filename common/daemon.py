"""What the pump and drainer mains and apps share: the run loop of a daemon and its shutdown steps.

`run_daemon` is the whole body of a daemon's `main` after its config is parsed: log set-up,
warnings for ignored keys, SIGTERM / SIGINT -> `app.request_pause()` (on a thread of
common/signals.py, never inside the signal handler), `start()` (a failure is one line on stderr and
exit status 1, or 2 for a ConfigError: the decorator `run_command` of the main prints it), then
`run()` whose result is the exit status.

systemd (Type=notify, common/sdnotify.py): READY=1 goes out once `start()` has returned, and
`start()` returns only after the gRPC and HTTP servers listen and the node is registered, so a
unit ordered after this one finds it serving.  STOPPING=1 goes out when SIGTERM / SIGINT begins
the shutdown.  WATCHDOG=1 pings run from before start-up until the process ends (the pump's
offline wait and the drainer's final flush can take long; systemd must not kill them for it).
A stop asked for through the HTTP API (`PUT /state/<id>/close`) is seen by systemd as the main
process exiting with status 0.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from common.cli import fail
from common.config import dump
from common.errors import BinlogError, ConfigError, UnavailableError
from common.logsetup import setup_logging
from common.sdnotify import Notifier
from common.signals import SignalWatcher

log = logging.getLogger(__name__)
T = TypeVar("T")


class DaemonConfig(Protocol):
    @property
    def log_level(self) -> str: ...

    @property
    def log_file(self) -> str: ...

    @property
    def log_format(self) -> str: ...

    @property
    def log_file_max_size(self) -> int: ...

    @property
    def log_file_max_backups(self) -> int: ...

    def check_supported(self) -> None: ...

    def ignored_keys(self) -> Iterable[str]: ...


class DaemonApp(Protocol):
    def start(self) -> None: ...

    def run(self) -> int: ...

    def request_pause(self) -> None: ...


def run_daemon(
    prog: str,
    cfg: DaemonConfig,
    print_config: bool,
    make_app: Callable[[], DaemonApp],
    *,
    notifier: Notifier | None = None,
) -> int:
    """Run one daemon to its end; `notifier` defaults to the one NOTIFY_SOCKET names (tests pass theirs)."""
    if print_config:
        sys.stdout.write(dump(cfg) + start_notes(cfg))
        return 0
    cfg.check_supported()
    setup_daemon_logging(cfg)
    log.debug("%s: logging at level %s to %s", prog, cfg.log_level, cfg.log_file or "stderr")
    for warning in cfg.ignored_keys():
        log.warning("%s", warning)
    systemd = notifier if notifier is not None else Notifier()
    watchdog = systemd.start_watchdog()
    stopping = False
    try:
        app = make_app()

        def on_signal(signum: int) -> None:  # on the watcher's thread: never re-enters a lock main holds
            nonlocal stopping
            name = signal.Signals(signum).name
            log.info("received %s: pausing", name)
            stopping = True
            systemd.stopping(f"{prog}: {name} received, shutting down")
            app.request_pause()

        signals = SignalWatcher(on_signal)
        try:
            try:
                app.start()
            except ConfigError as exc:  # found only at start (a data-dir that cannot be a directory): exit 2
                log.error("%s cannot start: %s", prog, exc)
                raise
            except (BinlogError, OSError) as exc:
                log.error("%s failed to start: %s", prog, exc)
                return fail(prog, str(exc), status=1)
            if not stopping:  # a signal during start-up already said STOPPING: READY would contradict it
                systemd.ready(f"{prog}: serving")
            return app.run()
        finally:
            signals.close()
    finally:
        if watchdog is not None:
            watchdog.stop()
        systemd.close()


def refusals(cfg: DaemonConfig) -> list[str]:
    """Why the daemon would refuse this config at start: every reason when the config lists them
    (`refusals()`), else the one `check_supported()` raises; [] when it would start."""
    listed = getattr(cfg, "refusals", None)
    if callable(listed):
        return [str(r) for r in listed()]
    try:
        cfg.check_supported()
    except ConfigError as exc:
        return [str(exc)]
    return []


def start_notes(cfg: DaemonConfig) -> str:
    """`--print-config`'s trailer: TOML comments naming the settings refused at start (exit status 2) and the
    keys ignored with a warning; empty when there is neither."""
    refused, ignored = refusals(cfg), list(cfg.ignored_keys())
    if not refused and not ignored:
        return ""
    lines = ["", "# At start (not config keys):"]
    lines += [f"# REFUSED (the daemon exits with status 2): {r}" for r in refused]
    lines += [f"# ignored (a warning is logged): {w}" for w in ignored]
    return "\n".join(lines) + "\n"


def setup_daemon_logging(cfg: DaemonConfig) -> None:
    """Logging as `cfg` says; ConfigError naming `log-file` when that file cannot be opened."""
    try:
        setup_logging(
            cfg.log_level,
            cfg.log_file,
            log_format=cfg.log_format,
            max_size_mib=cfg.log_file_max_size,
            max_backups=cfg.log_file_max_backups,
        )
    except OSError as exc:
        raise ConfigError(
            f"invalid value for 'log-file': cannot open {cfg.log_file!r}: {exc.strerror or exc}"
        ) from None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


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
