"""`drainer`: merges every pump's binlogs by commit_ts and replicates them downstream.

    drainer --config drainer.toml
    drainer --pd-urls http://127.0.0.1:2379 --addr 127.0.0.1:8249 --dest-db-type sqlite

Config: defaults < `--config drainer.toml` < DRAINER_* environment < flags (see drainer/config.py).
A bad value exits with status 2 and one line on stderr.  A failed start (etcd or pd-server
unreachable, a downstream that refuses the login) exits with status 1; so does a binlog the
drainer cannot apply (the checkpoint stays before it).  SIGTERM / SIGINT save the checkpoint
`consistent=true` and publish `paused`; `PUT /state/<id>/close` publishes `offline`.
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
from drainer.app import DrainerApp
from drainer.config import parse_args

log = logging.getLogger(__name__)


@run_command(prog="drainer")
def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    if args.print_config:
        sys.stdout.write(dump(cfg))
        return 0
    cfg.check_supported()
    setup_logging(cfg.log_level, cfg.log_file)
    for warning in cfg.ignored_keys():
        log.warning("%s", warning)

    app = DrainerApp(cfg)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: pausing", signal.Signals(signum).name)
        app.request_pause()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        app.start()
    except (BinlogError, OSError) as exc:
        log.error("drainer failed to start: %s", exc)
        return fail("drainer", str(exc), status=1)
    return app.run()


if __name__ == "__main__":
    sys.exit(main())
