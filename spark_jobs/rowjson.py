"""Row images as canonical JSON text: what the row-change DataFrames carry in `key` and `values` (pure).

Spark columns are flat and typed; a row of any table is carried as one STRING instead, so one
DataFrame holds the changes of every table.  The text is canonical: one value has one text, so two
images of the same row compare equal as strings and a key can be grouped on.

Each value is first put in its sqlite store form (`common.sql.values.to_sqlite`: integers, floats,
DECIMAL as plain text with its scale, temporal values as text, TIMESTAMP in UTC, JSON as canonical
JSON text, BIGINT UNSIGNED above 2**63-1 as 20-digit text), then binary strings and BIT values become
base64 text.  Decoding needs the column (its type says which text is which) and gives back the value
`common.schema.types.check_value` gives, which `to_mysql` / `to_sqlite` take:

    values  {"<column name>": <value>, ...}   keys sorted, no spaces, UTF-8 (not \\u escaped)
    key     [<value of key column 1>, ...]    in key order

A key is the primary key's values, or, for a table without a primary key, the whole row (such a
table cannot tell two identical rows apart; see the README's limits).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from common.codec.flatten import MySQLType
from common.schema.model import ColumnInfo, TableInfo
from common.sql.values import from_sqlite, to_sqlite

__all__ = ["decode_row", "decode_value", "dumps", "encode_key", "encode_row", "encode_value", "key_columns"]

_BINARY_TYPES: Final = frozenset(
    {
        MySQLType.STRING,
        MySQLType.VARCHAR,
        MySQLType.VAR_STRING,
        MySQLType.TINY_BLOB,
        MySQLType.BLOB,
        MySQLType.MEDIUM_BLOB,
        MySQLType.LONG_BLOB,
    }
)


def _is_bytes_column(col: ColumnInfo) -> bool:
    ct = col.ctype
    return ct.tp == MySQLType.BIT or (ct.tp in _BINARY_TYPES and ct.is_binary)


def encode_value(col: ColumnInfo, value: object) -> Any:
    """The JSON value of a checked `value` of `col`."""
    stored = to_sqlite(col, value)
    if isinstance(stored, bytes):
        return base64.b64encode(stored).decode("ascii")
    return stored


def decode_value(col: ColumnInfo, raw: Any) -> object:
    """The checked Python value back from `encode_value`'s JSON value."""
    if raw is None:
        return None
    if _is_bytes_column(col) and isinstance(raw, str):
        raw = base64.b64decode(raw.encode("ascii"), validate=True)
    return from_sqlite(col, raw)


def dumps(doc: object) -> str:
    """Canonical JSON text: sorted keys, no spaces, non-ASCII kept as is."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_row(columns: Sequence[ColumnInfo], values: Sequence[object]) -> str:
    """`values` (aligned with `columns`) as the canonical JSON object by column name."""
    return dumps({c.name: encode_value(c, v) for c, v in zip(columns, values, strict=True)})


def key_columns(t: TableInfo) -> tuple[ColumnInfo, ...]:
    """The columns a row of `t` is identified by: its primary key's, else every column."""
    pk = t.primary_key
    if pk is None:
        return t.columns
    return tuple(t.column(name) for name in pk.columns)


def encode_key(columns: Sequence[ColumnInfo], values: Sequence[object]) -> str:
    """The canonical JSON list of the key values (`values` aligned with `columns`)."""
    return dumps([encode_value(c, v) for c, v in zip(columns, values, strict=True)])


def decode_row(t: TableInfo, text: str) -> dict[str, object]:
    """Column name -> checked value for the columns of `t` present in the JSON object `text`.

    Names of columns `t` does not have (dropped since) are left out; the caller decides what a
    column missing from the image gets.
    """
    doc: Mapping[str, Any] = json.loads(text)
    out: dict[str, object] = {}
    for name, raw in doc.items():
        if t.has_column(name):
            col = t.column(name)
            out[col.name] = decode_value(col, raw)
    return out
