"""Helpers for upstream-writer functional tests: pull every pump, merge by commit_ts, replay rows.

`replay` is a tiny reference drainer: it decodes every TableMutation with the table info valid
at the binlog's schema version and applies the changes, in `sequence` order, to a dict keyed by
(table id, handle).  Comparing its result with the writer's store proves that the binlogs carry
exactly the committed changes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from common.codec import EXTRA_HANDLE_ID, decode_deleted_row, decode_inserted_row, decode_updated_row, unflatten
from common.codec.row import Row as DatumRow
from common.pb import binlog_pb2
from common.schema.infoschema import InfoSchema
from common.schema.model import TableInfo
from tests.functional.pumputil import PumpClient, is_fake
from tools.localcluster import PumpProcess

Model = dict[tuple[int, int], dict[str, Any]]


def pull_merged(
    pumps: Sequence[PumpProcess], cluster_id: int, upto: int, timeout: float = 60, *, exactly_once: bool = False
) -> list[binlog_pb2.Binlog]:
    """Every commit binlog (fake ones dropped) with commit_ts <= upto from all pumps, by commit_ts.

    Each pump's stream is read until it passes `upto` (fake binlogs guarantee it does).  A transaction
    served by two pumps is kept once, as the drainer's merge does: a pump killed after storing a
    prewrite but before answering makes the client write it to a second pump, and when the writer did
    not record which pump took it, the first pump's resolver later gives its copy the same commit.
    `exactly_once`: such a second copy fails the test instead (the writer recorded the pump)."""
    merged: dict[tuple[int, int], binlog_pb2.Binlog] = {}
    served_by: dict[int, str] = {}
    for p in pumps:
        client = PumpClient(p.addr, cluster_id)
        try:
            for b in client.pull(0, timeout):
                if b.commit_ts > upto:
                    break
                if is_fake(b):
                    continue
                if exactly_once:
                    assert b.start_ts not in served_by, (
                        f"start_ts={b.start_ts} served by {served_by[b.start_ts]} and again by {p.node_id}"
                    )
                    served_by[b.start_ts] = p.node_id
                merged.setdefault((b.start_ts, b.commit_ts), b)
        finally:
            client.close()
    return sorted(merged.values(), key=lambda b: b.commit_ts)


def _values(t: TableInfo, row: DatumRow) -> dict[str, Any]:
    by_id = {c.id: c for c in t.columns}
    return {by_id[cid].lname: unflatten(d, by_id[cid].ctype) for cid, d in row.items() if cid in by_id}


def _full(t: TableInfo, partial: dict[str, Any], handle: int) -> dict[str, Any]:
    out = {}
    for c in t.columns:
        if c.lname in partial:
            out[c.lname] = partial[c.lname]
        elif t.handle_column is c:
            out[c.lname] = handle if not (c.ctype.unsigned and handle < 0) else handle + (1 << 64)
        else:
            out[c.lname] = None
    return out


def _handle(t: TableInfo, row: DatumRow) -> int:
    if t.pk_is_handle:
        hc = t.handle_column
        assert hc is not None
        v = unflatten(row[hc.id], hc.ctype)
        return int(v)
    return int(row[EXTRA_HANDLE_ID].value)


def replay(binlogs: Iterable[binlog_pb2.Binlog], schema: InfoSchema, model: Model | None = None) -> Model:
    model = {} if model is None else model
    for b in binlogs:
        if b.ddl_job_id or not b.prewrite_value:
            continue
        pv = binlog_pb2.PrewriteValue.FromString(b.prewrite_value)
        for m in pv.mutations:
            t = schema.table_at(m.table_id, pv.schema_version)
            assert t is not None, f"table {m.table_id} unknown at schema version {pv.schema_version}"
            ins, upd, dele = iter(m.inserted_rows), iter(m.updated_rows), iter(m.deleted_rows)
            for kind in m.sequence:
                if kind == binlog_pb2.Insert:
                    hd, row = decode_inserted_row(next(ins))
                    h = int(hd[0].value)
                    if t.pk_is_handle and t.handle_column is not None and t.handle_column.ctype.unsigned and h < 0:
                        h += 1 << 64
                    assert (t.id, h) not in model, f"insert of existing row {t.name}/{h} at {b.commit_ts}"
                    model[(t.id, h)] = _full(t, _values(t, row), h)
                elif kind == binlog_pb2.Update:
                    old, new = decode_updated_row(next(upd))
                    h = _handle(t, old)
                    assert model.get((t.id, h)) == _values(t, old), f"update of {t.name}/{h}: old row differs"
                    model[(t.id, h)] = _values(t, new)
                else:
                    assert kind == binlog_pb2.DeleteRow
                    old = decode_deleted_row(next(dele))
                    h = _handle(t, old)
                    assert model.pop((t.id, h), None) == _values(t, old), f"delete of {t.name}/{h}: old row differs"
    return model
