"""Each pump's whole stream, pulled afresh from offset 0 over gRPC, reduced to (commit_ts, start_ts, tp).

The checker compares these with the history (tests.nemesis.checker rule c); nothing here uses the
drainer.  A pull stops once it received a binlog with commit_ts >= `upto` (pumps send fake binlogs while
a stream is open, so an idle pump still gets there), or after `idle_timeout` seconds without a message,
or at `timeout`.  Only the three numbers of each binlog are kept, never its payload.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import grpc

from common.etcd import EtcdClient
from common.pb import pump_pb2
from common.pb.wire import pull_entity, split_binlog
from common.pd_client import wait_cluster_id
from common.pull import PULL_METHOD

MAX_MESSAGE: Final = (1 << 31) - 1


@dataclass(frozen=True, slots=True)
class StreamEntry:
    commit_ts: int
    start_ts: int
    tp: int
    """binlog_pb2 BinlogType: Commit (1) for a commit, Rollback (2) with start_ts == commit_ts for a fake."""


@dataclass(frozen=True, slots=True)
class PumpStream:
    addr: str
    entries: list[StreamEntry]
    complete: bool
    """True when the pull reached `upto`; False when it stopped on the idle timeout, the deadline or an error."""
    error: str | None = None


def cluster_id_from_etcd(etcd_urls: str | Sequence[str], timeout: float = 10.0) -> int:
    """The cluster id pd-server published in etcd."""
    etcd = EtcdClient(etcd_urls)
    try:
        return wait_cluster_id(etcd, timeout)
    finally:
        etcd.close()


def pull_stream(
    addr: str, cluster_id: int, upto: int, *, idle_timeout: float = 5.0, timeout: float = 60.0
) -> PumpStream:
    """One pump's stream from offset 0 until commit_ts >= `upto` (see the module docstring)."""
    options = [("grpc.max_receive_message_length", MAX_MESSAGE)]
    channel = grpc.insecure_channel(addr, options=options)
    entries: list[StreamEntry] = []
    last_msg = [time.monotonic()]
    stop = threading.Event()
    call: Any = None
    complete = False
    error: str | None = None

    def watchdog() -> None:
        deadline = time.monotonic() + timeout
        while not stop.wait(0.1):
            now = time.monotonic()
            if now - last_msg[0] > idle_timeout or now > deadline:
                if call is not None:
                    call.cancel()
                return

    try:
        pull = channel.unary_stream(
            PULL_METHOD, request_serializer=pump_pb2.PullBinlogReq.SerializeToString, response_deserializer=None
        )
        req = pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=0))
        call = pull(req)
        dog = threading.Thread(target=watchdog, daemon=True)
        dog.start()
        try:
            for raw in call:
                last_msg[0] = time.monotonic()
                payload, _ = pull_entity(raw)
                b, _value = split_binlog(payload)
                entries.append(StreamEntry(b.commit_ts, b.start_ts, b.tp))
                if b.commit_ts >= upto:
                    complete = True
                    break
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                error = f"{exc.code().name}: {exc.details()}"
            else:
                error = "stopped: idle timeout or deadline"
        finally:
            stop.set()
            call.cancel()
    finally:
        channel.close()
    return PumpStream(addr, entries, complete, error)


def pull_streams(
    addrs: Sequence[str], cluster_id: int, upto: int, *, idle_timeout: float = 5.0, timeout: float = 60.0
) -> dict[str, PumpStream]:
    """Every pump's stream (pulled in parallel), by address."""
    with ThreadPoolExecutor(max(1, len(addrs))) as pool:
        futures = {
            a: pool.submit(pull_stream, a, cluster_id, upto, idle_timeout=idle_timeout, timeout=timeout) for a in addrs
        }
        return {a: f.result() for a, f in futures.items()}
