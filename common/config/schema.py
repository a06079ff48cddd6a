"""What a config dataclass declares: its fields, their TOML keys and their value types.

A config class is a frozen dataclass. Each field's TOML key is its name in kebab case (`data_dir` ->
`data-dir`) unless `field(metadata={"key": ...})` says otherwise. Recognised metadata keys:

    key       the TOML key, for names Python cannot spell ("pd-urls" is fine, "kv_chan_cap" needs it)
    help      one line of help for the command-line flag
    validate  a callable run on the final (non-None) value: it raises ValueError / ConfigError, or
              returns False, to reject it (see `common.config.checks`)
    aliases   extra command-line option strings, such as ("-L",)
    parse     a callable that turns the raw value into the field's value, in place of the built-in
              conversion: it gets the TOML value as tomllib returns it, or the string of an environment
              variable or flag (a programmatic flag value as given), and raises ValueError to reject it;
              the loader reports "<source>: invalid value for '<key>': <the ValueError's text>". The
              `validate` callable then checks the parsed value as usual. Value fields only.
    env       extra environment variable names for the field, such as ("LEGACY_HOST",), read like the
              generated PREFIX_KEY name and at the same precedence; the generated name wins when both
              are set. Value fields only.

Supported annotations: int, float, bool, str, Path, Duration, ByteSize, Literal[...] of str/int/bool,
`X | None`, `tuple[X, ...]` and `dict[str, X]` of those scalars, a nested config dataclass (a TOML table),
`tuple[Section, ...]` (an array of tables) and `dict[str, Section]` (named tables, `[a.b.NAME]`). Anything
else is a TypeError when the class is first used: that is a programming error, not a config error.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Union, get_args, get_origin

from common.config.units import DURATION_UNIT, SIZE_UNIT

_METADATA_KEYS: Final = frozenset({"key", "help", "validate", "aliases", "parse", "env"})
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class Kind(enum.Enum):
    """The shape of a config value."""

    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    STR = "str"
    PATH = "path"
    DURATION = "duration"
    SIZE = "size"
    LITERAL = "literal"
    OPTIONAL = "optional"  # `item | None`
    TUPLE = "tuple"  # `tuple[item, ...]`
    DICT = "dict"  # `dict[str, item]`
    SECTION = "section"  # a nested dataclass: a TOML table
    SECTIONS = "sections"  # `tuple[section, ...]`: an array of tables
    NAMED_SECTIONS = "named sections"  # `dict[str, section]`: a table of named tables ([a.b.NAME])


_SECTION_LISTS: Final = frozenset({Kind.SECTIONS, Kind.NAMED_SECTIONS})
"""Kinds whose value is several tables: set by a file only (not by the environment or a flag)."""
_SCALARS: Final = frozenset(
    {Kind.INT, Kind.FLOAT, Kind.BOOL, Kind.STR, Kind.PATH, Kind.DURATION, Kind.SIZE, Kind.LITERAL}
)


@dataclasses.dataclass(frozen=True)
class TypeSpec:
    """A parsed field annotation."""

    kind: Kind
    choices: tuple[object, ...] = ()  # LITERAL
    item: TypeSpec | None = None  # OPTIONAL, TUPLE, DICT
    section: type | None = None  # SECTION, SECTIONS, NAMED_SECTIONS

    @property
    def table(self) -> type | None:
        """The dataclass of a TOML table field (`Section` or `Section | None`), else None."""
        if self.kind is Kind.SECTION:
            return self.section
        if self.kind is Kind.OPTIONAL and self.item is not None and self.item.kind is Kind.SECTION:
            return self.item.section
        return None


@dataclasses.dataclass(frozen=True)
class ConfigField:
    """One field of a config dataclass."""

    name: str
    key: str
    spec: TypeSpec
    help: str
    validate: Callable[[Any], object] | None
    aliases: tuple[str, ...]
    dc_field: dataclasses.Field[Any]
    parse: Callable[[object], object] | None = None
    env: tuple[str, ...] = ()

    @property
    def has_default(self) -> bool:
        return (
            self.dc_field.default is not dataclasses.MISSING or self.dc_field.default_factory is not dataclasses.MISSING
        )

    def default(self) -> object:
        """The declared default (a fresh one for a default_factory); only call when `has_default`."""
        if self.dc_field.default_factory is not dataclasses.MISSING:
            return self.dc_field.default_factory()
        return self.dc_field.default


def join(path: str, key: str) -> str:
    """The dotted key path of `key` inside the table at `path`."""
    return f"{path}.{key}" if path else key


_FIELDS: dict[type, tuple[ConfigField, ...]] = {}


def fields_of(cls: type) -> tuple[ConfigField, ...]:
    """The config fields of `cls`, checked once; TypeError if `cls` is not a usable config class."""
    cached = _FIELDS.get(cls)
    if cached is None:
        cached = _FIELDS[cls] = _inspect(cls)
    return cached


def _inspect(cls: type) -> tuple[ConfigField, ...]:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"config class {cls.__name__} must be a frozen dataclass")
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except NameError as exc:
        raise TypeError(f"cannot resolve the annotations of config class {cls.__name__}: {exc}") from exc
    result: list[ConfigField] = []
    seen: dict[str, str] = {}
    for dc_field in dataclasses.fields(cls):
        if not dc_field.init:
            continue
        where = f"{cls.__name__}.{dc_field.name}"
        meta = dict(dc_field.metadata)
        unknown = set(meta) - _METADATA_KEYS
        if unknown:
            raise TypeError(f"{where}: unknown field metadata {sorted(unknown)}; use {sorted(_METADATA_KEYS)}")
        key = str(meta.get("key", dc_field.name.replace("_", "-")))
        if not _BARE_KEY.fullmatch(key):
            raise TypeError(f"{where}: TOML key {key!r} must use only letters, digits, '-' and '_'")
        if key in seen:
            raise TypeError(f"{where}: TOML key {key!r} is also used by field {seen[key]!r}")
        seen[key] = dc_field.name
        validate = meta.get("validate")
        if validate is not None and not callable(validate):
            raise TypeError(f"{where}: metadata 'validate' must be callable")
        aliases = tuple(str(a) for a in meta.get("aliases", ()))
        spec = parse_annotation(hints[dc_field.name], where)
        parse, env = _value_hooks(meta, spec, where)
        result.append(
            ConfigField(
                dc_field.name, key, spec, str(meta.get("help", "")), validate, aliases, dc_field, parse=parse, env=env
            )
        )
    return tuple(result)


def _value_hooks(
    meta: dict[str, Any], spec: TypeSpec, where: str
) -> tuple[Callable[[object], object] | None, tuple[str, ...]]:
    """The `parse` and `env` metadata of a field, checked: both only make sense for a value field."""
    parse = meta.get("parse")
    if parse is not None and not callable(parse):
        raise TypeError(f"{where}: metadata 'parse' must be callable")
    env = meta.get("env", ())
    if isinstance(env, str) or not isinstance(env, tuple | list) or not all(isinstance(n, str) and n for n in env):
        raise TypeError(f"{where}: metadata 'env' must be a tuple of environment variable names")
    if (parse is not None or env) and (spec.table is not None or spec.kind in _SECTION_LISTS):
        raise TypeError(f"{where}: metadata 'parse' and 'env' are for value fields, not tables")
    return parse, tuple(env)


def parse_annotation(tp: object, where: str) -> TypeSpec:
    """The TypeSpec of one annotation; TypeError naming `where` if it is not supported."""
    spec = _parse(tp, where)
    if spec is None:
        raise TypeError(f"{where}: unsupported config type {tp!r}")
    return spec


def _parse(tp: object, where: str) -> TypeSpec | None:
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        base, marks = args[0], tp.__metadata__  # type: ignore[attr-defined]
        if DURATION_UNIT in marks:
            return TypeSpec(Kind.DURATION) if base is float else None
        if SIZE_UNIT in marks:
            return TypeSpec(Kind.SIZE) if base is int else None
        return _parse(base, where)
    simple = {bool: Kind.BOOL, int: Kind.INT, float: Kind.FLOAT, str: Kind.STR, Path: Kind.PATH}
    if isinstance(tp, type) and tp in simple:
        return TypeSpec(simple[tp])
    if origin is Literal:
        if not args or not all(isinstance(a, str | int) for a in args):
            return None
        return TypeSpec(Kind.LITERAL, choices=args)
    if origin is Union or origin is types.UnionType:
        others = [a for a in args if a is not type(None)]
        if len(args) != 2 or len(others) != 1:
            return None
        item = _parse(others[0], where)
        if item is None or item.kind in (Kind.OPTIONAL, Kind.SECTIONS):
            return None
        return TypeSpec(Kind.OPTIONAL, item=item)
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            return None
        if isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
            fields_of(args[0])
            return TypeSpec(Kind.SECTIONS, section=args[0])
        item = _parse(args[0], where)
        return TypeSpec(Kind.TUPLE, item=item) if item is not None and item.kind in _SCALARS else None
    if origin is dict:
        if len(args) != 2 or args[0] is not str:
            return None
        if isinstance(args[1], type) and dataclasses.is_dataclass(args[1]):
            fields_of(args[1])
            return TypeSpec(Kind.NAMED_SECTIONS, section=args[1])
        item = _parse(args[1], where)
        return TypeSpec(Kind.DICT, item=item) if item is not None and item.kind in _SCALARS else None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        fields_of(tp)
        return TypeSpec(Kind.SECTION, section=tp)
    return None


def value_fields(cls: type, path: str = "") -> Iterator[tuple[str, tuple[ConfigField, ...]]]:
    """(dotted key path, chain of fields) of every value field, descending into tables.

    These are the fields the environment and command-line flags can set: everything except tables
    themselves and arrays of tables.
    """
    for f in fields_of(cls):
        table = f.spec.table
        if table is not None:
            for sub_path, chain in value_fields(table, join(path, f.key)):
                yield sub_path, (f, *chain)
        elif f.spec.kind not in _SECTION_LISTS:
            yield join(path, f.key), (f,)


def resolve(cls: type, dotted: str) -> tuple[ConfigField, ...] | None:
    """The chain of fields a dotted key path names, or None if there is no such key."""
    chain: list[ConfigField] = []
    current: type | None = cls
    for key in dotted.split("."):
        if current is None:
            return None
        found = next((f for f in fields_of(current) if f.key == key), None)
        if found is None:
            return None
        chain.append(found)
        current = found.spec.table
    return tuple(chain)


def describe(spec: TypeSpec, *, text: bool = False) -> str:
    """What a value of this type looks like, for error messages (`text`: as an env / flag string)."""
    kind = spec.kind
    if kind is Kind.BOOL and text:
        return "a boolean (true/false/1/0/yes/no)"
    if kind is Kind.LITERAL:
        return "one of " + ", ".join(repr(c) for c in spec.choices)
    if kind is Kind.OPTIONAL:
        assert spec.item is not None
        return describe(spec.item, text=text) + (" or an empty value" if text else "")
    if kind is Kind.TUPLE:
        assert spec.item is not None
        return ("a comma-separated list of " if text else "a list of ") + _plural(spec.item)
    if kind is Kind.DICT:
        assert spec.item is not None
        return "comma-separated key=value pairs" if text else "a table of " + _plural(spec.item)
    return _SINGULAR[kind]


def _plural(spec: TypeSpec) -> str:
    if spec.kind is Kind.LITERAL:
        return "values from " + ", ".join(repr(c) for c in spec.choices)
    return _PLURAL[spec.kind]


_SINGULAR: Final = {
    Kind.INT: "an integer",
    Kind.FLOAT: "a number",
    Kind.BOOL: "a boolean (true or false)",
    Kind.STR: "a string",
    Kind.PATH: "a path",
    Kind.DURATION: "a duration such as '3s', '500ms', '1m30s' or a number of seconds",
    Kind.SIZE: "a size such as '500MiB', '10MB', '1G' or a number of bytes",
    Kind.SECTION: "a table",
    Kind.SECTIONS: "an array of tables",
    Kind.NAMED_SECTIONS: "a table of named tables",
}
_PLURAL: Final = {
    Kind.INT: "integers",
    Kind.FLOAT: "numbers",
    Kind.BOOL: "booleans",
    Kind.STR: "strings",
    Kind.PATH: "paths",
    Kind.DURATION: "durations",
    Kind.SIZE: "sizes",
}
