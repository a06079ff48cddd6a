"""`arbiter`: applies the drainer's Kafka topic (db-type = "kafka") to a MySQL-compatible downstream.

    arbiter --config arbiter.toml
    arbiter --up.topic 6912345_obinlog --up.kafka-addrs 127.0.0.1:9092 --down.host 127.0.0.1

Config: defaults < `--config arbiter.toml` < BINLOG_SERVER_* environment < flags (arbiter/config.py).
A bad value exits with status 2 and one line on stderr.  A failed start (downstream or Kafka
unreachable, the kafka extra not installed) exits with status 1; so does a message the arbiter
cannot decode or apply (the checkpoint stays before it).  SIGTERM / SIGINT apply what is in flight,
save the checkpoint with status 0 and exit 0.
"""

from __future__ import annotations

import sys

from arbiter.app import ArbiterApp
from arbiter.config import parse_args
from common.config import run_command
from common.daemon import run_daemon


@run_command(prog="arbiter")
def main(argv: list[str] | None = None) -> int:
    cfg, args = parse_args(argv)
    return run_daemon("arbiter", cfg, args.print_config, lambda: ArbiterApp(cfg))


if __name__ == "__main__":
    sys.exit(main())
