"""drainer.toml / DRAINER_* / MYSQL_* / flags: defaults, precedence, strictness, unsupported settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.config import dump
from common.encrypt import encrypt
from common.errors import ConfigError
from drainer import main as drainer_main
from drainer.config import DrainerConfig, EventFilterRule, TableName, load_config, parse_args

DEPLOY_SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "drainer.toml"


def toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "drainer.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults() -> None:
    cfg = load_config(env={})
    assert (cfg.addr, cfg.status_addr, cfg.advertise) == ("127.0.0.1:8249", "127.0.0.1:18249", "127.0.0.1:8249")
    assert (cfg.node_id, cfg.data_dir, cfg.pd_urls) == ("", Path("data.drainer"), "http://127.0.0.1:2379")
    assert (cfg.detect_interval, cfg.initial_commit_ts, cfg.synced_check_time) == (5.0, -1, 5)
    assert (cfg.compressor, cfg.heartbeat_interval, cfg.log_level, cfg.log_file) == ("", 1.0, "info", "")
    assert cfg.pump_stall_report_after == 30.0
    s = cfg.syncer
    assert (s.txn_batch, s.worker_count, s.sync_ddl, s.safe_mode, s.db_type) == (20, 16, True, False, "mysql")
    assert (s.safe_mode_duration, s.max_inflight_bytes) == (300.0, 16 << 20)
    assert (s.loopback_control, s.channel_id, s.sql_mode, s.case_sensitive) == (False, 0, None, False)
    assert s.ignore_schema_names == ("INFORMATION_SCHEMA", "PERFORMANCE_SCHEMA", "mysql")
    assert (s.ignore_table, s.replicate_do_db, s.replicate_do_table, s.event_filter) == ((), (), (), ())
    assert (s.dispatch, s.detect, s.ignore_txn_commit_ts) == (True, True, ())
    assert (s.relay.log_dir, s.relay.max_file_size, cfg.relay_enabled) == ("", 10_485_760, False)
    to = s.to
    assert (to.host, to.user, to.password, to.port) == ("localhost", "root", "", 3306)
    assert (to.sync_mode, to.read_timeout, to.params, to.merge) == (1, 60.0, {}, False)
    assert (to.dir, to.retention_time, to.path) == ("", 0, "")
    assert (to.kafka_addrs, to.zookeeper_addrs, to.kafka_version) == ("127.0.0.1:9092", "", "0.8.2.0")
    assert (to.kafka_max_messages, to.kafka_max_message_size, to.kafka_client_id) == (1024, 1 << 30, "tidb_binlog")
    assert (to.topic_name, to.protocol, to.kafka_ack_timeout) == ("", "secondary-binlog", 300.0)
    assert (cfg.file_dir, cfg.sqlite_path) == (Path("data.drainer"), Path("data.drainer/downstream.db"))
    cp = to.checkpoint
    assert (cp.type, cp.schema, cp.table, cp.host, cp.user, cp.password, cp.port) == (
        "",
        "tidb_binlog",
        "checkpoint",
        "",
        "",
        "",
        0,
    )
    assert cfg.ignored_keys() == []
    cfg.check_supported()


def test_deploy_sample_parses_to_the_defaults() -> None:
    cfg = load_config(DEPLOY_SAMPLE, env={})
    assert cfg == DrainerConfig()
    assert dump(cfg)


def test_full_file(tmp_path: Path) -> None:
    file = toml(
        tmp_path,
        """
