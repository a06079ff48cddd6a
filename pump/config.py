"""pump configuration: defaults < pump.toml < PUMP_* environment < flags (docs/architecture.md#configuration).

Keys are the original `pump.toml` ones, plus a few of ours:

    status-addr              HTTP status / metrics address. grpcio cannot share a port with HTTP/1.1,
                             so the original's single cmux port becomes two (docs/architecture.md#ports).
    [storage] value-log-file-size, resolve-interval, max-txn-timeout
    [storage] max-inflight-write-bytes  WriteBinlog payload bytes held between arrival and the
                             storage's return (default 256 MiB; one larger payload is admitted alone)
    [upstream] txn-status-dsn, status-row-ttl
    gen-binlog-pull-interval while a drainer is pulling, the idle gap after which a fake binlog is
                             written (default 0.25 s; 0 = off: only `gen-binlog-interval`, as the original)
    log-format, log-file-max-size, log-file-max-backups   text / json lines, size rotation (common/logsetup.py)

`gc` keeps the original's two spellings: a plain number is a number of DAYS (`gc = 7`, `PUMP_GC=7`,
`--gc 7`) and a string with a unit is a duration (`gc = "8h"`); the field's own parser (`parse_gc`) reads
both from every source.  `PumpConfig.gc` holds seconds.

The original's deprecated keys (`binlog-file-size`, `enable-binlog-slice`, `binlog-slice-size`,
`log-rotate`) and its push-gateway flags (`metrics-addr`, `metrics-interval`) are accepted and ignored;
`PumpConfig.ignored_keys()` lists the ones that are set so `main` can warn about them.
The original's Go flags (`-config`, `-L`, `-fake-binlog-interval`, ...) work too (common/config/goflags.py).
`[storage.kv]` sets the index's LevelDB options where LevelDB has one (`KVConfig`); the rest are named by
`ignored_keys()` when set to anything but their default.
`[security]` turns on TLS for gRPC, etcd and HTTP (common/tls.py); `check_supported()` checks its files.
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from common.config import (
    ByteSize,
    Duration,
    at_least,
    load,
    parse_duration,
)
from common.config.cli import config_parser, parse_config_args
from common.config.convert import show
from common.config.goflags import PUMP_FLAGS
from common.config.node import NodeAddress, SecurityConfig
from common.config.node import validate_etcd_urls as _etcd_urls
from common.config.node import validate_host_port as _host_port
from common.config.schema import Kind, TypeSpec, describe
from common.logsetup import DEFAULT_LOG_FORMAT, DEFAULT_MAX_BACKUPS, DEFAULT_MAX_SIZE_MIB, LogFormat
from common.txnstatus import DEFAULT_STATUS_ROW_TTL
from pump.storage.api import (
    DEFAULT_KV_CHAN_CAP,
    DEFAULT_KV_WRITE_BUFFER,
    DEFAULT_MAX_TXN_TIMEOUT,
    DEFAULT_RESOLVE_INTERVAL,
    DEFAULT_SLOW_WRITE_THRESHOLD,
    DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE,
    DEFAULT_VALUE_LOG_FILE_SIZE,
    LevelDBOptions,
    StorageOptions,
)

ENV_PREFIX: Final = "PUMP"

DEFAULT_ADDR: Final = "127.0.0.1:8250"
"""Original: first non-loopback IPv4 + :8250; its sample uses 127.0.0.1:8250."""
DEFAULT_STATUS_ADDR: Final = "127.0.0.1:18250"
"""Ours: HTTP status and metrics (the original served them on `addr` through cmux)."""
DEFAULT_PD_URLS: Final = "http://127.0.0.1:2379"
DEFAULT_DATA_DIR: Final = Path("data.pump")
DEFAULT_HEARTBEAT_INTERVAL: Final = 2.0
SECONDS_PER_DAY: Final = 86_400
DEFAULT_GC_DAYS: Final = 7
DEFAULT_GC: Final = float(DEFAULT_GC_DAYS * SECONDS_PER_DAY)
DEFAULT_GEN_BINLOG_INTERVAL: Final = 3.0
DEFAULT_GEN_BINLOG_PULL_INTERVAL: Final = 0.25
"""Ours: `gen-binlog-pull-interval`.  The original has only `gen-binlog-interval` (3 s), so an idle pump
held a drainer's merge back for up to 3 s (x2 with its ticker)."""
MAX_MESSAGE_SIZE_LIMIT: Final = 2 * 1024**3
"""grpcio takes a C int; the original's MaxInt - 4 MiB does not fit, so we cap at 2 GiB."""
DEFAULT_MAX_MESSAGE_SIZE: Final = MAX_MESSAGE_SIZE_LIMIT - 4 * 1024**2
"""Original: MaxInt - 4 MiB."""
DEFAULT_LOG_LEVEL: Final = "info"
DEFAULT_MAX_INFLIGHT_WRITE_BYTES: Final = 256 * 1024**2
"""Ours: `[storage] max-inflight-write-bytes`."""

