"""pump.toml / PUMP_* / flags: defaults, precedence, gc spellings, strictness, the `pump` exit status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from common.config import dump, load
from common.errors import ConfigError
from pump import main as pump_main
from pump.app import default_resolver_factory
from pump.config import (
    DEFAULT_GC,
    DEFAULT_MAX_MESSAGE_SIZE,
    MAX_MESSAGE_SIZE_LIMIT,
    PumpConfig,
    gc_seconds,
    load_config,
    parse_args,
    parse_gc,
)
from pump.storage.api import LevelDBOptions, StorageOptions

DAY = 86_400.0
DEPLOY_SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "pump.toml"


def toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pump.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    cfg = load_config(env={})
    assert (cfg.addr, cfg.status_addr, cfg.advertise) == ("127.0.0.1:8250", "127.0.0.1:18250", "127.0.0.1:8250")
    assert cfg.pd_urls == "http://127.0.0.1:2379"
    assert cfg.data_dir == Path("data.pump")
    assert (cfg.heartbeat_interval, cfg.gen_binlog_interval, cfg.gen_binlog_pull_interval) == (2.0, 3.0, 0.25)
    assert cfg.gc == DEFAULT_GC == 7 * DAY
    assert cfg.max_message_size == DEFAULT_MAX_MESSAGE_SIZE == 2 * 1024**3 - 4 * 1024**2
    assert cfg.storage_options() == StorageOptions()
    assert cfg.storage.max_inflight_write_bytes == 256 << 20
    assert cfg.ignored_keys() == []
    cfg.check_supported()


def test_storage_section_maps_to_storage_options(tmp_path: Path) -> None:
    file = toml(
        tmp_path,
        """
[storage]
sync-log = false
kv_chan_cap = 1024
slow_write_threshold = 0.5
stop-write-at-available-space = "1 gib"
value-log-file-size = "64MiB"
resolve-interval = "2s"
max-txn-timeout = "5m"
max-inflight-write-bytes = "64 MiB"

[storage.kv]
block-cache-capacity = 16777216
compaction-L0-trigger = 4
write-L0-slowdown-trigger = 9

[upstream]
txn-status-dsn = "sqlite:///tmp/txn.db"
""",
    )
    cfg = load_config(file, env={})
    assert cfg.storage_options() == StorageOptions(
        value_log_file_size=64 << 20,
        sync_log=False,
        kv_chan_cap=1024,
        slow_write_threshold=0.5,
        stop_write_at_available_space=1 << 30,
        resolve_interval=2.0,
        max_txn_timeout=300.0,
        kv=LevelDBOptions(lru_cache_size=16 << 20),
    )
    assert cfg.storage.max_inflight_write_bytes == 64 << 20
    assert (cfg.storage.kv.compaction_l0_trigger, cfg.storage.kv.write_l0_slowdown_trigger) == (4, 9)
    assert cfg.ignored_keys() == [
        f"config key 'storage.kv.{key}' is ignored (LevelDB fixes its compaction triggers and level sizes at "
        "build time; plyvel cannot set them)"
        for key in ("compaction-L0-trigger", "write-L0-slowdown-trigger")
    ]
    assert cfg.upstream.txn_status_dsn == "sqlite:///tmp/txn.db"


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    file = toml(
        tmp_path, 'node-id = "file"\naddr = "10.0.0.1:1"\nheartbeat-interval = 5\n[storage]\nsync-log = false\n'
    )
    env = {"PUMP_NODE_ID": "env", "PUMP_ADDR": "10.0.0.2:2", "PUMP_STORAGE_SYNC_LOG": "true"}
    cfg, _ = parse_args(["--config", str(file), "--addr", "10.0.0.3:3"], env=env)
    assert (cfg.node_id, cfg.addr, cfg.heartbeat_interval, cfg.storage.sync_log) == ("env", "10.0.0.3:3", 5.0, True)
    assert cfg.listen_port == 3


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [(7, 7 * DAY), (1, DAY), ("3", 3 * DAY), ("8h", 8 * 3600.0), ("90m", 5400.0), ("1h30m", 5400.0), (0.5, DAY / 2)],
)
def test_gc_seconds(raw: object, seconds: float) -> None:
    assert gc_seconds(raw) == seconds


def test_gc_spellings_from_every_source(tmp_path: Path) -> None:
    assert load_config(toml(tmp_path, "gc = 3\n"), env={}).gc == 3 * DAY
    assert load_config(toml(tmp_path, 'gc = "8h"\n'), env={}).gc == 8 * 3600.0
    assert load_config(toml(tmp_path, "gc = 3\n"), env={"PUMP_GC": "2"}).gc == 2 * DAY
    assert load_config(toml(tmp_path, "gc = 3\n"), env={"PUMP_GC": "12h"}).gc == 12 * 3600.0
    assert parse_args(["--gc", "8h"], env={"PUMP_GC": "2"})[0].gc == 8 * 3600.0
    assert parse_args(["--gc", "1"], env={})[0].gc == DAY
    assert load_config(flags={"gc": 2}, env={}).gc == 2 * DAY


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [(7, 7 * DAY), ("3", 3 * DAY), (" 2 ", 2 * DAY), ("8h", 8 * 3600.0), (0.5, DAY / 2), (0, 0.0), (-1, -1.0)],
)
def test_parse_gc(raw: object, seconds: float) -> None:
    """The field's parser: days or a duration; a value that is not positive stays unscaled for the validator."""
    assert parse_gc(raw) == seconds


