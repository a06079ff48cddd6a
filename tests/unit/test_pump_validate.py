"""pump/validate.py: what WriteBinlog accepts, case by case (pure)."""

from __future__ import annotations

import pytest

from common.pb import binlog_pb2, gogo
from pump.validate import is_probe, refusal

P, C, R = binlog_pb2.Prewrite, binlog_pb2.Commit, binlog_pb2.Rollback


def parse(payload: bytes) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog.FromString(payload)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"", id="probe: empty payload"),
        pytest.param(gogo.encode_binlog(P, 0, 0), id="probe: zero binlog as gogo writes it"),
        pytest.param(gogo.encode_binlog(P, 7, prewrite_key=b"k", prewrite_value=b"v"), id="DML prewrite"),
        pytest.param(gogo.encode_binlog(P, 7, prewrite_value=b""), id="prewrite with an empty prewrite_value"),
        pytest.param(gogo.encode_binlog(P, 7, ddl_query=b"create table t (a int)", ddl_job_id=3), id="DDL prewrite"),
        pytest.param(gogo.encode_binlog(C, 7, 8, prewrite_key=b"k"), id="commit"),
        pytest.param(gogo.encode_binlog(C, 7, 8, ddl_query=b"q", ddl_job_id=3), id="DDL commit"),
        pytest.param(gogo.encode_binlog(R, 7, 0), id="rollback from TiDB"),
        pytest.param(gogo.fake_binlog(9), id="fake binlog"),
        pytest.param(gogo.encode_binlog(C, 7, 8) + b"\x78\x01", id="commit with an unknown field 15"),
        pytest.param(gogo.encode_binlog(C, 1, (1 << 63) - 1), id="largest commit_ts"),
    ],
)
def test_valid(payload: bytes) -> None:
    assert refusal(parse(payload)) is None


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (gogo.encode_binlog(99, 7, prewrite_value=b"v"), "unknown binlog type 99"),
        (gogo.encode_binlog(99, 0, 0), "unknown binlog type 99"),  # not a probe
        (gogo.encode_binlog(-1, 7, 8), "unknown binlog type -1"),
        (gogo.encode_binlog(C, 7, 8) + b"\x08\x63", "unknown binlog type 99"),  # Go takes the last tp
        (b"\x0a\x01\x00" + gogo.encode_binlog(C, 7, 8)[2:], "binlog type field has wire type 2, not a varint"),
        (gogo.encode_binlog(binlog_pb2.PreDDL, 7, 8), "binlog type PreDDL is obsolete"),
        (gogo.encode_binlog(binlog_pb2.PostDDL, 7, 8), "binlog type PostDDL is obsolete"),
        (gogo.encode_binlog(P, 0, 5, prewrite_value=b"v"), "prewrite has start_ts 0, must be > 0"),
        (gogo.encode_binlog(P, -5, 0, prewrite_value=b"v"), "prewrite has start_ts -5, must be > 0"),
        (gogo.encode_binlog(P, 7, 0, prewrite_key=b"k"), "prewrite has neither prewrite_value nor ddl_query"),
        (gogo.encode_binlog(C, 0, 0), "commit has start_ts 0, must be > 0"),
        (gogo.encode_binlog(C, 0, 8), "commit has start_ts 0, must be > 0"),
        (gogo.encode_binlog(C, -1, 8), "commit has start_ts -1, must be > 0"),
        (gogo.encode_binlog(C, 7, 0), "commit_ts 0 is not above start_ts 7"),
        (gogo.encode_binlog(C, 7, 7), "commit_ts 7 is not above start_ts 7"),
        (gogo.encode_binlog(C, 7, 6), "commit_ts 6 is not above start_ts 7"),
        (gogo.encode_binlog(C, 7, -8), "commit_ts -8 is not above start_ts 7"),
        (gogo.encode_binlog(R, 0, 0), "rollback has start_ts 0, must be > 0"),
        (gogo.encode_binlog(R, -7, -7), "rollback has start_ts -7, must be > 0"),
        (gogo.encode_binlog(R, 7, 8), "rollback has commit_ts 8, must be 0 (or start_ts 7)"),
        (gogo.encode_binlog(R, 7, 6), "rollback has commit_ts 6, must be 0 (or start_ts 7)"),
    ],
)
def test_refused(payload: bytes, reason: str) -> None:
    assert refusal(parse(payload)) == reason


def test_probe_is_only_the_zero_prewrite() -> None:
    assert is_probe(parse(b""))
    assert is_probe(parse(gogo.encode_binlog(P, 0, 0)))
    assert not is_probe(parse(gogo.encode_binlog(P, 7, prewrite_value=b"v")))
    assert not is_probe(parse(gogo.fake_binlog(9)))