LogLevel = Literal["debug", "info", "warn", "warning", "error", "fatal"]


def _positive(value: float) -> None:
    if not value > 0:
        raise ValueError("must be > 0")


def _kv_write_buffer(value: int) -> None:
    if value and not 64 * 1024 <= value <= 1024**3:
        raise ValueError("must be between 64KiB and 1GiB (LevelDB's limits for write_buffer_size)")


def _not_negative(value: float) -> None:
    if not value >= 0:
        raise ValueError("must be >= 0")


def gc_seconds(raw: object) -> float:
    """The `gc` value in seconds: a plain number means days, a string with a unit is a duration.

    Raises ValueError for anything else (`parse_gc`, the field's parser, checks the value first).
    """
    if isinstance(raw, bool):
        raise ValueError(f"{raw!r} is not a gc value")
    if isinstance(raw, int | float):
        days = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        try:
            days = float(text)
        except ValueError:
            return parse_duration(text)
    else:
        raise ValueError(f"{raw!r} is not a gc value")
    if not math.isfinite(days):
        raise ValueError(f"{raw!r} is not a finite number of days")
    return days * SECONDS_PER_DAY


_GC_EXPECTED: Final = describe(TypeSpec(Kind.DURATION))
"""What a rejected `gc` value is said to need: the words of every other duration key."""


def parse_gc(raw: object) -> float:
    """The `gc` field's parser: `raw` as written in pump.toml, PUMP_GC or --gc, in seconds (see `gc_seconds`).

    It accepts exactly what a duration field accepts and words a rejection the same way, so `gc` errors
    read like those of every other duration key.  A value that is not positive is returned as a plain
    duration, unscaled: the field's validator rejects it, and its message then shows the number as written.
    """
    seconds: float | None = None
    if isinstance(raw, int | float | str) and not isinstance(raw, bool):
        with contextlib.suppress(ValueError):
            seconds = parse_duration(raw)
    if seconds is None:
        raise ValueError(f"expected {_GC_EXPECTED}, got {show(raw)}")
    return gc_seconds(raw) if seconds > 0 else seconds


def _message_size(value: int) -> None:
    if not 0 < value <= MAX_MESSAGE_SIZE_LIMIT:
        raise ValueError(f"must be between 1 and {MAX_MESSAGE_SIZE_LIMIT} (2 GiB)")


def _bytes_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def _in_range(low: int, high: int, what: str) -> Callable[[int], None]:
    """`low` <= value <= `high`, or 0 (the default, as the original)."""

    def check(value: int) -> None:
        if value and not low <= value <= high:
            raise ValueError(f"must be between {_bytes_text(low)} and {_bytes_text(high)} ({what})")

    return check


@dataclass(frozen=True)
class KVConfig:
    """`[storage.kv]`: the original's goleveldb tuning, for the index's LevelDB (plyvel).

    Used: `write-buffer` (write_buffer_size), `block-cache-capacity` (the block cache, lru_cache_size),
    `block-size`, `block-restart-interval`, `compaction-table-size` (max_file_size: goleveldb's
    CompactionTableSize is the size of a table file).  The other five tune goleveldb's compaction
    triggers, which LevelDB fixes at build time: `ignored_keys()` names each one set to anything but its
    default.  As the original's setDefaultStorageConfig, a value <= 0 means the key's default."""

    block_cache_capacity: ByteSize = field(
        default=8 * 1024 * 1024, metadata={"validate": _in_range(1, 1 << 40, "the block cache")}
    )
    block_restart_interval: int = 16
    block_size: ByteSize = field(
        default=4096, metadata={"validate": _in_range(1 << 10, 4 << 20, "LevelDB's limits for block_size")}
    )
    compaction_l0_trigger: int = field(default=8, metadata={"key": "compaction-L0-trigger"})
    compaction_table_size: ByteSize = field(
        default=64 * 1024 * 1024,
        metadata={"validate": _in_range(1 << 20, 1 << 30, "LevelDB's limits for max_file_size")},
    )
    compaction_total_size: ByteSize = 512 * 1024 * 1024
    compaction_total_size_multiplier: float = 8.0
    write_buffer: ByteSize = field(default=DEFAULT_KV_WRITE_BUFFER, metadata={"validate": _kv_write_buffer})
    write_l0_pause_trigger: int = field(default=24, metadata={"key": "write-L0-pause-trigger"})
    write_l0_slowdown_trigger: int = field(default=17, metadata={"key": "write-L0-slowdown-trigger"})

    def leveldb(self) -> LevelDBOptions:
        d = LevelDBOptions()
        return LevelDBOptions(
            write_buffer_size=self.write_buffer or d.write_buffer_size,
            lru_cache_size=self.block_cache_capacity or d.lru_cache_size,
            block_size=self.block_size or d.block_size,
            block_restart_interval=max(self.block_restart_interval, 0) or d.block_restart_interval,
            max_file_size=self.compaction_table_size or d.max_file_size,
        )

    def ignored_keys(self) -> list[str]:
        """The keys LevelDB has no option for that are set to anything but their default."""
        defaults = KVConfig()
        return [
            f"storage.kv.{key}"
            for name, key in _KV_UNUSED
            if getattr(self, name) > 0 and getattr(self, name) != getattr(defaults, name)
        ]


