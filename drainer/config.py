"""drainer configuration: defaults < drainer.toml < DRAINER_* environment < flags (docs/architecture.md#configuration).

Keys are the original `drainer.toml` ones (`[syncer]` lives in `config_syncer`), plus a few of ours:

    status-addr              HTTP status / metrics address (grpcio cannot share a port with HTTP/1.1,
                             docs/architecture.md#ports)
    heartbeat-interval       status updates in etcd (original: fixed 1 s)
    [syncer] safe-mode-duration, max-inflight-bytes, [[syncer.event-filter]], db-type = "sqlite",
    [syncer.to] path
    log-format, log-file-max-size, log-file-max-backups   text / json lines, size rotation (common/logsetup.py)

`[syncer.to]` host / user / password / port that no file, DRAINER_* variable or flag sets come from
MYSQL_HOST / MYSQL_USER / MYSQL_PSWD / MYSQL_PORT, as in the original; always load a `DrainerConfig`
through `load_config` / `parse_args` to get that.

`[security]` (TLS for gRPC, etcd and HTTP; common/tls.py) is checked by `check_supported()`, and so are
`[syncer.to.security]` / `[syncer.to.checkpoint.security]` (TLS to MySQL; common/mysql_tls.py) when they are
used: `to_tls()` / `checkpoint_tls()`.
Accepted but not honoured: `loopback-control`, db-type oracle
and checkpoint type oracle make `check_supported()` raise; `metrics-addr`, `metrics-interval`,
`cache-binlog-count`, `load-schema-snapshot`, the deprecated `log-rotate`, `disable-dispatch` / `disable-detect`,
`[syncer.to] zookeeper-addrs`, and the kafka keys set for another db-type are listed by `ignored_keys()`
(the disable-* keys still take effect).

The original's Go flags work too (`-config`, `-c`, `-dest-db-type`, `-relay-log-dir`, `-safe-mode=false`, ...;
common/config/goflags.py maps each to its key here).

`[syncer.to] kafka-addrs` left unset comes from the KAFKA_ADDRS environment variable, else 127.0.0.1:9092,
as in the original (below the file, like the MYSQL_* variables).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from common.config import Duration, at_least, load_with_sources
from common.config.cli import config_parser, parse_config_args
from common.config.goflags import DRAINER_FLAGS
from common.config.node import NodeAddress, SecurityConfig
from common.config.node import validate_etcd_urls as _etcd_urls
from common.config.node import validate_host_port as _host_port
from common.encrypt import EncryptError, decrypt
from common.errors import ConfigError
from common.filters import EventFilterRule, TableName
from common.logsetup import DEFAULT_LOG_FORMAT, DEFAULT_MAX_BACKUPS, DEFAULT_MAX_SIZE_MIB, LogFormat
from common.mysql_tls import MySQLSecurity, MySQLTLS
from drainer.config_syncer import (
    KAFKA_ADDRS_ENV,
    KAFKA_KEYS,
    RELAY_DB_TYPES,
    SQLITE_DOWNSTREAM_NAME,
    UNSUPPORTED_DB_TYPES,
    CheckpointConfig,
    RelayConfig,
    SyncerConfig,
    ToConfig,
    split_addrs,
)

__all__ = [
    "CheckpointConfig",
    "DrainerConfig",
    "EventFilterRule",
    "RelayConfig",
    "SecurityConfig",
    "SyncerConfig",
    "TableName",
    "ToConfig",
    "build_parser",
    "load_config",
    "parse_args",
]

ENV_PREFIX: Final = "DRAINER"

DEFAULT_ADDR: Final = "127.0.0.1:8249"
"""Original: first non-loopback IPv4 + :8249; its sample uses 127.0.0.1:8249."""
DEFAULT_STATUS_ADDR: Final = "127.0.0.1:18249"
"""Ours: HTTP status and metrics (the original served them on `addr` through cmux)."""
DEFAULT_PD_URLS: Final = "http://127.0.0.1:2379"
DEFAULT_DATA_DIR: Final = Path("data.drainer")
DEFAULT_DETECT_INTERVAL: Final = 5.0
"""Original code default (its sample and README say 10)."""
DEFAULT_INITIAL_COMMIT_TS: Final = -1
"""-1: start at the current PD TSO when there is no checkpoint."""
DEFAULT_SYNCED_CHECK_TIME: Final = 5
"""Minutes without anything to sync after which /status says Synced."""
DEFAULT_HEARTBEAT_INTERVAL: Final = 1.0
"""Ours as a key; the original's fixed 1 s."""
DEFAULT_PUMP_STALL_REPORT_AFTER: Final = 30.0
"""Ours: seconds without a binlog from the pump the merge waits for before it is reported as stalled."""
DEFAULT_PULL_IDLE_TIMEOUT: Final = 30.0
"""Ours: seconds a pull stream may deliver nothing before it is dialled again (drainer.puller)."""
DEFAULT_LOG_LEVEL: Final = "info"
MYSQL_DB_TYPES: Final = frozenset({"mysql", "tidb"})
TO_SECURITY: Final = "[syncer.to.security]"
CHECKPOINT_SECURITY: Final = "[syncer.to.checkpoint.security]"

