"""What WriteBinlog accepts: `refusal(binlog)` is None for a valid binlog, else the reason (pure).

Ours: the original stores whatever parses as a `binlog.Binlog`.  Every rule below refuses a binlog that
the pump would otherwise store and then mishandle:

    type      a known, current type: Prewrite (0), Commit (1), Rollback (2).  An unknown value (proto2
              keeps it as an unknown field 1 and reads tp as 0, Prewrite) would wait as a prewrite and
              hold maxCommitTS, and so every drainer, until the resolver's max-txn-timeout.  PreDDL (3)
              and PostDDL (4) are obsolete: nothing sends them, and the sorter would take their
              commit_ts as a commit's.
    Prewrite  start_ts > 0, and its data: prewrite_value (DML) or ddl_query (a DDL prewrite has no
              prewrite_value).  commit_ts is not looked at (TiDB sends 0).
    Commit    start_ts > 0 and commit_ts > start_ts.  commit_ts == start_ts would take the index key of
              its own prewrite (both are keyed by that ts); below it, a commit older than its
              transaction would be served.
    Rollback  start_ts > 0 and commit_ts 0 (TiDB's), or commit_ts == start_ts (a fake binlog: the pump
              writes its own through the storage, not WriteBinlog, but accepts them here as the
              original does).  Any other commit_ts would raise maxCommitTS as a commit does, and the
              rollback would be served as if it were a fake binlog.

The liveness probe (tp Prewrite, start_ts == commit_ts == 0: an empty payload) is valid; the caller
stores nothing for it (`is_probe`).

Orphan commits (a commit or rollback whose prewrite this pump does not hold) are accepted: the pump
cannot tell them from legitimate ones when they arrive.  A prewrite is acknowledged once it is in the
value log, before the index writer (or, while the index lags, the slow chaser) has put it in the
index and the sorter, so a lookup at WriteBinlog would refuse the client's commit that follows an
acknowledged prewrite; and a commit sent again after the resolver settled its prewrite, or after its
first copy was stored but the answer lost, no longer finds its prewrite waiting.  None of them is
harmful: a commit only ever ends a wait in the sorter (it never starts one, so it cannot stall the
watermark), and PullBinlogs skips a commit whose prewrite it cannot find, logging it and counting it
in `binlog_pump_storage_error_count{type="feed_pre_write_value"}`, so no transaction is served
without its data.
"""

from __future__ import annotations

from typing import Final

from google.protobuf import unknown_fields

from common.pb import binlog_pb2

__all__ = ["is_probe", "refusal"]

_PREWRITE: Final = binlog_pb2.Prewrite
_COMMIT: Final = binlog_pb2.Commit
_ROLLBACK: Final = binlog_pb2.Rollback
_OBSOLETE: Final = {binlog_pb2.PreDDL: "PreDDL", binlog_pb2.PostDDL: "PostDDL"}
_TP_FIELD: Final = 1
_VARINT: Final = 0


def is_probe(binlog: binlog_pb2.Binlog) -> bool:
    """The client's liveness probe: a Prewrite with start_ts == commit_ts == 0 (call after `refusal`)."""
    return binlog.tp == _PREWRITE and binlog.start_ts == 0 and binlog.commit_ts == 0


def refusal(binlog: binlog_pb2.Binlog) -> str | None:
    """Why WriteBinlog must refuse `binlog`, or None when it is valid (the probe included)."""
    bad_tp = _bad_type_field(binlog)
    if bad_tp is not None:
        return bad_tp
    tp = binlog.tp
    start_ts, commit_ts = binlog.start_ts, binlog.commit_ts
    if tp == _PREWRITE:
        if start_ts == 0 and commit_ts == 0:
            return None  # the probe
        if start_ts <= 0:
            return f"prewrite has start_ts {start_ts}, must be > 0"
        if not binlog.HasField("prewrite_value") and not binlog.HasField("ddl_query"):
            return "prewrite has neither prewrite_value nor ddl_query"
        return None
    if tp == _COMMIT:
        if start_ts <= 0:
            return f"commit has start_ts {start_ts}, must be > 0"
        if commit_ts <= start_ts:
            return f"commit_ts {commit_ts} is not above start_ts {start_ts}"
        return None
    if tp == _ROLLBACK:
        if start_ts <= 0:
            return f"rollback has start_ts {start_ts}, must be > 0"
        if commit_ts not in (0, start_ts):
            return f"rollback has commit_ts {commit_ts}, must be 0 (or start_ts {start_ts})"
        return None
    name = _OBSOLETE.get(tp)
    return f"binlog type {name} is obsolete" if name is not None else f"unknown binlog type {tp}"


def _bad_type_field(binlog: binlog_pb2.Binlog) -> str | None:
    """What is wrong with a `tp` the parser could not take (kept as unknown field 1), or None."""
    fields = unknown_fields.UnknownFieldSet(binlog)
    for i in range(len(fields)):
        field = fields[i]
        if field.field_number != _TP_FIELD:
            continue
        value = field.data
        if field.wire_type != _VARINT or not isinstance(value, int):
            return f"binlog type field has wire type {field.wire_type}, not a varint"
        return f"unknown binlog type {value - (1 << 64) if value >= 1 << 63 else value}"  # sign-extended int32
    return None
