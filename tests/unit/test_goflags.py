"""The original's Go command lines (common/config/goflags.py): every flag of pump, drainer, arbiter and reparo
sets the key it names here; Go's spellings work and the ones Go would mis-parse are refused by name."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from arbiter import config as arbiter_config
from common import version
from common.config.goflags import (
    ARBITER_FLAGS,
    CONFIG,
    DRAINER_FLAGS,
    PUMP_FLAGS,
    REPARO_FLAGS,
    VERSION,
    GoFlags,
    to_argparse,
)
from common.config.schema import Kind, value_fields
from common.errors import ConfigError
from drainer import config as drainer_config
from pump import config as pump_config
from tools.reparo import config as reparo_config

DAY = 86_400.0

ParseArgs = Callable[..., tuple[Any, argparse.Namespace]]

# program -> (its Go flags, parse_args, its config class, the words every command line of the test needs)
COMMANDS: dict[str, tuple[GoFlags, ParseArgs, type, list[str]]] = {
    "pump": (PUMP_FLAGS, pump_config.parse_args, pump_config.PumpConfig, []),
    "drainer": (DRAINER_FLAGS, drainer_config.parse_args, drainer_config.DrainerConfig, []),
    "arbiter": (ARBITER_FLAGS, arbiter_config.parse_args, arbiter_config.ArbiterConfig, ["-up.topic", "t"]),
    "reparo": (REPARO_FLAGS, reparo_config.parse_args, reparo_config.ReparoConfig, ["-data-dir", "d"]),
}

# (program, value flag) -> (the word given, the value of the key it sets)
VALUES: dict[tuple[str, str], tuple[str, object]] = {
    ("pump", "L"): ("debug", "debug"),
    ("pump", "node-id"): ("p1", "p1"),
    ("pump", "addr"): ("127.0.0.1:8350", "127.0.0.1:8350"),
    ("pump", "advertise-addr"): ("10.0.0.1:8350", "10.0.0.1:8350"),
    ("pump", "socket"): ("/tmp/pump.sock", "/tmp/pump.sock"),
    ("pump", "pd-urls"): ("http://10.0.0.2:2379", "http://10.0.0.2:2379"),
    ("pump", "data-dir"): ("/data/pump", Path("/data/pump")),
    ("pump", "heartbeat-interval"): ("5", 5.0),
    ("pump", "gc"): ("3", 3 * DAY),
    ("pump", "metrics-addr"): ("10.0.0.3:9091", "10.0.0.3:9091"),
    ("pump", "metrics-interval"): ("30", 30),
    ("pump", "log-file"): ("pump.log", "pump.log"),
    ("pump", "max-message-size"): ("1048576", 1048576),
    ("pump", "fake-binlog-interval"): ("7", 7.0),
    ("pump", "binlog-file-size"): ("1024", 1024),
    ("pump", "binlog-slice-size"): ("64", 64),
    ("pump", "log-rotate"): ("day", "day"),
    ("drainer", "L"): ("warn", "warn"),
    ("drainer", "node-id"): ("d1", "d1"),
    ("drainer", "addr"): ("127.0.0.1:8349", "127.0.0.1:8349"),
    ("drainer", "advertise-addr"): ("10.0.0.1:8349", "10.0.0.1:8349"),
    ("drainer", "data-dir"): ("/data/drainer", Path("/data/drainer")),
    ("drainer", "detect-interval"): ("9", 9.0),
    ("drainer", "pd-urls"): ("http://10.0.0.2:2379", "http://10.0.0.2:2379"),
    ("drainer", "metrics-addr"): ("10.0.0.3:9091", "10.0.0.3:9091"),
    ("drainer", "metrics-interval"): ("30", 30),
    ("drainer", "log-file"): ("drainer.log", "drainer.log"),
    ("drainer", "initial-commit-ts"): ("-1", -1),
    ("drainer", "compressor"): ("gzip", "gzip"),
    ("drainer", "cache-binlog-count"): ("100", 100),
    ("drainer", "synced-check-time"): ("2", 2),
    ("drainer", "log-rotate"): ("day", "day"),
    ("drainer", "txn-batch"): ("7", 7),
    ("drainer", "channel-id"): ("3", 3),
    ("drainer", "ignore-schemas"): ("a,b", "a,b"),
    ("drainer", "c"): ("8", 8),
    ("drainer", "dest-db-type"): ("file", "file"),
    ("drainer", "relay-log-dir"): ("/data/relay", "/data/relay"),
    ("drainer", "relay-max-file-size"): ("2048", 2048),
    ("arbiter", "L"): ("error", "error"),
    ("arbiter", "addr"): ("127.0.0.1:8351", "127.0.0.1:8351"),
    ("arbiter", "metrics.addr"): ("10.0.0.3:9091", "10.0.0.3:9091"),
    ("arbiter", "metrics.interval"): ("30", 30),
    ("arbiter", "log-file"): ("arbiter.log", "arbiter.log"),
    ("arbiter", "up.initial-commit-ts"): ("42", 42),
    ("arbiter", "up.topic"): ("topic2", "topic2"),
    ("arbiter", "down.worker-count"): ("4", 4),
    ("arbiter", "down.batch-size"): ("32", 32),
    ("reparo", "L"): ("debug", "debug"),
    ("reparo", "data-dir"): ("/data/files", "/data/files"),
    ("reparo", "start-datetime"): ("2024-05-01 10:00:00", "2024-05-01 10:00:00"),
    ("reparo", "stop-datetime"): ("2024-05-02 10:00:00", "2024-05-02 10:00:00"),
    ("reparo", "start-tso"): ("5", 5),
    ("reparo", "stop-tso"): ("9", 9),
    ("reparo", "txn-batch"): ("7", 7),
    ("reparo", "log-file"): ("reparo.log", "reparo.log"),
    ("reparo", "dest-type"): ("mysql", "mysql"),
    ("reparo", "c"): ("8", 8),
}


def value_of(cfg: object, dotted: str) -> object:
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part.replace("-", "_"))
    return value


def all_flags(kind: str) -> list[tuple[str, str]]:
    """(program, flag name) of every value flag (kind "value") or bool flag ("bool") that sets a key."""
    return [
        (program, f.name)
        for program, (flags, *_) in COMMANDS.items()
        for f in flags.flags.values()
        if f.key is not None and f.boolean == (kind == "bool")
    ]


def parse(program: str, argv: list[str], env: Mapping[str, str] | None = None) -> Any:
    _, parse_args, _, base = COMMANDS[program]
    cfg, _ = parse_args([*base, *argv], env={} if env is None else env)
    return cfg


def test_every_value_flag_has_a_sample() -> None:
    """A flag added to a table without a line in VALUES would not be tested: this fails first."""
    assert set(all_flags("value")) == set(VALUES)


@pytest.mark.parametrize(("program", "name"), all_flags("value"))
@pytest.mark.parametrize(("dashes", "joined"), [("-", False), ("-", True), ("--", False), ("--", True)])
def test_every_value_flag_sets_its_key_in_each_go_spelling(program: str, name: str, dashes: str, joined: bool) -> None:
    flags = COMMANDS[program][0]
    key = flags.flags[name].key
    assert key is not None
    word, expected = VALUES[(program, name)]
    argv = [f"{dashes}{name}={word}"] if joined else [f"{dashes}{name}", word]
    cfg = parse(program, argv)
    assert value_of(cfg, key) == expected


@pytest.mark.parametrize(("program", "name"), all_flags("bool"))
def test_every_bool_flag_takes_the_go_forms(program: str, name: str) -> None:
    key = COMMANDS[program][0].flags[name].key
    assert key is not None
    assert value_of(parse(program, [f"-{name}"]), key) is True
    assert value_of(parse(program, [f"-{name}=false"]), key) is False
    assert value_of(parse(program, [f"--{name}=true"]), key) is True
    assert value_of(parse(program, [f"-{name}=0"]), key) is False
    assert value_of(parse(program, [f"-{name}=T"]), key) is True


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_every_key_of_a_table_is_a_key_of_the_command_with_the_same_kind(program: str) -> None:
    flags, _, cls, _ = COMMANDS[program]
    kinds = {}
    for dotted, chain in value_fields(cls):
        spec = chain[-1].spec
        scalar = spec.item if spec.kind is Kind.OPTIONAL and spec.item is not None else spec
        kinds[dotted] = scalar.kind
    for f in flags.flags.values():
        if f.key is None:
            assert f.target in (CONFIG, VERSION)
            continue
        assert f.key in kinds, f"{program} -{f.name}: no key {f.key!r}"
        assert (kinds[f.key] is Kind.BOOL) == f.boolean, f"{program} -{f.name}: bool flag vs key kind"


@pytest.mark.parametrize("program", sorted(COMMANDS))
@pytest.mark.parametrize("spelling", [["-config", "{}"], ["-config={}"], ["--config", "{}"], ["--config={}"]])
def test_config_file_in_every_spelling(program: str, spelling: list[str], tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('log-file = "from-file.log"\n', encoding="utf-8")
    cfg = parse(program, [w.format(path) for w in spelling])
    assert cfg.log_file == "from-file.log"


def test_drainer_c_is_worker_count_and_config_is_never_c_onfig(tmp_path: Path) -> None:
    """Was: `drainer -config f.toml` parsed as `-c onfig` (worker-count 'onfig')."""
    path = tmp_path / "drainer.toml"
    path.write_text("[syncer]\nworker-count = 3\n", encoding="utf-8")
    cfg = parse("drainer", ["-config", str(path)])
    assert cfg.syncer.worker_count == 3
    assert parse("drainer", ["-config", str(path), "-c", "8"]).syncer.worker_count == 8
    assert parse("drainer", ["-c=5"]).syncer.worker_count == 5


def test_flags_outrank_the_environment_as_before() -> None:
    assert parse("pump", ["-L", "debug"], env={"PUMP_LOG_LEVEL": "error"}).log_level == "debug"
    assert parse("drainer", [], env={"DRAINER_SYNCER_WORKER_COUNT": "4"}).syncer.worker_count == 4
    assert parse("drainer", ["-c", "6"], env={"DRAINER_SYNCER_WORKER_COUNT": "4"}).syncer.worker_count == 6


def test_our_own_dotted_flags_keep_working_with_one_dash_or_two() -> None:
    cfg = parse("drainer", ["--syncer.to.port", "3307", "-syncer.to.user=u", "--status-addr", "127.0.0.1:1"])
    assert (cfg.syncer.to.port, cfg.syncer.to.user, cfg.status_addr) == (3307, "u", "127.0.0.1:1")
    assert parse("drainer", ["--syncer.to.password", "-starts-with-dash"]).syncer.to.password == "-starts-with-dash"
    pump = parse("pump", ["--storage.sync-log", "false", "--gen-binlog-interval", "4"])
    assert (pump.storage.sync_log, pump.gen_binlog_interval) == (False, 4.0)
    assert parse("pump", ["--storage.sync-log"]).storage.sync_log is True


def test_deprecated_flags_are_accepted_and_warned_about() -> None:
    pump = parse("pump", ["-binlog-file-size", "1", "-enable-binlog-slice", "-log-rotate", "day"])
    assert pump.ignored_keys() == [
        "config key 'binlog-file-size' is ignored (deprecated)",
        "config key 'enable-binlog-slice' is ignored (deprecated)",
        "config key 'log-rotate' is ignored (deprecated)",
    ]
    drainer = parse("drainer", ["-log-rotate", "day", "-disable-dispatch"])
    assert drainer.ignored_keys() == [
        "config key 'log-rotate' is ignored (deprecated)",
        "config key 'syncer.disable-dispatch' is ignored (deprecated, use enable-dispatch; it still takes effect)",
    ]
    assert drainer.syncer.dispatch is False


@pytest.mark.parametrize(
    ("program", "argv", "message"),
    [
        ("drainer", ["-foo"], "unknown flag -foo: the original's drainer has no such flag and it is not one of ours"),
        ("drainer", ["--foo=1"], "unknown flag --foo: the original's drainer has no such flag"),
        ("drainer", ["-c8"], "unknown flag -c8:"),
        ("pump", ["-dest-db-type", "file"], "unknown flag -dest-db-type: the original's pump has no such flag"),
        ("reparo", ["-sync-ddl"], "unknown flag -sync-ddl: the original's reparo has no such flag"),
        ("drainer", ["-safe-mode", "false"], "-safe-mode is a bool flag and takes no separate value: write "
         "-safe-mode=false"),
        ("arbiter", ["-safe-mode", "true"], "write -safe-mode=true"),
        ("drainer", ["-safe-mode=maybe"], "-safe-mode=maybe: a bool flag takes true or false"),
        ("pump", ["-addr"], "flag -addr needs a value (-addr VALUE or -addr=VALUE)"),
        ("pump", ["--status-addr"], "flag --status-addr needs a value"),
        ("pump", ["-L", "debug", "extra"], "unexpected argument 'extra': pump takes only flags"),
        ("pump", ["--", "x"], "unexpected argument 'x'"),
        ("pump", ["---addr=x"], "bad flag syntax: ---addr=x"),
    ],
)  # fmt: skip
def test_what_go_would_mis_parse_is_refused_naming_the_word(program: str, argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(program, argv)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_value_may_start_with_a_dash_as_in_go() -> None:
    assert parse("drainer", ["-initial-commit-ts", "-1", "-L", "debug"]).log_level == "debug"
    assert parse("drainer", ["-ignore-schemas", "-x"]).syncer.ignore_schemas == "-x"


def test_rewriting_is_plain_words_in_words_out() -> None:
    parser = drainer_config.build_parser()
    words = to_argparse(
        ["-config", "f", "-c", "8", "-safe-mode", "-V", "-h", "--syncer.to.port", "1"], DRAINER_FLAGS, parser
    )
    assert words == ["--config=f", "--syncer.worker-count=8", "--syncer.safe-mode", "--version", "--help",
                     "--syncer.to.port=1"]  # fmt: skip


def test_help_names_the_originals_flags_and_where_they_go() -> None:
    text = pump_config.build_parser().format_help()
    assert "-fake-binlog-interval (= --gen-binlog-interval)" in " ".join(text.split())
    text = " ".join(drainer_config.build_parser().format_help().split())
    assert "-c (= --syncer.worker-count)" in text
    assert "-dest-db-type (= --syncer.db-type)" in text


@pytest.mark.parametrize("program", sorted(COMMANDS))
@pytest.mark.parametrize("word", ["-V", "--V", "--version", "-version"])
def test_version_prints_the_three_lines_and_exits_0(
    program: str, word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(program, [word])
    assert info.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Release Version: ")
    assert lines[1].startswith("Git Commit Hash: ")
    assert lines[2].startswith("Build TS: ")
    assert lines[3].startswith("Python Version: ")


# ----------------------------------------------------------------------------------------------- build info


def fake_build_module(monkeypatch: pytest.MonkeyPatch, git_hash: str, build_ts: str) -> None:
    module = types.ModuleType(version.BUILD_INFO_MODULE)
    module.GIT_HASH = git_hash  # type: ignore[attr-defined]
    module.BUILD_TS = build_ts  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, version.BUILD_INFO_MODULE, module)


def test_build_info_from_the_generated_module_outside_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_build_module(monkeypatch, "abc123", "2026-01-02 03:04:05")
    info = version.build_info(tmp_path)
    assert (info.git_hash, info.build_ts) == ("abc123", "2026-01-02 03:04:05")
    assert info.release not in ("", version.UNKNOWN)


def test_build_info_without_module_or_checkout_is_unknown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, version.BUILD_INFO_MODULE, None)  # import fails: the module is absent
    info = version.build_info(tmp_path)
    assert (info.git_hash, info.build_ts) == ("unknown", "unknown")
    assert "Git Commit Hash: unknown\nBuild TS: unknown\n" in info.text()


def git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_build_info_in_a_checkout_is_its_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "x")
    head = git(tmp_path, "rev-parse", "HEAD")
    fake_build_module(monkeypatch, "stale0", "2026-01-02 03:04:05")
    info = version.build_info(tmp_path)
    assert (info.git_hash, info.build_ts) == (head, "unknown (source checkout)")
    fake_build_module(monkeypatch, head, "2026-01-02 03:04:05")
    assert version.build_info(tmp_path).build_ts == "2026-01-02 03:04:05"


def test_build_info_script_writes_a_module_version_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "_build_info.py"
    script = Path(__file__).resolve().parents[2] / "deploy" / "build_info.py"
    subprocess.run(
        [sys.executable, str(script), "--git-hash", "feed42", "--out", str(out)], check=True, capture_output=True
    )
    namespace: dict[str, object] = {}
    exec(compile(out.read_text(encoding="utf-8"), str(out), "exec"), namespace)
    assert namespace["GIT_HASH"] == "feed42"
    assert isinstance(namespace["BUILD_TS"], str)
    fake_build_module(monkeypatch, "feed42", namespace["BUILD_TS"])
    assert version.build_info(tmp_path).text().splitlines()[1:3] == [
        "Git Commit Hash: feed42",
        f"Build TS: {namespace['BUILD_TS']}",
    ]


@pytest.mark.parametrize("program", sorted(COMMANDS))
@pytest.mark.parametrize("spelling", [["-config="], ["-config", ""], ["--config="], ["-config", " "]])
def test_an_empty_config_file_name_is_refused_naming_it(program: str, spelling: list[str]) -> None:
    """Was: Path("") is ".", read as the config file ("cannot read config file '.': Is a directory")."""
    with pytest.raises(ConfigError) as info:
        parse(program, spelling)
    assert "is empty: give the TOML file's path, or leave the flag out" in str(info.value)


@pytest.mark.parametrize("program", sorted(COMMANDS))
def test_version_false_is_no_version_as_in_go(program: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Go's -V=false sets V to false: the command runs.  Was: argparse's "ignored explicit argument"."""
    cfg = parse(program, ["-V=false", "-L", "error"])
    assert cfg.log_level == "error"
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit) as info:
        parse(program, ["-V=true"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("Release Version: ")
