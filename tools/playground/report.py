"""What a playground prints at the end: the summary table, and how to reach and stop a kept cluster (pure)."""

from __future__ import annotations

from common.audit import AuditResult
from tools.playground.cluster import Cluster
from tools.playground.monitor import LagStats, Reading, secs
from tools.playground.options import PROG, Options
from tools.playground.state import State
from upstream import RunResult


def downstream_where(o: Options, cluster: Cluster, state: State) -> str:
    if o.downstream is None:
        return f"sqlite {cluster.downstream_path}"
    return f"{o.downstream.describe()}, databases {', '.join(state.databases)}"


def summary_text(
    o: Options,
    *,
    result: RunResult,
    problems: list[str],
    lags: LagStats,
    catch_up: float,
    audit: AuditResult,
    last: Reading,
    where: str,
) -> str:
    """The summary table: one key and one line of numbers per row."""
    s = result.stats
    snap = s.snapshot(result.elapsed)
    ev = last.events
    applied = ", ".join(f"{t.lower()} {ev.get(t, 0)}" for t in ("Insert", "Update", "Delete", "DDL"))
    stored = ", ".join(f"{p.name} {'down' if p.binlogs is None else p.binlogs}" for p in last.pumps)
    rows = [
        (
            "workload",
            f"{o.workload} into `{o.database}`, {o.threads} thread{'s' if o.threads != 1 else ''}, seed {o.seed}",
        ),
        (
            "transactions",
            f"{s.committed} committed in {result.elapsed:.1f}s ({snap.txn_per_s:.1f} txn/s), "
            f"{s.failed} failed, {s.retried} retried" + (f", {s.ddl} DDL" if s.ddl else ""),
        ),
        ("check", "workload invariants hold" if not problems else "FAILED: " + "; ".join(problems)),
        ("rows", f"{last.rows} changes applied downstream ({applied}); tables hold {audit.rows} rows"),
        ("lag", f"p50 {secs(lags.p50())}, max {secs(lags.max())} (checkpoint behind the clock)"),
        ("catch-up", f"{catch_up:.1f}s after the workload stopped"),
        ("pumps", f"{stored} binlogs stored"),
        ("downstream", where),
        ("audit", audit.headline().removeprefix("audit ")),
    ]
    return "\nsummary\n" + "\n".join(f"  {k:<13} {v}" for k, v in rows)


def kept_text(o: Options, c: Cluster, where: str) -> str:
    """Every address and pid of a kept cluster, and the commands to write more, audit again and stop it."""
    lines = [
        "",
        "the cluster keeps running:",
        f"  etcd        {c.etcd.url}   (pid {c.etcd.process.pid})",
        f"  pd-server   {c.pd.addr}   (pid {c.pd.process.pid})",
    ]
    lines += [f"  {n.name:<11} {n.addr}, http://{n.status_addr}/status   (pid {n.process.pid})" for n in c.nodes()]
    audit_target = f"sqlite://{c.downstream_path}" if o.downstream is None else o.downstream.describe()
    lines += [
        f"  upstream    {c.upstream_dsn}",
        f"  downstream  {where}",
        f"  logs        {o.base}/*.log",
        "write more:",
        f"  binlog-workload --workload {o.workload} --database {o.database} --etcd {c.etcd.url} "
        f"--store {c.upstream_dsn} --duration 30s",
        "audit again:",
        f"  python -m tools.audit --etcd {c.etcd.url} --upstream {c.upstream_dsn} --downstream {audit_target}",
        "stop it:",
        f"  {PROG} --stop --dir {o.base}",
        "  (or: kill " + " ".join(str(p.pid) for p in reversed(c.processes()) if p.pid) + ")",
    ]
    return "\n".join(lines)
