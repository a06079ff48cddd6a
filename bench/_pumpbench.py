"""Shared code of ``bench/pump_write.py`` and ``bench/pump_pull.py``.

* ``Cluster``: a private etcd, pd-server and one pump (real processes) in a temp dir.
* ``TsPool``: timestamps allocated from pd-server in bulk before a timed section, handed out in
  order by a shared counter, so a commit ts taken after its prewrite is acknowledged is larger than
  every start ts taken before: the same ordering TSO gives, without timing TSO.
* ``run_pairs``: writer threads sending prewrite + commit pairs through one gRPC channel, with
  pre-serialized ``WriteBinlogReq`` bytes (the same client code against the pump and the baselines).
* ``pull_messages``: one PullBinlogs stream, raw response bytes, stopped after a known count.
* ``BaselineServer``: this file run as a script (``serve``): a bare grpcio ``binlog.Pump`` service in
  its own process; ``WriteBinlog`` returns an empty ``WriteBinlogResp`` without parsing the request,
  ``PullBinlogs`` streams pre-serialized messages read from a file.  With ``durable_dir``
  (``serve-durable``) it is the durable floor instead: the least a pump that replies only after
  fdatasync can do on grpcio (``serve_durable``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

import grpc
import grpc.aio

from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo, pd_pb2, pd_pb2_grpc, pump_pb2
from common.pd_client import read_cluster_id, read_leader
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import ManagedProcess, free_port, port_open

SERVICE = "binlog.Pump"
WRITE_METHOD = f"/{SERVICE}/WriteBinlog"
PULL_METHOD = f"/{SERVICE}/PullBinlogs"
SERVER_WORKERS = 64  # the baseline server's thread pool (the pump itself serves with grpc.aio)
MAX_MESSAGE = 2**31 - 1
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
RPC_TIMEOUT = 120.0
_TSO_BLOCK = 200_000  # < 2^18 logical values per Tso RPC


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_info() -> dict[str, Any]:
    import platform

    return {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()}


def install_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every ``finally`` stops its processes."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


# ------------------------------------------------------------------------------------- payloads


def prewrite_value(size: int) -> bytes:
    """A valid gogo ``PrewriteValue`` (one inserted row) of exactly ``size`` bytes when possible."""
    n = max(0, size - 16)
    best = b""
    for _ in range(8):
        pv = binlog_pb2.PrewriteValue(schema_version=1)
        pv.mutations.add(table_id=7, inserted_rows=[b"r" * n], sequence=[binlog_pb2.Insert])
        best = gogo.marshal_prewrite_value(pv)
        if len(best) == size:
            break
        n = max(0, n + size - len(best))
    return best


class RequestBuilder:
    """``WriteBinlogReq`` bytes built directly (checked against protobuf once)."""

    def __init__(self, cluster_id: int) -> None:
        self.head = b"\x08" + gogo.uvarint(cluster_id) + b"\x12"
        probe = gogo.encode_binlog(binlog_pb2.Commit, 5, 6, prewrite_key=b"k")
        expect = pump_pb2.WriteBinlogReq(clusterID=cluster_id, payload=probe).SerializeToString()
        assert self.build(probe) == expect, "hand-built WriteBinlogReq differs from protobuf's"

    def build(self, binlog: bytes) -> bytes:
        return b"".join((self.head, gogo.uvarint(len(binlog)), binlog))


# ----------------------------------------------------------------------------------- timestamps


class TsPool:
    """Bulk-allocated TSO timestamps, handed out in increasing order (thread-safe)."""

    def __init__(self, etcd_url: str) -> None:
        etcd = EtcdClient(etcd_url)
        try:
            leader = read_leader(etcd, retry_for=10.0)
        finally:
            etcd.close()
        if leader is None:
            raise RuntimeError("no pd-server leader in etcd")
        self.cluster_id = leader.cluster_id
        self._channel = grpc.insecure_channel(leader.addr)
        self._stub = pd_pb2_grpc.PDStub(self._channel)
        self._ts = array("Q")
        self._next: Iterator[int] = itertools.count()

    def refill(self, n: int) -> None:
        ts = array("Q")
        while len(ts) < n:
            count = min(_TSO_BLOCK, n - len(ts))
            resp = self._stub.Tso(pd_pb2.TsoRequest(cluster_id=self.cluster_id, count=count), timeout=10)
            first = (int(resp.first.physical) << 18) | int(resp.first.logical)
            ts.extend(range(first, first + count))
        self._ts = ts
        self._next = itertools.count()

    def next(self) -> int:
        i = next(self._next)  # itertools.count is atomic under the GIL
        try:
            return self._ts[i]
        except IndexError:
            raise RuntimeError(f"timestamp pool of {len(self._ts)} exhausted") from None

    def close(self) -> None:
        self._channel.close()


# ------------------------------------------------------------------------------------- cluster


class Cluster:
    """etcd + pd-server + one pump, all real processes under ``base``."""

    def __init__(self, base: Path, pump_args: Sequence[str]) -> None:
        self.base = base
        self.etcd = EtcdProcess(base)
        self.pd = PDProcess(base, self.etcd.url)
        self.pump = PumpProcess(base, self.etcd.url, extra_args=pump_args)
        self.pump_args = list(pump_args)
        self.cluster_id = 0

    def start(self) -> None:
        log(f"starting etcd, pd-server and pump under {self.base}")
        self.etcd.start()
        self.pd.start()
        self.pump.start()
        etcd = EtcdClient(self.etcd.url)
        try:
            cid = read_cluster_id(etcd)
        finally:
            etcd.close()
        if cid is None:
            raise RuntimeError("pd-server published no cluster id")
        self.cluster_id = cid
        log(f"cluster up: pump at {self.pump.addr} (pid {self.pump.process.pid}), cluster id {cid}")

    @property
    def pump_pid(self) -> int:
        pid = self.pump.process.pid
        assert pid is not None
        return pid

    def alive(self) -> list[str]:
        """Names of the processes that died."""
        procs = [self.etcd.process, self.pd.process, self.pump.process]
        return [p.name for p in procs if not p.alive]

    def stop(self) -> None:
        for stop in (self.pump.stop, self.pd.stop, self.etcd.stop):
            with contextlib.suppress(Exception):
                stop()


class TempDir:
    def __init__(self, keep: bool, prefix: str) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self.keep = keep

    def cleanup(self) -> None:
        if self.keep:
            log(f"kept {self.path}")
        else:
            shutil.rmtree(self.path, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcUsage:
    """CPU seconds (user, kernel) of a whole process and the context switches of its live threads."""

    user: float
    system: float
    ctx_switches: int

    def __sub__(self, other: ProcUsage) -> ProcUsage:
        return ProcUsage(self.user - other.user, self.system - other.system, self.ctx_switches - other.ctx_switches)

    def per(self, n: int) -> dict[str, float]:
        """Per unit of work (a binlog): CPU µs, the kernel's share of it, context switches."""
        cpu = self.user + self.system
        return {
            "cpu_us": cpu / n * 1e6 if n else float("nan"),
            "kernel_share": self.system / cpu if cpu else float("nan"),
            "ctx_switches": self.ctx_switches / n if n else float("nan"),
        }


