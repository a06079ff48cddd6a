"""binlogctl without servers: both flag styles, validation, the table, JSON list, savepoint, status address."""

from __future__ import annotations

import json
import tomllib
from datetime import UTC
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from common import tso
from common.encrypt import KEY_ENV, decrypt
from common.errors import ConfigError
from common.registry import NodeKind, NodeState, NodeStatus
from drainer.checkpoint import FileCheckpoint
from tools import binlogctl
from tools.binlogctl import CommandError, status_addr_of, write_savepoint
from tools.binlogctl.options import (
    COMMANDS,
    DEFAULT_DATA_DIR,
    DEFAULT_PD_URLS,
    DEFAULT_TIMEOUT,
    Options,
    go_style_to_argparse,
    parse,
)
from tools.binlogctl.render import json_list, node_table, savepoint_text, table, ts_time

# 2024-05-01 10:00:00.123 UTC, logical 5
TS = tso.compose(1714557600123, 5)


def opts(argv: list[str]) -> Options:
    o = parse(argv)
    assert o is not None
    return o


# ----------------------------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["-cmd", "pumps", "-pd-urls", "http://h:1"], ["--cmd=pumps", "--pd-urls=http://h:1"]),
        (["-cmd=drainers"], ["--cmd=drainers"]),
        (["--node-id", "n1"], ["--node-id=n1"]),
        (["-text", "-starts-with-dash"], ["--text=-starts-with-dash"]),
        (["-show-offline-nodes"], ["--show-offline-nodes"]),
        (["-show-offline-nodes=true", "-json=1"], ["--show-offline-nodes", "--json"]),
        (["-show-offline-nodes=false", "pumps"], ["pumps"]),
        (["-show-offline-nodes", "pumps"], ["--show-offline-nodes", "pumps"]),  # a bool takes no value
        (["pumps", "-V", "-h", "-foo"], ["pumps", "-V", "-h", "-foo"]),
        (["encrypt", "--", "-cmd"], ["encrypt", "--", "-cmd"]),
    ],
)
def test_go_style_words_become_argparse_words(argv: list[str], words: list[str]) -> None:
    assert go_style_to_argparse(argv) == words


def test_a_value_flag_at_the_end_and_a_bad_bool_are_named() -> None:
    with pytest.raises(ConfigError, match="flag -node-id needs a value"):
        go_style_to_argparse(["update-pump", "-node-id"])
    with pytest.raises(ConfigError, match=r"-show-offline-nodes=maybe: expected true or false"):
        go_style_to_argparse(["-show-offline-nodes=maybe"])


def test_both_styles_give_the_same_options(tmp_path: Path) -> None:
    where = str(tmp_path)
    go = opts(
        "-cmd update-pump -pd-urls http://127.0.0.1:2379 -node-id p1 -state paused -data-dir X "
        "-show-offline-nodes -time-zone UTC".replace("X", where).split()
    )
    ours = opts(
        "update-pump --pd-urls http://127.0.0.1:2379 --node-id p1 --state paused --data-dir X "
        "--show-offline-nodes --time-zone UTC".replace("X", where).split()
    )
    assert go == ours
    assert go.command == "update-pump"
    assert go.state is NodeState.PAUSED
    assert go.data_dir == tmp_path
    assert go.show_offline
    assert go.time_zone == ZoneInfo("UTC")


def test_defaults() -> None:
    o = opts([])
    assert o == Options(command="pumps", pd_urls=DEFAULT_PD_URLS)
    assert o.data_dir == Path(DEFAULT_DATA_DIR) == Path("binlog_position")
    assert o.timeout == DEFAULT_TIMEOUT
    assert not o.show_offline
    assert not o.json
    assert o.time_zone is None


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_parses_in_both_styles(command: str) -> None:
    extra = ["--node-id", "n", "--state", "online", "--text", "t"]
    assert opts([command, *extra]).command == command
    assert opts(["-cmd", command, *extra]).command == command
    assert opts(["-cmd", command, command, *extra]).command == command  # both, the same: fine


def test_generate_meta_commit_ts_in_both_styles() -> None:
    assert opts(["generate_meta"]).commit_ts is None
    assert opts(["generate_meta", "--commit-ts", "417455000000000000"]).commit_ts == 417455000000000000
    assert opts(["-cmd", "generate_meta", "-commit-ts", "9223372036854775807"]).commit_ts == 9223372036854775807
    assert opts(["-cmd=generate_meta", "-commit-ts=7"]).commit_ts == 7


