"""arbiter configuration: defaults < arbiter.toml < BINLOG_SERVER_* environment < flags.

Keys are the original `arbiter.toml` ones (deploy/arbiter.toml shows each with its default):

    addr                          HTTP /status and /metrics (the original only named its metrics instance by it)
    log-level, log-file           (+ ours: log-format, log-file-max-size, log-file-max-backups, common/logsetup.py)
    open-sarama-log               true: librdkafka's own log lines go to the log (logger `arbiter.kafka`)
    [up]   kafka-addrs, kafka-version, topic (required), initial-commit-ts,
           message-buffer-size, sarama-buffer-size   (accepted, ignored: the queue is bounded by bytes)
    [down] host, port, user, password, worker-count, batch-size, safe-mode
    [metrics] addr, interval      (accepted; addr set is warned about: no Prometheus push, scrape /metrics)

Ours:

    [up]   kafka-max-message-size     largest message the consumer accepts (default 1 GiB, as the drainer's
                                      kafka-max-message-size); sets librdkafka's fetch.max.bytes and
                                      receive.message.max.bytes
           queue-bytes                messages read from Kafka and not yet handed to the loader (64 MiB)
           connect-timeout            how long the start waits for the broker before it fails (30 s)
    [down] encrypted_password         `binlogctl encrypt` output; wins over password
           checkpoint-schema          schema of the arbiter_checkpoint table (tidb_binlog)
           max-inflight-bytes         the loader's byte budget of decoded rows (16 MiB, as the drainer's)
    [down.security] ssl-ca, ssl-cert, ssl-key   TLS to the downstream and its checkpoint (common/mysql_tls.py;
                                      the original's arbiter had no TLS)

`kafka-version` is checked (dotted numbers such as "0.8.2.0", "2.1.0") and otherwise unused: librdkafka
asks the broker which protocol versions it speaks.  The original's Go flags work too
(common/config/goflags.py): its `-safe-mode` flag is `--down.safe-mode`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from common.config import ByteSize, Duration, at_least, load
from common.config.cli import config_parser, parse_config_args
from common.config.goflags import ARBITER_FLAGS
from common.config.node import validate_host_port
from common.encrypt import EncryptError, decrypt
from common.errors import ConfigError
from common.logsetup import DEFAULT_LOG_FORMAT, DEFAULT_MAX_BACKUPS, DEFAULT_MAX_SIZE_MIB, LogFormat
from common.mysql_tls import MySQLSecurity, MySQLTLS

__all__ = [
    "ArbiterConfig",
    "DownConfig",
    "MetricsConfig",
    "UpConfig",
    "build_parser",
    "load_config",
    "parse_args",
]

ENV_PREFIX: Final = "BINLOG_SERVER"
"""The original's environment prefix."""
DEFAULT_ADDR: Final = "127.0.0.1:8251"
DEFAULT_KAFKA_ADDRS: Final = "127.0.0.1:9092"
DEFAULT_KAFKA_VERSION: Final = "0.8.2.0"
DEFAULT_INITIAL_COMMIT_TS: Final = 0
DEFAULT_MAX_MESSAGE_SIZE: Final = 1 << 30
"""Ours, as the drainer's kafka-max-message-size (1 GiB)."""
MAX_MESSAGE_SIZE_LIMIT: Final = (1 << 31) - (1 << 21)
"""librdkafka's receive.message.max.bytes tops out at 2 GiB - 1; keep room for its framing."""
MIN_MESSAGE_SIZE: Final = 1024
"""librdkafka's message.max.bytes cannot go below 1000, and fetch.max.bytes may not be below it."""
DEFAULT_QUEUE_BYTES: Final = 64 << 20
"""Ours: bytes of Kafka messages read and not yet handed to the loader (the original: a channel of
`message-buffer-size` messages)."""
DEFAULT_CONNECT_TIMEOUT: Final = 30.0
"""Ours: seconds the start waits for the broker to answer before it fails."""
DEFAULT_DOWN_HOST: Final = "localhost"
DEFAULT_DOWN_PORT: Final = 3306
DEFAULT_DOWN_USER: Final = "root"
DEFAULT_WORKER_COUNT: Final = 16
DEFAULT_BATCH_SIZE: Final = 64
DEFAULT_CHECKPOINT_SCHEMA: Final = "tidb_binlog"
DOWN_SECURITY: Final = "[down.security]"
DEFAULT_MAX_INFLIGHT_BYTES: Final = 16 << 20
"""The loader's budget of decoded rows, as the drainer's `[syncer] max-inflight-bytes`."""
DEFAULT_METRICS_INTERVAL: Final = 15
DEFAULT_LOG_LEVEL: Final = "info"

