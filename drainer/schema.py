"""The drainer's schema: DDL history jobs applied in schema-version order (docs/architecture.md#syncer-and-schema).

    history (etcd /tidb/ddl/history/, docs/formats.md#ddl-history) ─► JobSource ─► DrainerSchema
        load(checkpoint schema version)    apply every job up to it; later ones stay pending
        apply_upto(pv.schema_version)      a DML needs a newer schema: apply pending jobs (refetch if unknown)
        handle_ddl(job_id, commit_ts)      a DDL binlog: fetch its job (waiting for it), apply, return a DDL event
        shape(table_id, schema_version)    the table as it was at that version, for decoding rows

Every applied job records, for each table it touches, the :class:`TableShape` (database name and
table info) valid from its schema version on, or None once the table is gone; ``shape`` looks
the version up, so rows of a binlog are always read with the table its writer saw, even after a
later add/drop column, rename (also across databases) or truncate.

Jobs that are not done (cancelled) or have schema version 0 (a failed DDL) are never applied.
Not thread-safe: one syncer thread owns it (``close`` may be called from any thread).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from typing import Protocol

from common.errors import BinlogError
from common.etcd import EtcdClient
from common.events import DDL, TableShape
from common.schema.history import DDLHistory
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobState, JobType

log = logging.getLogger(__name__)

DDL_JOB_RETRY_INTERVAL = 1.0
"""Seconds between looks for a DDL job that is not in the history yet (original: 1 s)."""
DDL_JOB_TIMEOUT = 60.0

_APPLIED_STATES = frozenset({JobState.DONE, JobState.SYNCED})


class UnknownTableError(BinlogError):
    """A binlog names a table id the schema does not know at the binlog's schema version."""

    def __init__(self, table_id: int, schema_version: int, *, commit_ts: int = 0, node_id: str = "") -> None:
        self.table_id = table_id
        self.schema_version = schema_version
        self.commit_ts = commit_ts
        self.node_id = node_id
        where = "".join([f" commit_ts={commit_ts}" if commit_ts else "", f" from pump {node_id}" if node_id else ""])
        super().__init__(f"unknown table id {table_id} at schema version {schema_version}{where}")


class DDLJobNotFoundError(BinlogError):
    """A DDL binlog's job did not appear in the DDL history in time."""


class SchemaVersionMissingError(BinlogError):
    """A binlog needs a schema version the DDL history does not reach (yet)."""

    retriable = True


class JobSource(Protocol):
    """Where DDL jobs come from."""

    def all_jobs(self) -> list[Job]:
        """Every history job, sorted by schema_version."""
        ...

    def job(self, job_id: int) -> Job | None: ...


class EtcdJobSource:
    """The DDL history the upstream writer keeps in etcd (``/tidb/ddl/history/``)."""

    def __init__(self, etcd: EtcdClient) -> None:
        self._history = DDLHistory(etcd)

    def all_jobs(self) -> list[Job]:
        return sorted(self._history.load(), key=lambda j: (j.schema_version, j.id))

    def job(self, job_id: int) -> Job | None:
        return self._history.get(job_id)


class MemoryJobSource:
    """An in-memory history (unit tests, tools): ``add`` publishes a job."""

    def __init__(self, jobs: list[Job] | None = None) -> None:
        self.jobs: dict[int, Job] = {j.id: j for j in jobs or []}

    def add(self, *jobs: Job) -> None:
        for j in jobs:
            self.jobs[j.id] = j

    def all_jobs(self) -> list[Job]:
        return sorted(self.jobs.values(), key=lambda j: (j.schema_version, j.id))

    def job(self, job_id: int) -> Job | None:
        return self.jobs.get(job_id)


def _applicable(job: Job) -> bool:
    return job.state in _APPLIED_STATES and job.schema_version > 0


def ddl_target(job: Job) -> tuple[str, str]:
    """The (database, table) a DDL statement runs in: no database for CREATE DATABASE, no table for db jobs."""
    if job.type == JobType.CREATE_SCHEMA:
        return "", ""
    if job.type == JobType.DROP_SCHEMA:
        return job.schema_name, ""
    return job.schema_name, job.table.name if job.table is not None else job.table_name


