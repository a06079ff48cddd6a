"""The original's Go command lines: its flag names, and the rewriting of Go flag words into ours.

The original's pump, drainer, arbiter and reparo parse their command line with Go's `flag` package:

* `-name` and `--name` are the same flag; a value is `-name=value` or `-name value` (the next word, even
  one that starts with a dash, as in `-initial-commit-ts -1`);
* a bool flag is `-name` (true) or `-name=true|false` (also 1, 0, t, f, T, F, TRUE, FALSE, True, False);
  it never takes the next word: `-safe-mode false` is `-safe-mode` followed by a stray argument `false`,
  which the original then refuses ("'false' is not a valid flag");
* parsing stops at `--` or at the first word that is not a flag.

Several of its flags name a key differently from its own TOML (`-c` is `[syncer] worker-count`,
`-dest-db-type` is `[syncer] db-type`, `-fake-binlog-interval` is `gen-binlog-interval`).  A `GoFlags`
table per command lists every flag of the original's `<command> -h` with the dotted key it sets here.
`to_argparse()` turns a command line written either way into argparse words before parsing:

    -config f.toml | -config=f.toml | --config f.toml   ->  --config=f.toml
    -c 8                                                 ->  --syncer.worker-count=8
    -safe-mode | -safe-mode=false                        ->  --syncer.safe-mode=true | --syncer.safe-mode=false
    -V | -V=true                                         ->  --version           (-V=false: nothing, as Go)
    --syncer.to.port 3307 | -syncer.to.port=3307         ->  --syncer.to.port=3307        (our own keys)

It never guesses: a word that is neither one of the original's flags nor one of our long options fails
naming it, `-safe-mode false` fails saying to write `-safe-mode=false`, and a stray word fails naming it.
Our own bool flags keep argparse's form `--storage.sync-log false` (their value may be the next word).
The deprecated flags map to keys that are accepted and ignored with a warning (`ignored_keys()`).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from common.errors import ConfigError

CONFIG: Final = "--config"
VERSION: Final = "--version"
HELP: Final = "--help"
"""Targets that are not config keys: the config file, -V and -h."""

_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_HELP_NAMES: Final = ("h", "help")
"""Go's flag package answers -h and -help (and their two-dash spellings) with the usage text."""


@dataclass(frozen=True)
class GoFlag:
    """One flag of the original: its name (no dashes), the option it becomes here, and whether it is bool.

    `target` is `--<dotted key>`, or CONFIG / VERSION."""

    name: str
    target: str
    boolean: bool = False

    @property
    def key(self) -> str | None:
        """The dotted config key it sets, None for -config and -V."""
        return None if self.target in (CONFIG, VERSION) else self.target.removeprefix("--")


@dataclass(frozen=True)
class GoFlags:
    """The original's flag set of one command (`program`), by name."""

    program: str
    flags: Mapping[str, GoFlag]

    @classmethod
    def of(cls, program: str, *flags: GoFlag) -> GoFlags:
        return cls(program, {f.name: f for f in flags})

    def epilog(self) -> str:
        """One help paragraph naming the original's flags, and the keys of those spelled differently."""
        renamed = [f"-{f.name} (= {f.target})" for f in self.flags.values() if f.key is not None and f.key != f.name]
        same = [f"-{f.name}" for f in self.flags.values() if f.key == f.name]
        return (
            f"The original {self.program}'s Go flags work too, with one dash or two, '-flag value' or "
            f"'-flag=value' (a bool flag: -flag or -flag=false): -config, -V, {', '.join(same)}; "
            f"and under another name here: {', '.join(renamed)}."
        )


def _value(name: str, target: str, boolean: bool = False) -> GoFlag:
    return GoFlag(name, target, boolean)


def _same(*names: str) -> tuple[GoFlag, ...]:
    return tuple(GoFlag(n, f"--{n}") for n in names)


def _same_bool(*names: str) -> tuple[GoFlag, ...]:
    return tuple(GoFlag(n, f"--{n}", boolean=True) for n in names)


_COMMON: Final = (GoFlag("config", CONFIG), GoFlag("V", VERSION, boolean=True), GoFlag("L", "--log-level"))

PUMP_FLAGS: Final = GoFlags.of(
    "pump",
    *_COMMON,
    *_same("node-id", "addr", "advertise-addr", "socket", "pd-urls", "data-dir", "heartbeat-interval", "gc"),
    *_same("metrics-addr", "metrics-interval", "log-file", "max-message-size"),
    _value("fake-binlog-interval", "--gen-binlog-interval"),
    *_same_bool("enable-debug"),
    # deprecated in the original too: accepted and ignored with a warning
    *_same("binlog-file-size", "binlog-slice-size", "log-rotate"),
    *_same_bool("enable-binlog-slice"),
)
"""pump/config.go NewConfig."""

