"""`drainer`: merges every pump's binlogs by commit_ts and replicates them downstream.

    drainer --config drainer.toml
    drainer --pd-urls http://127.0.0.1:2379 --addr 127.0.0.1:8249 --dest-db-type sqlite
    drainer -config drainer.toml -c 8 -dest-db-type file -safe-mode=false   (the original's Go flags)
    drainer -V                                                              (release, git hash, build time)

Config: defaults < `--config drainer.toml` < DRAINER_* environment < flags (see drainer/config.py).
A bad value exits with status 2 and one line on stderr.  A failed start (etcd or pd-server
unreachable, a downstream that refuses the login) exits with status 1; so does a binlog the
drainer cannot apply (the checkpoint stays before it).  SIGTERM / SIGINT save the checkpoint
`consistent=true` and publish `paused`; `PUT /state/<id>/close` publishes `offline`.
"""

from __future__ import annotations

import sys

from common.config import run_command
from common.daemon import run_daemon
from drainer.app import DrainerApp
from drainer.config import parse_args
from drainer.malloc import tune_malloc


@run_command(prog="drainer")
def main(argv: list[str] | None = None) -> int:
    tune_malloc()  # before any thread allocates
    cfg, args = parse_args(argv)
    return run_daemon("drainer", cfg, args.print_config, lambda: DrainerApp(cfg))


if __name__ == "__main__":
    sys.exit(main())