_KV_UNUSED: Final = (
    ("compaction_l0_trigger", "compaction-L0-trigger"),
    ("compaction_total_size", "compaction-total-size"),
    ("compaction_total_size_multiplier", "compaction-total-size-multiplier"),
    ("write_l0_pause_trigger", "write-L0-pause-trigger"),
    ("write_l0_slowdown_trigger", "write-L0-slowdown-trigger"),
)
_KV_UNUSED_WHY: Final = "LevelDB fixes its compaction triggers and level sizes at build time; plyvel cannot set them"


@dataclass(frozen=True)
class StorageConfig:
    sync_log: bool = field(default=True, metadata={"help": "fdatasync every write batch"})
    kv_chan_cap: int = field(
        default=DEFAULT_KV_CHAN_CAP,
        metadata={"key": "kv_chan_cap", "help": "index queue capacity", "validate": _positive},
    )
    slow_write_threshold: Duration = field(
        default=DEFAULT_SLOW_WRITE_THRESHOLD,
        metadata={"key": "slow_write_threshold", "help": "log storage writes slower than this", "validate": _positive},
    )
    stop_write_at_available_space: ByteSize = field(
        default=DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE, metadata={"help": "refuse writes below this much free space"}
    )
    value_log_file_size: ByteSize = field(
        default=DEFAULT_VALUE_LOG_FILE_SIZE,
        metadata={"help": "rotate value log files at this size", "validate": _positive},
    )
    resolve_interval: Duration = field(
        default=DEFAULT_RESOLVE_INTERVAL,
        metadata={"help": "ask the upstream about a prewrite without commit after this long", "validate": _positive},
    )
    max_txn_timeout: Duration = field(
        default=DEFAULT_MAX_TXN_TIMEOUT,
        metadata={
            "help": "drop a prewrite the upstream does not know after this long at most "
            "([upstream] status-row-ttl decides sooner)",
            "validate": _positive,
        },
    )
    max_inflight_write_bytes: ByteSize = field(
        default=DEFAULT_MAX_INFLIGHT_WRITE_BYTES,
        metadata={"help": "WriteBinlog payload bytes in flight before new writes wait (ours)", "validate": _positive},
    )
    kv: KVConfig = field(default_factory=KVConfig)


@dataclass(frozen=True)
class UpstreamConfig:
    txn_status_dsn: str = field(
        default="",
        metadata={"help": "transaction status store of the upstream writer (sqlite path or mysql DSN); empty = none"},
    )
    status_row_ttl: Duration = field(
        default=DEFAULT_STATUS_ROW_TTL,
        metadata={
            "help": "roll back a prewrite whose transaction has no status row once its start_ts is this old "
            "(at least the writers' status-row TTL)",
            "validate": _positive,
        },
    )


_IGNORED_KEYS: Final = (
    ("binlog_file_size", "binlog-file-size", "deprecated"),
    ("enable_binlog_slice", "enable-binlog-slice", "deprecated"),
    ("binlog_slice_size", "binlog-slice-size", "deprecated"),
    ("log_rotate", "log-rotate", "deprecated"),
    ("metrics_addr", "metrics-addr", "Prometheus push is not supported: scrape /metrics on status-addr"),
    ("metrics_interval", "metrics-interval", "Prometheus push is not supported: scrape /metrics on status-addr"),
)


