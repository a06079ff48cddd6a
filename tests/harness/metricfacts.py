"""The original's metric facts (tests/data/original_*.txt) and a faithful reader of /metrics text.

`original_metrics()` is the fact list of what the original pump, drainer and arbiter export;
`original_alert_rules()` the expressions of the original's alert rules, `original_dashboard_metrics()`
the names its Grafana dashboard reads.  `Exposition` parses text format 0.0.4 as written, with the
names as they are scraped: prometheus_client's own parser renames a counter `x` to `x_total`, which
would hide exactly what these tests look for.  `metric_names` reads the metric names out of a PromQL
expression (strings, label matchers, ranges and grouping clauses dropped; identifiers that are neither
functions nor keywords kept).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

DATA: Final = Path(__file__).resolve().parents[1] / "data"
SUFFIXES: Final = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}
"""The sample names a family of each type is read by in PromQL (name + suffix)."""
EXPORTED: Final = "exported"
UNREGISTERED: Final = "unregistered"
GO_RUNTIME: Final = "go-runtime"


@dataclass(frozen=True)
class OriginalMetric:
    component: str
    name: str
    type: str
    labels: frozenset[str]
    status: str


def _lines(name: str) -> list[str]:
    text = (DATA / name).read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def original_metrics(component: str | None = None) -> list[OriginalMetric]:
    """The fact list, or the part of it `component` exported."""
    found: list[OriginalMetric] = []
    for line in _lines("original_metrics.txt"):
        comp, name, kind, labels, status = line.split()
        assert kind in SUFFIXES, line
        assert status in (EXPORTED, UNREGISTERED, GO_RUNTIME), line
        found.append(OriginalMetric(comp, name, kind, frozenset(labels.split(",")) - {"-"}, status))
    return [m for m in found if component is None or m.component == component]


def original_alert_rules() -> list[tuple[str, str]]:
    """(alert, expr) of each rule of the original's binlog.rules.yml."""
    return [(alert, expr) for alert, expr in (line.split("\t") for line in _lines("original_alert_rules.txt"))]


def original_dashboard_metrics() -> set[str]:
    return {line.strip() for line in _lines("original_dashboard_metrics.txt")}


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')

Labels = tuple[tuple[str, str], ...]


@dataclass
class Exposition:
    """Text format 0.0.4 as scraped: family types, label names per family, samples by (name, labels)."""

    types: dict[str, str] = field(default_factory=dict)
    label_names: dict[str, set[str]] = field(default_factory=dict)
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    type_lines: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> Exposition:
        e = cls()
        family = ""
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(" ")
                e.type_lines.append(family)
                e.types[family] = kind
                e.label_names[family] = set()
                continue
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            assert m is not None, f"not a sample line: {line!r}"
            name, labels_text, value = m.groups()
            assert name in {family + s for s in SUFFIXES[e.types[family]]}, f"{name} outside its family {family}"
            labels = tuple(sorted(_LABEL.findall(labels_text or "")))
            e.label_names[family].update(k for k, _ in labels if k != "le" or e.types[family] != "histogram")
            e.samples[name, labels] = float(value)
        return e

    def series(self) -> set[str]:
        """Every name PromQL can read here: a family's samples, labelled families without one included."""
        return {name + s for name, kind in self.types.items() for s in SUFFIXES[kind]}

    def get(self, name: str, /, **labels: str) -> float:
        """The sample's value; 0 when it is not there (yet)."""
        return self.samples.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str, /, **match: str) -> float:
        """Sum of every sample `name` whose labels include `match`."""
        return sum(
            v
            for (n, labels), v in self.samples.items()
            if n == name and all((k, val) in labels for k, val in match.items())
        )


_KEYWORDS: Final = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    text = _GROUPING.sub(" ", _RANGE.sub(" ", _MATCHERS.sub(" ", _STRING.sub('""', expr))))
    return {m.group(1) for m in _IDENT.finditer(text) if m.group(2) is None and m.group(1) not in _KEYWORDS}
