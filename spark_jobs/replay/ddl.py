"""DDL ordering for replay (pure): which jobs apply, in what order, and the final schema at stop-ts.

Jobs apply in schema-version order (ties by job id), as the drainer applies them; cancelled jobs and
jobs with schema version 0 (a failed DDL) never apply.  A job belongs to the replay window when its
DDL took effect at or before stop-ts.  When a DDL took effect is known exactly from its DDL binlog
(`ddl_job_id` on the commit record in a pump, the DDL record of a file sink, matched by query text
in order); a job whose binlog is not in the input (older than the retained history, or a DDL of a
schema the drainer filtered) is taken to be in effect from its own start_ts, which is before any
DML that saw it committed.

The names of a table change over time (rename, truncate gives it a new id, drop and re-create
reuse a name): `NameTimeline` answers "which table id was db.t at commit_ts", which is what the rows of
a file sink (names, no ids) need.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobState, TableInfo

__all__ = [
    "NameTimeline",
    "ScheduledJob",
    "applicable",
    "effective_times",
    "final_schema",
    "match_ddl_queries",
    "ordered_jobs",
    "version_at",
]

_APPLIED = frozenset({JobState.DONE, JobState.SYNCED})


def applicable(job: Job) -> bool:
    """Whether a job changes the schema at all (done or synced, with a schema version)."""
    return job.state in _APPLIED and job.schema_version > 0


def ordered_jobs(jobs: Iterable[Job]) -> list[Job]:
    """The applicable jobs in the order they apply: by schema version, then id; a duplicate id once."""
    seen: set[int] = set()
    out = []
    for j in sorted(jobs, key=lambda j: (j.schema_version, j.id)):
        if applicable(j) and j.id not in seen:
            seen.add(j.id)
            out.append(j)
    return out


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    job: Job
    ts: int
    """When it took effect: its DDL binlog's commit_ts, else its start_ts."""
    exact: bool


def _normalize_query(q: str) -> str:
    q = q.strip()
    if q.lower().startswith("use "):
        _, sep, rest = q.partition(";")
        q = rest.strip() if sep else q
    return q.rstrip("; \t\n")


def match_ddl_queries(jobs: Sequence[Job], ddl_records: Sequence[tuple[int, str]]) -> dict[int, int]:
    """job id -> commit_ts for file-sink DDL records `(commit_ts, query)` matched to `jobs` in order.

    The file sink writes `use `db`; <query>;`; records and jobs are both in apply order, so each
    record is matched to the next job (at or after the previous match) with the same query text.
    """
    out: dict[int, int] = {}
    order = ordered_jobs(jobs)
    i = 0
    for commit_ts, query in sorted(ddl_records):
        q = _normalize_query(query)
        for k in range(i, len(order)):
            if _normalize_query(order[k].query) == q:
                out[order[k].id] = commit_ts
                i = k + 1
                break
    return out


def effective_times(jobs: Iterable[Job], commit_ts_of: Mapping[int, int]) -> list[ScheduledJob]:
    """The applicable jobs in apply order, each with when it took effect."""
    out = []
    for j in ordered_jobs(jobs):
        ts = commit_ts_of.get(j.id)
        out.append(ScheduledJob(j, ts if ts is not None else j.start_ts, ts is not None))
    return out


def version_at(schedule: Sequence[ScheduledJob], ts: int | None) -> int:
    """The schema version in effect at `ts` (None: after every job): the newest job that took effect by then."""
    v = 0
    for s in schedule:
        if ts is None or s.ts <= ts:
            v = max(v, s.job.schema_version)
    return v


def final_schema(schedule: Sequence[ScheduledJob], stop_ts: int | None = None) -> InfoSchema:
    """The schema at `stop_ts` (None: after every job), jobs applied in order."""
    upto = version_at(schedule, stop_ts)
    return InfoSchema.from_jobs([s.job for s in schedule], upto_version=upto)


class NameTimeline:
    """(database, table) name -> which table id (and table info) it named at a given time."""

    def __init__(self, schedule: Sequence[ScheduledJob]) -> None:
        # (db lower, table lower) -> ascending [(ts, table id or 0 when the name is free, info)]
        self._names: dict[tuple[str, str], list[tuple[int, int, TableInfo | None]]] = {}
        s = InfoSchema()
        before: dict[tuple[str, str], tuple[int, TableInfo]] = {}
        for sj in schedule:
            s.apply(sj.job)
            now = {(r.db.name.lower(), r.table.name.lower()): (r.table.id, r.table) for r in s.tables()}
            for name in before.keys() | now.keys():
                was, cur = before.get(name), now.get(name)
                if was != cur:
                    entry = (sj.ts, cur[0], cur[1]) if cur is not None else (sj.ts, 0, None)
                    self._names.setdefault(name, []).append(entry)
            before = now

    def lookup(self, db: str, table: str, ts: int) -> tuple[int, TableInfo] | None:
        """The table `db.table` named just before `ts` (a row committed at `ts`), None if none."""
        hist = self._names.get((db.lower(), table.lower()))
        if not hist:
            return None
        i = bisect.bisect_left(hist, ts, key=lambda e: e[0])  # jobs that took effect before ts
        if i == 0:
            return None
        _, tid, info = hist[i - 1]
        return None if info is None else (tid, info)
