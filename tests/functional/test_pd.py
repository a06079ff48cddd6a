"""pd-server and the TSO client as real processes against a real etcd."""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common import tso
from common.errors import ClusterIDMismatchError, TSOError, UnavailableError
from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc
from common.pd_client import CLUSTER_ID_KEY, LEADER_KEY, TIMESTAMP_KEY, TSOClient, read_cluster_id, read_leader
from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import free_port, wait_for

pytestmark = pytest.mark.functional


def test_10k_timestamps_from_8_threads_are_unique_and_increasing(tso_client: TSOClient) -> None:
    per_thread: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(1250):
                per_thread[i].append(tso_client.get_ts())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors
    flat = [ts for seq in per_thread for ts in seq]
    assert len(flat) == 10_000
    assert len(set(flat)) == 10_000
    for seq in per_thread:
        assert all(a < b for a, b in itertools.pairwise(seq))
    # concurrent callers were batched into fewer RPCs than timestamps
    assert tso_client.rpc_count < 10_000


def test_kill9_and_restart_never_goes_backwards(etcd: EtcdClient, pd_server: PDProcess) -> None:
    client = TSOClient(etcd, timeout=30)
    try:
        before = [client.get_ts() for _ in range(200)]
        cluster_id = client.cluster_id
        pd_server.kill9()
        # the restarted server's clock is two minutes behind: only the persisted window keeps TSO monotonic
        pd_server.process.env["BINLOG_TEST_CLOCK_SKEW_MS"] = "-120000"
        pd_server.start()
        after = client.get_ts()  # same client: rediscovers and reconnects
        assert after > max(before)
        assert client.cluster_id == cluster_id  # created once, kept across restarts
        saved = etcd.get(TIMESTAMP_KEY)
        assert saved is not None
        assert int(saved.value) > tso.physical(after)
    finally:
        client.close()


def test_cluster_id_and_leader_published_in_etcd(etcd: EtcdClient, pd_server: PDProcess) -> None:
    cid = read_cluster_id(etcd)
    assert cid is not None
    assert cid > 0
    kv = etcd.get(CLUSTER_ID_KEY)
    assert kv is not None
    assert kv.value.decode() == str(cid)
    leader = read_leader(etcd)
    assert leader is not None
    assert leader.addr == pd_server.addr
    assert leader.cluster_id == cid


def test_wrong_cluster_id_is_refused(etcd: EtcdClient, pd_server: PDProcess) -> None:
    import grpc

    with grpc.insecure_channel(pd_server.addr) as channel:
        stub = pd_pb2_grpc.PDStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Tso(pd_pb2.TsoRequest(cluster_id=12345, count=1), timeout=5)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "cluster id mismatch" in str(info.value.details())
        with pytest.raises(grpc.RpcError) as info:
            stub.Tso(pd_pb2.TsoRequest(cluster_id=0, count=1 << 18), timeout=5)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        resp = stub.Tso(pd_pb2.TsoRequest(cluster_id=0, count=3), timeout=5)
        assert resp.count == 3
        assert resp.first.physical > 0
    assert ClusterIDMismatchError.retriable is False


