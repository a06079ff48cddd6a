"""Command-line side of the config: argparse flags for every key, and the console-script error boundary.

Flags are the dotted key paths with `--` in front: `--gc`, `--data-dir`, `--storage.sync-log`,
`--syncer.to.host`. Only value keys get a flag (tables and arrays of tables do not). Bool flags take an
optional value: `--sync-log`, `--sync-log=true`, `--sync-log=false`. Lists are comma-separated
(`--ignore-schemas=a,b`), string tables are `k=v,k2=v2`, and an empty value clears an `X | None` key.
Every config flag defaults to "not given", so a flag the user did not type never overrides the file or the
environment.

A parser built with `go_flags` (pump, drainer, arbiter, reparo) also takes the original's Go command line
(`-config f.toml`, `-c 8`, `-safe-mode=false`; common/config/goflags.py): its words are rewritten into ours
before argparse sees them.  `config_parser` adds `-V` / `--version` (common/version.py).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, NoReturn, ParamSpec, TypeVar, overload

from common.config.goflags import GoFlags, to_argparse
from common.config.loader import env_name, load
from common.config.schema import Kind, TypeSpec, value_fields
from common.config.units import format_duration
from common.errors import ConfigError
from common.version import add_version_flag

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")

CONFIG_FILE_DEST: Final = "config_file"
"""Namespace attribute holding the `--config FILE` value (None when not given)."""

EXIT_CONFIG_ERROR: Final = 2
_FLAG_DEST_PREFIX: Final = "config_key:"


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise ConfigError instead of printing usage and exiting.

    It also refuses abbreviated long options (`--data` for `--data-dir`) unless `allow_abbrev=True`.
    With `go_flags` it reads the original's Go flags too (`goflags.to_argparse` runs before parsing).
    """

    def __init__(self, *args: Any, go_flags: GoFlags | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.go_flags = go_flags

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.go_flags is not None:
            args = to_argparse(sys.argv[1:] if args is None else args, self.go_flags, self)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"command line: {message}")


def add_flags(parser: argparse.ArgumentParser, cls: type, *, env_prefix: str = "") -> None:
    """Add `--config FILE` and one `--dotted.key` flag per value key of `cls` to `parser`.

    Help text comes from the field's `help` metadata, plus its default and (with `env_prefix`) the
    environment variable that also sets it. `aliases` metadata adds option strings such as "-L".
    """
    parser.add_argument("--config", dest=CONFIG_FILE_DEST, metavar="FILE", default=None, help="TOML config file")
    for dotted, chain in value_fields(cls):
        f = chain[-1]
        parts = [f.help] if f.help else []
        default = _flag_text(f.spec, f.default()) if f.has_default else ""
        if default:
            parts.append(f"(default: {default})")
        if env_prefix:
            parts.append(f"[env {', '.join((env_name(env_prefix, dotted), *f.env))}]")
        scalar = f.spec.item if f.spec.kind is Kind.OPTIONAL and f.spec.item is not None else f.spec
        extra: dict[str, object] = {"nargs": "?", "const": "true"} if scalar.kind is Kind.BOOL else {}
        parser.add_argument(
            f"--{dotted}",
            *f.aliases,
            dest=_FLAG_DEST_PREFIX + dotted,
            default=argparse.SUPPRESS,
            metavar=_metavar(scalar),
            help=" ".join(parts).replace("%", "%%"),
            **extra,  # type: ignore[arg-type]
        )


def flags_from_args(args: argparse.Namespace) -> dict[str, object]:
    """The config flags the user actually gave, as {dotted key path: string value}, ready for `load()`."""
    return {
        name.removeprefix(_FLAG_DEST_PREFIX): value
        for name, value in vars(args).items()
        if name.startswith(_FLAG_DEST_PREFIX)
    }


def load_args(cls: type[T], args: argparse.Namespace, *, env: Mapping[str, str], env_prefix: str) -> T:
    """`load()` with the `--config` file and the given flags of a namespace parsed after `add_flags()`."""
    file: str | Path | None = getattr(args, CONFIG_FILE_DEST, None)
    return load(cls, file=file, env=env, env_prefix=env_prefix, flags=flags_from_args(args))


