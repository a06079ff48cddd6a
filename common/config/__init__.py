"""Typed, frozen, validated component config: defaults < TOML file (strict) < environment < flags.

A component declares its config as frozen dataclasses; nested dataclasses are TOML tables and
`tuple[Section, ...]` is an array of tables. The TOML key of a field is its name in kebab case, or
`field(metadata={"key": ...})`; `help`, `validate`, `aliases`, `parse` (a field's own parser) and `env` (extra
environment variable names) metadata are optional (see `schema`).

    @dataclass(frozen=True)
    class StorageConfig:
        sync_log: bool = DEFAULT_SYNC_LOG
        kv_chan_cap: int = field(default=DEFAULT_KV_CHAN_CAP, metadata={"key": "kv_chan_cap"})

    @dataclass(frozen=True)
    class PumpConfig:
        gc: int = field(default=DEFAULT_GC_DAYS, metadata={"help": "days of binlog to keep", "validate": at_least(1)})
        heartbeat_interval: Duration = DEFAULT_HEARTBEAT_INTERVAL
        storage: StorageConfig = field(default_factory=StorageConfig)

    cfg = load(PumpConfig, file="pump.toml", env=os.environ, env_prefix="PUMP", flags={"gc": "3"})

`load_with_sources` does the same and also says which source set each key:

    loaded = load_with_sources(PumpConfig, file="pump.toml", env=os.environ, env_prefix="PUMP")
    loaded.config.gc, loaded.was_set("storage.sync-log"), loaded.source("gc")  # Source.FILE == "file"

Every bad input raises ConfigError naming the key and where the value came from; nothing here exits
except `run_command`, the boundary that turns a ConfigError into exit status 2 and one stderr line.
A dataclass may define `validate(self)` to check relations between keys (raise ConfigError or ValueError).
"""

from common.config.checks import at_least, between, non_empty
from common.config.cli import ArgumentParser, add_flags, flags_from_args, load_args, run_command
from common.config.loader import Loaded, Source, env_name, load, load_with_sources
from common.config.render import dump, to_dict
from common.config.units import ByteSize, Duration, format_duration, parse_duration, parse_size

__all__ = [
    "ArgumentParser",
    "ByteSize",
    "Duration",
    "Loaded",
    "Source",
    "add_flags",
    "at_least",
    "between",
    "dump",
    "env_name",
    "flags_from_args",
    "format_duration",
    "load",
    "load_args",
    "load_with_sources",
    "non_empty",
    "parse_duration",
    "parse_size",
    "run_command",
    "to_dict",
]