def proc_usage(pid: int) -> ProcUsage:
    """/proc/<pid>/stat's utime and stime (every thread, exited ones included) and the voluntary and
    involuntary context switches summed over /proc/<pid>/task/*/status (live threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    switches = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:  # the thread ended meanwhile
            continue
        for line in text.splitlines():
            if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                switches += int(line.split()[1])
    return ProcUsage(int(fields[11]) / tick, int(fields[12]) / tick, switches)


def peak_rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def wait_idle(pid: int, *, busy: float = 0.05, window: float = 0.25, timeout: float = 120.0) -> float:
    """Wait until process ``pid`` uses < ``busy`` of a core over two windows in a row; seconds waited."""
    began = time.monotonic()
    calm = 0
    while calm < 2:
        if time.monotonic() - began > timeout:
            log(f"warning: pid {pid} still busy after {timeout:.0f}s")
            break
        c0 = cpu_seconds(pid)
        time.sleep(window)
        calm = calm + 1 if cpu_seconds(pid) - c0 < busy * window else 0
    return time.monotonic() - began


# ------------------------------------------------------------------------------------- writers


@dataclass
class WriteResult:
    pairs: int = 0
    elapsed: float = 0.0
    latencies: list[float] = field(default_factory=list)  # seconds per RPC
    errors: list[str] = field(default_factory=list)
    max_commit_ts: int = 0

    def summary(self, pair_bytes: int) -> dict[str, Any]:
        lat = sorted(self.latencies)
        rate = self.pairs / self.elapsed if self.elapsed else 0.0
        return {
            "pairs": self.pairs,
            "pairs_per_s": rate,
            "mb_per_s": rate * pair_bytes / 1e6,
            "p50_ms": percentile(lat, 0.50) * 1000,
            "p99_ms": percentile(lat, 0.99) * 1000,
        }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


WriteCall = Callable[[bytes], bytes]


def write_call(channel: grpc.Channel) -> WriteCall:
    """``WriteBinlog`` taking and returning raw bytes."""
    stub: Any = channel.unary_unary(WRITE_METHOD, request_serializer=None, response_deserializer=None)

    def call(req: bytes) -> bytes:
        resp: bytes = stub(req, timeout=RPC_TIMEOUT)
        if resp:
            errmsg = pump_pb2.WriteBinlogResp.FromString(resp).errmsg
            if errmsg:
                raise RuntimeError(f"WriteBinlog: {errmsg}")
        return resp

    return call


def run_pairs(
    call: WriteCall,
    pool: TsPool,
    builder: RequestBuilder,
    value: bytes,
    writers: int,
    *,
    duration: float | None = None,
    pairs: int | None = None,
) -> WriteResult:
    """``writers`` threads each writing prewrite(value) + commit pairs until ``duration`` or ``pairs``."""
    budget: Iterator[int] = itertools.count()
    lock = threading.Lock()
    failed = threading.Event()
    result = WriteResult()
    gate = threading.Barrier(writers + 1)
    deadline = [float("inf")]
    prewrite, commit = binlog_pb2.Prewrite, binlog_pb2.Commit
    encode, build, clock = gogo.encode_binlog, builder.build, time.perf_counter

    def writer(i: int) -> None:
        key = b"bench-%d" % i
        lat: list[float] = []
        done = 0
        top = 0
        gate.wait()
        try:
            while not failed.is_set() and clock() < deadline[0]:
                if pairs is not None and next(budget) >= pairs:
                    break
                start_ts = pool.next()
                req = build(encode(prewrite, start_ts, 0, prewrite_key=key, prewrite_value=value))
                t0 = clock()
                call(req)
                t1 = clock()
                commit_ts = pool.next()  # taken after the prewrite is acknowledged, as TiDB does
                req = build(encode(commit, start_ts, commit_ts, prewrite_key=key))
                t2 = clock()
                call(req)
                t3 = clock()
                lat.append(t1 - t0)
                lat.append(t3 - t2)
                done += 1
                top = max(top, commit_ts)
        except Exception as exc:
            failed.set()
            with lock:
                result.errors.append(f"writer {i}: {type(exc).__name__}: {exc}"[:500])
        with lock:
            result.pairs += done
            result.latencies.extend(lat)
            result.max_commit_ts = max(result.max_commit_ts, top)

    threads = [threading.Thread(target=writer, args=(i,), daemon=True, name=f"writer-{i}") for i in range(writers)]
    for t in threads:
        t.start()
    began = clock()
    if duration is not None:
        deadline[0] = began + duration
    gate.wait()
    for t in threads:
        t.join()
    result.elapsed = clock() - began
    return result


def raw_append(
    path: Path, blobs: Sequence[bytes], writers: int, duration: float, *, report: list[str] | None = None
) -> WriteResult:
    """Append + ``os.fdatasync`` each blob of a pair under one lock (no group commit); pairs as above."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_TRUNC, 0o644)
    lock = threading.Lock()
    result = WriteResult()
    gate = threading.Barrier(writers + 1)
    deadline = [float("inf")]
    clock = time.perf_counter

    def writer() -> None:
        lat: list[float] = []
        done = 0
        gate.wait()
        try:
            while clock() < deadline[0]:
                for blob in blobs:
                    t0 = clock()
                    with lock:
                        os.write(fd, blob)
                        os.fdatasync(fd)
                    lat.append(clock() - t0)
                done += 1
        except OSError as exc:
            with lock:
                result.errors.append(f"raw append: {exc}")
        with lock:
            result.pairs += done
            result.latencies.extend(lat)

    threads = [threading.Thread(target=writer, daemon=True) for _ in range(writers)]
    try:
        for t in threads:
            t.start()
        began = clock()
        deadline[0] = began + duration
        gate.wait()
        for t in threads:
            t.join()
        result.elapsed = clock() - began
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            path.unlink()
    return result


