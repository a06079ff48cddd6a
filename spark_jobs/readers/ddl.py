"""The DDL history a job decodes rows with: from etcd, or from a JSON export file.

The upstream writer keeps every DDL job at `/tidb/ddl/history/<job_id>` in etcd (docs/formats.md#ddl-history,
`common.schema.history`).  A replay on a cluster without access to that etcd reads an export instead,
written by `binlog-spark export-ddl --pd-urls URL --out FILE`:

    {"format": "binlog-spark-ddl-history", "version": 1,
     "jobs": [<job JSON as in common/schema/model.py>, ...]}      jobs by (schema_version, id)

Loading checks every job strictly (an unknown key or a bad type is an error naming the job).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from common.errors import BinlogError
from common.schema.model import Job, job_from_dict, job_to_dict
from spark_jobs.errors import InputError

if TYPE_CHECKING:
    from common.etcd import EtcdClient
    from common.tls import TLS

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "etcd_client",
    "jobs_from_etcd",
    "load_history",
    "read_export",
    "write_export",
]

log = logging.getLogger(__name__)

EXPORT_FORMAT: Final = "binlog-spark-ddl-history"
EXPORT_VERSION: Final = 1
ETCD_RETRY_FOR: Final = 5.0
"""Seconds an unreachable etcd is retried before the job gives up (a job is not a daemon)."""


def _sorted(jobs: Sequence[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.schema_version, j.id))


def etcd_client(pd_urls: str, tls: TLS | None = None) -> EtcdClient:
    """A client of the cluster's etcd at `pd_urls` (over TLS with `tls`); InputError naming --pd-urls."""
    from common.etcd import EtcdClient

    try:
        return EtcdClient(pd_urls, retry_for=ETCD_RETRY_FOR, tls=tls)
    except BinlogError as exc:
        raise InputError(f"--pd-urls {pd_urls}: {exc}") from None


def jobs_from_etcd(pd_urls: str, tls: TLS | None = None) -> list[Job]:
    """Every job of the DDL history in the etcd at `pd_urls` (over TLS with `tls`); InputError when it
    cannot be read."""
    from common.schema.history import DDLHistory

    client = etcd_client(pd_urls, tls)
    try:
        jobs = DDLHistory(client).load()
    except BinlogError as exc:
        raise InputError(f"cannot read the DDL history from etcd {pd_urls}: {exc}") from None
    finally:
        client.close()
    log.info("ddl history read from etcd %s: %d jobs", pd_urls, len(jobs))
    return _sorted(jobs)


def read_export(path: str | os.PathLike[str]) -> list[Job]:
    """The jobs of an export file; InputError naming the file and what is wrong with it."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"DDL history export {p}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise InputError(f"DDL history export {p}: not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise InputError(f"DDL history export {p}: not a {EXPORT_FORMAT} file (written by binlog-spark export-ddl)")
    if doc.get("version") != EXPORT_VERSION:
        raise InputError(f"DDL history export {p}: version {doc.get('version')!r}, this reader knows {EXPORT_VERSION}")
    raw = doc.get("jobs")
    if not isinstance(raw, list):
        raise InputError(f"DDL history export {p}: 'jobs' is not a list")
    try:
        jobs = [job_from_dict(j, f"{p} job #{i}") for i, j in enumerate(raw)]
    except BinlogError as exc:
        raise InputError(f"DDL history export {exc}") from None
    return _sorted(jobs)


def write_export(jobs: Sequence[Job], path: str | os.PathLike[str]) -> None:
    """Write `jobs` as an export file (atomically: a temporary file renamed over `path`)."""
    p = Path(path)
    doc = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "jobs": [job_to_dict(j) for j in _sorted(jobs)]}
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, p)
    except OSError as exc:
        raise InputError(f"cannot write the DDL history export {p}: {exc.strerror or exc}") from None


def load_history(*, pd_urls: str | None = None, ddl_file: str | None = None, tls: TLS | None = None) -> list[Job]:
    """The DDL history from exactly one of `ddl_file` (an export) or `pd_urls` (etcd)."""
    if ddl_file:
        return read_export(ddl_file)
    if pd_urls:
        return jobs_from_etcd(pd_urls, tls)
    raise InputError("no DDL history: give --ddl-history FILE (an export) or --pd-urls URL (the cluster's etcd)")