# (field name, variable) of [syncer.to] keys whose unset value comes from a MYSQL_* variable.  Not `env`
# aliases of the fields: these rank below the file, not beside DRAINER_*, and report their own port error.
_MYSQL_ENV: Final = (
    ("host", "MYSQL_HOST"),
    ("user", "MYSQL_USER"),
    ("password", "MYSQL_PSWD"),
    ("port", "MYSQL_PORT"),
    ("kafka_addrs", KAFKA_ADDRS_ENV),
)

LogLevel = Literal["debug", "info", "warn", "warning", "error", "fatal"]


def _positive(value: float) -> None:
    if not value > 0:
        raise ValueError("must be > 0")


_NO_PUSH: Final = "Prometheus push is not supported: scrape /metrics on status-addr"


@dataclass(frozen=True)
class DrainerConfig(NodeAddress):
    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port", "validate": _host_port})
    advertise_addr: str = field(default="", metadata={"help": "address registered in etcd (default: addr)"})
    status_addr: str = field(
        default=DEFAULT_STATUS_ADDR,
        metadata={"help": "HTTP status and metrics address host:port", "validate": _host_port},
    )
    node_id: str = field(default="", metadata={"help": "node id (default: hostname:port)"})
    data_dir: Path = field(default=DEFAULT_DATA_DIR, metadata={"help": "drainer data directory"})
    detect_interval: Duration = field(
        default=DEFAULT_DETECT_INTERVAL, metadata={"help": "interval of pump discovery", "validate": _positive}
    )
    pd_urls: str = field(
        default=DEFAULT_PD_URLS,
        metadata={"help": "etcd endpoints of PD, comma separated", "validate": _etcd_urls},
    )
    initial_commit_ts: int = field(
        default=DEFAULT_INITIAL_COMMIT_TS,
        metadata={"help": "start here without a checkpoint (-1: current TSO)", "validate": at_least(-1)},
    )
    synced_check_time: int = field(
        default=DEFAULT_SYNCED_CHECK_TIME,
        metadata={"help": "minutes idle before /status says synced", "validate": at_least(0)},
    )
    compressor: Literal["", "gzip"] = field(default="", metadata={"help": "compression of PullBinlogs streams"})
    heartbeat_interval: Duration = field(
        default=DEFAULT_HEARTBEAT_INTERVAL,
        metadata={"help": "interval of status updates in etcd (ours)", "validate": _positive},
    )
    pump_stall_report_after: Duration = field(
        default=DEFAULT_PUMP_STALL_REPORT_AFTER,
        metadata={
            "help": "report the pump the merge waits for as stalled (/status, metrics, log) after this long "
            "without a binlog from it (ours)",
            "validate": _positive,
        },
    )
    pull_idle_timeout: Duration = field(
        default=DEFAULT_PULL_IDLE_TIMEOUT,
        metadata={
            "help": "cancel and dial again a pump's pull stream that delivers nothing for this long (a live "
            "pump sends a fake binlog every few seconds) (ours)",
            "validate": _positive,
        },
    )
    log_level: LogLevel = field(default=DEFAULT_LOG_LEVEL, metadata={"help": "log level", "aliases": ("-L",)})
    log_file: str = field(default="", metadata={"help": "log file (default: stderr)"})
    log_format: LogFormat = field(default=DEFAULT_LOG_FORMAT, metadata={"help": "text, or json: one object per line"})
    log_file_max_size: int = field(
        default=DEFAULT_MAX_SIZE_MIB,
        metadata={"help": "rotate log-file at this many MiB (0 = never)", "validate": at_least(0)},
    )
    log_file_max_backups: int = field(
        default=DEFAULT_MAX_BACKUPS, metadata={"help": "rotated log files kept", "validate": at_least(1)}
    )
    metrics_addr: str | None = field(default=None, metadata={"help": "ignored: no Prometheus push"})
    metrics_interval: int | None = field(default=None, metadata={"help": "ignored: no Prometheus push"})
    cache_binlog_count: int | None = field(default=None, metadata={"help": "ignored: use [syncer] max-inflight-bytes"})
    log_rotate: str | None = field(default=None, metadata={"help": "deprecated, ignored"})
    security: SecurityConfig = field(default_factory=SecurityConfig)
    syncer: SyncerConfig = field(default_factory=SyncerConfig)

    def validate(self) -> None:
        self.check_advertise()
        self.to_password  # noqa: B018 - an encrypted password that does not decrypt fails at load
        self.checkpoint_password  # noqa: B018

    @property
    def to_password(self) -> str:
        """The downstream password: `[syncer.to] encrypted_password` decrypted when set, else `password`."""
        return _password(self.syncer.to.password, self.syncer.to.encrypted_password, "syncer.to.encrypted_password")

    @property
    def checkpoint_password(self) -> str:
        """`[syncer.to.checkpoint]`'s password, from its own encrypted_password when set (the original read the
        downstream's encrypted_password field here)."""
        cp = self.syncer.to.checkpoint
        return _password(cp.password, cp.encrypted_password, "syncer.to.checkpoint.encrypted_password")

    def to_tls(self) -> MySQLTLS:
        """TLS to the downstream (`[syncer.to.security]`), its files read and checked (ConfigError naming
        the key and the file)."""
        return self.syncer.to.security.load(TO_SECURITY)

    def checkpoint_tls(self) -> MySQLTLS:
        """TLS to a MySQL checkpoint: `[syncer.to.checkpoint.security]` when the checkpoint has its own type
        (and host), else the downstream's, as the original's GenCheckPointCfg."""
        cp = self.syncer.to.checkpoint
        return cp.security.load(CHECKPOINT_SECURITY) if cp.type else self.to_tls()

    @property
    def file_dir(self) -> Path:
        """The file sink directory: `[syncer.to] dir`, else data-dir."""
        return Path(self.syncer.to.dir) if self.syncer.to.dir else self.data_dir

    @property
    def sqlite_path(self) -> Path:
        """The sqlite sink database: `[syncer.to] path`, else <data-dir>/downstream.db."""
        return Path(self.syncer.to.path) if self.syncer.to.path else self.data_dir / SQLITE_DOWNSTREAM_NAME

    @property
    def relay_dir(self) -> Path:
        """`[syncer.relay] log-dir`, relative to the working directory as given."""
        return Path(self.syncer.relay.log_dir)

    @property
    def relay_enabled(self) -> bool:
        return bool(self.syncer.relay.log_dir)

    def ignored_keys(self) -> list[str]:
        """One warning line per deprecated or unsupported key that is set."""
        s = self.syncer
        found: list[tuple[str, str]] = []
        if self.metrics_addr is not None:
            found.append(("metrics-addr", _NO_PUSH))
        if self.metrics_interval is not None:
            found.append(("metrics-interval", _NO_PUSH))
        if self.cache_binlog_count is not None:
            found.append(("cache-binlog-count", "memory is bounded by [syncer] max-inflight-bytes"))
        if self.log_rotate is not None:
            found.append(("log-rotate", "deprecated"))
        if s.disable_dispatch is not None:
            found.append(("syncer.disable-dispatch", "deprecated, use enable-dispatch; it still takes effect"))
        if s.disable_detect is not None:
            found.append(("syncer.disable-detect", "deprecated, use enable-detect; it still takes effect"))
        if s.load_schema_snapshot:
            found.append(("syncer.load-schema-snapshot", "the schema is always built from the DDL history"))
        if s.db_type not in MYSQL_DB_TYPES and s.to.security != MySQLSecurity():
            found.append(("syncer.to.security", "only db-type mysql and tidb read it"))
        if s.to.checkpoint.type not in MYSQL_DB_TYPES and s.to.checkpoint.security != MySQLSecurity():
            why = (
                "read only with [syncer.to.checkpoint] type mysql or tidb; without a type a MySQL checkpoint "
                "uses the downstream's connection and [syncer.to.security]"
            )
            found.append(("syncer.to.checkpoint.security", why))
        if s.db_type == "kafka":
            if s.to.zookeeper_addrs:
                why = f"ZooKeeper is not read; the brokers are kafka-addrs = {s.to.kafka_addrs}"
                found.append(("syncer.to.zookeeper-addrs", why))
        else:
            defaults = ToConfig()
            found.extend(
                (f"syncer.to.{name.replace('_', '-')}", "only db-type kafka reads it")
                for name in KAFKA_KEYS
                if getattr(s.to, name) != getattr(defaults, name)
            )
        if s.db_type not in ("file", "pb"):
            found.extend(
                (f"syncer.to.{key}", "only db-type file reads it")
                for key, value, default in (("dir", s.to.dir, ""), ("retention-time", s.to.retention_time, 0))
                if value != default
            )
        if s.db_type not in ("mysql", "tidb"):
            if s.to.sync_mode != 1:
                found.append(("syncer.to.sync-mode", "only db-type mysql and tidb read it"))
            if s.to.merge:
                found.append(("syncer.to.merge", "only db-type mysql and tidb read it"))
        return [f"config key '{key}' is ignored ({why})" for key, why in found]

    def check_supported(self) -> None:
        """Raise ConfigError for settings this version cannot honour (oracle, loopback), and for
        `[security]` files that cannot be used (read and checked here, so a bad one exits with status 2):
        the first of `refusals()`."""
        refused = self.refusals()
        if refused:
            raise ConfigError(refused[0])

    def refusals(self) -> list[str]:
        """Every reason start-up refuses this config (exit status 2), in the order they are checked."""
        s = self.syncer
        found: list[str] = []
        checks: list[Callable[[], object]] = [lambda: self.security.load_tls(etcd_urls=self.pd_urls)]
        if s.db_type in MYSQL_DB_TYPES:
            checks.append(self.to_tls)
        if s.to.checkpoint.type in MYSQL_DB_TYPES:
            checks.append(self.checkpoint_tls)
        for check in checks:
            try:
                check()
            except ConfigError as exc:
                found.append(str(exc))
        if s.db_type in UNSUPPORTED_DB_TYPES:
            found.append(
                f"'syncer.db-type' = {s.db_type!r} is not supported by this version; use mysql, tidb, sqlite, file "
                "or kafka"
            )
        if s.to.checkpoint.type == "oracle":
            found.append("'syncer.to.checkpoint.type' = 'oracle' is not supported; use mysql, tidb, sqlite or file")
        if s.loopback_control:
            found.append("'syncer.loopback-control' is not supported yet; set it to false")
        if s.relay.log_dir and s.db_type not in RELAY_DB_TYPES:
            found.append(
                f"'syncer.relay.log-dir' is set, but the relay log applies only to db-type mysql, tidb or sqlite, "
                f"not {s.db_type!r}; remove it or change db-type"
            )
        return found


