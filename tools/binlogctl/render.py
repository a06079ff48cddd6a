"""What `binlogctl` prints and writes, as pure functions of values: node tables, JSON lists, the savepoint.

Node table (`pumps` / `drainers`), columns left-aligned, two spaces apart; a TSO's time at millisecond
precision in the chosen zone, `-` for 0:

    NodeID  Addr             State   MaxCommitTS         MaxCommitTime                UpdateTime
    pump0   127.0.0.1:8250   online  449572212541276161  2024-05-01 10:00:00.123 UTC  2024-05-01 10:00:02.456 UTC

`drainers` adds one note per online drainer under the table, from its HTTP `/status` (`stalled_pumps`:
the pumps its merge waits for that sent nothing for longer than its `pump-stall-report-after`).  Notes
start with `(` like the offline note, so the table's columns stay the original's:

    (drainer d1: stalled: pump1 at 127.0.0.1:8250 for 42s, last commit_ts 449572212541276161)
    (drainer d2: no stalled pump)
    (drainer d3: status unavailable: cannot reach 127.0.0.1:18249: connection refused)

`--json`: a JSON array whose items are the etcd values byte for byte, one per line.

Savepoint (`generate_meta`, `<data-dir>/savepoint`), TOML as the drainer's file checkpoint reads it
(drainer/checkpoint.py: `commitTS`; `consistent` and `schema-version` default to false / 0 when absent, as
the original's generate_meta leaves them out). The time lines are comments, so no TOML reader sees them:

    commitTS = 449572212541276161
    # commitTS time UTC: 2024-05-01 10:00:00.123 UTC
    # commitTS time Asia/Shanghai: 2024-05-01 18:00:00.123 CST          (only with --time-zone)
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, tzinfo

from common import tso
from common.registry import NodeStatus

TABLE_HEADER = ("NodeID", "Addr", "State", "MaxCommitTS", "MaxCommitTime", "UpdateTime")


def ts_time(ts: int, zone: tzinfo | None = None) -> str:
    """The wall-clock time of a TSO, `YYYY-MM-DD HH:MM:SS.mmm ZONE` (zone None: local), `-` for 0."""
    if ts <= 0:
        return "-"
    when = tso.to_datetime(ts, UTC).astimezone(zone)
    return f"{when:%Y-%m-%d %H:%M:%S}.{when.microsecond // 1000:03d} {when:%Z}".rstrip()


def node_rows(nodes: Sequence[NodeStatus], zone: tzinfo | None = None) -> list[tuple[str, ...]]:
    return [
        (
            n.node_id,
            n.host,
            n.state.value,
            str(n.max_commit_ts),
            ts_time(n.max_commit_ts, zone),
            ts_time(n.update_ts, zone),
        )
        for n in nodes
    ]


def table(rows: Sequence[Sequence[str]], header: Sequence[str] = TABLE_HEADER) -> str:
    """Rows under a header, columns padded to their widest cell; no trailing spaces."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [header, *rows]]
    return "\n".join(lines) + "\n"


def node_table(nodes: Sequence[NodeStatus], zone: tzinfo | None = None, *, hidden_offline: int = 0) -> str:
    """The `pumps` / `drainers` output: the table, and a note on offline nodes left out."""
    text = table(node_rows(nodes, zone))
    if hidden_offline:
        text += f"({hidden_offline} offline node{'s' if hidden_offline > 1 else ''} hidden; --show-offline-nodes)\n"
    return text


def stalled_text(doc: object) -> str:
    """What a drainer's `/status` document says about stalled pumps, for its note under the table."""
    pumps = doc.get("stalled_pumps") if isinstance(doc, dict) else None
    if not isinstance(pumps, list):
        return "status unavailable: its /status has no stalled_pumps (an older drainer?)"
    if not pumps:
        return "no stalled pump"
    parts = []
    for p in pumps:
        if not isinstance(p, dict):
            continue
        text = f"{p.get('node_id', '?')}"
        if p.get("addr"):
            text += f" at {p['addr']}"
        seconds = p.get("seconds")
        if isinstance(seconds, int | float):
            text += f" for {seconds:.0f}s"
        if p.get("last_ts"):
            text += f", last commit_ts {p['last_ts']}"
        parts.append(text)
    return "stalled: " + "; ".join(parts)


def stall_notes(notes: Sequence[tuple[str, str]]) -> str:
    """One `(drainer ID: text)` line per (node id, text)."""
    return "".join(f"(drainer {node_id}: {text})\n" for node_id, text in notes)


def json_list(values: Sequence[bytes]) -> str:
    """A JSON array of already-encoded JSON values, each kept byte for byte on its own line."""
    if not values:
        return "[]\n"
    return "[\n" + ",\n".join(v.decode("utf-8") for v in values) + "\n]\n"


def savepoint_text(commit_ts: int, zone: tzinfo | None = None, zone_name: str = "") -> str:
    """The savepoint file generate_meta writes (see the module docstring)."""
    text = f"commitTS = {commit_ts}\n# commitTS time UTC: {ts_time(commit_ts, UTC)}\n"
    if zone is not None:
        text += f"# commitTS time {zone_name or zone}: {ts_time(commit_ts, zone)}\n"
    return text
