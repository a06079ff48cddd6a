"""Live pumps -> row changes, read over gRPC: no executor needs a pump's disk.

The driver decides the windows before Spark starts (`plan_windows`): for every pump, the commit_ts
window (start-ts, stop-ts] is cut into `per_pump` windows of equal wall-clock length, from where the
pump's history really begins (`common.pull.first_ts`: for a replay from the beginning, a window from
ts 0 would be one window) to stop-ts, which defaults to a fresh TSO taken at job start.  Probing every
pump first also fails the job before Spark starts when a pump is unreachable, refuses the cluster id
or has garbage-collected part of the window.

One Spark task reads one window (`window_rows`) with `common.pull.pull_window`: the pump pairs each
commit with its prewrite, as for the drainer, so there is one pass, not the file reader's two.  The
task yields tagged rows:

    ("c", Change)                           a row change (`readers.changes.CHANGE_DDL`)
    ("d", (job_id, commit_ts))              a DDL commit: when the DDL took effect
    ("s", (commits, ddl, bytes))            what the window held, once at its end

The job persists them, collects the small "d" / "s" rows for the DDL schedule and the progress line,
and turns the "c" rows into the changes DataFrame.  Every table is decoded (which tables the replay
keeps depends on the schema at stop-ts, known only after the read); compaction drops the others.  A
transaction that does not decode is counted and reported, not fatal, as in the file reader.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from common.errors import BinlogError, PumpReadError
from common.pull import DEFAULT_IDLE_TIMEOUT, PumpWindow, first_ts, pull_window
from common.schema.model import Job
from common.tso import compose, physical
from spark_jobs.errors import InputError
from spark_jobs.readers.changes import dml_changes
from spark_jobs.readers.damage import DamageReport
from spark_jobs.readers.ranges import Damage

if TYPE_CHECKING:
    from pyspark import Accumulator

    from common.tls import TLS

__all__ = [
    "CHANGE",
    "DDL",
    "DEFAULT_WINDOWS_PER_PUMP",
    "STATS",
    "NetPlan",
    "PumpAddr",
    "Tagged",
    "ddl_commit_times",
    "discover_pumps",
    "live_windows",
    "parse_pump_addrs",
    "plan_windows",
    "window_rows",
]

log = logging.getLogger(__name__)

CHANGE: Final = "c"
DDL: Final = "d"
STATS: Final = "s"
DEFAULT_WINDOWS_PER_PUMP: Final = 4
"""Read tasks per pump: enough that a few executors share a long history, few enough that every task
reads a good stretch of it (each builds the schema from the DDL history once)."""

Tagged = tuple[str, Any]


@dataclass(frozen=True, slots=True)
class PumpAddr:
    """A pump to read: its name (node id, or the address when given by address) and gRPC address."""

    name: str
    addr: str


def parse_pump_addrs(addrs: Sequence[str]) -> list[PumpAddr]:
    """`host:port` items (comma-separated or separate); InputError for one that is not an address."""
    out: list[PumpAddr] = []
    for item in (a.strip() for text in addrs for a in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(f"--from-pump-addrs {item!r}: expected host:port")
        if item not in {p.addr for p in out}:
            out.append(PumpAddr(item, item))
    if not out:
        raise InputError("--from-pump-addrs: no pump address given")
    return out


def discover_pumps(pd_urls: str, after: int, tls: TLS | None = None) -> list[PumpAddr]:
    """The pumps registered in the cluster's etcd, as the drainer finds them.  A pump that is offline
    is left out when its last commit_ts is at or before `after` (it holds nothing of the window);
    otherwise it still holds binlogs of the window that only its data directory can give: InputError."""
    from common.registry import NodeKind, NodeState, Registry
    from spark_jobs.readers.ddl import etcd_client

    client = etcd_client(pd_urls, tls)
    try:
        nodes = Registry(client).list(NodeKind.PUMP)
    except BinlogError as exc:
        raise InputError(f"cannot list the pumps in etcd {pd_urls}: {exc}") from None
    finally:
        client.close()
    out: list[PumpAddr] = []
    for n in nodes:
        if n.state == NodeState.OFFLINE:
            if n.max_commit_ts <= after:
                log.info("pump %s is offline with nothing after %d: not read", n.node_id, after)
                continue
            raise InputError(
                f"pump {n.node_id} is offline and holds binlogs up to commit_ts {n.max_commit_ts}, after the "
                f"window's start {after}: it no longer serves them; replay a copy of its data directory with "
                "--from-pumps, or start the window after that ts"
            )
        out.append(PumpAddr(n.node_id, n.host))
    if not out:
        raise InputError(f"no pump is registered in etcd {pd_urls}")
    return out


def plan_windows(
    pumps: Sequence[PumpAddr],
    *,
    cluster_id: int,
    after: int,
    upto: int,
    per_pump: int,
    tls: TLS | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    first: Callable[[PumpWindow], int] = first_ts,
) -> list[PumpWindow]:
    """The windows of every pump (see the module doc); raises PumpReadError for a pump that cannot serve
    the window (`first` probes it: unreachable, wrong cluster id, gc'd window)."""
    if after >= upto:
        raise InputError(f"the window is empty: start ts {after} is not below stop ts {upto}")
    pem = None if tls is None else (tls.ca_pem, tls.cert_pem, tls.key_pem)
    per: list[list[PumpWindow]] = []
    for p in pumps:
        whole = PumpWindow(p.name, p.addr, cluster_id, after, upto, pem, idle_timeout)
        begin = first(whole) - 1  # nothing of this pump is at or below it, after `after`
        bounds = _split(max(after, min(begin, upto - 1)), upto, per_pump)
        per.append([replace(whole, after=a, upto=b) for a, b in itertools.pairwise(bounds)])
    # the pumps in turn, so that the tasks running at once read different pumps
    return [w for row in itertools.zip_longest(*per) for w in row if w is not None]


def _split(after: int, upto: int, parts: int) -> list[int]:
    """`parts` + 1 increasing bounds from `after` to `upto`, evenly by physical time (fewer when the
    window is shorter than `parts` milliseconds)."""
    lo, hi = physical(after), physical(upto)
    inner = sorted({compose(lo + (hi - lo) * i // parts, 0) for i in range(1, parts)} - {after, upto})
    return [after, *(b for b in inner if after < b < upto), upto]


@dataclass(frozen=True)
class NetPlan:
    """What every window task needs, broadcast once: the DDL history (JSON of every job)."""

    jobs_json: tuple[str, ...]


def window_rows(w: PumpWindow, plan: NetPlan, errors: Accumulator[DamageReport] | None) -> Iterator[Tagged]:
    """One task: the tagged rows of one window (see the module doc)."""
    from drainer import translate_iter
    from spark_jobs.readers.pump_changes import build_schema

    schema = build_schema(plan.jobs_json)
    report = DamageReport()
    commits = ddl = size = 0
    try:
        for item in pull_window(w):
            b = item.binlog
            size += item.size
            if b.ddl_job_id:
                ddl += 1
                yield DDL, (int(b.ddl_job_id), int(b.commit_ts))
                continue
            commits += 1
            try:
                _, dmls = translate_iter(b, schema, node_id=w.name, prewrite_value=item.prewrite_value)
                for change in dml_changes(dmls, int(b.commit_ts)):
                    yield CHANGE, change
            except BinlogError as exc:
                if isinstance(exc, PumpReadError):
                    raise
                what = f"commit_ts {b.commit_ts}: cannot decode: {exc}"
                report.add(Damage(w.name, w.addr, int(b.commit_ts), item.size, what))
        yield STATS, (commits, ddl, size)
    finally:
        if errors is not None and not report.empty:
            errors.add(report)


def ddl_commit_times(seen: Mapping[int, int], jobs: Sequence[Job], *, after: int, stop_ts: int) -> dict[int, int]:
    """When each DDL job took effect, as far as a read of the window (after, stop_ts] can tell.

    `seen`: job id -> commit_ts of the DDL binlogs the read found.  A job that started after `after`
    and whose DDL binlog is not in the window committed after stop_ts (it would be in the window
    otherwise; a DDL that never committed does not apply at all): it gets stop_ts + 1, so the schema
    at stop_ts does not have it -- a replay "up to just before the TRUNCATE" must not take the
    TRUNCATE that was still running then.  A job that started at or before `after` is left to its own
    start_ts (`replay.ddl.effective_times`): it committed before the window, unless it ran through the
    whole window, which only the DDL binlogs before the window could tell."""
    times = dict(seen)
    for j in jobs:
        if j.id not in times and j.start_ts > after:
            times[j.id] = stop_ts + 1
    return times


def live_windows(
    *,
    addrs: Sequence[str] | None,
    pd_urls: str | None,
    cluster_id: int | None,
    start_ts: int | None,
    stop_ts: int | None,
    per_pump: int = DEFAULT_WINDOWS_PER_PUMP,
    tls: TLS | None = None,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
) -> tuple[list[PumpWindow], int]:
    """The windows of a replay from live pumps (`addrs`, else the pumps registered at `pd_urls`) and its
    stop ts: `stop_ts`, else a fresh TSO from the cluster's pd-server.  The cluster id is `cluster_id`,
    else read from `pd_urls`.  `tls`: etcd, pd-server and the pumps are spoken to over TLS.  InputError
    for what is missing; PumpReadError for a pump that cannot serve."""
    after = start_ts or 0
    if cluster_id is None or stop_ts is None:
        if not pd_urls:
            missing = " and ".join(n for n, v in (("--cluster-id", cluster_id), ("--stop-ts", stop_ts)) if v is None)
            raise InputError(f"reading live pumps needs --pd-urls (the cluster's etcd) or {missing}")
        cluster_id, stop_ts = _from_pd(pd_urls, cluster_id, stop_ts, tls)
    if not addrs and not pd_urls:
        raise InputError("--from-cluster needs --pd-urls")
    pumps = parse_pump_addrs(addrs) if addrs else discover_pumps(pd_urls or "", after, tls)
    windows = plan_windows(
        pumps, cluster_id=cluster_id, after=after, upto=stop_ts, per_pump=per_pump, tls=tls, idle_timeout=idle_timeout
    )
    log.info("%d window(s) of %d pump(s), (%d, %d]", len(windows), len(pumps), after, stop_ts)
    return windows, stop_ts


def _from_pd(pd_urls: str, cluster_id: int | None, stop_ts: int | None, tls: TLS | None) -> tuple[int, int]:
    from common.pd_client import TSOClient
    from spark_jobs.readers.ddl import etcd_client

    etcd = etcd_client(pd_urls, tls)
    tso = TSOClient(etcd)
    try:
        if cluster_id is None:
            cluster_id = tso.cluster_id
        if stop_ts is None:
            stop_ts = tso.get_ts()
    except BinlogError as exc:
        raise InputError(f"cannot read the cluster id / a TSO through {pd_urls}: {exc}") from None
    finally:
        tso.close()
        etcd.close()
    return cluster_id, stop_ts
