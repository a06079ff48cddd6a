"""Prometheus text exposition (format 0.0.4) with the original's counter names (docs/architecture.md#metrics).

The original's Go client writes a counter registered as `x` under exactly that name:

    # HELP binlog_drainer_event the count of sql event(dml, ddl).
    # TYPE binlog_drainer_event counter
    binlog_drainer_event{type="Insert"} 40

prometheus_client follows OpenMetrics instead: a counter `x` is scraped as `x_total` (and a counter
registered as `x_total` is also scraped as `x_total`: the client strips the suffix from the family
name, so the two cannot be told apart after collection), with an `x_created` gauge beside it.  The
original's dashboard and alert rules read `binlog_drainer_event`, `binlog_pump_storage_error_count`
and the like, so `render` writes the counter families named in `bare_counters` under their bare name
(`x`, samples `x{...} v`), and every other counter as prometheus_client does (`x_total`: that covers
the original's own `..._total` names such as `binlog_drainer_ddl_jobs_total`, and the client's
`process_cpu_seconds_total`).  No `_total` alias of a bare counter is written: one series per
counter, as the original, so a `sum()` over a name pattern never counts a counter twice.

`_created` samples are dropped (the Go client has none, and nothing we ship reads them); histograms,
gauges and the rest are written as prometheus_client writes them.  Metric and label names are
ASCII identifiers (ours and the client's collectors); label values and help texts are escaped as the
format requires.  Pure: takes a collector, returns bytes
(served with common.httpserver.METRICS_CONTENT_TYPE).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final, cast

from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["render"]

_go_float: Final = cast(Callable[[float], str], floatToGoString)
"""A sample value as the Go client writes it ("+Inf", "1e+06"; untyped in prometheus_client)."""
_TYPES: Final = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}
"""OpenMetrics types the 0.0.4 format lacks, and what they are written as (as prometheus_client does)."""


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_value(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def render(collector: Collector, bare_counters: Collection[str] = ()) -> bytes:
    """The 0.0.4 text of everything `collector` (a registry) yields; counter families whose name is
    in `bare_counters` are written without the `_total` suffix, as the Go client writes them."""
    out: list[str] = []
    for family in collector.collect():
        name, kind = family.name, family.type
        rename: dict[str, str] = {}
        if kind == "counter":
            if name in bare_counters:
                exported = name
                rename[name + "_total"] = name
            else:
                exported = name + "_total"
        elif kind == "info":
            exported = name + "_info"
        else:
            exported = name
        out.append(f"# HELP {exported} {_escape_help(family.documentation)}\n")
        out.append(f"# TYPE {exported} {_TYPES.get(kind, kind)}\n")
        created = name + "_created"
        for s in family.samples:
            if s.name == created:
                continue
            labels = ""
            if s.labels:
                labels = "{" + ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(s.labels.items())) + "}"
            stamp = "" if s.timestamp is None else f" {int(float(s.timestamp) * 1000):d}"
            out.append(f"{rename.get(s.name, s.name)}{labels} {_go_float(s.value)}{stamp}\n")
    return "".join(out).encode()
