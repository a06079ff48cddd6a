"""`pump`: stores binlogs from the upstream writer and serves them to drainers in commit order.

    pump --config pump.toml
    pump --pd-urls http://127.0.0.1:2379 --addr 127.0.0.1:8250 --data-dir data.pump
    pump -config pump.toml -L debug -fake-binlog-interval 3      (the original's Go flags)
    pump -V                                                      (release, git hash, build time)

Config: defaults < `--config pump.toml` < PUMP_* environment < flags (see pump/config.py).  A bad value,
or an unusable `[security]` file, exits with status 2 and one line on stderr.  A failed
start (etcd or pd-server unreachable, a drainer that cannot be notified) exits with status 1.
SIGTERM / SIGINT pause the pump (published `paused`); `PUT /state/<id>/close` takes it offline.
"""

from __future__ import annotations

import sys

from common.config import run_command
from common.daemon import run_daemon
from pump.app import PumpApp
from pump.config import parse_args


@run_command(prog="pump")
def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    return run_daemon("pump", cfg, args.print_config, lambda: PumpApp(cfg))


if __name__ == "__main__":
    sys.exit(main())
