"""Show an effective config: `dump()` as TOML text (for `--print-config`) and `to_dict()` for JSON.

`dump()` output loads back to an equal config: durations are written the Go way ("1m30s"), sizes as byte
counts, an empty array of tables as `key = []`, an empty table of named tables as `key = {}`, and a None
value as a comment (TOML has no null).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.config.schema import Kind, TypeSpec, fields_of, join
from common.config.units import format_duration

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dump(cfg: object) -> str:
    """The config as TOML text, every key included, tables after the top-level keys."""
    lines: list[str] = []
    _dump_table(cfg, "", lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def to_dict(cfg: object) -> dict[str, Any]:
    """The config as nested dicts keyed by TOML key, with JSON-friendly values (Path -> str, tuple -> list)."""
    return {f.key: _plain(f.spec, getattr(cfg, f.name)) for f in fields_of(type(cfg))}


def format_value(spec: TypeSpec, value: object) -> str:
    """One value as TOML (None has no TOML form and renders as an empty string)."""
    kind = spec.kind
    if value is None:
        return ""
    if kind is Kind.OPTIONAL:
        assert spec.item is not None
        return format_value(spec.item, value)
    if kind is Kind.TUPLE:
        assert spec.item is not None
        assert isinstance(value, tuple)
        item = spec.item
        return "[" + ", ".join(format_value(item, v) for v in value) + "]"
    if kind is Kind.DICT:
        assert spec.item is not None
        assert isinstance(value, dict)
        item = spec.item
        pairs = ", ".join(f"{_key(str(k))} = {format_value(item, v)}" for k, v in value.items())
        return "{ " + pairs + " }" if pairs else "{}"
    if kind is Kind.DURATION:
        assert isinstance(value, int | float)
        return _string(format_duration(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # also valid TOML for inf, -inf and nan
    if isinstance(value, int):
        return str(value)
    return _string(str(value))


def _dump_table(obj: object, path: str, lines: list[str]) -> None:
    fields = fields_of(type(obj))
    for f in fields:
        value = getattr(obj, f.name)
        if f.spec.table is not None or (f.spec.kind in (Kind.SECTIONS, Kind.NAMED_SECTIONS) and value):
            continue
        if value is None:
            lines.append(f"# {f.key} is not set")
        elif f.spec.kind is Kind.SECTIONS:
            lines.append(f"{f.key} = []")
        elif f.spec.kind is Kind.NAMED_SECTIONS:
            lines.append(f"{f.key} = {{}}")
        else:
            lines.append(f"{f.key} = {format_value(f.spec, value)}")
    for f in fields:
        value = getattr(obj, f.name)
        key_path = join(path, f.key)
        if f.spec.table is not None:
            lines.append("")
            if value is None:
                lines.append(f"# [{key_path}] is not set")
            else:
                lines.append(f"[{key_path}]")
                _dump_table(value, key_path, lines)
    for f in fields:
        value = getattr(obj, f.name)
        if f.spec.kind is Kind.SECTIONS:
            for element in value:
                lines.extend(("", f"[[{join(path, f.key)}]]"))
                _dump_table(element, join(path, f.key), lines)
        elif f.spec.kind is Kind.NAMED_SECTIONS:
            for name, element in value.items():
                lines.extend(("", f"[{join(path, f.key)}.{_key(name)}]"))
                _dump_table(element, f"{join(path, f.key)}.{_key(name)}", lines)


def _plain(spec: TypeSpec, value: object) -> Any:
    if value is None:
        return None
    kind = spec.kind
    if spec.table is not None:
        return to_dict(value)
    if kind is Kind.SECTIONS:
        assert isinstance(value, tuple)
        return [to_dict(v) for v in value]
    if kind is Kind.NAMED_SECTIONS:
        assert isinstance(value, dict)
        return {k: to_dict(v) for k, v in value.items()}
    if kind is Kind.TUPLE:
        assert spec.item is not None
        assert isinstance(value, tuple)
        item = spec.item
        return [_plain(item, v) for v in value]
    if kind is Kind.DICT:
        assert spec.item is not None
        assert isinstance(value, dict)
        item = spec.item
        return {k: _plain(item, v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _string(key)


def _string(text: str) -> str:
    """A TOML basic string."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