@dataclass(frozen=True)
class PumpConfig(NodeAddress):
    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port", "validate": _host_port})
    advertise_addr: str = field(
        default="", metadata={"help": "address registered for clients and drainers (default: addr)"}
    )
    status_addr: str = field(
        default=DEFAULT_STATUS_ADDR,
        metadata={"help": "HTTP status and metrics address host:port", "validate": _host_port},
    )
    socket: str = field(default="", metadata={"help": "unix socket that also serves gRPC"})
    pd_urls: str = field(
        default=DEFAULT_PD_URLS,
        metadata={"help": "etcd endpoints of PD, comma separated", "validate": _etcd_urls},
    )
    data_dir: Path = field(default=DEFAULT_DATA_DIR, metadata={"help": "where binlogs are stored"})
    heartbeat_interval: Duration = field(
        default=DEFAULT_HEARTBEAT_INTERVAL,
        metadata={"help": "interval of status updates in etcd", "validate": _positive},
    )
    gc: Duration = field(
        default=DEFAULT_GC,
        metadata={
            "help": "how long binlogs are kept: a number of days, or a duration such as '8h'",
            "parse": parse_gc,
            "validate": _positive,
        },
    )
    gen_binlog_interval: Duration = field(
        default=DEFAULT_GEN_BINLOG_INTERVAL,
        metadata={
            "help": "write a fake binlog after this long without writes",
            "validate": _positive,
            "aliases": ("--fake-binlog-interval",),
        },
    )
    gen_binlog_pull_interval: Duration = field(
        default=DEFAULT_GEN_BINLOG_PULL_INTERVAL,
        metadata={
            "help": "while a drainer is pulling, write a fake binlog after this long without writes "
            "(ours; 0 = off, capped at gen-binlog-interval)",
            "validate": _not_negative,
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
    node_id: str = field(default="", metadata={"help": "node id (default: <data-dir>/.node, else hostname:port)"})
    max_message_size: ByteSize = field(
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metadata={"help": "largest gRPC message received or sent", "validate": _message_size},
    )
    enable_debug: bool = field(
        default=False, metadata={"help": "ignored, as the original ignored it (use log-level = debug)"}
    )
    binlog_file_size: int | None = field(default=None, metadata={"help": "deprecated, ignored"})
    enable_binlog_slice: bool | None = field(default=None, metadata={"help": "deprecated, ignored"})
    binlog_slice_size: int | None = field(default=None, metadata={"help": "deprecated, ignored"})
    log_rotate: str | None = field(default=None, metadata={"help": "deprecated, ignored"})
    metrics_addr: str | None = field(default=None, metadata={"help": "ignored: no Prometheus push"})
    metrics_interval: int | None = field(default=None, metadata={"help": "ignored: no Prometheus push"})
    security: SecurityConfig = field(default_factory=SecurityConfig)
    storage: StorageConfig = field(default_factory=StorageConfig)
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)

    def validate(self) -> None:
        self.check_advertise()

    def storage_options(self) -> StorageOptions:
        s = self.storage
        return StorageOptions(
            value_log_file_size=s.value_log_file_size,
            sync_log=s.sync_log,
            kv_chan_cap=s.kv_chan_cap,
            slow_write_threshold=s.slow_write_threshold,
            stop_write_at_available_space=s.stop_write_at_available_space,
            resolve_interval=s.resolve_interval,
            max_txn_timeout=s.max_txn_timeout,
            kv=s.kv.leveldb(),
        )

    def ignored_keys(self) -> list[str]:
        """One warning line per deprecated or unsupported key that is set."""
        found = [
            f"config key '{key}' is ignored ({why})"
            for name, key, why in _IGNORED_KEYS
            if getattr(self, name) is not None
        ]
        if self.enable_debug:
            found.append(
                "config key 'enable-debug' is ignored (the original defined it and never read it; "
                "set log-level = debug for debug logs)"
            )
        found += [f"config key '{key}' is ignored ({_KV_UNUSED_WHY})" for key in self.storage.kv.ignored_keys()]
        return found

    def check_supported(self) -> None:
        """Raise ConfigError for `[security]` files that cannot be used (read and checked here, so a bad
        one exits with status 2 before anything starts)."""
        self.security.load_tls(etcd_urls=self.pd_urls)


# ----------------------------------------------------------------------------------------------- loading


def load_config(
    file: str | Path | None = None,
    *,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, object] | None = None,
) -> PumpConfig:
    """Load and validate a PumpConfig (env prefix PUMP); raises ConfigError naming the bad key."""
    return load(PumpConfig, file=file, env=env, env_prefix=ENV_PREFIX, flags=flags)


def build_parser() -> argparse.ArgumentParser:
    return config_parser(
        "pump",
        "TiDB-Binlog pump: stores binlogs and serves them in order",
        PumpConfig,
        env_prefix=ENV_PREFIX,
        go_flags=PUMP_FLAGS,
    )


def parse_args(
    argv: list[str] | None = None, env: Mapping[str, str] | None = None
) -> tuple[PumpConfig, argparse.Namespace]:
    """Parse the command line and load the config; raises ConfigError (never exits)."""
    return parse_config_args(build_parser(), load_config, argv, env)