data-dir = "/var/drainer"
detect-interval = "500ms"
initial-commit-ts = 42
[syncer]
db-type = "file"
txn-batch = 5
ignore-txn-commit-ts = [7, 8]
ignore-schemas = "a, b"
replicate-do-db = ["~^shop", "crm"]
safe-mode-duration = "30s"
max-inflight-bytes = "8MiB"
[[syncer.replicate-do-table]]
db-name = "test"
tbl-name = "~^log_"
[[syncer.ignore-table]]
db-name = "test"
tbl-name = "secret"
[[syncer.event-filter]]
schema-pattern = "shop"
table-pattern = "audit_*"
ignore-event = ["delete", "all ddl"]
ignore-sql = ["^drop"]
[syncer.relay]
log-dir = "/var/relay"
max-file-size = "1MiB"
[syncer.to]
dir = "/var/pb"
retention-time = 3
params = { time_zone = "+00:00" }
[syncer.to.checkpoint]
type = "mysql"
host = "cp-host"
""",
    )
    cfg = load_config(file, env={})
    s = cfg.syncer
    assert (cfg.data_dir, cfg.detect_interval, cfg.initial_commit_ts) == (Path("/var/drainer"), 0.5, 42)
    assert (s.db_type, s.txn_batch, s.ignore_txn_commit_ts, s.ignore_schema_names) == ("file", 5, (7, 8), ("a", "b"))
    assert (s.safe_mode_duration, s.max_inflight_bytes) == (30.0, 8 << 20)
    assert s.replicate_do_db == ("~^shop", "crm")
    assert s.replicate_do_table == (TableName("test", "~^log_"),)
    assert s.ignore_table == (TableName("test", "secret"),)
    assert s.event_filter == (EventFilterRule("shop", "audit_*", ("delete", "all ddl"), ("^drop",)),)
    assert (s.relay.log_dir, s.relay.max_file_size, cfg.relay_enabled) == ("/var/relay", 1 << 20, True)
    assert (cfg.file_dir, s.to.retention_time, s.to.params) == (Path("/var/pb"), 3, {"time_zone": "+00:00"})
    assert (s.to.checkpoint.type, s.to.checkpoint.host) == ("mysql", "cp-host")


def test_precedence_file_env_flags(tmp_path: Path) -> None:
    file = toml(tmp_path, 'node-id = "file"\naddr = "10.0.0.1:1"\n[syncer]\ntxn-batch = 3\nworker-count = 4\n')
    env = {"DRAINER_NODE_ID": "env", "DRAINER_ADDR": "10.0.0.2:2", "DRAINER_SYNCER_TXN_BATCH": "6"}
    cfg, args = parse_args(["--config", str(file), "--addr", "10.0.0.3:3", "-c", "9"], env=env)
    assert (cfg.node_id, cfg.addr, cfg.listen_port) == ("env", "10.0.0.3:3", 3)
    assert (cfg.syncer.txn_batch, cfg.syncer.worker_count) == (6, 9)
    assert args.print_config is False


def test_original_flag_spellings() -> None:
    cfg, _ = parse_args(["--dest-db-type", "pb", "--txn-batch", "2", "--safe-mode", "-L", "debug"], env={})
    assert (cfg.syncer.db_type, cfg.syncer.txn_batch, cfg.syncer.safe_mode, cfg.log_level) == ("pb", 2, True, "debug")


def test_mysql_env_defaults_of_syncer_to(tmp_path: Path) -> None:
    env = {"MYSQL_HOST": "db1", "MYSQL_USER": "u", "MYSQL_PSWD": "pw", "MYSQL_PORT": "3307"}
    to = load_config(env=env).syncer.to
    assert (to.host, to.user, to.password, to.port) == ("db1", "u", "pw", 3307)
    # Any explicit setting beats MYSQL_*: the file, DRAINER_* or a flag.
    file = toml(tmp_path, '[syncer.to]\nhost = "file-host"\n')
    to = load_config(
        file, env={**env, "DRAINER_SYNCER_TO_USER": "env-user"}, flags={"syncer.to.port": "4000"}
    ).syncer.to
    assert (to.host, to.user, to.password, to.port) == ("file-host", "env-user", "pw", 4000)


def test_mysql_env_yields_to_a_key_set_to_its_default_value(tmp_path: Path) -> None:
    """MYSQL_* fill only keys no source set: a file that spells out the default still wins."""
    env = {"MYSQL_HOST": "db1", "MYSQL_PORT": "3307", "MYSQL_USER": "u"}
    file = toml(tmp_path, '[syncer.to]\nhost = "localhost"\n')
    to = load_config(file, env={**env, "DRAINER_SYNCER_TO_PORT": "3306"}, flags={"syncer.to.user": "root"}).syncer.to
    assert (to.host, to.port, to.user) == ("localhost", 3306, "root")
    # An overridden bad MYSQL_PORT is never read.
    assert load_config(env={"MYSQL_PORT": "many", "DRAINER_SYNCER_TO_PORT": "3308"}).syncer.to.port == 3308


@pytest.mark.parametrize("raw", ["many", "", "0", "70000"])
def test_bad_mysql_port_message(raw: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        load_config(env={"MYSQL_PORT": raw})
    assert str(excinfo.value) == (
        f"environment variable MYSQL_PORT: invalid value for 'syncer.to.port': must be a port number 1..65535 "
        f"(got {raw!r})"
    )


def test_bad_mysql_port_env_names_the_variable() -> None:
    with pytest.raises(ConfigError, match=r"MYSQL_PORT: invalid value for 'syncer.to.port'"):
        load_config(env={"MYSQL_PORT": "many"})


def test_unknown_key_names_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'syncer.txn_batch' \(did you mean 'syncer.txn-batch'\?\)"):
        load_config(toml(tmp_path, "[syncer]\ntxn_batch = 1\n"), env={})
    with pytest.raises(ConfigError, match=r"unknown key 'syncer.ignore-table\[0\].table'"):
        load_config(toml(tmp_path, '[[syncer.ignore-table]]\ndb-name = "a"\ntable = "b"\n'), env={})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[syncer]\nignore-schemas = "a,,b"\n', r"'syncer.ignore-schemas': empty schema name"),
        ('[syncer]\nignore-schemas = "a,"\n', r"'syncer.ignore-schemas': empty schema name"),
        ("[syncer]\ntxn-batch = 0\n", r"'syncer.txn-batch': must be >= 1"),
        ("[syncer]\nworker-count = -1\n", r"'syncer.worker-count'"),
        ('[syncer]\ndb-type = "postgres"\n', r"'syncer.db-type': expected one of"),
        ('[syncer]\ndb-type = "flash"\n', r"'syncer.db-type': the flash DestDBType is no longer supported"),
        ('[syncer]\nreplicate-do-db = ["~("]\n', r"'syncer.replicate-do-db': bad regular expression"),
        ('[[syncer.ignore-table]]\ndb-name = "a"\n', r"'syncer.ignore-table\[0\].tbl-name': must not be empty"),
        (
            '[[syncer.replicate-do-table]]\ndb-name = "~["\ntbl-name = "t"\n',
            r"'syncer.replicate-do-table\[0\].db-name': bad regular expression",
        ),
        ('[[syncer.event-filter]]\nignore-event = ["upsert"]\n', r"'syncer.event-filter\[0\].ignore-event\[0\]'"),
        ('[[syncer.event-filter]]\nignore-sql = ["("]\n', r"'syncer.event-filter\[0\].ignore-sql'"),
        ('[[syncer.event-filter]]\nschema-pattern = "a"\n', r"needs ignore-event or ignore-sql"),
        ("initial-commit-ts = -2\n", r"'initial-commit-ts': must be >= -1"),
        ('compressor = "zstd"\n', r"'compressor'"),
        ("[syncer.to]\nport = 70000\n", r"'syncer.to.port'"),
        ("[syncer.to]\nsync-mode = 3\n", r"'syncer.to.sync-mode'"),
        ("[syncer.to]\nretention-time = -1\n", r"'syncer.to.retention-time'"),
        ('[syncer.to.checkpoint]\ntype = "redis"\n', r"'syncer.to.checkpoint.type'"),
        ('[syncer.to.checkpoint]\nschema = ""\n', r"'syncer.to.checkpoint.schema' must not be empty"),
        ('status-addr = "nohost"\n', r"'status-addr': must be host:port"),
        ('addr = "0.0.0.0:8249"\n', r"advertise-addr"),
        ('detect-interval = "0s"\n', r"'detect-interval': must be > 0"),
        ("pump-stall-report-after = 0\n", r"'pump-stall-report-after': must be > 0"),
        ('pump-stall-report-after = "-1s"\n', r"'pump-stall-report-after'"),
        ("pull-idle-timeout = 0\n", r"'pull-idle-timeout': must be > 0"),
        ('pd-urls = "ftp://x"\n', r"pd-urls"),
        ('[syncer.to]\nkafka-addrs = ""\n', r"'syncer.to.kafka-addrs': expected comma-separated host:port"),
        ('[syncer.to]\nkafka-addrs = "a:1,b"\n', r"'syncer.to.kafka-addrs': .*got 'b'"),
        ('[syncer.to]\nkafka-ack-timeout = "0s"\n', r"'syncer.to.kafka-ack-timeout': must be > 0"),
        ("[syncer.to]\nkafka-max-messages = 0\n", r"'syncer.to.kafka-max-messages'"),
        ("[syncer.to]\nkafka-max-message-size = 0\n", r"'syncer.to.kafka-max-message-size': must be > 0"),
        ('[syncer.to]\nprotocol = "avro"\n', r"'syncer.to.protocol': expected one of"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(toml(tmp_path, text), env={})


def test_bad_env_and_flag_values_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"DRAINER_SYNCER_WORKER_COUNT: invalid value for 'syncer.worker-count'"):
        load_config(env={"DRAINER_SYNCER_WORKER_COUNT": "many"})
    with pytest.raises(ConfigError, match=r"flag --syncer.safe-mode: invalid value for 'syncer.safe-mode'"):
        parse_args(["--syncer.safe-mode=perhaps"], env={})


def test_empty_ignore_schemas_means_none() -> None:
    assert load_config(flags={"syncer.ignore-schemas": ""}, env={}).syncer.ignore_schema_names == ()


def test_deprecated_disable_keys_win_and_are_listed() -> None:
    cfg = load_config(flags={"syncer.disable-dispatch": "true", "syncer.enable-detect": "false"}, env={})
    assert (cfg.syncer.dispatch, cfg.syncer.detect) == (False, False)
    cfg = load_config(flags={"syncer.disable-detect": "false", "syncer.enable-detect": "false"}, env={})
    assert cfg.syncer.detect is True
    assert cfg.ignored_keys() == [
        "config key 'syncer.disable-detect' is ignored (deprecated, use enable-detect; it still takes effect)"
    ]


def test_ignored_keys_are_accepted_and_listed(tmp_path: Path) -> None:
    file = toml(
        tmp_path,
        'metrics-addr = "127.0.0.1:9091"\ncache-binlog-count = 8\n[syncer]\nload-schema-snapshot = true\n'
        '[syncer.to]\nkafka-addrs = "k:9092"\ntopic-name = "t"\n',
    )
    warnings = load_config(file, env={}).ignored_keys()
    assert len(warnings) == 5
    assert warnings[0] == (
        "config key 'metrics-addr' is ignored (Prometheus push is not supported: scrape /metrics on status-addr)"
    )
    assert "config key 'syncer.to.kafka-addrs' is ignored (only db-type kafka reads it)" in warnings
    assert "config key 'syncer.to.topic-name' is ignored (only db-type kafka reads it)" in warnings


def test_kafka_keys(tmp_path: Path) -> None:
    file = toml(
        tmp_path,
        '[syncer]\ndb-type = "kafka"\n[syncer.to]\nkafka-addrs = "k1:9092, k2:9093"\nkafka-version = "2.1.0"\n'
        'kafka-max-messages = 64\nkafka-max-message-size = "64MiB"\nkafka-client-id = "me"\ntopic-name = "t"\n'
        'protocol = "canal-json"\nkafka-ack-timeout = "20s"\nzookeeper-addrs = "zk:2181"\n',
    )
    cfg = load_config(file, env={"KAFKA_ADDRS": "env:1"})
    cfg.check_supported()
    to = cfg.syncer.to
    assert (to.kafka_addrs, to.kafka_version, to.kafka_max_messages) == ("k1:9092, k2:9093", "2.1.0", 64)
    assert (to.kafka_max_message_size, to.kafka_client_id, to.topic_name) == (64 << 20, "me", "t")
    assert (to.protocol, to.kafka_ack_timeout) == ("canal-json", 20.0)
    assert cfg.ignored_keys() == [
        "config key 'syncer.to.zookeeper-addrs' is ignored (ZooKeeper is not read; the brokers are "
        "kafka-addrs = k1:9092, k2:9093)"
    ]


def test_kafka_addrs_from_the_environment_when_unset() -> None:
    flags = {"syncer.db-type": "kafka"}
    assert load_config(flags=flags, env={"KAFKA_ADDRS": "k9:9092,k8:9092"}).syncer.to.kafka_addrs == "k9:9092,k8:9092"
    assert load_config(flags=flags, env={}).syncer.to.kafka_addrs == "127.0.0.1:9092"
    both = {"syncer.db-type": "kafka", "syncer.to.kafka-addrs": "flag:1"}
    assert load_config(flags=both, env={"KAFKA_ADDRS": "env:1"}).syncer.to.kafka_addrs == "flag:1"
    with pytest.raises(ConfigError, match=r"KAFKA_ADDRS: invalid value for 'syncer.to.kafka-addrs': expected"):
        load_config(flags=flags, env={"KAFKA_ADDRS": "nohost"})


@pytest.mark.parametrize("version", ["0.8.2.0", "0.10.2.1", "0.11.0.2", "1.0.0", "2.1.0", "3.7.0", "4.0.0"])
def test_kafka_versions_accepted(version: str) -> None:
    load_config(flags={"syncer.to.kafka-version": version}, env={})


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("2.1", "expected a Kafka version"),
        ("v2.1.0", "expected a Kafka version"),
        ("0.8.2", "expected a Kafka version"),
        ("2.1.0.0", "expected a Kafka version"),
        ("latest", "expected a Kafka version"),
        ("0.8.1.1", "unknown Kafka version"),
        ("9.0.0", "unknown Kafka version"),
    ],
)
def test_unknown_kafka_version_is_a_config_error_naming_the_key(version: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(flags={"syncer.db-type": "kafka", "syncer.to.kafka-version": version}, env={})
    message = str(info.value)
    assert "'syncer.to.kafka-version'" in message
    assert why in message
    assert '"0.X.Y.Z" before 1.0 (e.g. "0.8.2.0", "0.11.0.2") or "X.Y.Z" from 1.0 on' in message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"security.ssl-ca": "ca.pem"}, r"\[security\] ssl-ca is set but \[security\] ssl-cert and"),
        ({"security.cert-allowed-cn": "a"}, r"\[security\] cert-allowed-cn is set but \[security\] ssl-ca is not"),
        ({"syncer.db-type": "oracle"}, r"'syncer.db-type' = 'oracle' is not supported"),
        ({"syncer.loopback-control": "true"}, r"'syncer.loopback-control' is not supported yet"),
        ({"syncer.to.checkpoint.type": "oracle"}, r"'syncer.to.checkpoint.type' = 'oracle' is not supported"),
        (
            {"syncer.relay.log-dir": "/relay", "syncer.db-type": "file"},
            r"relay log applies only to db-type mysql, tidb or sqlite, not 'file'",
        ),
    ],
)
def test_unsupported_settings_load_but_are_refused(flags: dict[str, object], message: str) -> None:
    cfg = load_config(flags=flags, env={})
    with pytest.raises(ConfigError, match=message):
        cfg.check_supported()


def test_sync_mode_2_and_merge_are_accepted_for_mysql_and_listed_as_ignored_elsewhere() -> None:
    flags: dict[str, object] = {"syncer.to.sync-mode": 2, "syncer.to.merge": "true"}
    cfg = load_config(flags=flags, env={})
    cfg.check_supported()
    assert (cfg.syncer.to.sync_mode, cfg.syncer.to.merge, cfg.ignored_keys()) == (2, True, [])
    other = load_config(flags={**flags, "syncer.db-type": "file"}, env={})
    other.check_supported()
    assert other.ignored_keys() == [
        "config key 'syncer.to.sync-mode' is ignored (only db-type mysql and tidb read it)",
        "config key 'syncer.to.merge' is ignored (only db-type mysql and tidb read it)",
    ]
    with pytest.raises(ConfigError, match="sync-mode"):
        load_config(flags={"syncer.to.sync-mode": 3}, env={})


def test_supported_db_types_pass() -> None:
    for db_type in ("mysql", "tidb", "sqlite", "file", "pb", "kafka"):
        load_config(flags={"syncer.db-type": db_type}, env={}).check_supported()
    for db_type in ("mysql", "tidb", "sqlite"):  # with a relay log
        load_config(flags={"syncer.db-type": db_type, "syncer.relay.log-dir": "/r"}, env={}).check_supported()


def test_sink_paths_follow_data_dir_and_overrides() -> None:
    cfg = load_config(flags={"data-dir": "/d"}, env={})
    assert (cfg.file_dir, cfg.sqlite_path) == (Path("/d"), Path("/d/downstream.db"))
    cfg = load_config(flags={"data-dir": "/d", "syncer.to.dir": "/pb", "syncer.to.path": "/x.db"}, env={})
    assert (cfg.file_dir, cfg.sqlite_path) == (Path("/pb"), Path("/x.db"))


def test_print_config_round_trips(tmp_path: Path) -> None:
    cfg = load_config(flags={"node-id": "n1", "syncer.ignore-txn-commit-ts": "1,2", "syncer.to.params": "a=b"}, env={})
    assert load_config(toml(tmp_path, dump(cfg)), env={}) == cfg


def test_encrypted_passwords_are_decrypted_each_from_its_own_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINLOG_SECRET_KEY", raising=False)
    to_secret, cp_secret = encrypt("to-pass"), encrypt("cp-pass")
    cfg = load_config(
        flags={
            "syncer.to.password": "plain",
            "syncer.to.encrypted_password": to_secret,
            "syncer.to.checkpoint.password": "cp-plain",
            "syncer.to.checkpoint.encrypted_password": cp_secret,
        },
        env={},
    )
    cfg.check_supported()
    assert (cfg.to_password, cfg.checkpoint_password) == ("to-pass", "cp-pass")
    plain = load_config(flags={"syncer.to.password": "p", "syncer.to.checkpoint.password": "c"}, env={})
    assert (plain.to_password, plain.checkpoint_password) == ("p", "c")


def test_an_encrypted_password_that_does_not_decrypt_fails_at_load() -> None:
    with pytest.raises(ConfigError, match=r"'syncer.to.encrypted_password': encrypted text is not base64"):
        load_config(flags={"syncer.to.encrypted_password": "%%%"}, env={})
    with pytest.raises(ConfigError, match=r"'syncer.to.checkpoint.encrypted_password': encrypted text .*'@'"):
        load_config(flags={"syncer.to.checkpoint.encrypted_password": "YWJj"}, env={})


def test_print_config_lists_every_refusal_and_ignored_key(capsys: pytest.CaptureFixture[str]) -> None:
    """--print-config prints the config, then every reason start-up would refuse it and every ignored key."""
    argv = [
        "--print-config",
        "--syncer.loopback-control",
        "--syncer.db-type", "kafka",
        "--syncer.relay.log-dir", "/r",
        "--syncer.to.zookeeper-addrs", "z:2181",
        "--syncer.to.security.ssl-cert", "c.pem",
    ]  # fmt: skip
    assert drainer_main.main(argv) == 0
    out = capsys.readouterr().out
    trailer = out[out.index("# At start (not config keys):") :].splitlines()[1:]
    refused = [line for line in trailer if line.startswith("# REFUSED (the daemon exits with status 2): ")]
    assert [r.split(": ", 1)[1] for r in refused] == [
        "'syncer.loopback-control' is not supported yet; set it to false",
        "'syncer.relay.log-dir' is set, but the relay log applies only to db-type mysql, tidb or sqlite, not "
        "'kafka'; remove it or change db-type",
    ]
    ignored = [line for line in trailer if line.startswith("# ignored (a warning is logged): ")]
    assert any("'syncer.to.zookeeper-addrs' is ignored" in line for line in ignored), trailer
    assert len(refused) + len(ignored) == len(trailer)
    with pytest.raises(ConfigError, match="loopback-control"):  # start-up refuses the first of them
        load_config(flags={"syncer.loopback-control": "true", "syncer.db-type": "kafka"}, env={}).check_supported()


def test_file_sink_keys_for_another_db_type_are_named_as_ignored() -> None:
    cfg = load_config(flags={"syncer.to.dir": "/pb", "syncer.to.retention-time": "7"}, env={})
    assert cfg.ignored_keys() == [
        "config key 'syncer.to.dir' is ignored (only db-type file reads it)",
        "config key 'syncer.to.retention-time' is ignored (only db-type file reads it)",
    ]
    assert load_config(flags={"syncer.db-type": "file", "syncer.to.dir": "/pb"}, env={}).ignored_keys() == []
