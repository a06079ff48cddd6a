"""Tests of common.config: typed, strict, layered component config."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.config import (
    ArgumentParser,
    ByteSize,
    Duration,
    Source,
    add_flags,
    at_least,
    dump,
    env_name,
    flags_from_args,
    format_duration,
    load,
    load_args,
    load_with_sources,
    non_empty,
    parse_duration,
    parse_size,
    run_command,
    to_dict,
)
from common.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[2]
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

# ------------------------------------------------------------------ a pump-like config, as a component declares it

DEFAULT_ADDR = "127.0.0.1:8250"
DEFAULT_PD_URLS = "http://127.0.0.1:2379"
DEFAULT_DATA_DIR = Path("data.pump")
DEFAULT_HEARTBEAT_INTERVAL = 2.0
DEFAULT_GC_DAYS = 7
DEFAULT_SYNC_LOG = True
DEFAULT_KV_CHAN_CAP = 1 << 20
DEFAULT_SLOW_WRITE_THRESHOLD = 1.0
DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE = 10 * GiB
DEFAULT_BLOCK_SIZE = 4096
DEFAULT_COMPACTION_L0_TRIGGER = 8

LogLevel = Literal["debug", "info", "warn", "error"]
DEFAULT_LOG_LEVEL: LogLevel = "info"


@dataclass(frozen=True)
class KvConfig:
    block_size: ByteSize = DEFAULT_BLOCK_SIZE
    compaction_l0_trigger: int = field(default=DEFAULT_COMPACTION_L0_TRIGGER, metadata={"key": "compaction-L0-trigger"})


@dataclass(frozen=True)
class StorageConfig:
    sync_log: bool = field(default=DEFAULT_SYNC_LOG, metadata={"help": "fsync every write"})
    kv_chan_cap: int = field(default=DEFAULT_KV_CHAN_CAP, metadata={"key": "kv_chan_cap"})
    slow_write_threshold: Duration = field(
        default=DEFAULT_SLOW_WRITE_THRESHOLD, metadata={"key": "slow_write_threshold"}
    )
    stop_write_at_available_space: ByteSize = DEFAULT_STOP_WRITE_AT_AVAILABLE_SPACE
    kv: KvConfig = field(default_factory=KvConfig)


@dataclass(frozen=True)
class SecurityConfig:
    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    cert_allowed_cn: tuple[str, ...] = ()


@dataclass(frozen=True)
class PumpConfig:
    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address"})
    advertise_addr: str = ""
    pd_urls: str = field(default=DEFAULT_PD_URLS, metadata={"key": "pd-urls", "help": "etcd endpoints"})
    data_dir: Path = DEFAULT_DATA_DIR
    heartbeat_interval: Duration = DEFAULT_HEARTBEAT_INTERVAL
    gc: int = field(default=DEFAULT_GC_DAYS, metadata={"help": "days of binlog to keep", "validate": at_least(1)})
    log_level: LogLevel = field(default=DEFAULT_LOG_LEVEL, metadata={"aliases": ("-L",)})
    log_file: Path | None = None
    node_id: str = ""
    storage: StorageConfig = field(default_factory=StorageConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        if self.advertise_addr.startswith("0.0.0.0"):
            raise ConfigError(f"invalid value for 'advertise-addr': {self.advertise_addr!r} is not reachable")


# ------------------------------------------------------------------ a drainer-like config: arrays of tables, dicts


@dataclass(frozen=True)
class TableRule:
    db_name: str
    tbl_name: str = field(default="", metadata={"validate": non_empty})


@dataclass(frozen=True)
class FilterRule:
    ignore_event: tuple[str, ...] = ()
    ignore_sql: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckpointConfig:
    schema: str = "tidb_binlog"
    table: str = "checkpoint"


@dataclass(frozen=True)
class ToConfig:
    host: str = "localhost"
    port: int = 3306
    read_timeout: Duration = 60.0
    params: dict[str, str] = field(default_factory=dict)
    checkpoint: CheckpointConfig | None = None


@dataclass(frozen=True)
class SyncerConfig:
    txn_batch: int = 20
    worker_count: int = field(default=16, metadata={"aliases": ("-c",)})
    safe_mode: bool = False
    db_type: Literal["mysql", "tidb", "file", "kafka"] = "mysql"
    ignore_schemas: tuple[str, ...] = ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql")
    ignore_txn_commit_ts: tuple[int, ...] = ()
    replicate_do_table: tuple[TableRule, ...] = ()
    binlog_filter_rule: dict[str, FilterRule] = field(default_factory=dict)
    to: ToConfig = field(default_factory=ToConfig)

    def validate(self) -> None:
        if self.txn_batch > 10_000:
            raise ValueError("txn-batch must not exceed 10000")


@dataclass(frozen=True)
class DrainerConfig:
    initial_commit_ts: int = -1
    compressor: Literal["", "gzip"] = ""
    syncer: SyncerConfig = field(default_factory=SyncerConfig)


# ------------------------------------------------------------------ one field of every supported type


@dataclass(frozen=True)
class AllTypes:
    i: int = 0
    f: float = 0.0
    b: bool = False
    s: str = ""
    p: Path = Path("base")
    d: Duration = 1.0
    z: ByteSize = 0
    mode: Literal["a", "b"] = "a"
    level: Literal[1, 2, 3] = 1
    opt: int | None = None
    opt_d: Duration | None = None
    names: tuple[str, ...] = ()
    nums: tuple[int, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    positive: int = field(default=1, metadata={"validate": lambda v: v > 0})


@dataclass(frozen=True)
class Required:
    name: str
    size: int = 1


# classes that are not usable config classes: a programming error (TypeError), not a ConfigError


@dataclass
class NotFrozen:
    a: int = 0


@dataclass(frozen=True)
class UsesList:
    items: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class BadMetadata:
    a: int = field(default=0, metadata={"hepl": "typo"})


@dataclass(frozen=True)
class DuplicateKey:
    a_b: int = 0
    other: int = field(default=0, metadata={"key": "a-b"})


def write(tmp_path: Path, text: str, name: str = "pump.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def error_of(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    return str(excinfo.value)


# ================================================================== defaults and a realistic file


def test_defaults_only() -> None:
    cfg = load(PumpConfig)
    assert cfg == PumpConfig()
    assert cfg.storage.stop_write_at_available_space == 10 * GiB
    assert cfg.log_file is None


def test_realistic_pump_file(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        """
        # pump Configuration.
        addr = "127.0.0.1:8250"
        advertise-addr = "pump-1:8250"
        pd-urls = "http://127.0.0.1:2379"
        data-dir = "/var/lib/pump"
        heartbeat-interval = "500ms"
        gc = 5
        log-level = "debug"
        log-file = "pump.log"

        [security]
        ssl-ca = "/certs/ca.pem"
        ssl-cert = "/certs/pump.pem"
        ssl-key = "/certs/pump-key.pem"
        cert-allowed-cn = ["tidb", "drainer"]

        [storage]
        sync-log = false
        kv_chan_cap = 4096
        slow_write_threshold = "1m30s"
        stop-write-at-available-space = "500MiB"

        [storage.kv]
        block-size = "8KiB"
        compaction-L0-trigger = 4
        """,
    )
    cfg = load(PumpConfig, file=file)
    assert cfg == PumpConfig(
        advertise_addr="pump-1:8250",
        data_dir=Path("/var/lib/pump"),
        heartbeat_interval=0.5,
        gc=5,
        log_level="debug",
        log_file=Path("pump.log"),
        storage=StorageConfig(
            sync_log=False,
            kv_chan_cap=4096,
            slow_write_threshold=90.0,
            stop_write_at_available_space=500 * MiB,
            kv=KvConfig(block_size=8 * KiB, compaction_l0_trigger=4),
        ),
        security=SecurityConfig(
            ssl_ca="/certs/ca.pem",
            ssl_cert="/certs/pump.pem",
            ssl_key="/certs/pump-key.pem",
            cert_allowed_cn=("tidb", "drainer"),
        ),
    )


def test_partial_table_keeps_other_defaults(tmp_path: Path) -> None:
    cfg = load(PumpConfig, file=write(tmp_path, "[storage.kv]\nblock-size = 1024\n"))
    assert cfg.storage.kv == KvConfig(block_size=1024)
    assert cfg.storage.sync_log is DEFAULT_SYNC_LOG


def test_config_is_frozen() -> None:
    cfg = load(PumpConfig)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.gc = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.storage.sync_log = False  # type: ignore[misc]


# ================================================================== precedence


def test_precedence_each_level_overrides_the_one_below(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\nnode-id = 'from-file'\naddr = 'file:1'\n")
    env = {"PUMP_GC": "6", "PUMP_NODE_ID": "from-env"}
    flags = {"gc": "8"}

    assert load(PumpConfig).gc == DEFAULT_GC_DAYS
    assert load(PumpConfig, file=file).gc == 5
    from_env = load(PumpConfig, file=file, env=env, env_prefix="PUMP")
    assert (from_env.gc, from_env.node_id, from_env.addr) == (6, "from-env", "file:1")
    from_flags = load(PumpConfig, file=file, env=env, env_prefix="PUMP", flags=flags)
    assert (from_flags.gc, from_flags.node_id, from_flags.addr) == (8, "from-env", "file:1")


def test_precedence_merges_tables_key_by_key(tmp_path: Path) -> None:
    file = write(tmp_path, "[storage]\nsync-log = false\nkv_chan_cap = 10\n")
    cfg = load(
        PumpConfig,
        file=file,
        env={"PUMP_STORAGE_KV_CHAN_CAP": "20", "PUMP_STORAGE_KV_BLOCK_SIZE": "2KiB"},
        env_prefix="PUMP",
        flags={"storage.kv.compaction-L0-trigger": "3"},
    )
    assert cfg.storage == StorageConfig(
        sync_log=False, kv_chan_cap=20, kv=KvConfig(block_size=2 * KiB, compaction_l0_trigger=3)
    )


def test_env_is_ignored_without_prefix() -> None:
    assert load(PumpConfig, env={"GC": "3", "PUMP_GC": "3"}).gc == DEFAULT_GC_DAYS


def test_env_ignores_unrelated_variables() -> None:
    assert load(PumpConfig, env={"PUMP_UNKNOWN": "x", "PATH": "/bin"}, env_prefix="PUMP") == PumpConfig()


def test_array_of_tables_is_replaced_whole_by_a_higher_layer(tmp_path: Path) -> None:
    file = write(tmp_path, "[[syncer.replicate-do-table]]\ndb-name = 'a'\ntbl-name = 't'\n", "drainer.toml")
    cfg = load(DrainerConfig, file=file, flags={"syncer.replicate-do-table": [{"db-name": "b", "tbl-name": "u"}]})
    assert cfg.syncer.replicate_do_table == (TableRule("b", "u"),)


# ================================================================== strictness: unknown keys


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gcc = 1\n", "unknown key 'gcc' (did you mean 'gc'?)"),
        ("[storage]\nsync-lg = true\n", "unknown key 'storage.sync-lg' (did you mean 'storage.sync-log'?)"),
        ("[storage.kv]\nzzz = 1\n", "unknown key 'storage.kv.zzz'"),
        ("[storge]\nsync-log = true\n", "unknown key 'storge' (did you mean 'storage'?)"),
    ],
)
def test_unknown_key_names_key_and_file(tmp_path: Path, text: str, message: str) -> None:
    file = write(tmp_path, text)
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=file)
    assert error_of(excinfo) == f"config file '{file}': {message}"


def test_unknown_key_inside_array_of_tables(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        """
        [[syncer.replicate-do-table]]
        db-name = "a"
        tbl-name = "t"

        [[syncer.replicate-do-table]]
        db-name = "b"
        tbl-nme = "u"
        """,
        "drainer.toml",
    )
    with pytest.raises(ConfigError) as excinfo:
        load(DrainerConfig, file=file)
    assert error_of(excinfo) == (
        f"config file '{file}': unknown key 'syncer.replicate-do-table[1].tbl-nme' "
        "(did you mean 'syncer.replicate-do-table[1].tbl-name'?)"
    )


def test_unknown_flag_key() -> None:
    with pytest.raises(ConfigError, match=r"^flag --storage\.nope: unknown config key 'storage\.nope'$"):
        load(PumpConfig, flags={"storage.nope": "1"})


def test_flag_naming_a_table_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"^flag --storage: 'storage' is a table; set its keys one by one$"):
        load(PumpConfig, flags={"storage": "x"})


# ================================================================== wrong types in the file


@pytest.mark.parametrize(
    ("toml", "key", "expected", "got"),
    [
        ('i = "abc"', "i", "an integer", "'abc'"),
        ("i = true", "i", "an integer", "True"),
        ("i = 1.5", "i", "an integer", "1.5"),
        ("i = 1.0", "i", "an integer", "1.0"),
        ('f = "1.5"', "f", "a number", "'1.5'"),
        ("f = false", "f", "a number", "False"),
        ('b = "true"', "b", "a boolean (true or false)", "'true'"),
        ("b = 1", "b", "a boolean (true or false)", "1"),
        ("s = 5", "s", "a string", "5"),
        ("s = [1]", "s", "a string", "[1]"),
        ("p = 3", "p", "a path", "3"),
        ('p = ""', "p", "a path", "''"),
        ('d = "3x"', "d", "a duration such as '3s', '500ms', '1m30s' or a number of seconds", "'3x'"),
        ("d = true", "d", "a duration such as '3s', '500ms', '1m30s' or a number of seconds", "True"),
        ('z = "10XB"', "z", "a size such as '500MiB', '10MB', '1G' or a number of bytes", "'10XB'"),
        ("z = -1", "z", "a size such as '500MiB', '10MB', '1G' or a number of bytes", "-1"),
        ("z = 1.5", "z", "a size such as '500MiB', '10MB', '1G' or a number of bytes", "1.5"),
        ('mode = "c"', "mode", "one of 'a', 'b'", "'c'"),
        ("level = 4", "level", "one of 1, 2, 3", "4"),
        ('level = "1"', "level", "one of 1, 2, 3", "'1'"),
        ("level = true", "level", "one of 1, 2, 3", "True"),
        ('opt = "x"', "opt", "an integer", "'x'"),
        ("opt-d = []", "opt-d", "a duration such as '3s', '500ms', '1m30s' or a number of seconds", "[]"),
        ('names = "a,b"', "names", "a list of strings", "'a,b'"),
        ("names = ['a', 2]", "names[1]", "a string", "2"),
        ("nums = [1, 'x']", "nums[1]", "an integer", "'x'"),
        ("nums = [1, false]", "nums[1]", "an integer", "False"),
        ('labels = "a=b"', "labels", "a table of strings", "'a=b'"),
        ("labels = { a = 1 }", "labels.a", "a string", "1"),
    ],
)
def test_wrong_type_in_file(tmp_path: Path, toml: str, key: str, expected: str, got: str) -> None:
    file = write(tmp_path, toml + "\n", "types.toml")
    with pytest.raises(ConfigError) as excinfo:
        load(AllTypes, file=file)
    assert error_of(excinfo) == f"config file '{file}': invalid value for '{key}': expected {expected}, got {got}"


def test_scalar_where_table_expected(tmp_path: Path) -> None:
    file = write(tmp_path, "storage = 5\n")
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=file)
    assert error_of(excinfo) == f"config file '{file}': invalid value for 'storage': expected a table, got 5"


def test_table_where_array_of_tables_expected(tmp_path: Path) -> None:
    file = write(tmp_path, "[syncer.replicate-do-table]\ndb-name = 'a'\n", "drainer.toml")
    with pytest.raises(ConfigError) as excinfo:
        load(DrainerConfig, file=file)
    assert error_of(excinfo) == (
        f"config file '{file}': invalid value for 'syncer.replicate-do-table': "
        "expected an array of tables, got {'db-name': 'a'}"
    )


def test_good_values_of_every_type(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        """
        i = -3
        f = 2
        b = true
        s = "text"
        p = "/tmp/x"
        d = 1.5
        z = "1G"
        mode = "b"
        level = 3
        opt = 4
        opt-d = "10m"
        names = ["a", "b"]
        nums = [1, 2, 3]
        positive = 9
        [labels]
        team = "binlog"
        """,
        "types.toml",
    )
    cfg = load(AllTypes, file=file)
    assert cfg == AllTypes(
        i=-3,
        f=2.0,
        b=True,
        s="text",
        p=Path("/tmp/x"),
        d=1.5,
        z=GiB,
        mode="b",
        level=3,
        opt=4,
        opt_d=600.0,
        names=("a", "b"),
        nums=(1, 2, 3),
        labels={"team": "binlog"},
        positive=9,
    )
    assert isinstance(cfg.f, float)


def test_missing_required_key() -> None:
    with pytest.raises(ConfigError, match=r"^missing required key 'name'$"):
        load(Required)
    assert load(Required, flags={"name": "x"}) == Required(name="x")


def test_missing_required_key_inside_array_of_tables(tmp_path: Path) -> None:
    file = write(tmp_path, "[[syncer.replicate-do-table]]\ntbl-name = 't'\n", "drainer.toml")
    with pytest.raises(ConfigError) as excinfo:
        load(DrainerConfig, file=file)
    assert error_of(excinfo) == f"config file '{file}': missing required key 'syncer.replicate-do-table[0].db-name'"


def test_drainer_arrays_tables_and_optional_table(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        """
        initial-commit-ts = 0
        compressor = "gzip"

        [syncer]
        db-type = "tidb"
        ignore-txn-commit-ts = [1, 2]

        [[syncer.replicate-do-table]]
        db-name = "shop"
        tbl-name = "orders"

        [[syncer.replicate-do-table]]
        db-name = "shop"
        tbl-name = "items"

        [syncer.to]
        host = "db.local"
        read-timeout = "30s"
        params = { charset = "utf8mb4" }

        [syncer.to.checkpoint]
        schema = "ckpt"
        """,
        "drainer.toml",
    )
    cfg = load(DrainerConfig, file=file)
    assert cfg.initial_commit_ts == 0
    assert cfg.compressor == "gzip"
    assert cfg.syncer.db_type == "tidb"
    assert cfg.syncer.ignore_txn_commit_ts == (1, 2)
    assert cfg.syncer.replicate_do_table == (TableRule("shop", "orders"), TableRule("shop", "items"))
    assert cfg.syncer.to == ToConfig(
        host="db.local", read_timeout=30.0, params={"charset": "utf8mb4"}, checkpoint=CheckpointConfig(schema="ckpt")
    )


# ================================================================== environment


def test_env_values_of_every_type() -> None:
    env = {
        "T_I": " 42 ",
        "T_F": "2.5",
        "T_B": "yes",
        "T_S": " spaced ",
        "T_P": "/data",
        "T_D": "1m30s",
        "T_Z": "10MB",
        "T_MODE": "b",
        "T_LEVEL": "2",
        "T_OPT": "5",
        "T_OPT_D": "",
        "T_NAMES": "a, b,,c",
        "T_NUMS": "1,2",
        "T_LABELS": "team=binlog, tier = gold",
    }
    cfg = load(AllTypes, env=env, env_prefix="T")
    assert cfg == AllTypes(
        i=42,
        f=2.5,
        b=True,
        s=" spaced ",
        p=Path("/data"),
        d=90.0,
        z=10 * MiB,
        mode="b",
        level=2,
        opt=5,
        opt_d=None,
        names=("a", "b", "c"),
        nums=(1, 2),
        labels={"team": "binlog", "tier": "gold"},
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("TRUE", True), ("1", True), ("yes", True), ("false", False), ("0", False), ("No", False)],
)
def test_env_bool_words(text: str, expected: bool) -> None:
    assert load(PumpConfig, env={"PUMP_STORAGE_SYNC_LOG": text}, env_prefix="PUMP").storage.sync_log is expected


def test_env_nested_table_variable_names() -> None:
    env = {
        "PUMP_STORAGE_SYNC_LOG": "false",
        "PUMP_STORAGE_KV_COMPACTION_L0_TRIGGER": "2",
        "PUMP_SECURITY_CERT_ALLOWED_CN": "tidb,drainer",
        "PUMP_LOG_FILE": "",
    }
    cfg = load(PumpConfig, env=env, env_prefix="PUMP_")
    assert cfg.storage.sync_log is False
    assert cfg.storage.kv.compaction_l0_trigger == 2
    assert cfg.security.cert_allowed_cn == ("tidb", "drainer")
    assert cfg.log_file is None


def test_env_can_fill_an_optional_table() -> None:
    cfg = load(DrainerConfig, env={"DRAINER_SYNCER_TO_CHECKPOINT_TABLE": "ck"}, env_prefix="DRAINER")
    assert cfg.syncer.to.checkpoint == CheckpointConfig(table="ck")
    assert load(DrainerConfig, env={}, env_prefix="DRAINER").syncer.to.checkpoint is None


def test_env_name() -> None:
    assert env_name("PUMP", "storage.sync-log") == "PUMP_STORAGE_SYNC_LOG"
    assert env_name("PUMP_", "gc") == "PUMP_GC"
    assert env_name("DRAINER", "syncer.to.read-timeout") == "DRAINER_SYNCER_TO_READ_TIMEOUT"


@pytest.mark.parametrize(
    ("name", "value", "key", "expected"),
    [
        ("T_I", "abc", "i", "an integer"),
        ("T_I", "1.5", "i", "an integer"),
        ("T_F", "fast", "f", "a number"),
        ("T_B", "maybe", "b", "a boolean (true/false/1/0/yes/no)"),
        ("T_B", "", "b", "a boolean (true/false/1/0/yes/no)"),
        ("T_P", "", "p", "a path"),
        ("T_D", "5 seconds", "d", "a duration such as '3s', '500ms', '1m30s' or a number of seconds"),
        ("T_Z", "0.1K", "z", "a size such as '500MiB', '10MB', '1G' or a number of bytes"),
        ("T_MODE", "c", "mode", "one of 'a', 'b'"),
        ("T_LEVEL", "9", "level", "one of 1, 2, 3"),
        ("T_OPT", "x", "opt", "an integer or an empty value"),
        ("T_NUMS", "1,x,3", "nums", "a comma-separated list of integers"),
        ("T_LABELS", "team", "labels", "comma-separated key=value pairs"),
    ],
)
def test_bad_env_value_names_the_variable(name: str, value: str, key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load(AllTypes, env={name: value}, env_prefix="T")
    assert error_of(excinfo) == (
        f"environment variable {name}: invalid value for '{key}': expected {expected}, got {value!r}"
    )


def test_bad_nested_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, env={"PUMP_STORAGE_SYNC_LOG": "sometimes"}, env_prefix="PUMP")
    assert error_of(excinfo) == (
        "environment variable PUMP_STORAGE_SYNC_LOG: invalid value for 'storage.sync-log': "
        "expected a boolean (true/false/1/0/yes/no), got 'sometimes'"
    )


# ================================================================== flags


def pump_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="pump")
    add_flags(parser, PumpConfig, env_prefix="PUMP")
    return parser


def test_flags_override_file_and_env(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\n[storage]\nsync-log = true\n")
    args = pump_parser().parse_args(["--config", str(file), "--gc", "9", "--storage.sync-log=false", "-L", "warn"])
    cfg = load_args(PumpConfig, args, env={"PUMP_GC": "6"}, env_prefix="PUMP")
    assert (cfg.gc, cfg.storage.sync_log, cfg.log_level) == (9, False, "warn")


def test_unset_flags_do_not_override(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\nlog-level = 'error'\n[storage]\nsync-log = false\n")
    args = pump_parser().parse_args(["--config", str(file), "--node-id", "n1"])
    assert flags_from_args(args) == {"node-id": "n1"}
    cfg = load_args(PumpConfig, args, env={}, env_prefix="PUMP")
    assert (cfg.gc, cfg.log_level, cfg.storage.sync_log, cfg.node_id) == (5, "error", False, "n1")


def test_no_config_flag_means_no_file() -> None:
    args = pump_parser().parse_args([])
    assert flags_from_args(args) == {}
    assert load_args(PumpConfig, args, env={}, env_prefix="PUMP") == PumpConfig()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--storage.sync-log"], True),
        (["--storage.sync-log=true"], True),
        (["--storage.sync-log=false"], False),
        (["--storage.sync-log", "no"], False),
    ],
)
def test_bool_flag_forms(argv: list[str], expected: bool) -> None:
    args = pump_parser().parse_args(argv)
    cfg = load_args(PumpConfig, args, env={"PUMP_STORAGE_SYNC_LOG": str(not expected)}, env_prefix="PUMP")
    assert cfg.storage.sync_log is expected


def test_flag_values_of_list_dict_duration_and_size() -> None:
    parser = ArgumentParser(prog="drainer")
    add_flags(parser, DrainerConfig)
    args = parser.parse_args(
        [
            "--syncer.ignore-schemas=a,b",
            "--syncer.to.params=charset=utf8,tls=skip",
            "--syncer.to.read-timeout=1m",
            "-c",
            "4",
        ]
    )
    cfg = load_args(DrainerConfig, args, env={}, env_prefix="DRAINER")
    assert cfg.syncer.ignore_schemas == ("a", "b")
    assert cfg.syncer.to.params == {"charset": "utf8", "tls": "skip"}
    assert cfg.syncer.to.read_timeout == 60.0
    assert cfg.syncer.worker_count == 4


def test_arrays_of_tables_get_no_flag() -> None:
    parser = ArgumentParser(prog="drainer")
    add_flags(parser, DrainerConfig)
    with pytest.raises(ConfigError, match=r"^command line: unrecognized arguments: --syncer.replicate-do-table=x$"):
        parser.parse_args(["--syncer.replicate-do-table=x"])


def test_bad_flag_value_names_the_flag() -> None:
    args = pump_parser().parse_args(["--gc", "soon"])
    with pytest.raises(ConfigError) as excinfo:
        load_args(PumpConfig, args, env={}, env_prefix="PUMP")
    assert error_of(excinfo) == "flag --gc: invalid value for 'gc': expected an integer, got 'soon'"


def test_programmatic_flags_take_typed_values() -> None:
    assert load(PumpConfig, flags={"gc": 3, "data-dir": Path("/d")}).data_dir == Path("/d")
    with pytest.raises(ConfigError, match=r"^flag --gc: invalid value for 'gc': expected an integer, got 1\.5$"):
        load(PumpConfig, flags={"gc": 1.5})


def test_usage_errors_raise_instead_of_exiting() -> None:
    with pytest.raises(ConfigError, match=r"^command line: unrecognized arguments: --nope$"):
        pump_parser().parse_args(["--nope"])
    with pytest.raises(ConfigError, match=r"^command line: argument --gc: expected one argument$"):
        pump_parser().parse_args(["--gc"])


def test_abbreviated_flags_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^command line: unrecognized arguments: --heartbeat 3s$"):
        pump_parser().parse_args(["--heartbeat", "3s"])


def test_flag_help_shows_help_default_choices_and_env() -> None:
    text = " ".join(pump_parser().format_help().split())
    assert "--config FILE TOML config file" in text
    assert "--gc INT days of binlog to keep (default: 7) [env PUMP_GC]" in text
    assert "--storage.sync-log [BOOL] fsync every write (default: true) [env PUMP_STORAGE_SYNC_LOG]" in text
    assert (
        "--log-level {debug,info,warn,error}, -L {debug,info,warn,error} (default: info) [env PUMP_LOG_LEVEL]" in text
    )
    assert "--heartbeat-interval DURATION (default: 2s)" in text
    assert "--log-file PATH [env PUMP_LOG_FILE]" in text
    assert "--security.cert-allowed-cn TEXT,... [env PUMP_SECURITY_CERT_ALLOWED_CN]" in text
    assert "--storage.kv.compaction-L0-trigger INT (default: 8)" in text


def test_flags_work_with_a_plain_argparse_parser() -> None:
    parser = argparse.ArgumentParser(prog="pump")
    add_flags(parser, PumpConfig)
    parser.add_argument("--print-config", action="store_true")
    args = parser.parse_args(["--print-config", "--addr", "h:1"])
    assert args.print_config is True
    assert flags_from_args(args) == {"addr": "h:1"}


# ================================================================== durations and sizes


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3s", 3.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("10m", 600.0),
        ("1.5h", 5400.0),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("100ns", 1e-7),
        ("1h2m3.5s", 3723.5),
        ("-2s", -2.0),
        ("0", 0.0),
        ("2.5", 2.5),
        (" 4s ", 4.0),
        (7, 7.0),
        (0.25, 0.25),
    ],
)
def test_parse_duration_good(value: str | float, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "s", "3x", "1m30", "3 s", "abc", "1..5s", "-", "3d", True, float("inf")])
def test_parse_duration_bad(value: str | float) -> None:
    with pytest.raises(ValueError, match="not a"):
        parse_duration(value)


def test_parse_duration_names_unknown_unit() -> None:
    with pytest.raises(ValueError, match=r"unknown unit 'd' \(use ns, us, ms, s, m, h\)"):
        parse_duration("3d")


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (90, "1m30s"), (0.5, "500ms"), (3600, "1h0m0s"), (1.5, "1.5s"), (0.00025, "250us"), (1e-9, "1ns")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_format_duration_round_trips(ns: int) -> None:
    seconds = ns / 1e9
    assert round(parse_duration(format_duration(seconds)) * 1e9) == round(seconds * 1e9)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("500MiB", 500 * MiB),
        ("10MB", 10 * MiB),
        ("1G", GiB),
        ("1gb", GiB),
        ("64 KiB", 64 * KiB),
        ("1.5K", 1536),
        ("4096", 4096),
        ("12B", 12),
        ("2T", 2 << 40),
        (0, 0),
        (123, 123),
    ],
)
def test_parse_size_good(value: str | int, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["", "MB", "10XB", "-1", "0.1K", "1Ki", "ten", -1, True, 1.5])
def test_parse_size_bad(value: str | int) -> None:
    with pytest.raises(ValueError, match="not a"):
        parse_size(value)


# ================================================================== validation


def test_field_validator_names_key_value_and_source(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, env={"PUMP_GC": "0"}, env_prefix="PUMP")
    assert error_of(excinfo) == "environment variable PUMP_GC: invalid value for 'gc': must be >= 1 (got 0)"

    file = write(tmp_path, "gc = -2\n")
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=file)
    assert error_of(excinfo) == f"config file '{file}': invalid value for 'gc': must be >= 1 (got -2)"


def test_validator_returning_false() -> None:
    with pytest.raises(ConfigError) as excinfo:
        load(AllTypes, flags={"positive": "0"})
    assert error_of(excinfo) == "flag --positive: invalid value for 'positive': rejected by <lambda> (got 0)"


def test_validator_inside_array_of_tables_blames_the_file(tmp_path: Path) -> None:
    file = write(tmp_path, "[[syncer.replicate-do-table]]\ndb-name = 'a'\ntbl-name = ''\n", "drainer.toml")
    with pytest.raises(ConfigError) as excinfo:
        load(DrainerConfig, file=file)
    assert error_of(excinfo) == (
        f"config file '{file}': invalid value for 'syncer.replicate-do-table[0].tbl-name': must not be empty (got '')"
    )


def test_class_validate_method_raising_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^invalid value for 'advertise-addr': '0.0.0.0:8250' is not reachable$"):
        load(PumpConfig, flags={"advertise-addr": "0.0.0.0:8250"})


def test_nested_validate_method_raising_value_error_names_the_table() -> None:
    with pytest.raises(ConfigError, match=r"^invalid config in \[syncer\]: txn-batch must not exceed 10000$"):
        load(DrainerConfig, flags={"syncer.txn-batch": "20000"})


# ================================================================== file errors


def test_toml_syntax_error_has_file_line_and_column(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\n[storage]\nsync-log = \n")
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=file)
    assert error_of(excinfo) == f"config file '{file}': TOML syntax error at line 3, column 12: Invalid value"


def test_toml_syntax_error_at_end_of_file(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\npd-urls = [\n")
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=file)
    assert error_of(excinfo) == (
        f"config file '{file}': TOML syntax error at line 3, column 1 (end of file): Invalid value"
    )


def test_duplicate_key_is_a_syntax_error(tmp_path: Path) -> None:
    file = write(tmp_path, "gc = 5\ngc = 6\n")
    with pytest.raises(ConfigError, match=r"TOML syntax error at line 2, column \d+: "):
        load(PumpConfig, file=file)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "absent.toml"
    with pytest.raises(ConfigError) as excinfo:
        load(PumpConfig, file=missing)
    assert error_of(excinfo) == f"cannot read config file '{missing}': No such file or directory"


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    file = tmp_path / "bad.toml"
    file.write_bytes(b'node-id = "\xff"\n')
    with pytest.raises(ConfigError, match=r"^config file '.*bad\.toml': not valid UTF-8 \(byte 11\)$"):
        load(PumpConfig, file=file)


# ================================================================== schema errors are programming errors


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (NotFrozen, "config class NotFrozen must be a frozen dataclass"),
        (UsesList, r"UsesList\.items: unsupported config type list\[str\]"),
        (BadMetadata, r"BadMetadata\.a: unknown field metadata \['hepl'\]"),
        (DuplicateKey, r"DuplicateKey\.other: TOML key 'a-b' is also used by field 'a_b'"),
        (dict, "is not a dataclass"),
    ],
)
def test_unusable_config_class_is_a_type_error(cls: type, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        load(cls)


# ================================================================== dump and to_dict


def test_dump_round_trips_through_load(tmp_path: Path) -> None:
    cfg = load(
        DrainerConfig,
        flags={
            "syncer.replicate-do-table": [{"db-name": "a", "tbl-name": 't"1'}, {"db-name": "b", "tbl-name": "ü"}],
            "syncer.to.params": {"charset": "utf8mb4", "odd key": "x\ty"},
            "syncer.to.read-timeout": "1m30.5s",
            "syncer.to.checkpoint.schema": "ck",
            "syncer.ignore-schemas": "",
        },
    )
    text = dump(cfg)
    assert "[[syncer.replicate-do-table]]" in text
    assert 'read-timeout = "1m30.5s"' in text
    assert "ignore-schemas = []" in text
    assert load(DrainerConfig, file=write(tmp_path, text, "dumped.toml")) == cfg


def test_dump_of_pump_defaults(tmp_path: Path) -> None:
    text = dump(PumpConfig())
    assert text.startswith('addr = "127.0.0.1:8250"\n')
    assert "# log-file is not set\n" in text
    assert '\n[storage]\nsync-log = true\nkv_chan_cap = 1048576\nslow_write_threshold = "1s"\n' in text
    assert "\n[storage.kv]\nblock-size = 4096\ncompaction-L0-trigger = 8\n" in text
    assert load(PumpConfig, file=write(tmp_path, text)) == PumpConfig()


def test_dump_empty_array_of_tables_and_unset_optional_table(tmp_path: Path) -> None:
    text = dump(DrainerConfig())
    assert "replicate-do-table = []" in text
    assert "# [syncer.to.checkpoint] is not set" in text
    assert load(DrainerConfig, file=write(tmp_path, text, "d.toml")) == DrainerConfig()


def test_to_dict_is_json_friendly() -> None:
    data = to_dict(load(PumpConfig, flags={"log-file": "/var/log/pump.log"}))
    assert data["data-dir"] == "data.pump"
    assert data["log-file"] == "/var/log/pump.log"
    assert data["storage"]["kv_chan_cap"] == DEFAULT_KV_CHAN_CAP
    assert data["storage"]["kv"]["compaction-L0-trigger"] == DEFAULT_COMPACTION_L0_TRIGGER
    assert data["security"]["cert-allowed-cn"] == []
    assert json.loads(json.dumps(data)) == data


def test_to_dict_of_arrays_of_tables() -> None:
    cfg = load(DrainerConfig, flags={"syncer.replicate-do-table": [{"db-name": "a", "tbl-name": "t"}]})
    assert to_dict(cfg)["syncer"]["replicate-do-table"] == [{"db-name": "a", "tbl-name": "t"}]


# ================================================================== run_command


def test_run_command_turns_config_error_into_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    @run_command(prog="pump")
    def main() -> None:
        load(PumpConfig, flags={"gc": "x"})

    with pytest.raises(SystemExit) as excinfo:
        main()
    assert excinfo.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "pump: config error: flag --gc: invalid value for 'gc': expected an integer, got 'x'\n"


def test_run_command_passes_results_and_other_errors_through(capsys: pytest.CaptureFixture[str]) -> None:
    @run_command
    def ok(x: int) -> int:
        return x + 1

    @run_command
    def broken() -> None:
        raise RuntimeError("not a config problem")

    assert ok(1) == 2
    assert ok.__name__ == "ok"
    with pytest.raises(RuntimeError, match="not a config problem"):
        broken()
    assert capsys.readouterr().err == ""


def test_run_command_in_a_real_process(tmp_path: Path) -> None:
    file = write(tmp_path, "[storage]\nsync-lg = true\n")
    code = textwrap.dedent(
        """
        import os, sys
        from common.config import ArgumentParser, add_flags, load_args, run_command
        from tests.unit.test_config import PumpConfig

        @run_command(prog="pump")
        def main() -> None:
            parser = ArgumentParser(prog="pump")
            add_flags(parser, PumpConfig, env_prefix="PUMP")
            args = parser.parse_args(sys.argv[1:])
            load_args(PumpConfig, args, env=os.environ, env_prefix="PUMP")
            print("unreachable")

        main()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code, "--config", str(file)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"pump: config error: config file '{file}': unknown key 'storage.sync-lg' (did you mean 'storage.sync-log'?)"
    ]


