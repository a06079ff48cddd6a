"""Build a config dataclass from defaults < TOML file < environment < flags, then validate it.

Each source becomes a *layer*: a nested dict from field name to an already typed value (a nested layer for
a table). Layers merge key by key, so a file that sets `[storage] sync-log` and an environment that sets
`PUMP_STORAGE_KV_CHAN_CAP` both count. An array of tables is one value: the highest layer that sets it
wins whole. The merged layer is applied over the dataclass defaults and the result is validated.

The loader remembers which source set each key, so a validation error can say where the bad value came from,
and `load_with_sources` hands that record back (`Loaded.was_set`, `Loaded.source`) for rules that depend on
whether the user set a key at all.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Generic, TypeVar

from common.config import convert
from common.config.schema import ConfigField, Kind, fields_of, join, resolve, value_fields
from common.errors import ConfigError

T = TypeVar("T")

Layer = dict[str, Any]
"""Field name -> typed value, or -> a nested Layer for a table field."""

_DEFAULT_SOURCE: Final = "default value"
_INDEX = re.compile(r"\[\d+\]")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")
_TOML_AT_END: Final = " (at end of document)"
_LAST_PART = re.compile(r"(\[\d+\]|\.[^.\[]*|^[^.\[]*)$")


class Source(enum.StrEnum):
    """Which kind of source set a key. Ordered by precedence: a later one overrides an earlier one."""

    DEFAULT = "default"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"


_RANK: Final = {source: rank for rank, source in enumerate(Source)}

Origin = tuple[Source, str]
"""A source kind and its description for messages: (Source.ENV, "environment variable PUMP_GC")."""


@dataclasses.dataclass(frozen=True)
class Loaded(Generic[T]):
    """A loaded config and which source set each of its keys.

    Keys are dotted key paths as in the TOML file and the flags: "gc", "storage.sync-log",
    "syncer.to.host". A key inside an array of tables ("syncer.event-filter[0].ignore-event") counts as
    set by whatever set the array. A table ("syncer.to") counts as set when any key beneath it is, and its
    source is the highest-precedence source among those keys. A key the config class does not have is a
    KeyError, so a misspelt key in a rule cannot silently read as "not set".
    """

    config: T
    origins: Mapping[str, Origin]

    def was_set(self, key: str) -> bool:
        """True when a file, environment variable or flag set `key` (False: it has its default value)."""
        return self.source(key) is not Source.DEFAULT

    def source(self, key: str) -> Source:
        """The kind of source whose value `key` has."""
        return self._origin(key)[0]

    def where(self, key: str) -> str:
        """The source of `key` in the words of error messages: "config file 'pump.toml'", "default value"."""
        return self._origin(key)[1]

    def _origin(self, key: str) -> Origin:
        if not _is_key(type(self.config), key):
            raise KeyError(f"{type(self.config).__name__} has no config key {key!r}")
        found = _origin_of(key, self.origins)
        if found is not None:
            return found
        beneath = [origin for path, origin in self.origins.items() if path.startswith(key + ".")]
        if beneath:
            return max(beneath, key=lambda origin: _RANK[origin[0]])
        return Source.DEFAULT, _DEFAULT_SOURCE


def load(
    cls: type[T],
    *,
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    env_prefix: str = "",
    flags: Mapping[str, object] | None = None,
) -> T:
    """Build and validate a `cls` config from its defaults, a TOML file, the environment and flags.

    file        TOML file; every key must be known (else ConfigError naming key path and file).
    env         usually `os.environ`; only read when `env_prefix` is non-empty. The variable of key
                `storage.sync-log` with prefix "PUMP" is `PUMP_STORAGE_SYNC_LOG` (upper case, `-` and `.`
                become `_`). Other variables are ignored; arrays of tables cannot be set this way.
    flags       dotted key path -> value, e.g. {"gc": 7, "storage.sync-log": "false"}. A str value is parsed
                like an environment value; anything else must already have the field's type.

    Raises ConfigError for every bad input; TypeError if `cls` is not a usable config class.
    """
    return load_with_sources(cls, file=file, env=env, env_prefix=env_prefix, flags=flags).config


def load_with_sources(
    cls: type[T],
    *,
    file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    env_prefix: str = "",
    flags: Mapping[str, object] | None = None,
) -> Loaded[T]:
    """`load()`, also returning which source set each key (see `Loaded`)."""
    fields_of(cls)
    sources: dict[str, Origin] = {}
    layers: list[Layer] = []
    if isinstance(file, str) and not file.strip():
        # Path("") is ".", which would be read as a file: name the mistake instead (`-config "$UNSET"`)
        raise ConfigError(f"config file name {file!r} is empty: give the TOML file's path, or leave the flag out")
    if file is not None:
        layers.append(_file_layer(cls, Path(file), sources))
    if env is not None and env_prefix:
        layers.append(_env_layer(cls, env, env_prefix, sources))
    if flags:
        layers.append(_flag_layer(cls, flags, sources))
    merged: Layer = {}
    for layer in layers:
        merged = _merge(cls, merged, layer)
    cfg = _build(cls, merged, path="", base=None, source="")
    _validate(cfg, "", sources)
    return Loaded(cfg, MappingProxyType(sources))


def env_name(prefix: str, dotted: str) -> str:
    """The environment variable of a dotted key path: ("PUMP", "storage.sync-log") -> PUMP_STORAGE_SYNC_LOG."""
    stem = prefix if not prefix or prefix.endswith("_") else prefix + "_"
    return (stem + dotted).upper().replace("-", "_").replace(".", "_")


def _is_key(cls: type, key: str) -> bool:
    """Whether `key` names a key or table of `cls`; "[i]" after an array of tables steps into its elements."""
    current: type | None = cls
    for part in key.split("."):
        name, _, index = part.partition("[")
        found = None if current is None else next((f for f in fields_of(current) if f.key == name), None)
        if found is None:
            return False
        if index:
            if found.spec.kind is not Kind.SECTIONS or not _INDEX.fullmatch("[" + index):
                return False
            current = found.spec.section
        else:
            current = found.spec.table
    return True


# ----------------------------------------------------------------------------------------------- layers


def _file_layer(cls: type, file: Path, sources: dict[str, Origin]) -> Layer:
    source = f"config file '{file}'"
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file '{file}': {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not valid UTF-8 (byte {exc.start})") from None
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: TOML syntax error{_toml_error(str(exc), text)}") from None
    return _table_layer(cls, table, "", source, sources)


def _toml_error(message: str, text: str) -> str:
    """tomllib's "Reason (at line 3, column 5)" as " at line 3, column 5: Reason" (end of file included)."""
    position = _TOML_POSITION.search(message)
    if position is not None:
        line, column = position.groups()
        return f" at line {line}, column {column}: {message[: position.start()]}"
    if message.endswith(_TOML_AT_END):
        lines = text.split("\n")
        reason = message.removesuffix(_TOML_AT_END)
        return f" at line {len(lines)}, column {len(lines[-1]) + 1} (end of file): {reason}"
    return f": {message}"