# --------------------------------------------------------------------------------------- pulls


def pull_request(cluster_id: int, offset: int = 0) -> bytes:
    return pump_pb2.PullBinlogReq(clusterID=cluster_id, startFrom=pump_pb2.Pos(offset=offset)).SerializeToString()


def pull_messages(
    channel: grpc.Channel,
    request: bytes,
    count: int | None,
    on_message: Callable[[bytes], bool] | None = None,
    timeout: float = 600.0,
) -> tuple[int, int, float, bytes]:
    """Read a PullBinlogs stream of raw messages until ``count`` of them (or ``on_message`` says stop).

    Returns (messages, bytes, seconds from the call to the last message, last message).
    """
    stub: Any = channel.unary_stream(PULL_METHOD, request_serializer=None, response_deserializer=None)
    n = size = 0
    last = b""
    began = time.perf_counter()
    stream = stub(request, timeout=timeout)
    try:
        for msg in stream:
            n += 1
            size += len(msg)
            last = msg
            if count is not None and n >= count:
                break
            if on_message is not None and on_message(msg):
                break
        elapsed = time.perf_counter() - began
    finally:
        stream.cancel()
    return n, size, elapsed, last


def write_frames(f: BinaryIO, msg: bytes) -> None:
    f.write(struct.pack(">I", len(msg)))
    f.write(msg)


