"""The pump as a real process, with real etcd and pd-server, through its real gRPC and HTTP APIs."""

from __future__ import annotations

import itertools
import json
import shutil
import statistics
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from common import tso
from common.etcd import EtcdClient
from common.pb import binlog_pb2
from common.pd_client import TSOClient, read_cluster_id
from common.registry import NodeKind, NodeState, Registry
from common.txnstatus import TxnStatusStore
from pump.storage.storage import Storage
from tests.functional.pumputil import PumpClient, WriteLog, is_fake, join_all, prewrite_value, run_writers
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional
ROOT = Path(__file__).resolve().parents[2]
FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]


@pytest.fixture
def cluster_id(etcd: EtcdClient, pd_server: PDProcess) -> int:
    cid = read_cluster_id(etcd)
    assert cid is not None
    return cid


def start_pump(
    tmp_path: Path, etcd_server: EtcdProcess, request: pytest.FixtureRequest, *extra: str, name: str = "pump1"
) -> PumpProcess:
    pump = PumpProcess(tmp_path, etcd_server.url, name=name, extra_args=[*FAST, *extra])
    pump.start()

    def dump() -> None:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"\n===== {pump.name} log =====\n{pump.process.log_tail(80)}")
        pump.stop()

    request.addfinalizer(dump)
    return pump


@pytest.fixture
def pump(tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, request: pytest.FixtureRequest) -> PumpProcess:
    return start_pump(tmp_path, etcd_server, request)


@pytest.fixture
def client(pump: PumpProcess, cluster_id: int) -> Iterator[PumpClient]:
    c = PumpClient(pump.addr, cluster_id)
    yield c
    c.close()


def check_stream(pulled: list[binlog_pb2.Binlog], log: WriteLog) -> None:
    """Exactly the acknowledged commits plus fake binlogs, strictly ascending, prewrite data merged in."""
    ts = [b.commit_ts for b in pulled]
    assert ts == sorted(set(ts)), "not strictly ascending"
    commits = {b.commit_ts: b for b in pulled if b.tp == binlog_pb2.Commit}
    assert set(commits) == set(log.committed)
    for commit_ts, b in commits.items():
        assert b.start_ts == log.committed[commit_ts]
        assert b.prewrite_value == prewrite_value(b.start_ts)
    others = [b for b in pulled if b.tp != binlog_pb2.Commit]
    assert all(is_fake(b) for b in others)
    assert not any(b.tp == binlog_pb2.Prewrite for b in pulled)


