"""The `[syncer]` part of drainer.toml: filters, downstream (`[syncer.to]`), checkpoint, relay log.

Key names and defaults are the original's (docs/architecture.md#configuration), plus ours:

    [syncer] safe-mode-duration   how long safe mode is forced on after every start (original: fixed 5 min)
    [syncer] max-inflight-bytes   bytes of decoded DMLs between translation and their success downstream
    [syncer] db-type = "sqlite"   our sqlite sink, writing `[syncer.to] path` (default <data-dir>/downstream.db)
    [[syncer.event-filter]]       per-table DML / DDL event filters (see `EventFilterRule`): one self-contained
                                  rule, with `~regex` name patterns and case-sensitive `ignore-sql` under
                                  case-sensitive = true, which the original's v2 rules below lack.

The original's v2 rules are read as the original: `[syncer.binlog-filter-rule.<name>]` and
`[[syncer.table-migrate-rule]]` (`common.table_rules`); their `target` routes tables for the SQL sinks
(mysql, tidb, sqlite: drainer/sinks/routing.py), where the original routed only for oracle.
    [syncer.to] protocol          db-type kafka: "secondary-binlog" (the original's messages) or "canal-json"
    [syncer.to] kafka-ack-timeout db-type kafka: fail when the broker acknowledged nothing for this long

TLS to the downstream and to the checkpoint database: `[syncer.to.security]` and `[syncer.to.checkpoint.security]`
(ssl-ca, ssl-cert, ssl-key; common/mysql_tls.py).  As the original's GenCheckPointCfg, a checkpoint without its
own `type` lives on the downstream and uses the downstream's connection, `[syncer.to.security]` included; with
a type it uses its own host and `[syncer.to.checkpoint.security]`.

Kafka (`db-type = "kafka"`, drainer/sinks/kafka.py): `kafka-addrs` defaults to the KAFKA_ADDRS environment
variable, else 127.0.0.1:9092 (see `drainer.config.load_config`); `zookeeper-addrs` is accepted with a
warning and not used (the original read the broker list from ZooKeeper); `kafka-version` must be a Kafka
version in the original's dotted form (`parse_kafka_version`).

Table-name patterns (`replicate-do-db`, `replicate-do-table`, `ignore-table`): a leading `~` makes the rest a
regular expression (searched, not anchored); anything else is an exact name. Both match case-insensitively
unless `case-sensitive = true`. Event-filter patterns are shell wildcards (`*`, `?`) or `~regex`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Final, Literal

from common.config import ByteSize, Duration, at_least, between
from common.filters import CHECKPOINT_SCHEMA, EventFilterRule, Filter, TableName, name_pattern
from common.mysql_tls import MySQLSecurity
from common.table_rules import BinlogFilterRule, Router, TableMigrateRule, check_rules, v2_event_rules

log = logging.getLogger(__name__)

DbType = Literal["mysql", "tidb", "sqlite", "file", "pb", "kafka", "oracle", "flash"]
CheckpointType = Literal["", "mysql", "tidb", "sqlite", "file", "oracle"]

UNSUPPORTED_DB_TYPES: Final = frozenset({"oracle"})
RELAY_DB_TYPES: Final = frozenset({"mysql", "tidb", "sqlite"})
ROUTED_DB_TYPES: Final = frozenset({"mysql", "tidb", "sqlite"})
"""Downstreams `[[syncer.table-migrate-rule]] target` routes tables for (the original: oracle only)."""
"""Downstreams the relay log applies to (the original: mysql, tidb, oracle)."""
DEFAULT_DB_TYPE: Final = "mysql"
DEFAULT_TXN_BATCH: Final = 20
DEFAULT_WORKER_COUNT: Final = 16
DEFAULT_SAFE_MODE_DURATION: Final = 300.0
"""Ours: the original forces safe mode for a fixed 5 minutes after start."""
DEFAULT_MAX_INFLIGHT_BYTES: Final = 16 * 1024**2
"""Ours: memory is bounded by bytes (docs/architecture.md#byte-budgets); the original counted binlogs
(cache-binlog-count = 8).  Bytes of decoded DMLs as Python objects (`common.events.dml_memory`), not of binlogs."""
DEFAULT_IGNORE_SCHEMAS: Final = "INFORMATION_SCHEMA,PERFORMANCE_SCHEMA,mysql"
DEFAULT_RELAY_MAX_FILE_SIZE: Final = 10_485_760
DEFAULT_TO_HOST: Final = "localhost"
DEFAULT_TO_USER: Final = "root"
DEFAULT_TO_PORT: Final = 3306
DEFAULT_READ_TIMEOUT: Final = 60.0
DEFAULT_CHECKPOINT_SCHEMA: Final = CHECKPOINT_SCHEMA
DEFAULT_CHECKPOINT_TABLE: Final = "checkpoint"
DEFAULT_CHECKPOINT_HOST: Final = "127.0.0.1"
DEFAULT_CHECKPOINT_USER: Final = "root"
DEFAULT_CHECKPOINT_PORT: Final = 3306
SQLITE_DOWNSTREAM_NAME: Final = "downstream.db"
DEFAULT_KAFKA_ADDRS: Final = "127.0.0.1:9092"
KAFKA_ADDRS_ENV: Final = "KAFKA_ADDRS"
DEFAULT_KAFKA_VERSION: Final = "0.8.2.0"
DEFAULT_KAFKA_MAX_MESSAGES: Final = 1024
MAX_KAFKA_MAX_MESSAGES: Final = 1_000_000
"""librdkafka's upper bound of `batch.num.messages`, which kafka-max-messages sets."""
DEFAULT_KAFKA_MAX_MESSAGE_SIZE: Final = 1_073_741_824
DEFAULT_KAFKA_CLIENT_ID: Final = "tidb_binlog"
DEFAULT_KAFKA_ACK_TIMEOUT: Final = 300.0
"""Ours: the original failed after 30 s without an ack (fixed)."""
DEFAULT_KAFKA_PROTOCOL: Final = "secondary-binlog"
KAFKA_TOPIC_SUFFIX: Final = "_obinlog"
"""The default topic is `<cluster id>_obinlog`, as the original's."""
KafkaProtocol = Literal["secondary-binlog", "canal-json"]


# ----------------------------------------------------------------------------------------------- validators


def _positive(value: float) -> None:
    if not value > 0:
        raise ValueError("must be > 0")


def _port(value: int) -> None:
    if not 0 < value <= 65535:
        raise ValueError("must be a port number 1..65535")


def _port_or_unset(value: int) -> None:
    if value != 0:
        _port(value)


def _name_patterns(values: tuple[str, ...]) -> None:
    for value in values:
        name_pattern(value)


def split_schemas(value: str) -> tuple[str, ...]:
    """The names of a comma-separated `ignore-schemas` value; ValueError on an empty element."""
    if not value.strip():
        return ()
    names = tuple(part.strip() for part in value.split(","))
    if any(not name for name in names):
        raise ValueError("empty schema name in the comma-separated list")
    return names


_KAFKA_VERSION = re.compile(r"(?:0\.\d+\.\d+\.\d+|[1-9]\d*\.\d+\.\d+)")
MIN_KAFKA_VERSION: Final = (0, 8, 2, 0)
MAX_KAFKA_MAJOR: Final = 4
KAFKA_VERSION_FORM: Final = (
    'a Kafka version as "0.X.Y.Z" before 1.0 (e.g. "0.8.2.0", "0.11.0.2") or "X.Y.Z" from 1.0 on '
    f'(e.g. "2.1.0", "3.7.0"), from 0.8.2.0 up to {MAX_KAFKA_MAJOR}.x'
)


def parse_kafka_version(value: str) -> tuple[int, ...]:
    """The numbers of a `kafka-version` value; ValueError naming the accepted form when it is not one."""
    text = value.strip()
    if not _KAFKA_VERSION.fullmatch(text):
        raise ValueError(f"expected {KAFKA_VERSION_FORM}")
    parts = tuple(int(p) for p in text.split("."))
    if parts < MIN_KAFKA_VERSION or parts[0] > MAX_KAFKA_MAJOR:
        raise ValueError(f"unknown Kafka version; expected {KAFKA_VERSION_FORM}")
    return parts


def _kafka_version(value: str) -> None:
    parse_kafka_version(value)


def split_addrs(value: str) -> tuple[str, ...]:
    """The host:port items of a comma-separated `kafka-addrs` value; ValueError for an empty or bad one."""
    items = tuple(part.strip() for part in value.split(","))
    for item in items:
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ValueError(f"expected comma-separated host:port items, got {item!r}")
    return items


def _kafka_addrs(value: str) -> None:
    split_addrs(value)


def _db_type(value: str) -> None:
    if value == "flash":
        raise ValueError("the flash DestDBType is no longer supported")


# ----------------------------------------------------------------------------------------------- sections


@dataclass(frozen=True)
class RelayConfig:
    """`[syncer.relay]`: the relay log (`drainer.relay`); empty log-dir = no relay log."""

    log_dir: str = field(default="", metadata={"help": "relay log directory (empty: relay log off)"})
    max_file_size: ByteSize = field(
        default=DEFAULT_RELAY_MAX_FILE_SIZE, metadata={"help": "relay log file size", "validate": _positive}
    )


@dataclass(frozen=True)
class CheckpointConfig:
    """`[syncer.to.checkpoint]`: where the checkpoint lives; empty type = chosen by db-type.

    For an explicit mysql/tidb type, empty host/user and port 0 mean 127.0.0.1, root and 3306.
    """

    type: CheckpointType = field(default="", metadata={"help": "checkpoint store (empty: by db-type)"})
    schema: str = field(default=DEFAULT_CHECKPOINT_SCHEMA, metadata={"help": "checkpoint schema"})
    table: str = field(default=DEFAULT_CHECKPOINT_TABLE, metadata={"help": "checkpoint table"})
    host: str = field(default="", metadata={"help": "checkpoint MySQL host (explicit type only)"})
    user: str = field(default="", metadata={"help": "checkpoint MySQL user"})
    password: str = field(default="", metadata={"help": "checkpoint MySQL password"})
    encrypted_password: str = field(
        default="",
        metadata={"key": "encrypted_password", "help": "password from binlogctl encrypt (wins)"},
    )
    port: int = field(default=0, metadata={"help": "checkpoint MySQL port", "validate": _port_or_unset})
    security: MySQLSecurity = field(default_factory=MySQLSecurity)
    """TLS to the checkpoint database (explicit type only: without one, [syncer.to.security] applies)."""

    def validate(self) -> None:
        if not self.schema:
            raise ValueError("'syncer.to.checkpoint.schema' must not be empty")
        if not self.table:
            raise ValueError("'syncer.to.checkpoint.table' must not be empty")


@dataclass(frozen=True)
class ToConfig:
    """`[syncer.to]`: the downstream.

    host/user/password/port default to the MYSQL_HOST / MYSQL_USER / MYSQL_PSWD / MYSQL_PORT environment
    variables, else localhost / root / "" / 3306 (see `drainer.config.load_config`).
    """

    host: str = field(default=DEFAULT_TO_HOST, metadata={"help": "downstream MySQL host [env MYSQL_HOST]"})
    user: str = field(default=DEFAULT_TO_USER, metadata={"help": "downstream MySQL user [env MYSQL_USER]"})
    password: str = field(default="", metadata={"help": "downstream MySQL password [env MYSQL_PSWD]"})
    encrypted_password: str = field(
        default="",
        metadata={"key": "encrypted_password", "help": "password from binlogctl encrypt (wins)"},
    )
    port: int = field(
        default=DEFAULT_TO_PORT, metadata={"help": "downstream MySQL port [env MYSQL_PORT]", "validate": _port}
    )
    sync_mode: Literal[1, 2] = field(default=1, metadata={"help": "1 = full columns, 2 = partial columns"})
    read_timeout: Duration = field(
        default=DEFAULT_READ_TIMEOUT, metadata={"help": "downstream read timeout", "validate": _positive}
    )
    params: dict[str, str] = field(
        default_factory=dict, metadata={"help": "extra downstream session variables (name=value)"}
    )
    merge: bool = field(default=False, metadata={"help": "merge rows by primary key before applying"})
    dir: str = field(default="", metadata={"help": "file sink directory (empty: data-dir)"})
    retention_time: int = field(
        default=0, metadata={"help": "file sink: days to keep files, 0 = forever", "validate": at_least(0)}
    )
    path: str = field(default="", metadata={"help": "sqlite sink database file (empty: <data-dir>/downstream.db)"})
    kafka_addrs: str = field(
        default=DEFAULT_KAFKA_ADDRS,
        metadata={"help": "kafka: comma-separated brokers host:port [env KAFKA_ADDRS]", "validate": _kafka_addrs},
    )
    zookeeper_addrs: str = field(default="", metadata={"help": "kafka: not used (a warning); set kafka-addrs"})
    kafka_version: str = field(
        default=DEFAULT_KAFKA_VERSION,
        metadata={"help": "kafka: broker version, dotted (fallback for brokers < 0.10)", "validate": _kafka_version},
    )
    kafka_max_messages: int = field(
        default=DEFAULT_KAFKA_MAX_MESSAGES,
        metadata={"help": "kafka: messages per produce batch", "validate": between(1, MAX_KAFKA_MAX_MESSAGES)},
    )
    kafka_max_message_size: ByteSize = field(
        default=DEFAULT_KAFKA_MAX_MESSAGE_SIZE,
        metadata={"help": "kafka: largest message; a bigger transaction stops the drainer", "validate": _positive},
    )
    kafka_client_id: str = field(default=DEFAULT_KAFKA_CLIENT_ID, metadata={"help": "kafka: client.id"})
    topic_name: str = field(default="", metadata={"help": "kafka: topic (empty: <cluster id>_obinlog)"})
    protocol: KafkaProtocol = field(
        default=DEFAULT_KAFKA_PROTOCOL,
        metadata={"help": "kafka: message format, secondary-binlog (the original's) or canal-json (ours)"},
    )
    kafka_ack_timeout: Duration = field(
        default=DEFAULT_KAFKA_ACK_TIMEOUT,
        metadata={"help": "kafka: fail when nothing is acknowledged for this long (ours)", "validate": _positive},
    )
    security: MySQLSecurity = field(default_factory=MySQLSecurity)
    """TLS to the downstream (db-type mysql / tidb; common/mysql_tls.py)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


KAFKA_KEYS: Final = (
    "kafka_addrs",
    "zookeeper_addrs",
    "kafka_version",
    "kafka_max_messages",
    "kafka_max_message_size",
    "kafka_client_id",
    "topic_name",
    "protocol",
    "kafka_ack_timeout",
)
"""The `[syncer.to]` keys only db-type kafka reads."""


@dataclass(frozen=True)
class SyncerConfig:
    sql_mode: str | None = field(default=None, metadata={"help": "downstream sql_mode (default: unset)"})
    txn_batch: int = field(
        default=DEFAULT_TXN_BATCH,
        metadata={"help": "rows per downstream transaction", "validate": at_least(1), "aliases": ("--txn-batch",)},
    )
    worker_count: int = field(
        default=DEFAULT_WORKER_COUNT,
        metadata={"help": "parallel downstream workers", "validate": at_least(1), "aliases": ("-c",)},
    )
    sync_ddl: bool = field(default=True, metadata={"help": "execute DDLs downstream"})
    loopback_control: bool = field(default=False, metadata={"help": "not supported yet"})
    channel_id: int = field(default=0, metadata={"help": "loopback channel id (not supported yet)"})
    safe_mode: bool = field(
        default=False, metadata={"help": "REPLACE / DELETE+REPLACE rendering", "aliases": ("--safe-mode",)}
    )
    safe_mode_duration: Duration = field(
        default=DEFAULT_SAFE_MODE_DURATION,
        metadata={"help": "safe mode is forced on this long after every start (ours)", "validate": at_least(0)},
    )
    max_inflight_bytes: ByteSize = field(
        default=DEFAULT_MAX_INFLIGHT_BYTES,
        metadata={"help": "bytes of decoded DMLs in flight to the downstream (ours)", "validate": _positive},
    )
    db_type: DbType = field(
        default=DEFAULT_DB_TYPE,
        metadata={"help": "downstream type", "validate": _db_type, "aliases": ("--dest-db-type",)},
    )
    ignore_txn_commit_ts: tuple[int, ...] = field(default=(), metadata={"help": "commit_ts values to skip"})
    ignore_schemas: str = field(
        default=DEFAULT_IGNORE_SCHEMAS,
        metadata={"help": "comma-separated schemas to skip", "validate": split_schemas},
    )
    ignore_table: tuple[TableName, ...] = ()
    replicate_do_db: tuple[str, ...] = field(
        default=(),
        metadata={"help": "replicate only these schemas (with replicate-do-table)", "validate": _name_patterns},
    )
    replicate_do_table: tuple[TableName, ...] = ()
    event_filter: tuple[EventFilterRule, ...] = ()
    enable_dispatch: bool = field(default=True, metadata={"help": "split transactions over workers"})
    disable_dispatch: bool | None = field(default=None, metadata={"help": "deprecated: use enable-dispatch"})
    enable_detect: bool = field(default=True, metadata={"help": "causality detection between workers"})
    disable_detect: bool | None = field(default=None, metadata={"help": "deprecated: use enable-detect"})
    load_schema_snapshot: bool = field(default=False, metadata={"help": "not supported: ignored"})
    case_sensitive: bool = field(default=False, metadata={"help": "match filter patterns case-sensitively"})
    table_migrate_rule: tuple[TableMigrateRule, ...] = ()
    binlog_filter_rule: dict[str, BinlogFilterRule] = field(default_factory=dict)
    relay: RelayConfig = field(default_factory=RelayConfig)
    to: ToConfig = field(default_factory=ToConfig)

    @property
    def dispatch(self) -> bool:
        """enable-dispatch, unless the deprecated disable-dispatch is set (it wins, as in the original)."""
        return not self.disable_dispatch if self.disable_dispatch is not None else self.enable_dispatch

    @property
    def detect(self) -> bool:
        """enable-detect, unless the deprecated disable-detect is set (it wins, as in the original)."""
        return not self.disable_detect if self.disable_detect is not None else self.enable_detect

    @property
    def ignore_schema_names(self) -> tuple[str, ...]:
        return split_schemas(self.ignore_schemas)

    def validate(self) -> None:
        try:
            check_rules(self.binlog_filter_rule, self.table_migrate_rule, key="syncer.table-migrate-rule")
        except ValueError as exc:
            raise ValueError(str(exc)) from None


def syncer_filter(s: SyncerConfig) -> Filter:
    """The drainer's filters, built once from its `[syncer]` section."""
    for i, rule in enumerate(s.table_migrate_rule):
        if not rule.binlog_filter_rule and rule.target is None:
            log.warning("syncer.table-migrate-rule[%d] has no binlog-filter-rule and no target: it does nothing", i)
    return Filter(
        ignore_schemas=s.ignore_schema_names,
        ignore_tables=s.ignore_table,
        do_dbs=s.replicate_do_db,
        do_tables=s.replicate_do_table,
        ignore_txn_commit_ts=s.ignore_txn_commit_ts,
        event_rules=s.event_filter,
        v2_rules=v2_event_rules(s.binlog_filter_rule, s.table_migrate_rule),
        case_sensitive=s.case_sensitive,
        internal_schemas={CHECKPOINT_SCHEMA, s.to.checkpoint.schema},
    )


def syncer_router(s: SyncerConfig) -> Router:
    """The table router of the `[[syncer.table-migrate-rule]]`s with a target (empty: routes nothing)."""
    return Router(s.table_migrate_rule, case_sensitive=s.case_sensitive)
