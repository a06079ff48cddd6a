"""`pump`: stores binlogs from the upstream writer and serves them to drainers in commit order.

    pump --config pump.toml
    pump --pd-urls http://127.0.0.1:2379 --addr 127.0.0.1:8250 --data-dir data.pump

Config: defaults < `--config pump.toml` < PUMP_* environment < flags (see pump/config.py).  A bad value,
or a setting this version does not support (TLS), exits with status 2 and one line on stderr.  A failed
start (etcd or pd-server unreachable, a drainer that cannot be notified) exits with status 1.
SIGTERM / SIGINT pause the pump (published `paused`); `PUT /state/<id>/close` takes it offline.
"""

from __future__ import annotations

import logging
import signal
import sys
from types import FrameType

from common.cli import fail
from common.config import dump, run_command
from common.errors import BinlogError
from common.logsetup import setup_logging
from pump.app import PumpApp
from pump.config import parse_args

log = logging.getLogger(__name__)


@run_command(prog="pump")
def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    if args.print_config:
        sys.stdout.write(dump(cfg))
        return 0
    cfg.check_supported()
    setup_logging(cfg.log_level, cfg.log_file)
    for warning in cfg.ignored_keys():
        log.warning("%s", warning)

    app = PumpApp(cfg)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: pausing", signal.Signals(signum).name)
        app.request_pause()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        app.start()
    except (BinlogError, OSError) as exc:
        log.error("pump failed to start: %s", exc)
        return fail("pump", str(exc), status=1)
    return app.run()


if __name__ == "__main__":
    sys.exit(main())
