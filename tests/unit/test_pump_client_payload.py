"""WriteBinlog request bytes built without messages (pump_client/payload.py)."""

from __future__ import annotations

import pytest

from common.pb import binlog_pb2, pump_pb2
from pump_client import EncodedBinlog
from pump_client.payload import MAX_HEADER_SIZE, encode_write_req, request_size


def test_golden_request() -> None:
    assert encode_write_req(1, [b"p"]).hex() == "0801120170"
    assert encode_write_req(0, []) == b""
    assert encode_write_req(300, [b""]).hex() == "08ac02"


@pytest.mark.parametrize("cluster_id", [0, 1, 127, 128, 6_900_000_000_000_000_001, 2**64 - 1])
@pytest.mark.parametrize("sizes", [[], [0], [1], [127], [1, 126], [128], [100, 200, 70_000]])
def test_request_equals_the_message_serialization(cluster_id: int, sizes: list[int]) -> None:
    parts = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    payload = b"".join(parts)
    wire = encode_write_req(cluster_id, parts)
    assert wire == pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=payload).SerializeToString()
    assert request_size(cluster_id, len(payload)) == len(wire)
    assert len(wire) - len(payload) <= MAX_HEADER_SIZE


def test_encoded_binlog_is_taken_once() -> None:
    b = EncodedBinlog(binlog_pb2.Prewrite, 5, 0, [b"ab", b"c"])
    assert (b.tp, b.start_ts, b.commit_ts, b.size) == (binlog_pb2.Prewrite, 5, 0, 3)
    assert b.join() == b"abc"
    with pytest.raises(ValueError, match="start_ts=5 was already written"):
        b.take()