def config_parser(
    prog: str, description: str, cls: type, *, env_prefix: str, go_flags: GoFlags | None = None
) -> ArgumentParser:
    """A daemon's command line: `--config FILE`, one flag per key of `cls` (`add_flags`), `--print-config`,
    `-V` / `--version`; and with `go_flags` the original's flags (listed at the end of `--help`)."""
    parser = ArgumentParser(
        prog=prog, description=description, go_flags=go_flags, epilog=None if go_flags is None else go_flags.epilog()
    )
    add_flags(parser, cls, env_prefix=env_prefix)
    parser.add_argument("--print-config", action="store_true", help="print the effective config and exit")
    add_version_flag(parser)
    return parser


def parse_config_args(
    parser: argparse.ArgumentParser,
    load_config: Callable[..., T],
    argv: list[str] | None,
    env: Mapping[str, str] | None,
) -> tuple[T, argparse.Namespace]:
    """Parse `argv` and load the config: `load_config(file, env=..., flags=...)` with the `--config` file, the
    environment (os.environ when None) and the flags given.  Raises ConfigError; never exits."""
    args = parser.parse_args(argv)
    cfg = load_config(
        getattr(args, CONFIG_FILE_DEST, None), env=os.environ if env is None else env, flags=flags_from_args(args)
    )
    return cfg, args


@overload
def run_command(fn: Callable[P, R], /) -> Callable[P, R]: ...


@overload
def run_command(*, prog: str | None = None) -> Callable[[Callable[P, R]], Callable[P, R]]: ...


def run_command(
    fn: Callable[P, R] | None = None, /, *, prog: str | None = None
) -> Callable[P, R] | Callable[[Callable[P, R]], Callable[P, R]]:
    """Decorate a console script's `main`: a ConfigError becomes exit status 2 and one line on stderr.

    The line is `<prog>: config error: <message>`, with no traceback. `prog` defaults to the name of the
    running script. Use as `@run_command` or `@run_command(prog="pump")`.
    """

    def decorate(main: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(main)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return main(*args, **kwargs)
            except ConfigError as exc:
                _fail(prog or _program_name(main), str(exc))

        return wrapper

    return decorate if fn is None else decorate(fn)


def _metavar(spec: TypeSpec) -> str:
    if spec.kind is Kind.LITERAL:
        return "{" + ",".join(str(c) for c in spec.choices) + "}"
    if spec.kind is Kind.TUPLE and spec.item is not None:
        return _metavar(spec.item) + ",..."
    if spec.kind is Kind.DICT and spec.item is not None:
        return "KEY=" + _metavar(spec.item) + ",..."
    return _METAVARS.get(spec.kind) or str(spec.kind.value).upper()


_METAVARS: Final[dict[Kind, str]] = {Kind.INT: "INT", Kind.FLOAT: "NUMBER", Kind.STR: "TEXT", Kind.BOOL: "BOOL"}


def _flag_text(spec: TypeSpec, value: object) -> str:
    """A value the way it would be typed on the command line ("" for None and empty values)."""
    if value is None:
        return ""
    if spec.kind is Kind.OPTIONAL and spec.item is not None:
        return _flag_text(spec.item, value)
    if spec.kind is Kind.TUPLE and spec.item is not None and isinstance(value, tuple):
        item = spec.item
        return ",".join(_flag_text(item, v) for v in value)
    if spec.kind is Kind.DICT and spec.item is not None and isinstance(value, dict):
        item = spec.item
        return ",".join(f"{k}={_flag_text(item, v)}" for k, v in value.items())
    if spec.kind is Kind.DURATION and isinstance(value, int | float):
        return format_duration(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _fail(prog: str, message: str) -> NoReturn:
    one_line = re.sub(r"\s*\n\s*", " ", message.strip())
    sys.stderr.write(f"{prog}: config error: {one_line}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_CONFIG_ERROR)


def _program_name(main: Callable[..., object]) -> str:
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 and argv0 not in ("-c", "-m"):
        return Path(argv0).name
    return main.__module__.split(".")[0]