def _table_layer(cls: type, table: Mapping[str, object], path: str, source: str, sources: dict[str, Origin]) -> Layer:
    """A strict layer from one TOML table: every key must be a field of `cls`."""
    by_key = {f.key: f for f in fields_of(cls)}
    layer: Layer = {}
    for key, value in table.items():
        key_path = join(path, key)
        f = by_key.get(key)
        if f is None:
            close = difflib.get_close_matches(key, list(by_key), n=1)
            hint = f" (did you mean '{join(path, close[0])}'?)" if close else ""
            raise ConfigError(f"{source}: unknown key '{key_path}'{hint}")
        table_cls = f.spec.table
        if table_cls is not None:
            if not isinstance(value, dict):
                raise ConfigError(
                    f"{source}: invalid value for '{key_path}': expected a table, got {convert.show(value)}"
                )
            layer[f.name] = _table_layer(table_cls, value, key_path, source, sources)
        else:
            layer[f.name] = _native_value(f, value, key_path, source)
            sources[key_path] = (Source.FILE, source)
    return layer


def _native_value(f: ConfigField, value: object, key_path: str, source: str) -> object:
    if f.parse is not None:
        return _parsed(f, value, key_path, source)
    if f.spec.kind is Kind.NAMED_SECTIONS:
        return _named_tables(f, value, key_path, source)
    if f.spec.kind is not Kind.SECTIONS:
        return convert.from_native(f.spec, value, path=key_path, source=source)
    element_cls = f.spec.section
    assert element_cls is not None
    if not isinstance(value, list | tuple):
        raise ConfigError(
            f"{source}: invalid value for '{key_path}': expected an array of tables, got {convert.show(value)}"
        )
    elements: list[object] = []
    for i, element in enumerate(value):
        element_path = f"{key_path}[{i}]"
        if isinstance(element, element_cls):
            elements.append(element)
            continue
        if not isinstance(element, dict):
            raise ConfigError(
                f"{source}: invalid value for '{element_path}': expected a table, got {convert.show(element)}"
            )
        layer = _table_layer(element_cls, element, element_path, source, {})
        elements.append(_build(element_cls, layer, path=element_path, base=None, source=source))
    return tuple(elements)