def test_original_tipb_client_works_unchanged(pump: PumpProcess, cluster_id: int, tmp_path: Path) -> None:
    gen = tmp_path / "tipb_gen"
    gen.mkdir()
    fixtures = ROOT / "tests" / "fixtures" / "tipb"
    code = (
        "import os, sys, grpc_tools; from grpc_tools import protoc; "
        "inc = os.path.join(os.path.dirname(grpc_tools.__file__), '_proto'); "
        f"sys.exit(protoc.main(['protoc', '-I{fixtures}', '-I' + inc, '--python_out={gen}', '--grpc_python_out={gen}', "
        f"'{fixtures}/gogoproto/gogo.proto', '{fixtures}/binlog.proto', '{fixtures}/pump.proto']))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    done = subprocess.run(
        [sys.executable, str(fixtures / "client.py"), str(gen), pump.addr, str(cluster_id), "50"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [p["commit_ts"] for p in result["pulled"]] == result["written"]
    for p in result["pulled"]:
        assert p["meta"] == [p["start_ts"], p["commit_ts"]]
        assert p["row"].startswith("row-")


def test_20k_pairs_from_32_writers(client: PumpClient, tso_client: TSOClient) -> None:
    log = WriteLog()
    threads = run_writers(client, tso_client, writers=32, pairs_per_writer=625, log=log)
    join_all(threads, timeout=600)
    assert not log.errors, log.errors[:3]
    assert len(log.committed) + len(log.rolled_back) == 20_000
    assert log.rolled_back, "the load should include rollbacks"
    last = max(log.committed)
    pulled = client.pull_until(0, last)
    check_stream(pulled, log)
    # a second puller from a middle offset gets exactly the suffix
    middle = pulled[len(pulled) // 2].commit_ts
    suffix = client.pull_until(middle, last)
    assert [b.commit_ts for b in suffix] == [b.commit_ts for b in pulled if b.commit_ts > middle]


def test_kill9_under_load_loses_no_acknowledged_binlog(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    pump = start_pump(tmp_path, etcd_server, request)
    client = PumpClient(pump.addr, cluster_id)
    try:
        log = WriteLog()
        stop = threading.Event()
        client.wait_for_ready = False  # writers must see the crash, not wait for the restart
        threads = run_writers(client, tso_client, writers=16, pairs_per_writer=100_000, log=log, stop=stop)
        wait_for(lambda: len(log.committed) >= 2000 or bool(log.errors), 300, "2000 acknowledged commits")
        assert not log.errors, log.errors[:3]
        pump.kill9()
        stop.set()
        join_all(threads, timeout=60)
        acked = set(log.committed)

        for round_ in ("restart", "kill -9 again and restart with the index deleted"):
            if round_ != "restart":
                pump.kill9()
                shutil.rmtree(pump.data_dir / "kv")
            pump.start()
            client.close()
            client = PumpClient(pump.addr, cluster_id)  # a fresh channel, as a client reconnecting after a crash
            log.finish_inflight(client)
            pulled = client.pull_until(0, max(log.committed))
            commits = {b.commit_ts for b in pulled if b.tp == binlog_pb2.Commit}
            assert acked <= commits, f"{round_}: lost acknowledged commits"
            assert commits == set(log.committed), f"{round_}: unexpected commits"
            ts = [b.commit_ts for b in pulled]
            assert ts == sorted(set(ts)), f"{round_}: duplicates or disorder"
        pump.stop()
        storage = Storage(pump.data_dir)
        try:
            storage.wait_indexed(30)
            assert storage.check() == []
        finally:
            storage.close()
    finally:
        client.close()


def test_idle_pump_keeps_advancing_with_fake_binlogs(client: PumpClient, tso_client: TSOClient) -> None:
    now = tso_client.get_ts()
    seen: list[binlog_pb2.Binlog] = []
    for b in client.pull(now, timeout=60):
        seen.append(b)
        if len(seen) == 3:
            break
    assert all(is_fake(b) for b in seen)
    assert [b.commit_ts for b in seen] == sorted({b.commit_ts for b in seen})
    assert seen[0].commit_ts > now


def _fakes(client: PumpClient, after: int, count: int) -> list[int]:
    """The commit_ts of the next `count` fake binlogs after `after`, from one PullBinlogs stream."""
    got: list[int] = []
    for b in client.pull(after, timeout=60):
        assert is_fake(b)
        got.append(b.commit_ts)
        if len(got) == count:
            break
    return got


def _gaps_ms(ts: list[int]) -> list[int]:
    return [tso.physical(b) - tso.physical(a) for a, b in itertools.pairwise(ts)]


def test_idle_pump_writes_fake_binlogs_at_the_short_gap_only_while_a_drainer_pulls(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    """gen-binlog-pull-interval (0.1 s here) while a PullBinlogs stream is open, gen-binlog-interval (1 s)
    otherwise; the gaps are read from the fake binlogs' own TSO timestamps."""
    pump = start_pump(tmp_path, etcd_server, request, "--gen-binlog-pull-interval", "0.1")
    client = PumpClient(pump.addr, cluster_id)
    try:
        pulled = _fakes(client, tso_client.get_ts(), 7)
        closed = tso_client.get_ts()  # the stream is cancelled: from here on nobody pulls
        short = _gaps_ms(pulled)
        assert statistics.median(short) < 500, short
        assert min(short) >= 80, short  # not more often than asked

        def max_commit_ts() -> int:
            return int(pump.http_json("GET", "/status")["Checkpoint"]["maxCommitTS"])

        changes: set[int] = set()

        def four_fakes_unpulled() -> bool:
            ts = max_commit_ts()
            if ts > closed:
                changes.add(ts)
            return len(changes) >= 4

        wait_for(four_fakes_unpulled, 60, "four fake binlogs with no stream open", interval=0.02)
        reopened = tso_client.get_ts()
        unpulled = [ts for ts in _fakes(client, closed, len(changes)) if ts < reopened]
        long = _gaps_ms(unpulled[1:])  # the first may still be at the short gap (the close takes a moment)
        assert len(long) >= 2, unpulled
        assert min(long) >= 500, long
    finally:
        client.close()


def test_resolver_finishes_and_drops_orphaned_prewrites(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    db = tmp_path / "upstream.db"
    store = TxnStatusStore.open(f"sqlite:///{db}")
    store.ensure_schema()
    pump = start_pump(
        tmp_path, etcd_server, request,
        "--upstream.txn-status-dsn", f"sqlite:///{db}",
        "--storage.resolve-interval", "0.2", "--storage.max-txn-timeout", "2",
    )  # fmt: skip
    client = PumpClient(pump.addr, cluster_id)
    try:
        import sqlite3

        # A: the writer committed in its store, then died before sending the commit binlog
        a_start = tso_client.get_ts()
        with sqlite3.connect(db) as conn:
            store.begin_pending(conn, a_start, ttl_ms=60_000)
        client.prewrite(a_start)
        a_commit = tso_client.get_ts()
        with sqlite3.connect(db) as conn:
            store.mark_committed(conn, a_start, a_commit)
        # B: a prewrite whose transaction never committed and left no record
        b_start = tso_client.get_ts()
        client.prewrite(b_start)
        # C: a normal transaction after both; visible only once A and B are resolved
        c_start = tso_client.get_ts()
        client.prewrite(c_start)
        c_commit = tso_client.get_ts()
        client.commit(c_start, c_commit)

        pulled = client.pull_until(0, c_commit, timeout=60)
        commits = [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit]
        assert (a_start, a_commit) in commits
        assert (c_start, c_commit) in commits
        assert all(start != b_start for start, _ in commits)
        a = next(b for b in pulled if b.start_ts == a_start)
        assert a.prewrite_value == prewrite_value(a_start)
    finally:
        client.close()
        store.close()


def _http(method: str, url: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_bad_requests_get_clear_errors_and_lose_nothing(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    pump = start_pump(tmp_path, etcd_server, request, "--max-message-size", "1MiB")
    client = PumpClient(pump.addr, cluster_id)
    try:
        start = tso_client.get_ts()
        client.prewrite(start)
        commit = tso_client.get_ts()
        client.commit(start, commit)

        with pytest.raises(grpc.RpcError) as info:
            client.write(b"\xff\xff\xff not a binlog")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        wrong = PumpClient(pump.addr, cluster_id + 1)
        with pytest.raises(grpc.RpcError) as info:
            wrong.prewrite(tso_client.get_ts())
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cluster id mismatch" in str(info.value.details())
        wrong.close()
        with pytest.raises(grpc.RpcError) as info:
            client.write(b"\x08\x00" + b"\x22" + bytes([0x80, 0x80, 0x80, 0x01]) + b"x" * (2 << 20))
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        pulled = client.pull_until(0, commit)
        assert [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit] == [(start, commit)]

        # a ts that is not a uint64 is a 400 naming it, not a 500 with a traceback in the log
        debug = f"http://{pump.status_addr}/debug/binlog/"
        for raw, why in (("1" * 26, "above the largest ts"), ("-1", "non-negative"), ("x", "non-negative")):
            status, body = _http("GET", debug + raw)
            assert status == 400, body
            message = json.loads(body)["message"]
            assert message.startswith(f"bad ts {raw!r}: "), message
            assert why in message, message
        assert _http("GET", debug + str(commit))[0] == 200
        assert "Traceback" not in pump.process.log_tail(200)

        # pause through HTTP: the pump publishes paused and exits 0; its data is intact after a restart
        status, body = _http("PUT", f"http://{pump.status_addr}/state/{pump.node_id}/pause")
        assert status == 200, body
        assert json.loads(body)["code"] == 200
        assert pump.process.proc is not None
        assert pump.process.proc.wait(60) == 0
        etcd = EtcdClient(etcd_server.url)
        node = Registry(etcd).get(NodeKind.PUMP, pump.node_id)
        etcd.close()
        assert node is not None
        assert node.state is NodeState.PAUSED
        pump.start()
        pulled = client.pull_until(0, commit)
        assert [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit] == [(start, commit)]
    finally:
        client.close()


def test_disk_space_refusal_still_accepts_fake_binlogs(
    tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    pump = start_pump(tmp_path, etcd_server, request)
    client = PumpClient(pump.addr, cluster_id)
    try:
        start = tso_client.get_ts()
        client.prewrite(start)
        commit = tso_client.get_ts()
        client.commit(start, commit)
        pump.stop()
        pump.process.argv += ["--storage.stop-write-at-available-space", "1000TiB"]
        pump.start()
        now = tso_client.get_ts()
        client.wait_for_ready = False
        with pytest.raises(grpc.RpcError) as info:
            client.prewrite(tso_client.get_ts())
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "no available space" in str(info.value.details())
        fakes = []
        for b in client.pull(now, timeout=60):
            fakes.append(b)
            if len(fakes) == 2:
                break
        assert all(is_fake(b) for b in fakes)
        pulled = client.pull_until(0, commit)  # what was stored before is intact and still served
        assert [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit] == [(start, commit)]
    finally:
        client.close()
