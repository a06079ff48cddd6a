"""Helpers for pump functional tests: a typed client over the real gRPC API and writer threads."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc

from common.pb import binlog_pb2, gogo, pump_pb2, pump_pb2_grpc
from common.pd_client import TSOClient


def prewrite_value(start_ts: int) -> bytes:
    pv = binlog_pb2.PrewriteValue(schema_version=1)
    pv.mutations.add(table_id=7, inserted_rows=[b"row-%d" % start_ts], sequence=[binlog_pb2.Insert])
    return gogo.marshal_prewrite_value(pv)


class PumpClient:
    def __init__(self, addr: str, cluster_id: int) -> None:
        self.channel = grpc.insecure_channel(addr, options=[("grpc.max_receive_message_length", 64 << 20)])
        self.stub = pump_pb2_grpc.PumpStub(self.channel)
        self.cluster_id = cluster_id
        self.wait_for_ready = True  # ride over a pump restart as a real client would; off to see errors at once

    def write(self, payload: bytes, timeout: float = 30) -> None:
        req = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=payload)
        resp = self.stub.WriteBinlog(req, timeout=timeout, wait_for_ready=self.wait_for_ready)
        if resp.errmsg:
            raise RuntimeError(resp.errmsg)

    def prewrite(self, start_ts: int) -> None:
        self.write(
            gogo.encode_binlog(
                binlog_pb2.Prewrite, start_ts, prewrite_key=b"pk%d" % start_ts, prewrite_value=prewrite_value(start_ts)
            )
        )

    def commit(self, start_ts: int, commit_ts: int) -> None:
        self.write(gogo.encode_binlog(binlog_pb2.Commit, start_ts, commit_ts, prewrite_key=b"pk%d" % start_ts))

    def rollback(self, start_ts: int) -> None:
        self.write(gogo.encode_binlog(binlog_pb2.Rollback, start_ts, 0, prewrite_key=b"pk%d" % start_ts))

    def pull(self, offset: int, timeout: float) -> Iterator[binlog_pb2.Binlog]:
        req = pump_pb2.PullBinlogReq(clusterID=self.cluster_id, startFrom=pump_pb2.Pos(offset=offset))
        stream = self.stub.PullBinlogs(req, timeout=timeout, wait_for_ready=True)
        try:
            for resp in stream:
                b = binlog_pb2.Binlog.FromString(resp.entity.payload)
                assert resp.entity.meta.commitTs == b.commit_ts
                assert resp.entity.meta.startTs == b.start_ts
                yield b
        finally:
            stream.cancel()

    def pull_until(self, offset: int, last_commit_ts: int, timeout: float = 120) -> list[binlog_pb2.Binlog]:
        """Everything from `offset` up to and including `last_commit_ts`."""
        got: list[binlog_pb2.Binlog] = []
        for b in self.pull(offset, timeout):
            if b.commit_ts > last_commit_ts:
                break
            got.append(b)
            if b.commit_ts == last_commit_ts:
                break
        return got

    def close(self) -> None:
        self.channel.close()


def is_fake(b: binlog_pb2.Binlog) -> bool:
    return b.tp == binlog_pb2.Rollback and b.start_ts == b.commit_ts > 0


@dataclass
class WriteLog:
    """What the writers got acknowledged."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: dict[int, int] = field(default_factory=dict)  # commit_ts -> start_ts, acknowledged commits
    rolled_back: set[int] = field(default_factory=set)
    errors: list[BaseException] = field(default_factory=list)
    # transactions not finished (acknowledged) yet: start_ts -> commit_ts being sent, or None
    inflight: dict[int, int | None] = field(default_factory=dict)

    def finish_inflight(self, client: PumpClient) -> None:
        """What a real client does after a pump restart: retry the commit it was sending, else roll back."""
        for start_ts, commit_ts in sorted(self.inflight.items()):
            if commit_ts is None:
                client.rollback(start_ts)
                self.rolled_back.add(start_ts)
            else:
                client.commit(start_ts, commit_ts)
                self.committed[commit_ts] = start_ts
        self.inflight.clear()


def run_writers(
    client: PumpClient,
    tso: TSOClient,
    *,
    writers: int,
    pairs_per_writer: int,
    log: WriteLog,
    stop: threading.Event | None = None,
    rollback_every: int = 10,
    seed: int = 1,
) -> list[threading.Thread]:
    """Start writer threads: each keeps up to 3 transactions open and finishes them in random order."""

    def writer(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        open_txns: list[int] = []
        done = 0
        try:
            while done < pairs_per_writer and not (stop is not None and stop.is_set()):
                if len(open_txns) < 3 and done + len(open_txns) < pairs_per_writer:
                    start_ts = tso.get_ts()
                    with log.lock:
                        log.inflight[start_ts] = None
                    client.prewrite(start_ts)
                    open_txns.append(start_ts)
                    if rng.random() < 0.5:
                        continue
                start_ts = open_txns.pop(rng.randrange(len(open_txns)))
                if rng.randrange(rollback_every) == 0:
                    client.rollback(start_ts)
                    with log.lock:
                        log.rolled_back.add(start_ts)
                        del log.inflight[start_ts]
                else:
                    commit_ts = tso.get_ts()  # fetched after the prewrite is stored, as TiDB does
                    with log.lock:
                        log.inflight[start_ts] = commit_ts
                    client.commit(start_ts, commit_ts)
                    with log.lock:
                        log.committed[commit_ts] = start_ts
                        del log.inflight[start_ts]
                done += 1
        except grpc.RpcError as exc:
            if stop is None or not stop.is_set():
                with log.lock:
                    log.errors.append(exc)
        except BaseException as exc:
            with log.lock:
                log.errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,), name=f"writer-{i}", daemon=True) for i in range(writers)]
    for t in threads:
        t.start()
    return threads


def join_all(threads: list[threading.Thread], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        raise TimeoutError(f"writers still running: {alive[:5]}")