def test_run_command_keeps_multi_line_messages_on_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    @run_command(prog="reparo")
    def main() -> None:
        raise ConfigError("first line\n  second line")

    with pytest.raises(SystemExit):
        main()
    assert capsys.readouterr().err == "reparo: config error: first line second line\n"


def test_no_traceback_on_stderr_for_usage_errors() -> None:
    code = textwrap.dedent(
        """
        from common.config import ArgumentParser, add_flags, run_command
        from tests.unit.test_config import PumpConfig

        @run_command
        def main() -> None:
            parser = ArgumentParser(prog="pump")
            add_flags(parser, PumpConfig)
            parser.parse_args(["--bogus"])

        main()
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 2
    assert re.fullmatch(r"\S+: config error: command line: unrecognized arguments: --bogus\n", result.stderr)


# ================================================================== which source set each key


def build_args(cls: type, argv: list[str], *, env_prefix: str = "") -> argparse.Namespace:
    parser = ArgumentParser()
    add_flags(parser, cls, env_prefix=env_prefix)
    return parser.parse_args(argv)


def test_was_set_and_source_of_every_kind_of_source(tmp_path: Path) -> None:
    file = write(tmp_path, 'addr = "file:1"\nnode-id = "file"\n[storage]\nsync-log = false\n')
    env = {"PUMP_NODE_ID": "env", "PUMP_STORAGE_KV_CHAN_CAP": "5", "PUMP_GC": "3"}
    loaded = load_with_sources(PumpConfig, file=file, env=env, env_prefix="PUMP", flags={"gc": "4"})
    assert loaded.config == load(PumpConfig, file=file, env=env, env_prefix="PUMP", flags={"gc": "4"})
    expected = {
        "data-dir": Source.DEFAULT,
        "addr": Source.FILE,
        "node-id": Source.ENV,  # env over file
        "gc": Source.FLAG,  # flag over env
        "storage.sync-log": Source.FILE,
        "storage.kv_chan_cap": Source.ENV,
        "storage.kv.block-size": Source.DEFAULT,
    }
    assert {key: loaded.source(key) for key in expected} == expected
    assert {key: loaded.was_set(key) for key in expected} == {key: s != "default" for key, s in expected.items()}
    assert loaded.source("gc") == "flag"  # a str enum: compares with its plain name
    assert loaded.where("gc") == "flag --gc"
    assert loaded.where("node-id") == "environment variable PUMP_NODE_ID"
    assert loaded.where("addr") == f"config file '{file}'"
    assert loaded.where("data-dir") == "default value"


def test_sources_of_nested_tables_and_arrays_of_tables(tmp_path: Path) -> None:
    file = write(
        tmp_path,
        "[syncer.to]\nhost = 'h'\n[[syncer.replicate-do-table]]\ndb-name = 'd'\ntbl-name = 't'\n",
    )
    loaded = load_with_sources(DrainerConfig, file=file, env={"DRAINER_SYNCER_TO_PORT": "3307"}, env_prefix="DRAINER")
    assert loaded.source("syncer.to.host") is Source.FILE
    assert loaded.source("syncer.to.port") is Source.ENV
    assert loaded.source("syncer.to.read-timeout") is Source.DEFAULT
    assert not loaded.was_set("syncer.to.checkpoint.schema")
    # A table: set when a key beneath it is, with the highest-precedence source among them.
    assert loaded.source("syncer.to") is Source.ENV
    assert loaded.source("syncer") is Source.ENV
    assert not loaded.was_set("syncer.to.checkpoint")
    # An array of tables is set whole; its elements' keys count as set by the same source.
    assert loaded.source("syncer.replicate-do-table") is Source.FILE
    assert loaded.source("syncer.replicate-do-table[0].tbl-name") is Source.FILE
    assert load_with_sources(DrainerConfig).source("syncer.replicate-do-table") is Source.DEFAULT


@pytest.mark.parametrize("key", ["syncer.to.hots", "syncer.to.host.x", "syncer.event-filter[0].a", "syncer[0].to"])
def test_asking_for_a_key_the_class_does_not_have_is_a_key_error(key: str) -> None:
    loaded = load_with_sources(DrainerConfig)
    with pytest.raises(KeyError, match="DrainerConfig has no config key"):
        loaded.was_set(key)


def test_a_flag_overrides_the_environment_and_a_nested_flag_is_a_flag() -> None:
    env = {"DRAINER_SYNCER_TO_HOST": "env-host", "DRAINER_SYNCER_WORKER_COUNT": "2"}
    args = build_args(DrainerConfig, ["--syncer.to.host", "flag-host"], env_prefix="DRAINER")
    loaded = load_with_sources(DrainerConfig, env=env, env_prefix="DRAINER", flags=flags_from_args(args))
    assert loaded.config.syncer.to.host == "flag-host"
    assert (loaded.source("syncer.to.host"), loaded.where("syncer.to.host")) == (Source.FLAG, "flag --syncer.to.host")
    assert loaded.source("syncer.worker-count") is Source.ENV


# ================================================================== per-field hooks: parse and env


def _half_or_percent(raw: object) -> float:
    """A test parser: "50%" or 0.5 (TOML numbers) -> 0.5."""
    if isinstance(raw, str) and raw.strip().endswith("%"):
        try:
            return float(raw.strip()[:-1]) / 100
        except ValueError:
            pass
    elif isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    raise ValueError(f"expected a fraction or a percentage, got {raw!r}")


@dataclass(frozen=True)
class HookedTo:
    host: str = field(default="localhost", metadata={"env": ("LEGACY_HOST", "OLDER_HOST")})
    ratio: float = field(default=1.0, metadata={"parse": _half_or_percent, "validate": lambda v: 0 < v <= 1})


@dataclass(frozen=True)
class Hooked:
    ratio: float = field(default=1.0, metadata={"parse": _half_or_percent, "validate": lambda v: 0 < v <= 1})
    to: HookedTo = field(default_factory=HookedTo)


def test_parse_hook_reads_every_source(tmp_path: Path) -> None:
    file = write(tmp_path, "ratio = 0.25\n[to]\nratio = '10%'\n")
    assert load(Hooked, file=file) == Hooked(ratio=0.25, to=HookedTo(ratio=0.1))
    assert load(Hooked, env={"H_RATIO": " 50% "}, env_prefix="H").ratio == 0.5
    assert load(Hooked, env={"H_TO_RATIO": "20%"}, env_prefix="H").to.ratio == 0.2
    assert load(Hooked, flags={"ratio": "75%"}).ratio == 0.75
    assert load(Hooked, flags={"ratio": 0.5}).ratio == 0.5  # a programmatic flag value goes to the parser as given
    args = build_args(Hooked, ["--to.ratio", "5%"])
    assert load_args(Hooked, args, env={}, env_prefix="H").to.ratio == 0.05


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"env": {"H_RATIO": "half"}, "env_prefix": "H"},
            "environment variable H_RATIO: invalid value for 'ratio': expected a fraction or a percentage, got 'half'",
        ),
        (
            {"flags": {"to.ratio": True}},
            "flag --to.ratio: invalid value for 'to.ratio': expected a fraction or a percentage, got True",
        ),
        # The validator still checks the parsed value, and names the source.
        ({"flags": {"ratio": "150%"}}, "flag --ratio: invalid value for 'ratio': rejected by <lambda> (got 1.5)"),
    ],
)
def test_parse_hook_errors_name_source_key_and_reason(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load(Hooked, **kwargs)  # type: ignore[arg-type]
    assert error_of(excinfo) == message


def test_parse_hook_error_in_the_file(tmp_path: Path) -> None:
    file = write(tmp_path, "[to]\nratio = 'most'\n")
    with pytest.raises(ConfigError) as excinfo:
        load(Hooked, file=file, flags={"to.ratio": "5%"})  # a bad file value is an error even when overridden
    assert error_of(excinfo) == (
        f"config file '{file}': invalid value for 'to.ratio': expected a fraction or a percentage, got 'most'"
    )


def test_env_alias_hook() -> None:
    loaded = load_with_sources(Hooked, env={"LEGACY_HOST": "legacy"}, env_prefix="H")
    assert loaded.config.to.host == "legacy"
    assert (loaded.source("to.host"), loaded.where("to.host")) == (Source.ENV, "environment variable LEGACY_HOST")
    # The generated name wins over its aliases, and the first alias over later ones.
    both = {"LEGACY_HOST": "legacy", "OLDER_HOST": "older", "H_TO_HOST": "generated"}
    assert load(Hooked, env=both, env_prefix="H").to.host == "generated"
    assert load(Hooked, env={"OLDER_HOST": "older", "LEGACY_HOST": "legacy"}, env_prefix="H").to.host == "legacy"
    # At environment precedence: over the file, under a flag.
    assert load(Hooked, env={"OLDER_HOST": "older"}, env_prefix="H", flags={"to.host": "flag"}).to.host == "flag"
    # Like the generated name, aliases are only read with an env prefix.
    assert load(Hooked, env={"LEGACY_HOST": "legacy"}).to.host == "localhost"
    parser = ArgumentParser()
    add_flags(parser, Hooked, env_prefix="H")
    assert "[env H_TO_HOST, LEGACY_HOST, OLDER_HOST]" in " ".join(parser.format_help().split())


def test_env_alias_value_errors_name_the_alias() -> None:
    @dataclass(frozen=True)
    class Port:
        port: int = field(default=1, metadata={"env": ("OLD_PORT",)})

    with pytest.raises(ConfigError) as excinfo:
        load(Port, env={"OLD_PORT": "many"}, env_prefix="P")
    assert (
        error_of(excinfo) == "environment variable OLD_PORT: invalid value for 'port': expected an integer, got 'many'"
    )


@dataclass(frozen=True)
class AliasClash:
    a: int = 0
    b: int = field(default=0, metadata={"env": ("X_A",)})


@dataclass(frozen=True)
class EnvNotATuple:
    a: int = field(default=0, metadata={"env": "OLD_A"})


@dataclass(frozen=True)
class ParseNotCallable:
    a: int = field(default=0, metadata={"parse": "int"})


@dataclass(frozen=True)
class HookOnATable:
    to: HookedTo = field(default_factory=HookedTo, metadata={"env": ("TO",)})


@pytest.mark.parametrize(
    ("cls", "message"),
    [
        (AliasClash, "AliasClash: keys 'a' and 'b' share environment variable X_A"),
        (EnvNotATuple, r"EnvNotATuple\.a: metadata 'env' must be a tuple of environment variable names"),
        (ParseNotCallable, r"ParseNotCallable\.a: metadata 'parse' must be callable"),
        (HookOnATable, r"HookOnATable\.to: metadata 'parse' and 'env' are for value fields, not tables"),
    ],
)
def test_bad_hooks_are_type_errors(cls: type, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        load(cls, env={}, env_prefix="X")


# ================================================================== named tables (dict[str, Section])


def test_named_tables_load_from_the_file_and_programmatic_flags(tmp_path: Path) -> None:
    file = write(tmp_path, "[syncer.binlog-filter-rule.a]\nignore-event = ['insert']\n", "drainer.toml")
    cfg = load(DrainerConfig, file=file)
    assert set(cfg.syncer.binlog_filter_rule) == {"a"}
    assert cfg.syncer.binlog_filter_rule["a"].ignore_event == ("insert",)
    flagged = load(DrainerConfig, file=file, flags={"syncer.binlog-filter-rule": {"b": {"ignore-sql": ["^drop"]}}})
    assert set(flagged.syncer.binlog_filter_rule) == {"b"}  # replaced whole, as an array of tables
    assert to_dict(flagged)["syncer"]["binlog-filter-rule"] == {"b": {"ignore-event": [], "ignore-sql": ["^drop"]}}


def test_named_tables_get_no_flag_and_no_environment_variable() -> None:
    parser = ArgumentParser(prog="drainer")
    add_flags(parser, DrainerConfig)
    with pytest.raises(ConfigError, match=r"unrecognized arguments: --syncer.binlog-filter-rule=x$"):
        parser.parse_args(["--syncer.binlog-filter-rule=x"])
    cfg = load(DrainerConfig, env={"DRAINER_SYNCER_BINLOG_FILTER_RULE": "x"}, env_prefix="DRAINER")
    assert cfg.syncer.binlog_filter_rule == {}


def test_bad_named_table_names_its_key(tmp_path: Path) -> None:
    file = write(tmp_path, "[syncer.binlog-filter-rule]\na = 1\n", "drainer.toml")
    with pytest.raises(ConfigError) as excinfo:
        load(DrainerConfig, file=file)
    assert error_of(excinfo) == (
        f"config file '{file}': invalid value for 'syncer.binlog-filter-rule.a': expected a table, got 1"
    )
