"""`pd-server`: TSO and cluster id over etcd.

    pd-server --pd-urls http://127.0.0.1:2379 --addr 127.0.0.1:2390

Config: defaults < `--config pd.toml` < PD_* environment < flags.  A bad
value (an unusable `[security]` file too) exits with status 2 and one line on stderr; an unreachable
etcd, or an `addr` another program listens on, with status 1 and one line.
SIGTERM / SIGINT stop the server and give up the leader key, within seconds even while etcd does not
answer (the lease then expires by itself).

Under systemd (Type=notify): READY=1 once the gRPC port serves and this server holds /pd/leader,
STOPPING=1 when a signal begins the stop, WATCHDOG=1 pings when WatchdogSec is set (common/sdnotify.py).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from common.cli import fail
from common.config import dump, load_args, run_command
from common.config.cli import config_parser
from common.errors import ConfigError, ListenError, UnavailableError
from common.etcd import EtcdClient
from common.logsetup import setup_logging
from common.sdnotify import Notifier
from common.signals import SignalWatcher
from pd.config import PDConfig
from pd.server import PDServer

log = logging.getLogger(__name__)
ENV_PREFIX = "PD"
CLOCK_SKEW_ENV = "BINLOG_TEST_CLOCK_SKEW_MS"
"""Test-only: shift this pd-server's clock by N ms (negative = behind) to prove the window keeps TSO monotonic."""


@run_command(prog="pd-server")
def main(argv: list[str] | None = None) -> int:
    parser = config_parser("pd-server", "TSO and cluster id service over etcd", PDConfig, env_prefix=ENV_PREFIX)
    args = parser.parse_args(argv)
    cfg = load_args(PDConfig, args, env=os.environ, env_prefix=ENV_PREFIX)
    if args.print_config:
        sys.stdout.write(dump(cfg))
        return 0
    setup_logging(cfg.log_level, log_format=cfg.log_format)
    systemd = Notifier()
    watchdog = systemd.start_watchdog()
    try:
        return _serve(cfg, systemd)
    finally:
        if watchdog is not None:
            watchdog.stop()
        systemd.close()


def _serve(cfg: PDConfig, systemd: Notifier) -> int:
    try:
        tls = cfg.security.load_tls()
        etcd = EtcdClient(cfg.pd_urls, retry_for=cfg.etcd_retry, tls=tls)
    except ConfigError as exc:
        return fail("pd-server", str(exc))
    stop = threading.Event()
    server = PDServer(
        etcd,
        cfg.addr,
        advertise_addr=cfg.advertise_addr or None,
        lease_ttl=cfg.lease_ttl,
        campaign_timeout=cfg.campaign_timeout,
        clock_skew_ms=int(os.environ.get(CLOCK_SKEW_ENV, "0") or 0),
        tls=tls,
    )

    def on_signal(signum: int) -> None:  # on the watcher's thread, not in the signal handler
        name = signal.Signals(signum).name
        log.info("received %s", name)
        systemd.stopping(f"pd-server: {name} received, shutting down")
        stop.set()
        server.request_stop()  # a campaign still under way in start() gives up

    signals = SignalWatcher(on_signal)
    try:
        return _run(server, etcd, stop, systemd)
    finally:
        signals.close()


def _run(server: PDServer, etcd: EtcdClient, stop: threading.Event, systemd: Notifier) -> int:
    try:
        server.start()
    except ConfigError as exc:
        server.close()
        etcd.close()
        return fail("pd-server", str(exc))
    except (UnavailableError, ListenError) as exc:  # etcd unreachable, addr taken: the environment, exit 1
        server.close()
        etcd.close()
        return fail("pd-server", str(exc), status=1)
    if not stop.is_set():  # a signal during start-up already said STOPPING
        systemd.ready(f"pd-server: serving cluster {server.cluster_id} at {server.advertise}")
    try:
        stop.wait()
    finally:
        server.close()  # bounded, also while etcd does not answer
        etcd.close()  # cancels etcd calls still in flight in pd-server's daemon threads
    return 0


if __name__ == "__main__":
    sys.exit(main())