class DrainerSchema:
    def __init__(self, source: JobSource, *, retry_interval: float = DDL_JOB_RETRY_INTERVAL) -> None:
        self._source = source
        self._retry_interval = retry_interval
        self._stop = threading.Event()
        self._reset()

    def _reset(self) -> None:
        self._is = InfoSchema()
        self._jobs: list[Job] = []  # every applicable job known, by schema version
        self._by_id: dict[int, Job] = {}
        self._versions: list[int] = []  # their schema versions
        self._next = 0  # index into _jobs of the first job not applied
        # table id -> ascending [(schema_version, shape or None once gone)]
        self._shapes: dict[int, list[tuple[int, TableShape | None]]] = {}
        self._truncated: set[int] = set()

    # ------------------------------------------------------------------ lookups
    @property
    def infoschema(self) -> InfoSchema:
        return self._is

    def version(self) -> int:
        return self._is.version

    def shape(self, table_id: int, schema_version: int, *, commit_ts: int = 0, node_id: str = "") -> TableShape:
        """The table as it was at ``schema_version``; UnknownTableError when it did not exist then."""
        hist = self._shapes.get(table_id)
        if hist:
            i = bisect.bisect_right(hist, schema_version, key=lambda e: e[0])
            if i:
                found = hist[i - 1][1]
                if found is not None:
                    return found
        raise UnknownTableError(table_id, schema_version, commit_ts=commit_ts, node_id=node_id)

    def db_name_of(self, table_id: int, schema_version: int) -> str:
        return self.shape(table_id, schema_version).db

    def was_truncated(self, table_id: int, schema_version: int) -> bool:
        """Whether ``table_id`` is the old id of a table truncated at or before ``schema_version``."""
        if table_id not in self._truncated:
            return False
        try:
            self.shape(table_id, schema_version)
        except UnknownTableError:
            return True
        return False

    # ------------------------------------------------------------------ loading and applying
    def load(self, upto_version: int) -> None:
        """Start over from the history: apply every job up to ``upto_version``, keep the rest pending."""
        self._reset()
        self._merge(self._source.all_jobs())
        self._apply_known(upto_version)
        log.info(
            "schema loaded: schema_version=%s jobs=%s pending=%s",
            self.version(),
            len(self._jobs),
            len(self._jobs) - self._next,
        )

    def apply_upto(self, schema_version: int) -> None:
        """Apply history jobs up to ``schema_version`` (a DML written with a newer schema)."""
        if schema_version <= self.version():
            return
        if not self._versions or schema_version > self._versions[-1]:
            self._merge(self._source.all_jobs())
        if not self._versions or schema_version > self._versions[-1]:
            newest = self._versions[-1] if self._versions else 0
            raise SchemaVersionMissingError(
                f"schema version {schema_version} is not in the DDL history (newest job has version {newest})"
            )
        self._apply_known(schema_version)

    def handle_ddl(self, job_id: int, commit_ts: int, *, timeout: float = DDL_JOB_TIMEOUT) -> DDL | None:
        """The DDL event of a DDL binlog (None for a cancelled or failed job); its job is applied."""
        job = self._by_id.get(job_id)
        if job is None:
            job = self._fetch(job_id, commit_ts, timeout)
            self._merge(self._source.all_jobs())  # our view of the history is behind: catch up
        if not _applicable(job):
            log.info(
                "job_id=%s commit_ts=%s skipped: state %s, schema version %s",
                job_id,
                commit_ts,
                job.state,
                job.schema_version,
            )
            return None
        self._merge([job])
        v = job.schema_version
        if v > self.version():
            self._apply_known(v - 1)
            before = self._is.copy()
            self._apply_known(v)
        else:  # applied earlier: by load() or for a DML written with a newer schema
            before = InfoSchema.from_jobs(self._jobs[: bisect.bisect_left(self._versions, v)])
        db, table = ddl_target(job)
        log.info("job_id=%s commit_ts=%s schema_version=%s DDL %s: %s", job_id, commit_ts, v, job.type, job.query)
        return DDL(db=db, table=table, query=job.query, job=job, before=before)

    def close(self) -> None:
        """Stop waiting for DDL jobs (handle_ddl then fails at once). Idempotent."""
        self._stop.set()

    # ------------------------------------------------------------------ internals
    def _fetch(self, job_id: int, commit_ts: int, timeout: float) -> Job:
        deadline = time.monotonic() + timeout
        attempt = 0
        while True:
            job = self._source.job(job_id)
            if job is not None:
                return job
            attempt += 1
            left = deadline - time.monotonic()
            if left <= 0 or self._stop.is_set():
                raise DDLJobNotFoundError(
                    f"DDL job {job_id} of the binlog at commit_ts={commit_ts} is not in the DDL history "
                    f"after {attempt} look(s) in {timeout:g} s"
                )
            log.warning("job_id=%s commit_ts=%s not in the DDL history yet: looking again", job_id, commit_ts)
            self._stop.wait(min(self._retry_interval, left))

    def _merge(self, jobs: list[Job]) -> None:
        """Add applicable jobs not known yet (already applied versions are left alone)."""
        for job in jobs:
            if job.id in self._by_id or not _applicable(job):
                continue
            if job.schema_version <= self.version():
                log.warning(
                    "job_id=%s schema_version=%s appeared after that version was applied: ignored",
                    job.id,
                    job.schema_version,
                )
                continue
            i = bisect.bisect_right(self._versions, job.schema_version)
            self._jobs.insert(i, job)
            self._versions.insert(i, job.schema_version)
            self._by_id[job.id] = job

    def _apply_known(self, upto_version: int) -> None:
        while self._next < len(self._jobs) and self._versions[self._next] <= upto_version:
            self._apply(self._jobs[self._next])
            self._next += 1

    def _apply(self, job: Job) -> None:
        touched = {job.table_id}
        if job.table is not None:
            touched.add(job.table.id)
        if job.type == JobType.DROP_SCHEMA:
            touched.update(ref.table.id for ref in self._is.tables(job.schema_name))
        self._is.apply(job)
        if job.type == JobType.TRUNCATE_TABLE:
            self._truncated.add(job.table_id)
        for tid in touched - {0}:
            ref = self._is.table_by_id(tid)
            shape = None if ref is None else TableShape.of(ref.db.name, ref.table)
            hist = self._shapes.setdefault(tid, [])
            if hist or shape is not None:
                hist.append((job.schema_version, shape))
        log.debug("job_id=%s schema_version=%s applied %s", job.id, job.schema_version, job.type)
