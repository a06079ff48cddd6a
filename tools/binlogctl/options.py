"""`binlogctl` command line: both the original's Go flag style and a subcommand style, one parser.

    binlogctl -cmd pumps -pd-urls http://127.0.0.1:2379 -show-offline-nodes        (the original's style)
    binlogctl pumps --pd-urls http://127.0.0.1:2379 --show-offline-nodes          (ours)

Go's flag package takes `-name`, `--name`, `-name=value` and `-name value`, and a bool flag never takes the
next word (only `-name=true|false`). `go_style_to_argparse` rewrites the words into argparse's form before
parsing: a known long name with one dash gets two, a value flag is joined with its value (`--text=-x`), so a
value may start with a dash as in Go, and `=true` / `=false` on a bool flag becomes the flag or nothing.
`-cmd X` and the positional command are the same setting (both given and different: an error).

`parse()` returns frozen Options or raises ConfigError (one line, naming the flag); it never exits except
for `-h` and `-V`, as argparse does.  `--ssl-ca` (with `--ssl-cert` and `--ssl-key` when the servers
require a client certificate, as ours do) turns on TLS; the files are read and checked here.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo
from pathlib import Path
from typing import Final

from common.config import ArgumentParser
from common.errors import ConfigError
from common.etcd import parse_endpoints
from common.registry import NodeKind, NodeState
from common.tls import TLS, client_tls_from_flags

PROG: Final = "binlogctl"
DEFAULT_PD_URLS: Final = "http://127.0.0.1:2379"
DEFAULT_DATA_DIR: Final = "binlog_position"
DEFAULT_COMMAND: Final = "pumps"
DEFAULT_TIMEOUT: Final = 5.0
"""Ours: seconds for each network step (etcd with its retries, the TSO, a node's HTTP API)."""

LIST_COMMANDS: Final = {"pumps": NodeKind.PUMP, "drainers": NodeKind.DRAINER}
UPDATE_COMMANDS: Final = {"update-pump": NodeKind.PUMP, "update-drainer": NodeKind.DRAINER}
ACTION_COMMANDS: Final = {
    "pause-pump": (NodeKind.PUMP, "pause"),
    "pause-drainer": (NodeKind.DRAINER, "pause"),
    "offline-pump": (NodeKind.PUMP, "close"),
    "offline-drainer": (NodeKind.DRAINER, "close"),
}
COMMANDS: Final = (*LIST_COMMANDS, *UPDATE_COMMANDS, *ACTION_COMMANDS, "generate_meta", "encrypt")
COMMAND_ALIASES: Final = {"generate-meta": "generate_meta"}

VALUE_FLAGS: Final = frozenset(
    {"cmd", "node-id", "state", "data-dir", "pd-urls", "ssl-ca", "ssl-cert", "ssl-key", "time-zone", "text"}
    | {"status-addr", "timeout", "commit-ts"}  # ours
)
BOOL_FLAGS: Final = frozenset({"show-offline-nodes", "json"})
STATES: Final = tuple(s.value for s in NodeState)


@dataclass(frozen=True)
class Options:
    command: str
    pd_urls: str
    node_id: str = ""
    state: NodeState | None = None
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    show_offline: bool = False
    json: bool = False
    text: str = ""
    time_zone: tzinfo | None = None
    """None: the local time zone."""
    time_zone_name: str = ""
    status_addr: str = ""
    timeout: float = DEFAULT_TIMEOUT
    commit_ts: int | None = None
    """generate_meta: write this position instead of a fresh TSO (ours); None: the fresh TSO."""
    tls: TLS | None = None
    """--ssl-ca / --ssl-cert / --ssl-key read and checked: TLS to etcd, pd-server and the nodes' HTTP APIs."""


# ----------------------------------------------------------------------------------------------- Go style


def _split_flag(word: str) -> tuple[str, str | None] | None:
    """(name, value after '=' or None) of a `-name` / `--name` word, None for anything else."""
    if word in ("-", "--") or not word.startswith("-"):
        return None
    body = word[2:] if word.startswith("--") else word[1:]
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def go_style_to_argparse(argv: Sequence[str]) -> list[str]:
    """Rewrite Go flag words (see the module docstring) into argparse words; unknown words pass unchanged."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":  # everything after it is positional
            out += argv[i - 1 :]
            break
        split = _split_flag(word)
        if split is None:
            out.append(word)
            continue
        name, value = split
        if name in VALUE_FLAGS:
            if value is None:
                if i >= len(argv):
                    raise ConfigError(f"command line: flag -{name} needs a value")
                value = argv[i]
                i += 1
            out.append(f"--{name}={value}")
        elif name in BOOL_FLAGS:
            if value is None or value.lower() in ("true", "1", "t"):
                out.append(f"--{name}")
            elif value.lower() not in ("false", "0", "f"):
                raise ConfigError(f"command line: -{name}={value}: expected true or false")
        else:
            out.append(word)  # -h, -V, or an unknown flag argparse will name
    return out


# ----------------------------------------------------------------------------------------------- parser


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog=PROG,
        description=(
            "Inspect and change pump / drainer nodes in etcd, write a drainer savepoint, encrypt a password. "
            "Flags may be written Go-style (-cmd pumps -pd-urls URL) or with two dashes."
        ),
    )
    p.add_argument("command", nargs="?", metavar="COMMAND", help=f"one of {', '.join(COMMANDS)} (default pumps)")
    p.add_argument("--cmd", dest="cmd_flag", metavar="COMMAND", help="the command, as the original's -cmd")
    p.add_argument(
        "--pd-urls",
        default=DEFAULT_PD_URLS,
        metavar="URLS",
        help=f"etcd endpoints, comma-separated (default {DEFAULT_PD_URLS})",
    )
    p.add_argument("--node-id", default="", metavar="ID", help="node id for update-*, pause-*, offline-*")
    p.add_argument("--state", default="", metavar="STATE", help=f"new state for update-*: {', '.join(STATES)}")
    p.add_argument(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        metavar="DIR",
        help=f"generate_meta writes DIR/savepoint (default {DEFAULT_DATA_DIR})",
    )
    p.add_argument(
        "--commit-ts",
        default="",
        metavar="TS",
        help="generate_meta: write this commit_ts instead of the current TSO; refused when ahead of it (ours)",
    )
    p.add_argument("--show-offline-nodes", action="store_true", help="list offline nodes too")
    p.add_argument("--json", action="store_true", help="pumps / drainers: the etcd values as a JSON array")
    p.add_argument("--text", default="", help="the text to encrypt")
    p.add_argument("--time-zone", default="", metavar="ZONE", help="zone for listed times and savepoint comments")
    p.add_argument(
        "--status-addr",
        default="",
        metavar="HOST:PORT",
        help="pause-* / offline-*: the node's HTTP status address (default: published by the node, else the "
        "default status port that goes with its default gRPC port)",
    )
    p.add_argument(
        "--timeout", default=str(DEFAULT_TIMEOUT), metavar="SECONDS", help="for each network step (default 5)"
    )
    p.add_argument("--ssl-ca", default="", metavar="FILE", help="CA certificate (PEM): TLS to etcd, pd-server, nodes")
    p.add_argument("--ssl-cert", default="", metavar="FILE", help="client certificate (PEM) for TLS")
    p.add_argument("--ssl-key", default="", metavar="FILE", help="client private key (PEM) for TLS")
    p.add_argument("-V", "--version", action="store_true", help="print the version and exit")
    return p


def parse(argv: Sequence[str]) -> Options | None:
    """The options of `argv`, or None for -V (the caller prints the version). ConfigError on bad input."""
    args = build_parser().parse_args(go_style_to_argparse(argv))
    if args.version:
        return None
    command = _command(args.command, args.cmd_flag)
    parse_endpoints(args.pd_urls)  # a bad URL is named before anything connects
    tls = client_tls_from_flags(args.ssl_ca, args.ssl_cert, args.ssl_key)
    opts = Options(
        command=command,
        pd_urls=args.pd_urls,
        node_id=args.node_id,
        state=_state(args.state) if args.state else None,
        data_dir=Path(args.data_dir),
        show_offline=args.show_offline_nodes,
        json=args.json,
        text=args.text,
        time_zone=_zone(args.time_zone),
        time_zone_name=args.time_zone,
        status_addr=_status_addr(args.status_addr),
        timeout=_timeout(args.timeout),
        commit_ts=_commit_ts(args.commit_ts),
        tls=tls,
    )
    _check_needs(opts)
    return opts


def _command(positional: str | None, flag: str | None) -> str:
    if positional and flag and COMMAND_ALIASES.get(positional, positional) != COMMAND_ALIASES.get(flag, flag):
        raise ConfigError(f"command line: two commands given: {positional!r} and -cmd {flag!r}")
    command = positional or flag or DEFAULT_COMMAND
    command = COMMAND_ALIASES.get(command, command)
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}: use one of {', '.join(COMMANDS)}")
    return command


def _state(text: str) -> NodeState:
    try:
        return NodeState(text)
    except ValueError:
        raise ConfigError(f"--state {text!r} is not a node state: use one of {', '.join(STATES)}") from None


def _zone(name: str) -> tzinfo | None:
    if not name:
        return None
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"--time-zone {name!r} is not a known time zone (e.g. Asia/Shanghai, UTC)") from None


def _status_addr(text: str) -> str:
    if not text:
        return ""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--status-addr {text!r}: expected HOST:PORT")
    return text


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise ConfigError(f"--timeout {text!r}: expected a positive number of seconds")
    return value


def _commit_ts(text: str) -> int | None:
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 < value < 1 << 63:
        raise ConfigError(f"--commit-ts {text!r}: expected a TSO, an integer from 1 to 9223372036854775807")
    return value


def _check_needs(opts: Options) -> None:
    """The flags each command cannot do without (the original's checks, one line each)."""
    c = opts.command
    if c in UPDATE_COMMANDS or c in ACTION_COMMANDS:
        if not opts.node_id:
            raise ConfigError(f"{c} needs --node-id")
        if "/" in opts.node_id:
            raise ConfigError(f"--node-id {opts.node_id!r}: a node id contains no '/'")
    if c in UPDATE_COMMANDS and opts.state is None:
        raise ConfigError(f"{c} needs --state ({', '.join(STATES)})")
    if opts.commit_ts is not None and c != "generate_meta":
        raise ConfigError(f"--commit-ts is for generate_meta, not {c}")
    if c == "encrypt" and not opts.text:
        raise ConfigError("encrypt needs --text (the text to encrypt)")