def test_generate_meta_alias_and_version_flag() -> None:
    assert opts(["generate-meta"]).command == "generate_meta"
    assert opts(["-cmd", "generate-meta", "generate_meta"]).command == "generate_meta"
    assert parse(["-V"]) is None
    assert parse(["pumps", "--version"]) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["frobnicate"], "unknown command 'frobnicate': use one of pumps, drainers"),
        (["pumps", "-cmd", "drainers"], "two commands given: 'pumps' and -cmd 'drainers'"),
        (["update-pump", "--state", "paused"], "update-pump needs --node-id"),
        (["update-drainer", "--node-id", "d1"], r"update-drainer needs --state \(online, pausing, paused"),
        (["update-pump", "--node-id", "p", "--state", "dead"], "--state 'dead' is not a node state: use one of"),
        (["update-pump", "--node-id", "p", "--state", "Online"], "--state 'Online' is not a node state"),
        (["pause-pump"], "pause-pump needs --node-id"),
        (["offline-drainer", "--node-id", "a/b"], "--node-id 'a/b': a node id contains no '/'"),
        (["encrypt"], r"encrypt needs --text"),
        (["pumps", "-ssl-ca", "/nonexistent/ca.pem"], "--ssl-ca: cannot read '/nonexistent/ca.pem'"),
        (["pumps", "--ssl-cert", "c", "--ssl-key", "k"], "--ssl-cert is set but --ssl-ca is not"),
        (["pumps", "--ssl-ca", "ca.pem", "--ssl-key", "k"], "--ssl-key is set but --ssl-cert is not"),
        (["pumps", "--time-zone", "Mars/Olympus"], "--time-zone 'Mars/Olympus' is not a known time zone"),
        (["pumps", "--pd-urls", "ftp://h:1"], "bad etcd endpoint 'ftp://h:1'"),
        (["pumps", "--pd-urls", "http://h:notaport"], "bad etcd endpoint"),
        (["pumps", "--status-addr", "nohost"], "--status-addr 'nohost': expected HOST:PORT"),
        (["pumps", "--status-addr", "h:70000"], "--status-addr 'h:70000': expected HOST:PORT"),
        (["pumps", "--timeout", "0"], "--timeout '0': expected a positive number"),
        (["pumps", "--timeout", "soon"], "--timeout 'soon'"),
        (["pumps", "-foo"], "unrecognized arguments: -foo"),
        (["pumps", "--pd-url", "x"], "unrecognized arguments: --pd-url"),  # no abbreviations
        (["generate_meta", "--commit-ts", "soon"], r"--commit-ts 'soon': expected a TSO, an integer from 1 to"),
        (["generate_meta", "--commit-ts", "0"], "--commit-ts '0': expected a TSO"),
        (["generate_meta", "--commit-ts", str(1 << 63)], f"--commit-ts '{1 << 63}': expected a TSO"),
        (["pumps", "--commit-ts", "5"], "--commit-ts is for generate_meta, not pumps"),
    ],
)
def test_bad_command_lines_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse(argv)


# ----------------------------------------------------------------------------------------------- main


