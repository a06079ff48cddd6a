"""`dest-type = "print"`: binlogs as text, in the original reparo's format (pure: lines out).

    DDL query: use `db`; CREATE TABLE `t` (...);
    schema: db; table: t; type: Insert
    id(bigint): 1
    name(varchar): abc
    schema: db; table: t; type: Update
    id(bigint): 1 => 1
    name(varchar): abc => xyz

One header line per row change, then one line per column: `name(mysql_type): value`, for an update
`old => new`. Values are printed from their datums as the file sink wrote them: integers (ENUM as
its index, SET as its bitmask, BIT as a number), floats as Go prints them (`1.5`, `3`, `1e+21`),
formatted text (date, time, decimal, JSON) and strings as text, NULL as `<nil>` (Go's `%v` of
nil). Differs from the original: binary values that are not UTF-8 print as `0x<hex>` instead of
Go's byte list `[1 2 3]`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from typing import Final

from common.codec import Datum, Kind
from common.pb import pb_binlog_pb2
from common.pbfile import PbColumn, parse_columns
from tools.reparo.select import Selected

__all__ = ["format_datum", "selected_lines"]

_EVENT_NAMES: Final = {pb_binlog_pb2.Insert: "Insert", pb_binlog_pb2.Update: "Update", pb_binlog_pb2.Delete: "Delete"}
_GO_PLAIN_EXP_LIMIT: Final = 21


def _go_float(f: float) -> str:
    """Go's `%v` of a float64: the shortest digits, plain from 1e-4 to below 1e21, else `1e+21` / `1.5e-05`."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    d = Decimal(repr(f))
    if -4 <= d.adjusted() < _GO_PLAIN_EXP_LIMIT:
        text = format(d, "f")
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, _, exp = format(d.normalize(), "e").partition("e")
    return f"{mantissa}e{exp[0]}{exp[1:].rjust(2, '0')}"


def format_datum(datum: Datum) -> str:
    kind, v = datum
    if kind == Kind.NULL:
        return "<nil>"
    if kind == Kind.BYTES:
        try:
            return str(v.decode("utf-8"))
        except UnicodeDecodeError:
            return "0x" + str(v.hex())
    if kind == Kind.FLOAT:
        return _go_float(v)
    if kind == Kind.DECIMAL:
        return format(v.value, "f")
    return str(v)


def _column_line(c: PbColumn, update: bool) -> str:
    head = f"{c.name}({c.mysql_type}): {format_datum(c.value)}"
    if update and c.changed is not None:
        return f"{head} => {format_datum(c.changed)}"
    return head


def selected_lines(sel: Selected) -> Iterator[str]:
    """The printed lines of one selected binlog."""
    if sel.ddl is not None:
        yield f"DDL query: {sel.ddl.raw}"
        return
    for event in sel.events:
        name = _EVENT_NAMES.get(event.tp, str(event.tp))
        yield f"schema: {event.schema_name}; table: {event.table_name}; type: {name}"
        update = event.tp == pb_binlog_pb2.Update
        for c in parse_columns(event):
            yield _column_line(c, update)
