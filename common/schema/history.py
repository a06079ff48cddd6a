"""DDL history and schema meta in etcd (docs/formats.md#ddl-history; our stand-in for TiKV meta).

Keys:
    /tidb/ddl/history/<job_id, 20 digits>   a finished job, JSON (common.schema.model)
    /tidb/ddl/meta/schema_version           decimal text: the version of the newest job
    /tidb/ddl/meta/global_id                decimal text: the last id handed out for
                                            jobs, databases, tables (one sequence, as TiDB)
    /tidb/ddl/meta/autoid/<table_id>        decimal text: the last row id / auto-increment
                                            value handed out for a table

A job becomes part of the history in one etcd transaction that also advances the schema
version, guarded by the version it was planned against, so two writers can never publish
two jobs with the same version.  Ids are handed out by compare-and-put, in batches.
"""

from __future__ import annotations

import logging
import threading

from common.errors import BinlogError
from common.etcd import EtcdClient
from common.schema.model import HISTORY_PREFIX, Job, SchemaError, history_key

log = logging.getLogger(__name__)

META_PREFIX = "/tidb/ddl/meta/"
SCHEMA_VERSION_KEY = META_PREFIX + "schema_version"
GLOBAL_ID_KEY = META_PREFIX + "global_id"
AUTOID_PREFIX = META_PREFIX + "autoid/"

_CAS_ATTEMPTS = 100


class SchemaVersionConflictError(BinlogError):
    """Another writer published a DDL job first; reload the schema and plan again."""

    retriable = True


def _read_int(etcd: EtcdClient, key: str) -> tuple[int, bytes | None]:
    kv = etcd.get(key)
    if kv is None:
        return 0, None
    try:
        return int(kv.value), kv.value
    except ValueError:
        raise SchemaError(f"etcd key {key} holds {kv.value!r}, not a number") from None


class DDLHistory:
    """Read and publish DDL jobs; allocate ids.  Thread-safe."""

    def __init__(self, etcd: EtcdClient) -> None:
        self.etcd = etcd

    def load(self) -> list[Job]:
        """Every job in the history, by id."""
        kvs, _ = self.etcd.get_prefix(HISTORY_PREFIX)
        return [Job.from_json(kv.value, kv.key) for kv in kvs]

    def get(self, job_id: int) -> Job | None:
        key = history_key(job_id)
        kv = self.etcd.get(key)
        return None if kv is None else Job.from_json(kv.value, key)

    def schema_version(self) -> int:
        return _read_int(self.etcd, SCHEMA_VERSION_KEY)[0]

    def publish(self, job: Job) -> None:
        """Add `job` to the history if the schema version is still `job.schema_version - 1`."""
        expected_version = job.schema_version - 1
        current, raw = _read_int(self.etcd, SCHEMA_VERSION_KEY)
        if current != expected_version:
            raise SchemaVersionConflictError(
                f"schema version is {current}, job {job.id} was planned against {expected_version}"
            )
        ok = self.etcd.compare_and_put(
            SCHEMA_VERSION_KEY, raw, str(job.schema_version), also_put=[(job.key(), job.to_json())]
        )
        if not ok:
            stored = self.get(job.id)
            if stored is None or stored.schema_version != job.schema_version:
                raise SchemaVersionConflictError(f"schema version moved while publishing job {job.id}")
        log.info("job_id=%s schema_version=%s published %s: %s", job.id, job.schema_version, job.type, job.query)

    def alloc_global_ids(self, n: int = 1) -> int:
        """Reserve `n` consecutive ids; returns the first."""
        return alloc_range(self.etcd, GLOBAL_ID_KEY, n)


def alloc_range(etcd: EtcdClient, key: str, n: int, minimum: int = 0) -> int:
    """Advance the counter at `key` by `n` (from at least `minimum`); returns the first id of the range."""
    if n <= 0:
        raise ValueError(f"cannot allocate {n} ids")
    for _ in range(_CAS_ATTEMPTS):
        current, raw = _read_int(etcd, key)
        base = max(current, minimum)
        if etcd.compare_and_put(key, raw, str(base + n)):
            return base + 1
    raise SchemaVersionConflictError(f"could not allocate ids at {key}: too much contention")


class RowIDAllocator:
    """Per-table row ids (hidden handles and auto-increment values), reserved from etcd in batches."""

    def __init__(self, etcd: EtcdClient, batch: int = 1000) -> None:
        self.etcd = etcd
        self.batch = batch
        self._lock = threading.Lock()
        self._ranges: dict[int, tuple[int, int]] = {}  # table id -> (next, end exclusive)

    def next(self, table_id: int) -> int:
        with self._lock:
            nxt, end = self._ranges.get(table_id, (0, 0))
            if nxt >= end:
                nxt = alloc_range(self.etcd, f"{AUTOID_PREFIX}{table_id}", self.batch)
                end = nxt + self.batch
            self._ranges[table_id] = (nxt + 1, end)
            return nxt

    def rebase(self, table_id: int, value: int) -> None:
        """Make sure ids handed out later are above `value` (an explicit auto-increment value)."""
        with self._lock:
            nxt, end = self._ranges.get(table_id, (0, 0))
            if value < nxt:
                return
            if value < end:
                self._ranges[table_id] = (value + 1, end)
                return
            first = alloc_range(self.etcd, f"{AUTOID_PREFIX}{table_id}", self.batch, minimum=value)
            self._ranges[table_id] = (first, first + self.batch)