def read_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        (n,) = struct.unpack_from(">I", data, pos)
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return out


# --------------------------------------------------------------------------- baseline servers


class BaselineServer:
    """This file's ``serve`` mode in a child process: a bare grpcio ``binlog.Pump``; with ``durable_dir``
    its ``serve-durable`` mode instead (``serve_durable``: the durable floor, appending to a file there).

    Start it before this process makes any gRPC call: forking (``subprocess``) while a call is
    active can hang in grpcio's fork handlers.  ``messages`` is read on the first PullBinlogs.
    """

    def __init__(self, base: Path, name: str, messages: Path | None = None, *, durable_dir: Path | None = None) -> None:
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        script = [sys.executable, str(Path(__file__).resolve())]
        if durable_dir is not None and messages is not None:
            raise ValueError("the durable floor serves WriteBinlog only: no messages to stream")
        if durable_dir is not None:
            durable_dir.mkdir(parents=True, exist_ok=True)
            argv = [*script, "serve-durable", "--addr", self.addr, "--file", str(durable_dir / f"{name}.data")]
        else:
            argv = [*script, "serve", "--addr", self.addr]
        if messages is not None:
            argv += ["--messages", str(messages)]
        self.process = ManagedProcess(name, argv, base / f"{name}.log")

    @property
    def pid(self) -> int:
        pid = self.process.pid
        assert pid is not None, "not started"
        return pid

    def start(self) -> None:
        self.process.start()
        self.process.wait_ready(lambda: port_open("127.0.0.1", self.port), 60.0)

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.process.stop()


_SERVER_OPTIONS = (  # the pump's message-size and port options
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.so_reuseport", 0),
)


def _identity(data: bytes) -> bytes:
    return data


