"""What `binlog-spark audit` found: per table counts and examples, as JSON and as a readable table (pure).

JSON (``--format json`` on stdout, or ``--json FILE``)::

    {"ok": false, "upstream": "sqlite:/up.db", "downstream": "mysql://root@127.0.0.1:3306",
     "chunk_size": 10000,
     "tables": [{"table": "shop.orders", "key": "primary key (id)", "upstream_rows": 100,
                 "downstream_rows": 100, "chunks": 1, "chunks_differing": 1,
                 "missing": 1, "extra": 1, "different": 1, "problem": "",
                 "examples": [{"kind": "missing", "key": "id=7", "count": 1,
                               "upstream": {"id": "7", "v": "'a'"}, "downstream": null}, ...]}],
     "extra_tables": ["shop.tmp"]}

``problem`` is why a table could not be compared ("missing downstream (upstream has 5 rows)",
columns that differ, a chunk that could not be read); a table with a problem is not ok.  Values
in examples are shown as ``hashing.show`` renders them (cut at SHOW_CHARS); a ``different``
example also has ``"columns"``, the columns whose whole values differ, so a difference past the
characters shown is still named.  The exit status is 0 when every table is equal and no extra
table exists, else 1.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

__all__ = ["EXAMPLES", "AuditReport", "Example", "TableReport", "differing_positions"]

EXAMPLES: Final = 3
"""Examples per kind of difference and table (as common/audit.py)."""


@dataclass
class Example:
    kind: str
    """missing (upstream only), extra (downstream only) or different."""
    key: str
    upstream: list[str] | None
    downstream: list[str] | None
    count: int = 1
    """Rows the example stands for (more than 1 only for whole-row keys repeated on one side)."""
    differing: tuple[int, ...] | None = None
    """Of a `different` row: the positions of the columns whose whole values differ (None: not known,
    the shown cells tell)."""

    def changed_columns(self, columns: list[str]) -> list[str]:
        """Of a `different` row: the columns that differ (by whole value when known, else by the shown text)."""
        up, down = self.upstream or [], self.downstream or []
        if self.differing is not None:
            return [columns[i] for i in self.differing]
        return [c for c, a, b in zip(columns, up, down, strict=True) if a != b]

    def text(self, columns: list[str]) -> str:
        times = f" x{self.count}" if self.count > 1 else ""
        if self.kind == "different" and self.upstream is not None and self.downstream is not None:
            shown = dict(zip(columns, zip(self.upstream, self.downstream, strict=True), strict=True))
            changed = []
            for c in self.changed_columns(columns):
                a, b = shown[c]
                beyond = " (they differ beyond the characters shown)" if a == b else ""
                changed.append(f"{c} upstream {a} downstream {b}{beyond}")
            return f"{self.key}: " + ("; ".join(changed) or "values differ beyond the characters shown")
        cells = self.upstream if self.upstream is not None else self.downstream or []
        row = ", ".join(f"{c}={v}" for c, v in zip(columns, cells, strict=True))
        return f"{self.key}: ({row}){times}"

    def to_json(self, columns: list[str]) -> dict[str, Any]:
        def cells(values: list[str] | None) -> dict[str, str] | None:
            return None if values is None else dict(zip(columns, values, strict=True))

        doc: dict[str, Any] = {
            "kind": self.kind,
            "key": self.key,
            "count": self.count,
            "upstream": cells(self.upstream),
            "downstream": cells(self.downstream),
        }
        if self.kind == "different":
            doc["columns"] = self.changed_columns(columns)
        return doc


def differing_positions(up: Sequence[int] | None, down: Sequence[int] | None) -> tuple[int, ...] | None:
    """Positions where two rows' value hashes differ; None unless both rows have them, of one length."""
    if up is None or down is None or len(up) != len(down):
        return None
    return tuple(i for i, (a, b) in enumerate(zip(up, down, strict=True)) if a != b)


@dataclass
class TableReport:
    db: str
    table: str
    key: str = ""
    """How rows are matched, e.g. "primary key (id)" (common.audit.choose_key)."""
    columns: list[str] = field(default_factory=list)
    upstream_rows: int = 0
    downstream_rows: int = 0
    chunks: int = 0
    chunks_differing: int = 0
    missing: int = 0
    extra: int = 0
    different: int = 0
    examples: list[Example] = field(default_factory=list)
    problem: str = ""

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    @property
    def ok(self) -> bool:
        return not self.problem and not (self.missing or self.extra or self.different)

    @property
    def status(self) -> str:
        if self.problem:
            return self.problem
        return "equal" if self.ok else "DIFFERENT"

    def add(self, kind: str, n: int) -> None:
        setattr(self, kind, getattr(self, kind) + n)

    def to_json(self) -> dict[str, Any]:
        doc = {k: v for k, v in asdict(self).items() if k not in ("db", "examples", "columns")}
        doc["table"] = self.name
        doc["examples"] = [e.to_json(self.columns) for e in self.examples]
        return doc


@dataclass
class AuditReport:
    upstream: str
    downstream: str
    chunk_size: int
    tables: list[TableReport] = field(default_factory=list)
    extra_tables: list[str] = field(default_factory=list)
    """Downstream tables in a database the upstream has, but not upstream (only without --tables)."""

    @property
    def ok(self) -> bool:
        return not self.extra_tables and all(t.ok for t in self.tables)

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def table(self, name: str) -> TableReport:
        return next(t for t in self.tables if t.name == name)

    def headline(self) -> str:
        where = f"(upstream {self.upstream}, downstream {self.downstream})"
        if self.ok:
            rows = sum(t.upstream_rows for t in self.tables)
            return f"audit OK: {len(self.tables)} tables, {rows} rows, all equal {where}"
        bad = sum(not t.ok for t in self.tables) + len(self.extra_tables)
        return f"audit FAILED: {bad} of {len(self.tables) + len(self.extra_tables)} tables differ {where}"

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "upstream": self.upstream,
            "downstream": self.downstream,
            "chunk_size": self.chunk_size,
            "tables": [t.to_json() for t in self.tables],
            "extra_tables": list(self.extra_tables),
        }

    def json_text(self) -> str:
        return json.dumps(self.to_json(), indent=2, ensure_ascii=False)

    def render(self) -> str:
        """The headline, one aligned line per table, examples under each unequal table."""
        head = ["table", "rows up", "rows down", "chunks", "differ", "missing", "extra", "different", "status"]
        lines: list[list[str]] = []
        for t in self.tables:
            if t.problem and not t.key:
                counts = ["-"] * 7
            else:
                counts = [
                    str(v)
                    for v in (
                        t.upstream_rows,
                        t.downstream_rows,
                        t.chunks,
                        t.chunks_differing,
                        t.missing,
                        t.extra,
                        t.different,
                    )
                ]
            lines.append([t.name, *counts, t.status])
        lines += [[name, *["-"] * 7, "extra table downstream (not upstream)"] for name in self.extra_tables]
        widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head) - 1)]

        def fmt(r: list[str]) -> str:
            cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:], strict=True)]
            return "  ".join([*cells, r[-1]])

        out = [self.headline(), fmt(head)]
        for t, r in zip(self.tables, lines, strict=False):
            out.append(fmt(r))
            out += [f"    {e.kind:<9} {e.text(t.columns)}" for e in t.examples]
        out += [fmt(r) for r in lines[len(self.tables) :]]
        return "\n".join(out)