def test_main_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert binlogctl.main(["update-pump", "--node-id", "p1", "--state", "gone"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "binlogctl: --state 'gone' is not a node state: use one of online, pausing, paused, closing, offline\n"
    )


def test_main_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert binlogctl.main(["-V"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Release Version: ")
    assert "\nGit Commit Hash: " in out
    assert "\nBuild TS: " in out


def test_main_encrypt_prints_text_the_drainer_can_decrypt(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "00112233445566778899aabbccddeeff")
    assert binlogctl.main(["-cmd", "encrypt", "-text", "-my pässword"]) == 0
    out = capsys.readouterr().out
    assert out.endswith("\n")
    assert out.count("\n") == 1
    assert decrypt(out.strip(), bytes.fromhex("00112233445566778899aabbccddeeff")) == "-my pässword"


def test_main_encrypt_with_a_bad_key_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, "0011")
    assert binlogctl.main(["encrypt", "--text", "pw"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "binlogctl: BINLOG_SECRET_KEY is 2 bytes; AES needs 16, 24 or 32 bytes\n"


# ----------------------------------------------------------------------------------------------- rendering


def test_ts_time_in_utc_a_zone_and_zero() -> None:
    assert ts_time(TS, UTC) == "2024-05-01 10:00:00.123 UTC"
    assert ts_time(TS, ZoneInfo("Asia/Shanghai")) == "2024-05-01 18:00:00.123 CST"
    assert ts_time(0, UTC) == "-"
    assert ts_time(TS).startswith("2024-05-01 ")  # local zone


def test_table_aligns_columns_without_trailing_spaces() -> None:
    text = table([("a", "long value", "x"), ("longer", "v", "")], header=("H1", "H2", "H3"))
    assert text == ("H1      H2          H3\na       long value  x\nlonger  v\n")


def test_node_table_has_every_column_and_notes_hidden_offline_nodes() -> None:
    nodes = [
        NodeStatus("pump0", "127.0.0.1:8250", NodeState.ONLINE, max_commit_ts=TS, update_ts=TS + (2000 << 18)),
        NodeStatus("pump-with-long-id", "10.0.0.2:8250", NodeState.PAUSED),
    ]
    lines = node_table(nodes, UTC, hidden_offline=2).splitlines()
    assert lines[0].split() == ["NodeID", "Addr", "State", "MaxCommitTS", "MaxCommitTime", "UpdateTime"]
    assert lines[1].split() == [
        "pump0", "127.0.0.1:8250", "online", str(TS),
        "2024-05-01", "10:00:00.123", "UTC", "2024-05-01", "10:00:02.123", "UTC",
    ]  # fmt: skip
    assert lines[2].split() == ["pump-with-long-id", "10.0.0.2:8250", "paused", "0", "-", "-"]
    assert lines[0].index("Addr") == lines[1].index("127.0.0.1") == lines[2].index("10.0.0.2")
    assert lines[3] == "(2 offline nodes hidden; --show-offline-nodes)"
    assert node_table([], UTC) == "NodeID  Addr  State  MaxCommitTS  MaxCommitTime  UpdateTime\n"
    assert node_table([], UTC, hidden_offline=1).endswith("(1 offline node hidden; --show-offline-nodes)\n")


def test_json_list_keeps_each_stored_value_byte_for_byte() -> None:
    values = [NodeStatus("a", "h:1", NodeState.ONLINE).to_json().encode(), b'{"nodeId": "b",  "x": 1}']
    text = json_list(values)
    assert text.splitlines()[1:3] == [values[0].decode() + ",", values[1].decode()]
    assert json.loads(text) == [json.loads(v) for v in values]
    assert json_list([]) == "[]\n"


def test_savepoint_is_what_the_drainer_file_checkpoint_reads(tmp_path: Path) -> None:
    text = savepoint_text(TS, ZoneInfo("Asia/Shanghai"), "Asia/Shanghai")
    assert text == (
        f"commitTS = {TS}\n"
        "# commitTS time UTC: 2024-05-01 10:00:00.123 UTC\n"
        "# commitTS time Asia/Shanghai: 2024-05-01 18:00:00.123 CST\n"
    )
    assert tomllib.loads(text) == {"commitTS": TS}
    assert savepoint_text(TS) == f"commitTS = {TS}\n# commitTS time UTC: 2024-05-01 10:00:00.123 UTC\n"

    path = write_savepoint(tmp_path / "new" / "dir", text)
    assert path == tmp_path / "new" / "dir" / "savepoint"
    assert path.read_text() == text
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert [p.name for p in path.parent.iterdir()] == ["savepoint"]  # no temp file left
    cp = FileCheckpoint(path.parent)
    try:
        state = cp.load()
    finally:
        cp.close()
    assert state is not None
    assert (state.commit_ts, state.schema_version, state.consistent) == (TS, 0, False)


def test_savepoint_in_an_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(CommandError, match=f"cannot write {blocker}/savepoint: "):
        write_savepoint(blocker, "commitTS = 1\n")
    assert blocker.read_text() == "x"


# ----------------------------------------------------------------------------------------------- status address


@pytest.mark.parametrize(
    ("kind", "host", "labels", "override", "expected"),
    [
        (NodeKind.PUMP, "10.0.0.1:8250", None, "", "10.0.0.1:18250"),
        (NodeKind.DRAINER, "10.0.0.1:8249", None, "", "10.0.0.1:18249"),
        (NodeKind.PUMP, "10.0.0.1:8249", None, "", None),  # a drainer's default port on a pump: no guess
        (NodeKind.PUMP, "10.0.0.1:9000", None, "", None),
        (NodeKind.PUMP, "10.0.0.1:9000", {"status-addr": "10.0.0.1:9001"}, "", "10.0.0.1:9001"),
        (NodeKind.PUMP, "10.0.0.1:8250", {"status-addr": "10.0.0.1:9001"}, "", "10.0.0.1:9001"),
        (NodeKind.PUMP, "10.0.0.1:8250", {"status-addr": "10.0.0.1:9001"}, "h:2", "h:2"),
        (NodeKind.DRAINER, "[::1]:8249", None, "", "[::1]:18249"),
    ],
)
def test_status_address_resolution(
    kind: NodeKind, host: str, labels: dict[str, str] | None, override: str, expected: str | None
) -> None:
    status = NodeStatus("n", host, NodeState.ONLINE, labels=labels)
    assert status_addr_of(kind, status, override) == expected