LogLevel = Literal["debug", "info", "warn", "warning", "error", "fatal"]

_KAFKA_VERSION = re.compile(r"\d+(\.\d+){1,3}")
_NO_PUSH: Final = "Prometheus push is not supported: scrape /metrics on addr"
_BYTES_QUEUE: Final = "the queue between Kafka and the loader is bounded by bytes: [up] queue-bytes"


def _kafka_version(value: str) -> None:
    if not _KAFKA_VERSION.fullmatch(value.strip()):
        raise ValueError("expected a Kafka version of dotted numbers such as '0.8.2.0', '2.1.0' or '3.7.0'")


def _kafka_addrs(value: str) -> None:
    addrs = [a.strip() for a in value.split(",")]
    if not any(addrs):
        raise ValueError("must name at least one broker host:port")
    for addr in addrs:
        try:
            validate_host_port(addr)
        except ValueError:
            raise ValueError(f"{addr!r} is not host:port (give a comma-separated list of brokers)") from None


def _port(value: int) -> None:
    if not 0 < value <= 65535:
        raise ValueError("must be a port number 1..65535")


def _positive(value: float) -> None:
    if not value > 0:
        raise ValueError("must be > 0")


def _max_message_size(value: int) -> None:
    if not MIN_MESSAGE_SIZE <= value <= MAX_MESSAGE_SIZE_LIMIT:
        raise ValueError(f"must be between {MIN_MESSAGE_SIZE} and {MAX_MESSAGE_SIZE_LIMIT} bytes (librdkafka's limits)")


def _schema_name(value: str) -> None:
    if not value.strip() or "`" in value:
        raise ValueError("must be a schema name (not empty, no backquote)")


@dataclass(frozen=True)
class UpConfig:
    """`[up]`: the Kafka topic the drainer's kafka sink writes."""

    kafka_addrs: str = field(
        default=DEFAULT_KAFKA_ADDRS,
        metadata={"help": "Kafka brokers, comma-separated host:port", "validate": _kafka_addrs},
    )
    kafka_version: str = field(
        default=DEFAULT_KAFKA_VERSION,
        metadata={"help": "checked, not used: librdkafka negotiates the protocol", "validate": _kafka_version},
    )
    topic: str = field(default="", metadata={"help": "the topic to read (required; partition 0 is read)"})
    initial_commit_ts: int = field(
        default=DEFAULT_INITIAL_COMMIT_TS,
        metadata={"help": "without a checkpoint, apply the transactions after this commit_ts", "validate": at_least(0)},
    )
    message_buffer_size: int | None = field(default=None, metadata={"help": "ignored: " + _BYTES_QUEUE})
    sarama_buffer_size: int | None = field(default=None, metadata={"help": "ignored: " + _BYTES_QUEUE})
    kafka_max_message_size: ByteSize = field(
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metadata={"help": "largest message accepted (ours)", "validate": _max_message_size},
    )
    queue_bytes: ByteSize = field(
        default=DEFAULT_QUEUE_BYTES,
        metadata={"help": "bytes of messages read and not yet handed to the loader (ours)", "validate": at_least(1)},
    )
    connect_timeout: Duration = field(
        default=DEFAULT_CONNECT_TIMEOUT,
        metadata={"help": "how long the start waits for the broker (ours)", "validate": _positive},
    )

    def validate(self) -> None:
        if not self.topic.strip():
            raise ValueError("'up.topic' is required: the Kafka topic the drainer's kafka sink writes")

    @property
    def brokers(self) -> str:
        """`kafka-addrs` as librdkafka's bootstrap.servers."""
        return ",".join(a.strip() for a in self.kafka_addrs.split(",") if a.strip())


