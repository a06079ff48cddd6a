"""WriteBinlog request bytes, built without protobuf message objects (one copy of the binlog).

A ``pump.WriteBinlogReq`` (proto3) is two fields, each written only when non-zero / non-empty:

    08 uvarint(clusterID)                 clusterID (1), uint64
    12 uvarint(len(payload)) payload      payload (2), bytes: the gogo-marshalled binlog.Binlog

so ``{clusterID: 1, payload: b"p"}`` is ``08 01 12 01 70``.  Building a request through
``WriteBinlogReq(payload=...)`` and ``SerializeToString()`` copies a binlog twice, and the
``binlog.Binlog`` message holding ``prewrite_value`` once more; for a transaction of hundreds of MB
those copies are the client's memory.  `encode_write_req` joins the pieces of an already marshalled
binlog (`EncodedBinlog`) once, and the transport hands those bytes to gRPC as they are.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from common.pb.gogo import uvarint

_CLUSTER_ID_TAG: Final = b"\x08"
_PAYLOAD_TAG: Final = b"\x12"
MAX_HEADER_SIZE: Final = 2 * (1 + 10)
"""Bytes a request adds to its payload at most (two tags, two varints of up to 10 bytes)."""


def encode_write_req(cluster_id: int, payload: Sequence[bytes]) -> bytes:
    """The wire bytes of ``WriteBinlogReq{clusterID, payload=b"".join(payload)}``, in one allocation."""
    size = sum(len(p) for p in payload)
    head = [_CLUSTER_ID_TAG + uvarint(cluster_id)] if cluster_id else []
    if size:
        head.append(_PAYLOAD_TAG + uvarint(size))
    return b"".join([*head, *payload])


def request_size(cluster_id: int, payload_size: int) -> int:
    """The length of `encode_write_req` for a payload of `payload_size` bytes."""
    size = payload_size
    if cluster_id:
        size += 1 + len(uvarint(cluster_id))
    if payload_size:
        size += 1 + len(uvarint(payload_size))
    return size


class EncodedBinlog:
    """A binlog already marshalled (the gogo bytes of ``binlog.Binlog``), in pieces.

    For binlogs too big to copy into protobuf messages: `PumpsClient.write_encoded_binlog` joins the
    pieces into its request once and then drops them (`take`), so the caller's copies (e.g. the
    rows the pieces came from) are the only ones left.  An EncodedBinlog is written once.
    """

    __slots__ = ("_parts", "commit_ts", "size", "start_ts", "tp")

    def __init__(self, tp: int, start_ts: int, commit_ts: int, parts: list[bytes]) -> None:
        self.tp = tp
        self.start_ts = start_ts
        self.commit_ts = commit_ts
        self.size = sum(len(p) for p in parts)
        self._parts: list[bytes] | None = parts

    def take(self) -> list[bytes]:
        """The pieces, once: the binlog forgets them (ValueError the second time)."""
        parts = self._parts
        if parts is None:
            raise ValueError(f"binlog start_ts={self.start_ts} was already written")
        self._parts = None
        return parts

    def join(self) -> bytes:
        """The marshalled binlog as one bytes object (takes the pieces)."""
        return b"".join(self.take())