# ----------------------------------------------------------------------------------------------- loading


def load_config(
    file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> DrainerConfig:
    """Load and validate a DrainerConfig (env prefix DRAINER); raises ConfigError naming the bad key."""
    loaded = load_with_sources(DrainerConfig, file=file, env=env, env_prefix=ENV_PREFIX, flags=flags)
    cfg = loaded.config
    if not env:
        return cfg
    changes: dict[str, object] = {}
    for name, variable in _MYSQL_ENV:
        if loaded.was_set(f"syncer.to.{name.replace('_', '-')}") or variable not in env:
            continue
        raw = env[variable]
        if name == "kafka_addrs":
            try:
                split_addrs(raw)
            except ValueError as exc:
                raise ConfigError(
                    f"environment variable {variable}: invalid value for 'syncer.to.kafka-addrs': {exc}"
                ) from None
            changes[name] = raw.strip()
            continue
        if name != "port":
            changes[name] = raw
            continue
        try:
            port = int(raw.strip())
        except ValueError:
            port = 0
        if not 0 < port <= 65535:
            raise ConfigError(
                f"environment variable {variable}: invalid value for 'syncer.to.port': must be a port number "
                f"1..65535 (got {raw!r})"
            )
        changes[name] = port
    if not changes:
        return cfg
    to = dataclasses.replace(cfg.syncer.to, **changes)  # type: ignore[arg-type]
    return dataclasses.replace(cfg, syncer=dataclasses.replace(cfg.syncer, to=to))


def build_parser() -> argparse.ArgumentParser:
    return config_parser(
        "drainer",
        "TiDB-Binlog drainer: merges the pumps' binlogs and replicates them downstream",
        DrainerConfig,
        env_prefix=ENV_PREFIX,
        go_flags=DRAINER_FLAGS,
    )


def parse_args(
    argv: list[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[DrainerConfig, argparse.Namespace]:
    """Parse the command line and load the config; raises ConfigError (never exits)."""
    return parse_config_args(build_parser(), load_config, argv, env)


def _password(plain: str, encrypted: str, key: str) -> str:
    if not encrypted:
        return plain
    try:
        return decrypt(encrypted)
    except EncryptError as exc:
        raise ConfigError(f"'{key}': {exc}") from None