@pytest.mark.parametrize("raw", ["soon", True, "1_000", float("inf"), "inf", "", [7], None])
def test_parse_gc_rejects_what_a_duration_rejects(raw: object) -> None:
    with pytest.raises(
        ValueError, match=r"^expected a duration such as '3s', '500ms', '1m30s' or a number of seconds, got "
    ):
        parse_gc(raw)


def test_gc_errors_read_like_every_duration_key(tmp_path: Path) -> None:
    file = toml(tmp_path, "gc = -1\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(file, env={})
    assert str(excinfo.value) == f"config file '{file}': invalid value for 'gc': must be > 0 (got -1.0)"
    with pytest.raises(ConfigError) as excinfo:
        load_config(env={"PUMP_GC": "soon"})
    assert str(excinfo.value) == (
        "environment variable PUMP_GC: invalid value for 'gc': expected a duration such as '3s', '500ms', "
        "'1m30s' or a number of seconds, got 'soon'"
    )
    # A bad value that a higher source overrides is still an error; a rejected number is not (it is well typed).
    with pytest.raises(ConfigError, match=r"config file '.*': invalid value for 'gc'"):
        load_config(toml(tmp_path, 'gc = "soon"\n'), env={}, flags={"gc": "2"})
    assert load_config(toml(tmp_path, "gc = 0\n"), env={}, flags={"gc": "2"}).gc == 2 * DAY


def test_gc_days_without_load_config(tmp_path: Path) -> None:
    """The days rule lives in the field, so loading a PumpConfig through the framework directly keeps it."""
    assert load(PumpConfig, file=toml(tmp_path, "gc = 3\n")).gc == 3 * DAY
    assert load(PumpConfig, env={"PUMP_GC": "2"}, env_prefix="PUMP").gc == 2 * DAY


@pytest.mark.parametrize("text", ["gc = 0\n", "gc = -1\n", 'gc = "soon"\n', "gc = true\n", 'gc = "-8h"\n'])
def test_bad_gc_in_file(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid value for 'gc'"):
        load_config(toml(tmp_path, text), env={})


def test_bad_gc_flag_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        pump_main.main(["--gc", "soon"])
    assert excinfo.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("pump: config error: flag --gc: invalid value for 'gc'")


def test_unknown_key_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'storage.sync_log' \(did you mean 'storage.sync-log'\?\)"):
        load_config(toml(tmp_path, "[storage]\nsync_log = true\n"), env={})


def test_deprecated_keys_are_accepted_and_listed(tmp_path: Path) -> None:
    file = toml(tmp_path, 'binlog-file-size = 1024\nenable-binlog-slice = true\nlog-rotate = "day"\n')
    cfg = load_config(file, env={"PUMP_METRICS_ADDR": "127.0.0.1:9091"})
    warnings = cfg.ignored_keys()
    assert len(warnings) == 4
    assert warnings[0] == "config key 'binlog-file-size' is ignored (deprecated)"
    assert any("metrics-addr" in w and "scrape /metrics" in w for w in warnings)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"max-message-size": str(MAX_MESSAGE_SIZE_LIMIT + 1)}, "invalid value for 'max-message-size'"),
        ({"addr": "0.0.0.0:8250"}, "advertise-addr"),
        ({"advertise-addr": "host-without-port"}, "advertise-addr"),
        ({"addr": "nohost"}, "invalid value for 'addr': must be host:port"),
        ({"heartbeat-interval": "0s"}, "invalid value for 'heartbeat-interval': must be > 0"),
        ({"gen-binlog-pull-interval": "-1"}, "invalid value for 'gen-binlog-pull-interval': must be >= 0"),
        ({"pd-urls": "ftp://x"}, "pd-urls"),
        ({"log-level": "loud"}, "log-level"),
    ],
)
def test_bad_values(flags: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(flags=flags, env={})


def test_listen_on_all_interfaces_with_advertise_addr() -> None:
    cfg = load_config(flags={"addr": "0.0.0.0:8250", "advertise-addr": "10.1.1.1:8250"}, env={})
    assert cfg.advertise == "10.1.1.1:8250"


def test_max_message_size_accepts_a_size() -> None:
    assert load_config(flags={"max-message-size": "2GiB"}, env={}).max_message_size == MAX_MESSAGE_SIZE_LIMIT


def test_fake_binlog_interval_alias_and_short_log_level() -> None:
    cfg, _ = parse_args(["--fake-binlog-interval", "500ms", "-L", "debug"], env={})
    assert (cfg.gen_binlog_interval, cfg.log_level) == (0.5, "debug")


def test_gen_binlog_pull_interval_spellings_and_off(tmp_path: Path) -> None:
    assert load_config(toml(tmp_path, 'gen-binlog-pull-interval = "100ms"'), env={}).gen_binlog_pull_interval == 0.1
    assert load_config(env={"PUMP_GEN_BINLOG_PULL_INTERVAL": "0.5"}).gen_binlog_pull_interval == 0.5
    cfg, _ = parse_args(["--gen-binlog-pull-interval", "0"], env={})
    assert cfg.gen_binlog_pull_interval == 0.0  # off: fake binlogs only every gen-binlog-interval


def test_unusable_tls_files_exit_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "ca.pem"
    file = toml(tmp_path, f'[security]\nssl-ca = "{missing}"\ncert-allowed-cn = ["a", "b"]\n')
    cfg = load_config(file, env={})
    assert cfg.security.cert_allowed_cn == ("a", "b")
    with pytest.raises(ConfigError, match=r"\[security\] ssl-ca is set but \[security\] ssl-cert and"):
        cfg.check_supported()  # a server needs its own certificate
    with pytest.raises(SystemExit) as excinfo:
        pump_main.main(["--config", str(file)])
    assert excinfo.value.code == 2
    assert "ssl-cert and [security] ssl-key are not" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        pump_main.main(["--config", str(file), "--security.ssl-cert", "c.pem", "--security.ssl-key", "k.pem"])
    assert excinfo.value.code == 2
    assert f"[security] ssl-ca: cannot read '{missing}'" in capsys.readouterr().err


def test_print_config_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert pump_main.main(["--gc", "2", "--node-id", "n1", "--print-config"]) == 0
    out = capsys.readouterr().out
    again = load_config(toml(tmp_path, out), env={})
    assert again == load_config(flags={"gc": "2", "node-id": "n1"}, env={})
    assert again.gc == 2 * DAY


def test_deploy_sample_loads_to_the_defaults() -> None:
    cfg = load_config(DEPLOY_SAMPLE, env={})
    assert cfg == PumpConfig(gc=cfg.gc)
    assert cfg.gc == 7 * DAY
    assert dump(cfg)


def test_no_txn_status_dsn_means_no_resolver_and_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="pump.app"):
        assert default_resolver_factory(load_config(env={}), "pump-1:8250") is None
    warnings = [r.getMessage() for r in caplog.records if r.name == "pump.app"]
    assert len(warnings) == 1
    assert "txn-status-dsn" in warnings[0]
    assert "wait forever" in warnings[0]