def test_second_pd_server_waits_for_leader_then_gives_up(
    etcd_server: EtcdProcess, pd_server: PDProcess, tmp_path: Path
) -> None:
    cmd = [
        sys.executable, "-m", "pd.main", "--pd-urls", etcd_server.url,
        "--addr", f"127.0.0.1:{free_port()}", "--campaign-timeout", "1.5",
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "another pd-server holds /pd/leader" in done.stderr


def test_unreachable_etcd_exits_1_with_one_line() -> None:
    """The environment failed, not the config (exit status rule: 2 = change the config, 1 = run time; was 2)."""
    cmd = [sys.executable, "-m", "pd.main", "--pd-urls", f"http://127.0.0.1:{free_port()}", "--etcd-retry", "1s"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "unreachable" in lines[0]
    assert lines[0].startswith("pd-server: ")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--lease-ttl", "abc"], "lease-ttl"),
        (["--addr", "nohostport"], "addr"),
        (["--log-level", "loud"], "log-level"),
        (["--pd-urls", "ftp://x"], "bad etcd endpoint"),
    ],
)
def test_bad_config_exits_2_with_one_line(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pd.main", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0], done.stderr


def test_unknown_key_in_config_file_exits_2(tmp_path: Path) -> None:
    conf = tmp_path / "pd.toml"
    conf.write_text('addr = "127.0.0.1:1"\nlease-tll = 3\n')
    cmd = [sys.executable, "-m", "pd.main", "--config", str(conf)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "unknown key 'lease-tll'" in done.stderr
    assert str(conf) in done.stderr


def test_lease_loss_ends_the_term_and_a_new_one_starts(etcd: EtcdClient, pd_server: PDProcess) -> None:
    client = TSOClient(etcd, timeout=30)
    try:
        before = client.get_ts()
        kv = etcd.get(LEADER_KEY)
        assert kv is not None
        assert kv.lease != 0
        old_token = read_leader(etcd)
        etcd.revoke_lease(kv.lease)  # as if the lease expired while pd-server was cut off

        def new_term() -> bool:
            cur = read_leader(etcd)
            return cur is not None and cur != old_token

        wait_for(new_term, 30, "a new pd term")
        after = client.get_ts()
        assert after > before
        assert pd_server.process.alive
    finally:
        client.close()


def test_pd_server_survives_an_etcd_restart(etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess) -> None:
    client = TSOClient(etcd, timeout=30)
    try:
        before = client.get_ts()
        etcd_server.restart()
        after = [client.get_ts() for _ in range(50)]
        assert after[0] > before
        assert after == sorted(set(after))
        assert pd_server.process.alive
    finally:
        client.close()


def test_port_in_use_exits_1_and_claims_nothing(
    etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess
) -> None:
    """A port another program holds is the environment's fault at run time: exit status 1 (was 2)."""
    cmd = [sys.executable, "-m", "pd.main", "--pd-urls", etcd_server.url, "--addr", pd_server.addr]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot listen" in lines[0]
    leader = read_leader(etcd)
    assert leader is not None
    assert leader.addr == pd_server.addr


def test_tso_client_close_with_pending_requests_and_deadlines(etcd_server: EtcdProcess) -> None:
    etcd = EtcdClient(etcd_server.url, timeout=0.5, retry_for=0.5)
    client = TSOClient(etcd, timeout=0.5)  # no pd-server at all
    try:
        t0 = time.monotonic()
        with pytest.raises(UnavailableError):
            client.get_ts()
        assert time.monotonic() - t0 < 3.0  # the deadline bounds the etcd look-up and the RPC
        errors: list[BaseException] = []

        def waiter() -> None:
            try:
                client.get_ts(timeout=30)
            except BaseException as exc:
                errors.append(exc)

        th = threading.Thread(target=waiter)
        th.start()
        wait_for(lambda: client.rpc_count == 0 and th.is_alive(), 5, "a pending request")
        t1 = time.monotonic()
        client.close()
        th.join(10)
        assert not th.is_alive()
        assert time.monotonic() - t1 < 5.0
        assert len(errors) == 1
        assert isinstance(errors[0], TSOError)
        assert "closed" in str(errors[0])
    finally:
        client.close()
        etcd.close()


def test_malformed_leader_record_fails_calls_instead_of_hanging(etcd: EtcdClient) -> None:
    etcd.put(LEADER_KEY, b"not json")
    client = TSOClient(etcd, timeout=1.0)
    try:
        with pytest.raises((UnavailableError, TSOError)):
            client.get_ts()
        with pytest.raises((UnavailableError, TSOError)):
            client.get_ts()  # the dispatcher is still alive
    finally:
        client.close()
