"""reparo configuration: defaults < reparo.toml < Reparo_* environment < flags (docs/architecture.md#configuration).

Keys are the original `reparo.toml` ones:

    data-dir                       the drainer's file-sink directory (required)
    log-level, log-file
    start-datetime, stop-datetime  "2006-01-02 15:04:05", local time; or
    start-tso, stop-tso            the window as TSOs; binlogs with start <= commit_ts <= stop are kept, stop 0 = no end
    dest-type                      print (default, as the original command line) | mysql
    safe-mode, worker-count, txn-batch          the loader, as the drainer's
    replicate-do-db, replicate-ignore-db        schema name patterns (`~regex` or an exact name, any case)
    [[replicate-do-table]], [[replicate-ignore-table]]   db-name / tbl-name patterns
    [dest-db] host / port / user / password
    [dest-db.security] ssl-ca / ssl-cert / ssl-key   TLS to the destination (ours; common/mysql_tls.py)

A window may be given as a datetime or as a TSO, not both (the original silently let the datetime win).
Environment variables are `Reparo_<KEY>` as the original spells them (`Reparo_DATA_DIR`), or upper case
(`REPARO_DATA_DIR`). Flags are `--key` (`--data-dir d`, `--dest-db.port 3307`); the original's Go flags
(`-config`, `-data-dir=d`, `-c 8`, `-L`, `-safe-mode=false`; common/config/goflags.py) work too.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from common import tso
from common.config import at_least, flags_from_args, load
from common.config.cli import CONFIG_FILE_DEST, config_parser
from common.config.goflags import REPARO_FLAGS
from common.errors import ConfigError
from common.filters import TableName, name_pattern
from common.mysql_tls import MySQLSecurity, MySQLTLS

__all__ = [
    "DATETIME_FORMAT",
    "DestDBConfig",
    "ReparoConfig",
    "TableName",
    "build_parser",
    "load_config",
    "parse_args",
    "parse_datetime",
]

ENV_PREFIX: Final = "Reparo"
DATETIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S"
"""Go's "2006-01-02 15:04:05"."""
DEFAULT_DEST_TYPE: Final = "print"
"""The original command line's default (its sample reparo.toml sets mysql)."""
DEFAULT_WORKER_COUNT: Final = 16
DEFAULT_TXN_BATCH: Final = 20
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 3306
DEFAULT_USER: Final = "root"
DEST_SECURITY: Final = "[dest-db.security]"

LogLevel = Literal["debug", "info", "warn", "warning", "error", "fatal"]
DestType = Literal["print", "mysql"]


def parse_datetime(text: str) -> int:
    """The TSO of a local "YYYY-MM-DD hh:mm:ss" (ValueError naming the format otherwise)."""
    try:
        when = dt.datetime.strptime(text.strip(), DATETIME_FORMAT)
    except ValueError:
        raise ValueError(f"expected a local time like '2006-01-02 15:04:05', got {text!r}") from None
    return tso.from_datetime(when)


def _datetime(text: str) -> None:
    if text:
        parse_datetime(text)


def _port(value: int) -> None:
    if not 0 < value <= 65535:
        raise ValueError("must be a port number 1..65535")


def _name_patterns(values: tuple[str, ...]) -> None:
    for value in values:
        name_pattern(value)


@dataclass(frozen=True)
class DestDBConfig:
    """`[dest-db]`: the MySQL-compatible server that `dest-type = "mysql"` writes into."""

    host: str = field(default=DEFAULT_HOST, metadata={"help": "downstream MySQL host"})
    port: int = field(default=DEFAULT_PORT, metadata={"help": "downstream MySQL port", "validate": _port})
    user: str = field(default=DEFAULT_USER, metadata={"help": "downstream MySQL user"})
    password: str = field(default="", metadata={"help": "downstream MySQL password"})
    security: MySQLSecurity = field(default_factory=MySQLSecurity)
    """TLS to the destination (ours: the original's reparo had none)."""