def test_a_txn_status_dsn_gives_a_resolver(tmp_path: Path) -> None:
    dsn = f"sqlite:///{tmp_path / 'txn.db'}"
    resolver = default_resolver_factory(load_config(env={"PUMP_UPSTREAM_TXN_STATUS_DSN": dsn}), "pump-1:8250")
    assert resolver is not None
    resolver.close()


def test_storage_kv_keys_are_leveldb_options(tmp_path: Path) -> None:
    """Every [storage.kv] key LevelDB has an option for reaches plyvel; the original's sample values
    (its defaults) warn about nothing."""
    sample = """
[storage.kv]
block-cache-capacity = 8388608
block-restart-interval = 16
block-size = 4096
compaction-L0-trigger = 8
compaction-table-size = 67108864
compaction-total-size = 536870912
compaction-total-size-multiplier = 8.0
write-buffer = 67108864
write-L0-pause-trigger = 24
write-L0-slowdown-trigger = 17
"""
    cfg = load_config(toml(tmp_path, sample), env={})
    assert cfg.ignored_keys() == []
    assert (
        cfg.storage_options().kv
        == LevelDBOptions()
        == LevelDBOptions(
            write_buffer_size=64 << 20,
            lru_cache_size=8 << 20,
            block_size=4096,
            block_restart_interval=16,
            max_file_size=64 << 20,
        )
    )
    tuned = """
[storage.kv]
block-cache-capacity = "32 MiB"
block-restart-interval = 8
block-size = "16 KiB"
compaction-table-size = "4 MiB"
write-buffer = "1 MiB"
"""
    kv = load_config(toml(tmp_path, tuned), env={}).storage_options().kv
    assert kv.kwargs() == {
        "write_buffer_size": 1 << 20,
        "lru_cache_size": 32 << 20,
        "block_size": 16 << 10,
        "block_restart_interval": 8,
        "max_file_size": 4 << 20,
    }


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            "block-size = 512",
            "'storage.kv.block-size': must be between 1KiB and 4MiB (LevelDB's limits for block_size)",
        ),
        ("compaction-table-size = 1024", "'storage.kv.compaction-table-size': must be between 1MiB and 1GiB"),
        ("write-buffer = 1024", "'storage.kv.write-buffer': must be between 64KiB and 1GiB"),
    ],
)
def test_storage_kv_values_out_of_leveldb_range_are_refused(tmp_path: Path, line: str, error: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_config(toml(tmp_path, f"[storage.kv]\n{line}\n"), env={})


def test_storage_kv_zero_is_the_default_as_in_the_original(tmp_path: Path) -> None:
    """The original's setDefaultStorageConfig reads a value <= 0 as its default.  Was: block-cache-capacity = 0
    gave LevelDB a cache of 0 bytes, and the other zeros were refused."""
    zeros = """
[storage.kv]
block-cache-capacity = 0
block-restart-interval = 0
block-size = 0
compaction-table-size = 0
write-buffer = 0
"""
    cfg = load_config(toml(tmp_path, zeros), env={})
    assert cfg.storage_options().kv == LevelDBOptions()
    assert cfg.ignored_keys() == []
    negative = load_config(toml(tmp_path, "[storage.kv]\nblock-restart-interval = -1\n"), env={})
    assert negative.storage_options().kv.block_restart_interval == LevelDBOptions().block_restart_interval


def test_enable_debug_is_named_as_ignored(tmp_path: Path) -> None:
    cfg = load_config(toml(tmp_path, "enable-debug = true\n"), env={})
    assert cfg.ignored_keys() == [
        "config key 'enable-debug' is ignored (the original defined it and never read it; set log-level = debug "
        "for debug logs)"
    ]


def test_print_config_marks_what_start_would_refuse_or_ignore(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--print-config prints the effective config, then names what start-up would refuse or ignore."""
    missing = tmp_path / "no-ca.pem"
    argv = ["--print-config", "--security.ssl-ca", str(missing), "--storage.kv.write-L0-pause-trigger", "30"]
    assert pump_main.main(argv) == 0
    out = capsys.readouterr().out
    trailer = out[out.index("# At start (not config keys):") :].splitlines()
    assert trailer[1].startswith("# REFUSED (the daemon exits with status 2): ")
    assert "[security] ssl-ca is set but [security] ssl-cert and [security] ssl-key are not" in trailer[1]
    assert trailer[2:] == [
        "# ignored (a warning is logged): config key 'storage.kv.write-L0-pause-trigger' is ignored (LevelDB "
        "fixes its compaction triggers and level sizes at build time; plyvel cannot set them)"
    ]
    assert load_config(toml(tmp_path, out), env={}).storage.kv.write_l0_pause_trigger == 30  # still loads
    assert pump_main.main(["--print-config"]) == 0
    assert "# At start" not in capsys.readouterr().out  # nothing to say: no trailer
