"""Turn raw values into typed config values, or raise a ConfigError that names source, key and value.

Two entry points:
  `from_native` for values that already have a type: TOML values and programmatic flags. Strict: an int
                field rejects bools and floats, a float field accepts ints, a str field rejects numbers.
  `from_text`   for strings from the environment or the command line. Booleans are true/false/1/0/yes/no,
                lists are comma-separated, tables are `k=v,k2=v2`, and an empty string means None for an
                `X | None` field.

Tables and arrays of tables are handled by the loader; they never reach this module.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from common.config.schema import Kind, TypeSpec, describe
from common.config.units import parse_duration, parse_size
from common.errors import ConfigError

_TRUE: Final = frozenset({"true", "1", "yes"})
_FALSE: Final = frozenset({"false", "0", "no"})
_MAX_SHOWN: Final = 80


class _MismatchError(Exception):
    """A value that does not fit `spec`; `path` is the innermost key path (list items get `[i]`)."""

    def __init__(self, spec: TypeSpec, value: object, path: str) -> None:
        super().__init__(path)
        self.spec = spec
        self.value = value
        self.path = path


def show(value: object) -> str:
    """A short repr of a value for an error message."""
    text = repr(str(value)) if isinstance(value, Path) else repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def from_native(spec: TypeSpec, value: object, *, path: str, source: str) -> object:
    """`value` (from TOML or a programmatic flag) as a value of `spec`."""
    try:
        return _native(spec, value, path)
    except _MismatchError as bad:
        raise ConfigError(
            f"{source}: invalid value for '{bad.path}': expected {describe(bad.spec)}, got {show(bad.value)}"
        ) from None


def from_text(spec: TypeSpec, text: str, *, path: str, source: str) -> object:
    """`text` (an environment variable or a command-line argument) as a value of `spec`."""
    try:
        return _text(spec, text, path)
    except _MismatchError:
        raise ConfigError(
            f"{source}: invalid value for '{path}': expected {describe(spec, text=True)}, got {show(text)}"
        ) from None


def _native(spec: TypeSpec, value: object, path: str) -> object:
    kind = spec.kind
    if kind is Kind.OPTIONAL:
        assert spec.item is not None
        return None if value is None else _native(spec.item, value, path)
    if kind is Kind.TUPLE:
        assert spec.item is not None
        if not isinstance(value, list | tuple):
            raise _MismatchError(spec, value, path)
        return tuple(_native(spec.item, v, f"{path}[{i}]") for i, v in enumerate(value))
    if kind is Kind.DICT:
        assert spec.item is not None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise _MismatchError(spec, value, path)
        return {k: _native(spec.item, v, f"{path}.{k}") for k, v in value.items()}
    return _scalar(spec, value, path)


def _scalar(spec: TypeSpec, value: object, path: str) -> object:
    kind = spec.kind
    if kind is Kind.LITERAL:
        return _choice(spec, value, path)
    if isinstance(value, bool):
        if kind is Kind.BOOL:
            return value
        raise _MismatchError(spec, value, path)
    if kind is Kind.INT and isinstance(value, int):
        return value
    if kind is Kind.FLOAT and isinstance(value, int | float):
        return float(value)
    if kind is Kind.STR and isinstance(value, str):
        return value
    if kind is Kind.PATH and isinstance(value, str | os.PathLike) and str(value):
        return Path(value)
    if kind is Kind.DURATION and isinstance(value, int | float | str):
        try:
            return parse_duration(value)
        except ValueError:
            raise _MismatchError(spec, value, path) from None
    if kind is Kind.SIZE and isinstance(value, int | str):
        try:
            return parse_size(value)
        except ValueError:
            raise _MismatchError(spec, value, path) from None
    raise _MismatchError(spec, value, path)


def _choice(spec: TypeSpec, value: object, path: str) -> object:
    for choice in spec.choices:
        if type(choice) is type(value) and choice == value:
            return choice
    raise _MismatchError(spec, value, path)


def _text(spec: TypeSpec, text: str, path: str) -> object:
    kind = spec.kind
    stripped = text.strip()
    if kind is Kind.OPTIONAL:
        assert spec.item is not None
        return None if not stripped else _text(spec.item, text, path)
    if kind is Kind.TUPLE:
        assert spec.item is not None
        return tuple(_text(spec.item, part, path) for part in _split(stripped))
    if kind is Kind.DICT:
        assert spec.item is not None
        pairs: dict[str, object] = {}
        for part in _split(stripped):
            key, eq, raw = part.partition("=")
            if not eq or not key.strip():
                raise _MismatchError(spec, text, path)
            pairs[key.strip()] = _text(spec.item, raw.strip(), path)
        return pairs
    if kind is Kind.STR:
        return text
    if kind is Kind.BOOL:
        return _bool(spec, stripped, path)
    if kind is Kind.LITERAL:
        for choice in spec.choices:
            if isinstance(choice, bool):
                if stripped.lower() in (_TRUE if choice else _FALSE):
                    return choice
            elif str(choice) == stripped:
                return choice
        raise _MismatchError(spec, text, path)
    try:
        if kind is Kind.INT:
            return int(stripped)
        if kind is Kind.FLOAT:
            return float(stripped)
        if kind is Kind.DURATION:
            return parse_duration(stripped)
        if kind is Kind.SIZE:
            return parse_size(stripped)
    except ValueError:
        raise _MismatchError(spec, text, path) from None
    if kind is Kind.PATH and stripped:
        return Path(stripped)
    raise _MismatchError(spec, text, path)


def _bool(spec: TypeSpec, text: str, path: str) -> bool:
    word = text.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise _MismatchError(spec, text, path)


def _split(text: str) -> list[str]:
    """Comma-separated parts, stripped, without empty ones."""
    return [part.strip() for part in text.split(",") if part.strip()]
