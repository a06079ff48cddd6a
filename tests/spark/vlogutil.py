"""Writing small pump data directories straight through the pump's value log (no pump process)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from common.pb import binlog_pb2
from pump.storage.vlog import ValueLog


def write_pump_dir(
    data_dir: Path, binlogs: Sequence[binlog_pb2.Binlog], *, file_size: int = 1 << 20, node_id: str = ""
) -> list[tuple[int, int]]:
    """Append `binlogs` one record each to `<data_dir>/value/`; (fid, offset) of each record."""
    vlog = ValueLog(data_dir / "value", file_size=file_size, sync=False)
    try:
        out = []
        for b in binlogs:
            (ptr,) = vlog.append([b.SerializeToString()], max(b.start_ts, b.commit_ts))
            out.append((ptr.fid, ptr.offset))
    finally:
        vlog.close()
    if node_id:
        (data_dir / ".node").write_text(node_id + "\n", encoding="utf-8")
    return out


def txn_binlogs(
    start_ts: int, commit_ts: int, prewrite_value: bytes = b"", *, ddl_job_id: int = 0
) -> list[binlog_pb2.Binlog]:
    """A prewrite and its commit, as TiDB sends them."""
    p = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=start_ts, prewrite_key=b"k", ddl_job_id=ddl_job_id)
    if prewrite_value:
        p.prewrite_value = prewrite_value
    c = binlog_pb2.Binlog(
        tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=b"k", ddl_job_id=ddl_job_id
    )
    return [p, c]