@dataclass(frozen=True)
class DownConfig:
    """`[down]`: the MySQL-compatible server the transactions are applied to."""

    host: str = field(default=DEFAULT_DOWN_HOST, metadata={"help": "downstream MySQL host"})
    port: int = field(default=DEFAULT_DOWN_PORT, metadata={"help": "downstream MySQL port", "validate": _port})
    user: str = field(default=DEFAULT_DOWN_USER, metadata={"help": "downstream MySQL user"})
    password: str = field(default="", metadata={"help": "downstream MySQL password"})
    encrypted_password: str = field(
        default="", metadata={"key": "encrypted_password", "help": "binlogctl encrypt output; wins over password"}
    )
    worker_count: int = field(
        default=DEFAULT_WORKER_COUNT, metadata={"help": "parallel downstream workers", "validate": at_least(1)}
    )
    batch_size: int = field(
        default=DEFAULT_BATCH_SIZE, metadata={"help": "rows per downstream transaction", "validate": at_least(1)}
    )
    safe_mode: bool = field(default=False, metadata={"help": "REPLACE / DELETE+REPLACE rendering (idempotent)"})
    checkpoint_schema: str = field(
        default=DEFAULT_CHECKPOINT_SCHEMA,
        metadata={"help": "schema of the arbiter_checkpoint table (ours)", "validate": _schema_name},
    )
    max_inflight_bytes: ByteSize = field(
        default=DEFAULT_MAX_INFLIGHT_BYTES,
        metadata={"help": "the loader's budget of decoded rows not yet applied (ours)", "validate": at_least(1)},
    )
    security: MySQLSecurity = field(default_factory=MySQLSecurity)
    """TLS to the downstream, the checkpoint included (ours)."""

    @property
    def where(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"


@dataclass(frozen=True)
class MetricsConfig:
    """`[metrics]`: the original's Prometheus push settings (accepted; /metrics is scraped instead)."""

    addr: str = field(default="", metadata={"help": "ignored: " + _NO_PUSH})
    interval: int = field(default=DEFAULT_METRICS_INTERVAL, metadata={"help": "ignored: " + _NO_PUSH})


@dataclass(frozen=True)
class ArbiterConfig:
    addr: str = field(
        default=DEFAULT_ADDR, metadata={"help": "HTTP /status and /metrics host:port", "validate": validate_host_port}
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
    open_sarama_log: bool = field(default=True, metadata={"help": "log librdkafka's own messages"})
    up: UpConfig = field(default_factory=UpConfig)
    down: DownConfig = field(default_factory=DownConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def validate(self) -> None:
        self.down_password  # noqa: B018 - an encrypted password that does not decrypt fails at load

    @property
    def down_password(self) -> str:
        """`[down] encrypted_password` decrypted when set, else `password`."""
        d = self.down
        if not d.encrypted_password:
            return d.password
        try:
            return decrypt(d.encrypted_password)
        except EncryptError as exc:
            raise ConfigError(f"'down.encrypted_password': {exc}") from None

    def down_tls(self) -> MySQLTLS:
        """TLS to `[down]`, its files read and checked (ConfigError naming the key and the file)."""
        return self.down.security.load(DOWN_SECURITY)

    def check_supported(self) -> None:
        """`[down.security]`'s files are read and checked here (the daemon runner calls it: exit status 2)."""
        self.down_tls()

    def ignored_keys(self) -> list[str]:
        """One warning line per accepted key that has no effect here."""
        found: list[tuple[str, str]] = []
        if self.metrics.addr:
            found.append(("metrics.addr", _NO_PUSH))
        if self.up.message_buffer_size is not None:
            found.append(("up.message-buffer-size", _BYTES_QUEUE))
        if self.up.sarama_buffer_size is not None:
            found.append(("up.sarama-buffer-size", _BYTES_QUEUE))
        return [f"config key '{key}' is ignored ({why})" for key, why in found]


# ----------------------------------------------------------------------------------------------- loading


def load_config(
    file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> ArbiterConfig:
    """Load and validate an ArbiterConfig (env prefix BINLOG_SERVER); raises ConfigError naming the bad key."""
    return load(ArbiterConfig, file=file, env=env, env_prefix=ENV_PREFIX, flags=flags)


def build_parser() -> argparse.ArgumentParser:
    return config_parser(
        "arbiter",
        "arbiter: applies the drainer's Kafka topic to MySQL",
        ArbiterConfig,
        env_prefix=ENV_PREFIX,
        go_flags=ARBITER_FLAGS,
    )


def parse_args(
    argv: list[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[ArbiterConfig, argparse.Namespace]:
    """Parse the command line and load the config; raises ConfigError (never exits)."""
    return parse_config_args(build_parser(), load_config, argv, env)