def _named_tables(f: ConfigField, value: object, key_path: str, source: str) -> dict[str, object]:
    """A `dict[str, Section]` field: each `[key_path.NAME]` table built strictly as its dataclass."""
    element_cls = f.spec.section
    assert element_cls is not None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{source}: invalid value for '{key_path}': expected a table of named tables, got {convert.show(value)}"
        )
    named: dict[str, object] = {}
    for name, element in value.items():
        element_path = f"{key_path}.{name}"
        if isinstance(element, element_cls):
            named[name] = element
            continue
        if not isinstance(element, dict):
            raise ConfigError(
                f"{source}: invalid value for '{element_path}': expected a table, got {convert.show(element)}"
            )
        layer = _table_layer(element_cls, element, element_path, source, {})
        named[name] = _build(element_cls, layer, path=element_path, base=None, source=source)
    return named


def _parsed(f: ConfigField, value: object, key_path: str, source: str) -> object:
    """`value` through the field's own `parse` hook; its ValueError becomes a ConfigError naming the source."""
    assert f.parse is not None
    try:
        return f.parse(value)
    except ValueError as exc:
        raise ConfigError(f"{source}: invalid value for '{key_path}': {exc}") from None


def _env_layer(cls: type, env: Mapping[str, str], prefix: str, sources: dict[str, Origin]) -> Layer:
    """The generated PREFIX_KEY variable of every value field, else the first of its `env` aliases that is set."""
    layer: Layer = {}
    names: dict[str, str] = {}
    for dotted, chain in value_fields(cls):
        f = chain[-1]
        candidates = (env_name(prefix, dotted), *f.env)
        for name in candidates:
            if name in names:
                raise TypeError(
                    f"{cls.__name__}: keys '{names[name]}' and '{dotted}' share environment variable {name}"
                )
            names[name] = dotted
        name = next((n for n in candidates if n in env), "")
        if name:
            source = f"environment variable {name}"
            if f.parse is not None:
                value = _parsed(f, env[name], dotted, source)
            else:
                value = convert.from_text(f.spec, env[name], path=dotted, source=source)
            _put(layer, chain, value)
            sources[dotted] = (Source.ENV, source)
    return layer


def _flag_layer(cls: type, flags: Mapping[str, object], sources: dict[str, Origin]) -> Layer:
    layer: Layer = {}
    for dotted, value in flags.items():
        source = f"flag --{dotted}"
        chain = resolve(cls, dotted)
        if chain is None:
            raise ConfigError(f"{source}: unknown config key '{dotted}'")
        f = chain[-1]
        if f.spec.table is not None:
            raise ConfigError(f"{source}: '{dotted}' is a table; set its keys one by one")
        if isinstance(value, str) and f.spec.kind not in (Kind.SECTIONS, Kind.NAMED_SECTIONS) and f.parse is None:
            typed = convert.from_text(f.spec, value, path=dotted, source=source)
        else:
            typed = _native_value(f, value, dotted, source)
        _put(layer, chain, typed)
        sources[dotted] = (Source.FLAG, source)
    return layer