DRAINER_FLAGS: Final = GoFlags.of(
    "drainer",
    *_COMMON,
    *_same("node-id", "addr", "advertise-addr", "data-dir", "detect-interval", "pd-urls"),
    *_same("metrics-addr", "metrics-interval", "log-file", "initial-commit-ts", "compressor"),
    *_same("cache-binlog-count", "synced-check-time", "log-rotate"),
    _value("txn-batch", "--syncer.txn-batch"),
    _value("loopback-control", "--syncer.loopback-control", boolean=True),
    _value("sync-ddl", "--syncer.sync-ddl", boolean=True),
    _value("channel-id", "--syncer.channel-id"),
    _value("ignore-schemas", "--syncer.ignore-schemas"),
    _value("c", "--syncer.worker-count"),
    _value("dest-db-type", "--syncer.db-type"),
    _value("relay-log-dir", "--syncer.relay.log-dir"),
    _value("relay-max-file-size", "--syncer.relay.max-file-size"),
    _value("disable-dispatch", "--syncer.disable-dispatch", boolean=True),
    _value("enable-dispatch", "--syncer.enable-dispatch", boolean=True),
    _value("safe-mode", "--syncer.safe-mode", boolean=True),
    _value("disable-detect", "--syncer.disable-detect", boolean=True),
    _value("enable-detect", "--syncer.enable-detect", boolean=True),
    _value("load-schema-snapshot", "--syncer.load-schema-snapshot", boolean=True),
)
"""drainer/config.go NewConfig."""

ARBITER_FLAGS: Final = GoFlags.of(
    "arbiter",
    *_COMMON,
    *_same("addr", "metrics.addr", "metrics.interval", "log-file"),
    *_same("up.initial-commit-ts", "up.topic", "down.worker-count", "down.batch-size"),
    *_same_bool("open-sarama-log"),
    _value("safe-mode", "--down.safe-mode", boolean=True),
)
"""arbiter/config.go NewConfig."""

REPARO_FLAGS: Final = GoFlags.of(
    "reparo",
    *_COMMON,
    *_same("data-dir", "start-datetime", "stop-datetime", "start-tso", "stop-tso", "txn-batch", "log-file"),
    *_same("dest-type"),
    _value("c", "--worker-count"),
    *_same_bool("safe-mode"),
)
"""reparo/config.go NewConfig."""


def to_argparse(argv: Sequence[str], flags: GoFlags, parser: argparse.ArgumentParser) -> list[str]:
    """`argv` in argparse's words: the original's flags as our options, ours with their value joined.

    Raises ConfigError (one line naming the word) for an unknown flag, a missing value, a bad bool, a bool
    flag followed by a separate true/false, and any stray word (these commands take no positional argument).
    """
    ours = {s: a for a in parser._actions for s in a.option_strings if s.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":  # Go: the end of the flags; what follows would be positional
            if i < len(argv):
                raise _stray(argv[i], flags.program)
            break
        if word == "-" or not word.startswith("-"):
            raise _stray(word, flags.program)
        body = word[2:] if word.startswith("--") else word[1:]
        name, eq, value = body.partition("=")
        if not name or name.startswith("-"):
            raise ConfigError(f"command line: bad flag syntax: {word}")
        shown = word.partition("=")[0]
        go = flags.flags.get(name)
        if name in _HELP_NAMES:
            out.append(HELP)
        elif go is not None and go.boolean and go.target == VERSION:
            if not eq or _go_bool(shown, value) == "true":  # Go: -V=false leaves V false, the command runs
                out.append(VERSION)
        elif go is not None and go.boolean:
            out.append(f"{go.target}={_go_bool(shown, value)}" if eq else go.target)
            if not eq and i < len(argv) and argv[i] in _GO_TRUE | _GO_FALSE:
                raise ConfigError(
                    f"command line: {shown} is a bool flag and takes no separate value: write {shown}={argv[i]} "
                    f"(the original's {flags.program} would leave {argv[i]!r} over and refuse it)"
                )
        elif go is not None:
            if not eq:
                value, i = _next_value(argv, i, shown)
            out.append(f"{go.target}={value}")
        elif (action := ours.get(f"--{name}")) is not None:
            option, i = _our_option(f"--{name}", action, value if eq else None, argv, i)
            out.append(option)
        else:
            raise ConfigError(
                f"command line: unknown flag {shown}: the original's {flags.program} has no such flag and it is "
                f"not one of ours (see {flags.program} --help)"
            )
    return out


def _our_option(
    option: str, action: argparse.Action, given: str | None, argv: Sequence[str], i: int
) -> tuple[str, int]:
    """One of our long options with its value joined (`--key=value`, so a value may start with a dash), and
    the index of the word after it.  `given`: the value after '=' in the word, None without '='."""
    if given is not None:
        return f"{option}={given}", i
    if action.nargs == 0:
        return option, i
    if action.nargs is None:
        value, i = _next_value(argv, i, option)
        return f"{option}={value}", i
    if action.nargs == "?" and i < len(argv) and not argv[i].startswith("-"):  # ours: `--sync-log false`
        return f"{option}={argv[i]}", i + 1
    return option, i


def _next_value(argv: Sequence[str], i: int, shown: str) -> tuple[str, int]:
    if i >= len(argv):
        raise ConfigError(f"command line: flag {shown} needs a value ({shown} VALUE or {shown}=VALUE)")
    return argv[i], i + 1


def _go_bool(shown: str, value: str) -> str:
    if value in _GO_TRUE:
        return "true"
    if value in _GO_FALSE:
        return "false"
    raise ConfigError(f"command line: {shown}={value}: a bool flag takes true or false")


def _stray(word: str, program: str) -> ConfigError:
    return ConfigError(
        f"command line: unexpected argument {word!r}: {program} takes only flags (-name value or -name=value)"
    )