def serve(addr: str, messages_path: str | None) -> None:
    empty_resp = pump_pb2.WriteBinlogResp().SerializeToString()
    loaded: list[list[bytes]] = []
    load_lock = threading.Lock()

    def messages() -> list[bytes]:
        with load_lock:  # read on first use: the file is written after this server starts
            if not loaded:
                loaded.append(read_frames(Path(messages_path)) if messages_path else [])
            return loaded[0]

    def write_binlog(request: bytes, context: grpc.ServicerContext) -> bytes:
        return empty_resp

    def pull_binlogs(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        yield from messages()

    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        "WriteBinlog": grpc.unary_unary_rpc_method_handler(
            write_binlog, request_deserializer=_identity, response_serializer=_identity
        ),
        "PullBinlogs": grpc.unary_stream_rpc_method_handler(
            pull_binlogs, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    # a plain grpcio (thread pool) server
    executor = futures.ThreadPoolExecutor(max_workers=SERVER_WORKERS)
    server = grpc.server(executor, options=[*_SERVER_OPTIONS])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)  # type: ignore[attr-defined]
    if server.add_insecure_port(addr) == 0:
        raise SystemExit(f"cannot listen on {addr}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    stop.wait()
    server.stop(0)


def serve_durable(addr: str, path: str) -> None:
    """The durable floor: a ``grpc.aio`` server (the pump's stack) whose WriteBinlog hands the request
    bytes, unparsed, to one writer thread that appends everything queued (group commit), fdatasyncs and
    wakes the loop once per group; the reply goes after the fdatasync.  No parsing, validation, index,
    metrics or budget: what is left of the pump's CPU and latency once its own code is gone.
    Measured on the 2-core development machine: a thread-pool ``grpc.server`` doing the same (handler
    thread waiting on an event, or leader/follower group commit on the handler threads) costs the same
    CPU per call at 1 writer and 10-30% more at 8 and 64, and an fdatasync inline on the loop when
    nothing else is in flight is slower, so the floor uses the pump's own design.  A failed write ends
    the process (exit 1): its clients see UNAVAILABLE at once, and the bench reports it as died."""
    empty_resp = pump_pb2.WriteBinlogResp().SerializeToString()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    queued: list[tuple[bytes, asyncio.Future[None]]] = []
    ready = threading.Condition()

    def resolve(group: list[asyncio.Future[None]]) -> None:
        for fut in group:
            if not fut.done():  # else the call was cancelled
                fut.set_result(None)

    def writer(loop: asyncio.AbstractEventLoop) -> None:
        try:
            while True:
                with ready:
                    while not queued:
                        ready.wait()
                    group = queued[:]
                    queued.clear()
                data = memoryview(b"".join(request for request, _ in group))
                while data:
                    data = data[os.write(fd, data) :]
                os.fdatasync(fd)
                with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone
                    loop.call_soon_threadsafe(resolve, [fut for _, fut in group])
        except BaseException as exc:
            print(f"durable floor: write failed: {exc!r}", file=sys.stderr, flush=True)
            os._exit(1)

    async def run() -> None:
        loop = asyncio.get_running_loop()

        async def write_binlog(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
            done: asyncio.Future[None] = loop.create_future()
            with ready:
                queued.append((request, done))
                ready.notify()
            await done
            return empty_resp

        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "WriteBinlog": grpc.unary_unary_rpc_method_handler(
                write_binlog, request_deserializer=_identity, response_serializer=_identity
            ),
        }
        server = grpc.aio.server(options=[*_SERVER_OPTIONS])
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        server.add_registered_method_handlers(SERVICE, handlers)  # type: ignore[attr-defined]
        if server.add_insecure_port(addr) == 0:
            raise SystemExit(f"cannot listen on {addr}")
        await server.start()
        threading.Thread(target=writer, args=(loop,), daemon=True, name="floor-writer").start()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await server.stop(0)

    asyncio.run(run())


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def rnd(x: float, digits: int = 3) -> float:
    return round(x, digits)


def main() -> None:
    ap = argparse.ArgumentParser(description="bare grpcio binlog.Pump baseline server")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--addr", required=True)
    s.add_argument(
        "--messages", default=None, help="length-prefixed PullBinlogResp bytes to stream (read on first use)"
    )
    d = sub.add_parser("serve-durable")
    d.add_argument("--addr", required=True)
    d.add_argument("--file", required=True, help="the file WriteBinlog appends to")
    args = ap.parse_args()
    if args.cmd == "serve-durable":
        serve_durable(args.addr, args.file)
    else:
        serve(args.addr, args.messages)


if __name__ == "__main__":
    main()