def _put(layer: Layer, chain: tuple[ConfigField, ...], value: object) -> None:
    for f in chain[:-1]:
        layer = layer.setdefault(f.name, {})
    layer[chain[-1].name] = value


def _merge(cls: type, low: Layer, high: Layer) -> Layer:
    merged = dict(low)
    for f in fields_of(cls):
        if f.name not in high:
            continue
        table_cls = f.spec.table
        if table_cls is not None and f.name in low:
            merged[f.name] = _merge(table_cls, low[f.name], high[f.name])
        else:
            merged[f.name] = high[f.name]
    return merged


# ------------------------------------------------------------------------------------------------ build


def _build(cls: type[T], layer: Layer, *, path: str, base: T | None, source: str) -> T:
    """`layer` applied over `base` (or over the class defaults when `base` is None)."""
    values: dict[str, object] = {}
    for f in fields_of(cls):
        key_path = join(path, f.key)
        if f.name in layer:
            table_cls = f.spec.table
            if table_cls is None:
                values[f.name] = layer[f.name]
                continue
            default = f.default() if f.has_default else None
            values[f.name] = _build(
                table_cls,
                layer[f.name],
                path=key_path,
                base=default if isinstance(default, table_cls) else None,
                source=source,
            )
        elif base is None and not f.has_default:
            where = f"{source}: " if source else ""
            raise ConfigError(f"{where}missing required key '{key_path}'")
    try:
        if base is not None:
            return dataclasses.replace(base, **values)  # type: ignore[type-var]
        return cls(**values)
    except ValueError as exc:
        raise ConfigError(f"invalid config{_in_table(path)}: {exc}") from None


def _validate(cfg: object, path: str, sources: Mapping[str, Origin]) -> None:
    """Run field validators and `validate()` methods, innermost tables first."""
    for f in fields_of(type(cfg)):
        value = getattr(cfg, f.name)
        key_path = join(path, f.key)
        if f.spec.table is not None and value is not None:
            _validate(value, key_path, sources)
        elif f.spec.kind is Kind.SECTIONS:
            for i, element in enumerate(value):
                _validate(element, f"{key_path}[{i}]", sources)
        elif f.spec.kind is Kind.NAMED_SECTIONS:
            for name, element in value.items():
                _validate(element, f"{key_path}.{name}", sources)
        if f.validate is not None and value is not None:
            _run_validator(f, value, key_path, sources)
    method = getattr(cfg, "validate", None)
    if callable(method):
        try:
            method()
        except ValueError as exc:
            raise ConfigError(f"invalid config{_in_table(path)}: {exc}") from None


def _run_validator(f: ConfigField, value: object, key_path: str, sources: Mapping[str, Origin]) -> None:
    assert f.validate is not None
    try:
        verdict = f.validate(value)
        reason = "" if verdict is not False else f"rejected by {getattr(f.validate, '__name__', 'validator')}"
    except (ValueError, ConfigError) as exc:
        reason = str(exc)
    if reason:
        origin = _origin_of(key_path, sources)
        source = _DEFAULT_SOURCE if origin is None else origin[1]
        raise ConfigError(f"{source}: invalid value for '{key_path}': {reason} (got {convert.show(value)})")


def _origin_of(key_path: str, sources: Mapping[str, Origin]) -> Origin | None:
    """The source that set `key_path`, or the array of tables holding it; None when neither was set."""
    path = key_path
    while path:
        if path in sources:
            return sources[path]
        parent = _LAST_PART.sub("", path)
        if parent == path:
            break
        path = parent
    return None


def _in_table(path: str) -> str:
    return f" in [{path}]" if path else ""