@dataclass(frozen=True)
class ReparoConfig:
    data_dir: str = field(default="", metadata={"help": "the drainer's file-sink directory (pb binlog files)"})
    log_level: LogLevel = field(default="info", metadata={"help": "log level", "aliases": ("-L",)})
    log_file: str = field(default="", metadata={"help": "log file (default: stderr)"})
    start_datetime: str = field(
        default="", metadata={"help": "replay from this local time '2006-01-02 15:04:05'", "validate": _datetime}
    )
    stop_datetime: str = field(
        default="", metadata={"help": "replay up to this local time '2006-01-02 15:04:05'", "validate": _datetime}
    )
    start_tso: int = field(default=0, metadata={"help": "replay from this commit_ts", "validate": at_least(0)})
    stop_tso: int = field(
        default=0, metadata={"help": "replay up to this commit_ts (0: to the end)", "validate": at_least(0)}
    )
    dest_type: DestType = field(default=DEFAULT_DEST_TYPE, metadata={"help": "where binlogs go: print or mysql"})
    safe_mode: bool = field(default=False, metadata={"help": "REPLACE / DELETE+REPLACE rendering (idempotent)"})
    worker_count: int = field(
        default=DEFAULT_WORKER_COUNT, metadata={"help": "parallel downstream workers", "validate": at_least(1)}
    )
    txn_batch: int = field(
        default=DEFAULT_TXN_BATCH, metadata={"help": "rows per downstream transaction", "validate": at_least(1)}
    )
    replicate_do_db: tuple[str, ...] = field(
        default=(), metadata={"help": "replay only these schemas (with replicate-do-table)", "validate": _name_patterns}
    )
    replicate_ignore_db: tuple[str, ...] = field(
        default=(), metadata={"help": "skip these schemas", "validate": _name_patterns}
    )
    replicate_do_table: tuple[TableName, ...] = ()
    replicate_ignore_table: tuple[TableName, ...] = ()
    dest_db: DestDBConfig = field(default_factory=DestDBConfig)

    def validate(self) -> None:
        if not self.data_dir.strip():
            raise ValueError("'data-dir' is required: the directory of the drainer's pb binlog files")
        if self.start_datetime and self.start_tso:
            raise ValueError("set 'start-datetime' or 'start-tso', not both")
        if self.stop_datetime and self.stop_tso:
            raise ValueError("set 'stop-datetime' or 'stop-tso', not both")
        start, stop = self.start_ts, self.stop_ts
        if stop and stop < start:
            raise ValueError(f"the window ends before it starts: stop {stop} < start {start}")

    def dest_tls(self) -> MySQLTLS:
        """TLS to `[dest-db]`, its files read and checked (ConfigError naming the key and the file)."""
        return self.dest_db.security.load(DEST_SECURITY)

    @property
    def start_ts(self) -> int:
        """The first commit_ts replayed (0: from the beginning)."""
        return parse_datetime(self.start_datetime) if self.start_datetime else self.start_tso

    @property
    def stop_ts(self) -> int:
        """The last commit_ts replayed (0: no end)."""
        return parse_datetime(self.stop_datetime) if self.stop_datetime else self.stop_tso


# ----------------------------------------------------------------------------------------------- loading


def reparo_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment with `Reparo_*` names (the original's spelling) upper-cased for the loader."""
    stem = ENV_PREFIX.upper() + "_"
    return {(k.upper() if k.upper().startswith(stem) else k): v for k, v in env.items()}


def load_config(
    file: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> ReparoConfig:
    """Load and validate a ReparoConfig; raises ConfigError naming the bad key and where it came from."""
    return load(
        ReparoConfig,
        file=None if file is None else os.fspath(file),
        env=None if env is None else reparo_env(env),
        env_prefix=ENV_PREFIX,
        flags=flags,
    )


def build_parser() -> argparse.ArgumentParser:
    return config_parser(
        "reparo",
        "replay the drainer's pb binlog files (file sink) into MySQL, or print them",
        ReparoConfig,
        env_prefix=ENV_PREFIX,
        go_flags=REPARO_FLAGS,
    )


def parse_args(
    argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[ReparoConfig, argparse.Namespace]:
    """Parse the command line and load the config; raises ConfigError (never exits)."""
    args = build_parser().parse_args(argv)
    try:
        cfg = load_config(
            getattr(args, CONFIG_FILE_DEST, None),
            env=os.environ if env is None else env,
            flags=flags_from_args(args),
        )
    except ValueError as exc:  # a window property that validate() already checked; kept as a net
        raise ConfigError(str(exc)) from None
    return cfg, args
