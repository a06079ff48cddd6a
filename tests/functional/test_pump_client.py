"""PumpsClient against real etcd, pd-server and pump processes (and scripted in-process pumps for the
retry paths that real pumps cannot be made to take on cue)."""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from common.errors import ConfigError
from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo, pump_pb2, pump_pb2_grpc
from common.pd_client import CLUSTER_ID_KEY, TSOClient, read_cluster_id
from common.registry import NodeKind, NodeState, NodeStatus, Registry
from common.txnstatus import TxnStatusStore
from pump_client import (
    BinlogTooLargeError,
    EncodedBinlog,
    InvalidBinlogError,
    NoPumpError,
    PumpClientError,
    PumpFullError,
    PumpsClient,
)
from pump_client.metrics import COMMIT, PREWRITE
from pump_client.payload import MAX_HEADER_SIZE
from tests.functional.pumputil import PumpClient as RawPump
from tests.functional.pumputil import is_fake, prewrite_value
from tests.functional.upstreamutil import pull_merged
from tests.harness.tcpproxy import TcpProxy
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess
from tools.procs import free_port, wait_for

pytestmark = pytest.mark.functional
README = Path(__file__).resolve().parents[2] / "README.md"
README_PY_BLOCK = re.compile(r"```py\n(.*?)```", re.DOTALL)
FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
WRITERS = 8
DEADLINE = 30.0


def start_pumps(
    tmp_path: Path, etcd_server: EtcdProcess, request: pytest.FixtureRequest, n: int, *extra: str
) -> list[PumpProcess]:
    pumps = [PumpProcess(tmp_path, etcd_server.url, name=f"pump{i}", extra_args=[*FAST, *extra]) for i in range(n)]
    for pump in pumps:
        start_pump(pump, request)
    return pumps


def start_pump(pump: PumpProcess, request: pytest.FixtureRequest) -> None:
    """Start `pump`; stopped at the end of the test, its log tail printed when the test failed."""

    def cleanup() -> None:
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            print(f"\n===== {pump.name} log =====\n{pump.process.log_tail(60)}")
        pump.stop()

    request.addfinalizer(cleanup)
    pump.start()


def prewrite(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Prewrite,
        start_ts=start_ts,
        prewrite_key=b"pk%d" % start_ts,
        prewrite_value=prewrite_value(start_ts),
    )


def commit(start_ts: int, commit_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(
        tp=binlog_pb2.Commit, start_ts=start_ts, commit_ts=commit_ts, prewrite_key=b"pk%d" % start_ts
    )


def rollback(start_ts: int) -> binlog_pb2.Binlog:
    return binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=start_ts, prewrite_key=b"pk%d" % start_ts)


@dataclass
class Txns:
    """What the writer threads did."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: dict[int, int] = field(default_factory=dict)  # start_ts -> commit_ts
    rolled_back: set[int] = field(default_factory=set)
    pending: list[futures.Future[None]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def done(self) -> int:
        with self.lock:
            return len(self.committed) + len(self.rolled_back)


def run_writers(
    client: PumpsClient, tso: TSOClient, txns: Txns, *, per_writer: int, stop: threading.Event | None = None
) -> list[threading.Thread]:
    """WRITERS threads, each writing prewrite then commit (sync or async) or rollback (1 in 5)."""

    def writer(i: int) -> None:
        rng = random.Random(i)
        n = 0
        try:
            while n < per_writer and not (stop is not None and stop.is_set()):
                n += 1
                start_ts = tso.get_ts()
                client.write_binlog(prewrite(start_ts))
                if rng.randrange(5) == 0:
                    client.write_binlog(rollback(start_ts))
                    with txns.lock:
                        txns.rolled_back.add(start_ts)
                    continue
                commit_ts = tso.get_ts()
                if rng.randrange(2):
                    client.write_binlog(commit(start_ts, commit_ts))
                else:
                    fut = client.write_binlog_async(commit(start_ts, commit_ts))
                    with txns.lock:
                        txns.pending.append(fut)
                with txns.lock:
                    txns.committed[start_ts] = commit_ts
        except BaseException as exc:
            with txns.lock:
                txns.errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,), name=f"writer-{i}", daemon=True) for i in range(WRITERS)]
    for t in threads:
        t.start()
    return threads


def join(threads: list[threading.Thread], txns: Txns, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not [t.name for t in threads if t.is_alive()], "writers still running"
    _, not_done = futures.wait(txns.pending, timeout=max(1.0, deadline - time.monotonic()))
    assert not not_done, f"{len(not_done)} async commits not resolved"


def pull_past(pump: PumpProcess, cluster_id: int, last_ts: int) -> dict[int, binlog_pb2.Binlog]:
    """Commits of a pump (commit_ts -> binlog) until a binlog above `last_ts` arrives.

    Getting past `last_ts` proves every prewrite stored on this pump was matched by a commit or a
    rollback on this same pump: the pumps run without a txn-status store, so an unmatched prewrite
    would hold the watermark (and the stream) back forever.
    """
    raw = RawPump(pump.addr, cluster_id)
    commits: dict[int, binlog_pb2.Binlog] = {}
    try:
        for b in raw.pull(0, timeout=DEADLINE):
            assert b.tp != binlog_pb2.Prewrite
            if b.commit_ts > last_ts:
                break
            if not is_fake(b):
                commits[b.commit_ts] = b
    finally:
        raw.close()
    return commits


def has_binlog_at(pump: PumpProcess, ts: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{pump.status_addr}/debug/binlog/{ts}", timeout=10) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise


@pytest.fixture
def cluster_id(etcd: EtcdClient, pd_server: PDProcess) -> int:
    cid = read_cluster_id(etcd)
    assert cid is not None
    return cid


def info(client: PumpsClient, node_id: str) -> tuple[NodeState, bool]:
    (p,) = [p for p in client.pumps() if p.node_id == node_id]
    return p.state, p.available


# ------------------------------------------------------------------------------------- real pumps


@pytest.mark.parametrize("strategy", ["range", "hash", "score"])
def test_commits_land_on_their_prewrites_pump(
    strategy: str, tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    pumps = start_pumps(tmp_path, etcd_server, request, 2)
    with PumpsClient(etcd_server.url, strategy=strategy) as client:
        assert client.cluster_id == cluster_id
        assert [p.node_id for p in client.pumps()] == ["pump0", "pump1"]
        if strategy == "score":
            wait_for(lambda: all(p.score > 0 for p in client.pumps()), DEADLINE, "pumps to publish scores")
        txns = Txns()
        join(run_writers(client, tso_client, txns, per_writer=25), txns)
        assert not txns.errors, txns.errors[:3]
        assert len(txns.committed) + len(txns.rolled_back) == WRITERS * 25
        assert txns.rolled_back, "the load should include rollbacks"
        assert client.tracked_txns == 0
        assert client.metrics.given_up(PREWRITE) == client.metrics.given_up(COMMIT) == 0
        assert [client.metrics.failures(p.node_id) for p in pumps] == [0, 0]
        writes = [client.metrics.writes(p.node_id) for p in pumps]
        assert sum(writes) == 2 * WRITERS * 25

    last_ts = tso_client.get_ts()
    by_pump = {p.node_id: pull_past(p, cluster_id, last_ts) for p in pumps}
    where: dict[int, str] = {}  # start_ts -> node id
    for node_id, commits in by_pump.items():
        for commit_ts, b in commits.items():
            assert txns.committed.get(b.start_ts) == commit_ts
            assert b.prewrite_value == prewrite_value(b.start_ts), "the commit's prewrite is on another pump"
            assert b.start_ts not in where, "committed twice"
            where[b.start_ts] = node_id
    assert set(where) == set(txns.committed)
    for start_ts in txns.rolled_back:
        holders = [p.node_id for p in pumps if has_binlog_at(p, start_ts)]
        assert len(holders) == 1, (start_ts, holders)
        where[start_ts] = holders[0]  # and its rollback is there: that pump's stream got past it

    per_pump = [sum(1 for n in where.values() if n == p.node_id) for p in pumps]
    assert [w // 2 for w in writes] == per_pump
    if strategy == "range":
        assert abs(per_pump[0] - per_pump[1]) <= 1  # strict alternation: no attempt failed
    elif strategy == "hash":
        assert all(node_id == f"pump{start_ts % 2}" for start_ts, node_id in where.items())
    else:
        assert min(per_pump) >= 40  # equal scores: ~100 each; below 40 has probability < 1e-15


def test_kill9_one_of_three_pumps_while_writing(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    pumps = start_pumps(tmp_path, etcd_server, request, 3)
    victim = pumps[2]
    probe_interval = 0.5
    with PumpsClient(etcd_server.url, probe_interval=probe_interval, retry_interval=0.05) as client:
        txns = Txns()
        stop = threading.Event()
        threads = run_writers(client, tso_client, txns, per_writer=1_000_000, stop=stop)
        try:
            wait_for(lambda: txns.done >= 100 or bool(txns.errors), DEADLINE, "100 transactions")
            victim.kill9()
            at_kill = txns.done
            wait_for(lambda: txns.done >= at_kill + 200 or bool(txns.errors), DEADLINE, "200 more after the kill")
            assert not txns.errors, txns.errors[:3]
            wait_for(lambda: not info(client, victim.node_id)[1], DEADLINE, "the dead pump to become unavailable")
            before = client.metrics.writes(victim.node_id)
            victim.start()
            restarted = time.monotonic()
            wait_for(
                lambda: client.metrics.writes(victim.node_id) > before + 10 or bool(txns.errors),
                4 * probe_interval + 10,
                "the restarted pump to receive traffic again",
            )
            rejoined_after = time.monotonic() - restarted
        finally:
            stop.set()
            join(threads, txns)
        assert not txns.errors, txns.errors[:3]
        assert client.metrics.given_up(PREWRITE) == 0
        assert client.metrics.given_up(COMMIT) == 0  # commits for the dead pump waited for its restart
        assert client.tracked_txns == 0
        assert info(client, victim.node_id) == (NodeState.ONLINE, True)
        assert all(client.metrics.writes(p.node_id) > 0 for p in pumps)
        print(f"restarted pump took traffic again {rejoined_after:.2f}s after it was serving")


@dataclass
class StatusTxns:
    """What the writers of the freeze test did: start_ts -> (commit_ts, future, handed-over time)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    committed: dict[int, tuple[int, futures.Future[None], float]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)

    def delivered_since(self, since: float) -> int:
        """Transactions handed over at or after `since` whose commit binlog has been delivered."""
        with self.lock:
            return sum(1 for _, fut, at in self.committed.values() if at >= since and fut.done())


def run_status_writers(
    client: PumpsClient,
    tso: TSOClient,
    db_path: Path,
    status: TxnStatusStore,
    txns: StatusTxns,
    stop: threading.Event,
) -> list[threading.Thread]:
    """WRITERS threads doing what the upstream writer does: a pending txn-status row, the prewrite, the
    row marked committed, then the commit binlog sent asynchronously (rolled back if the prewrite fails)."""

    def writer(i: int) -> None:
        conn = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            while not stop.is_set():
                start_ts = tso.get_ts()
                status.begin_pending(conn, start_ts, ttl_ms=120_000)
                try:
                    client.write_binlog(prewrite(start_ts))
                except PumpClientError as exc:
                    status.mark_rolled_back(conn, start_ts)
                    with txns.lock:
                        txns.errors.append(exc)
                    continue
                commit_ts = tso.get_ts()
                status.mark_committed(conn, start_ts, commit_ts, pump_node_id=client.prewrite_pump(start_ts) or "")
                fut = client.write_binlog_async(commit(start_ts, commit_ts))
                with txns.lock:
                    txns.committed[start_ts] = (commit_ts, fut, time.monotonic())
        except BaseException as exc:
            with txns.lock:
                txns.errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=writer, args=(i,), name=f"writer-{i}", daemon=True) for i in range(WRITERS)]
    for t in threads:
        t.start()
    return threads


FROZEN_COMMITS = 50
"""Transactions that must commit (binlog delivered) while one pump of three is frozen ..."""
FROZEN_DEADLINE = 10.0
"""... within this many seconds of the freeze: less than write_timeout (15 s), which a prewrite sent to
the frozen pump used to wait before it was tried elsewhere."""


def test_sigstop_one_of_three_pumps_commits_continue_then_it_rejoins(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    db_path = tmp_path / "txn-status.db"
    dsn = f"sqlite:///{db_path}"
    status = TxnStatusStore.open(dsn)
    request.addfinalizer(status.close)
    status.ensure_schema()
    # with the resolver, as deployed: a prewrite the frozen pump received but answered too late was
    # written again to another pump; the frozen pump's copy is settled from the txn-status row
    pumps = start_pumps(
        tmp_path, etcd_server, request, 3, "--upstream.txn-status-dsn", dsn, "--storage.resolve-interval", "0.2"
    )
    victim = pumps[2]
    pid = victim.process.pid
    assert pid is not None

    def thaw() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)

    request.addfinalizer(thaw)  # runs before the pumps are stopped (finalizers run last-in first-out)
    with PumpsClient(etcd_server.url, probe_interval=0.5, retry_interval=0.05) as client:
        txns = StatusTxns()
        stop = threading.Event()
        threads = run_status_writers(client, tso_client, db_path, status, txns, stop)
        try:
            wait_for(lambda: len(txns.committed) >= 100 or bool(txns.errors), DEADLINE, "100 transactions")
            assert client.metrics.writes(victim.node_id) > 0
            os.killpg(pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            wait_for(
                lambda: txns.delivered_since(frozen_at) >= FROZEN_COMMITS or bool(txns.errors),
                FROZEN_DEADLINE,
                f"{FROZEN_COMMITS} transactions committed while {victim.node_id} is frozen",
            )
            continued_after = time.monotonic() - frozen_at
            assert not txns.errors, txns.errors[:3]
            assert info(client, victim.node_id) == (NodeState.ONLINE, False)  # suspect: no new prewrites
            writes_frozen = client.metrics.writes(victim.node_id)
            thaw()
            thawed_at = time.monotonic()
            wait_for(
                lambda: client.metrics.writes(victim.node_id) > writes_frozen + 10 or bool(txns.errors),
                DEADLINE,
                "the thawed pump to receive prewrites again",
            )
            rejoined_after = time.monotonic() - thawed_at
            assert info(client, victim.node_id) == (NodeState.ONLINE, True)
        finally:
            stop.set()
            thaw()
            for t in threads:
                t.join(DEADLINE)
        assert not [t.name for t in threads if t.is_alive()], "writers still running"
        assert not txns.errors, txns.errors[:3]
        pending = [fut for _, fut, _ in txns.committed.values()]
        _, not_done = futures.wait(pending, timeout=DEADLINE)
        assert not not_done, f"{len(not_done)} async commits not resolved"
        assert client.metrics.given_up(PREWRITE) == 0
        assert client.metrics.given_up(COMMIT) == 0  # the frozen pump's commits waited for it
        assert client.tracked_txns == 0

    # Each transaction on exactly one pump: a prewrite the frozen pump stored but answered too late was
    # rolled back there (by the client, or by its resolver: the status row names the other pump).
    pulled = pull_merged(pumps, cluster_id, tso_client.get_ts(), timeout=120, exactly_once=True)
    assert {(b.start_ts, b.commit_ts) for b in pulled} == {(s, c) for s, (c, _, _) in txns.committed.items()}
    print(
        f"{client.metrics.withdrawals()} prewrite copies withdrawn; "
        f"{FROZEN_COMMITS} commits {continued_after:.2f}s after the freeze; "
        f"the thawed pump took prewrites again {rejoined_after:.2f}s after SIGCONT"
    )


class _CrashedBeforeRollbacks(PumpsClient):
    """A writer that died before the rollbacks of its abandoned prewrite attempts went out."""

    def _withdraw(self, start_ts: int, node_ids: set[str]) -> None:
        pass


SLOW_MS = 800
"""Delay the proxy adds to everything sent to the slow pump: more than the client's attempt deadline."""


@pytest.mark.parametrize("rollbacks", ["delivered", "lost"])
def test_a_slow_pumps_copy_of_a_failed_over_prewrite_is_never_delivered_twice(
    tmp_path: Path,
    etcd_server: EtcdProcess,
    cluster_id: int,
    tso_client: TSOClient,
    request: pytest.FixtureRequest,
    rollbacks: str,
) -> None:
    """The nemesis suite found it: a pump 0.8 s away answers a prewrite after the client's attempt
    deadline (0.3 s) but stores it; the client writes the prewrite to another pump, and the slow pump's
    resolver used to find the transaction committed and commit its copy too.  Now the client rolls the
    copy back, and where that rollback never arrives, the status row names the pump that took the
    prewrite and the slow pump's resolver rolls its copy back.  Each pump's stream, pulled from 0,
    holds each transaction at most once across pumps."""
    db_path = tmp_path / "txn-status.db"
    dsn = f"sqlite:///{db_path}"
    status = TxnStatusStore.open(dsn)
    request.addfinalizer(status.close)
    status.ensure_schema()
    resolving = ["--upstream.txn-status-dsn", dsn, "--storage.resolve-interval", "0.2"]
    fast = start_pumps(tmp_path, etcd_server, request, 1, *resolving)[0]
    slow_port = free_port()
    proxy = TcpProxy("127.0.0.1", free_port(), "127.0.0.1", slow_port)
    proxy.start()
    request.addfinalizer(proxy.close)
    slow = PumpProcess(
        tmp_path,
        etcd_server.url,
        name="slow",
        grpc_port=slow_port,
        extra_args=[*FAST, *resolving],
        advertise=proxy.address,
    )
    start_pump(slow, request)
    cls = PumpsClient if rollbacks == "delivered" else _CrashedBeforeRollbacks
    committed: dict[int, int] = {}
    with cls(etcd_server.url, attempt_timeout=0.3, retry_interval=0.02, probe_interval=0.5) as client:
        proxy.set_delay(SLOW_MS, direction="up")
        conn = sqlite3.connect(db_path, timeout=30, isolation_level=None)
        try:
            deadline = time.monotonic() + DEADLINE
            while client.metrics.failures(slow.node_id) < 4:
                assert time.monotonic() < deadline, "the slow pump's attempts never timed out"
                start_ts = tso_client.get_ts()
                status.begin_pending(conn, start_ts, ttl_ms=120_000)
                client.write_binlog(prewrite(start_ts))
                commit_ts = tso_client.get_ts()
                status.mark_committed(conn, start_ts, commit_ts, pump_node_id=client.prewrite_pump(start_ts) or "")
                client.write_binlog(commit(start_ts, commit_ts))
                committed[start_ts] = commit_ts
        finally:
            conn.close()
        proxy.set_delay(0)
        assert client.metrics.given_up(PREWRITE) == 0
        if rollbacks == "lost":
            assert client.metrics.withdrawals() == 0
        else:  # one per prewrite that timed out on the slow pump (its other failures are those rollbacks' calls)
            assert client.metrics.withdrawals() >= 1

    pulled = pull_merged([fast, slow], cluster_id, tso_client.get_ts(), timeout=120, exactly_once=True)
    assert {(b.start_ts, b.commit_ts) for b in pulled} == set(committed.items())
    if rollbacks == "lost":  # the copies were there, and the resolver settled them
        assert f"committed through pump {fast.node_id}" in (tmp_path / "slow.log").read_text()


def test_a_paused_pump_gets_no_more_prewrites(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    pumps = start_pumps(tmp_path, etcd_server, request, 2)
    paused = pumps[1]
    with PumpsClient(etcd_server.url) as client:
        txns = Txns()
        join(run_writers(client, tso_client, txns, per_writer=5), txns)
        assert client.metrics.writes(paused.node_id) > 0
        req = urllib.request.Request(f"http://{paused.status_addr}/state/{paused.node_id}/pause", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        wait_for(lambda: info(client, paused.node_id) == (NodeState.PAUSED, False), DEADLINE, "the pump paused")
        before = client.metrics.writes(paused.node_id)
        join(run_writers(client, tso_client, txns, per_writer=10), txns)
        assert not txns.errors, txns.errors[:3]
        assert client.metrics.writes(paused.node_id) == before
        assert client.metrics.failures(paused.node_id) == 0  # not even tried
        assert client.metrics.writes(pumps[0].node_id) >= 2 * WRITERS * 10


def test_resource_exhausted_is_not_retried(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    (full,) = start_pumps(tmp_path, etcd_server, request, 1, "--storage.stop-write-at-available-space", "1000TiB")
    with PumpsClient(etcd_server.url, strategy="score") as client:
        assert client.pumps()[0].score == 0  # a pump below its threshold publishes 0
        started = time.monotonic()
        with pytest.raises(PumpFullError, match="RESOURCE_EXHAUSTED") as exc_info:
            client.write_binlog(prewrite(tso_client.get_ts()))
        assert time.monotonic() - started < 5
        assert not exc_info.value.retriable
        assert client.metrics.failures(full.node_id) == 1
        assert client.metrics.retries(full.node_id) == 0


def test_a_binlog_the_pump_calls_invalid_is_not_retried(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    (pump,) = start_pumps(tmp_path, etcd_server, request, 1)
    with PumpsClient(etcd_server.url) as client:
        started = time.monotonic()
        empty = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=tso_client.get_ts(), prewrite_key=b"k")
        with pytest.raises(InvalidBinlogError, match="INVALID_ARGUMENT") as exc_info:
            client.write_binlog(empty)  # a prewrite without data: every pump refuses it
        assert not exc_info.value.retriable
        assert client.metrics.retries(pump.node_id) == 0
        ts = tso_client.get_ts()
        client.write_binlog(prewrite(ts))
        # commit_ts == start_ts: refused by the pump, dropped by the client at once (not for commit_timeout)
        client.write_binlog_async(commit(ts, ts)).result(timeout=10)
        assert time.monotonic() - started < 10
        assert client.metrics.failures(pump.node_id) == 2  # one call each


def test_encoded_prewrite_is_sent_as_is_and_an_oversized_one_never(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, tso_client: TSOClient, request: pytest.FixtureRequest
) -> None:
    (pump,) = start_pumps(tmp_path, etcd_server, request, 1)
    limit = 1 << 20
    with PumpsClient(etcd_server.url, max_message_size=limit) as client:
        assert client.max_binlog_size == limit - MAX_HEADER_SIZE
        ts = tso_client.get_ts()
        body = gogo.marshal_binlog(prewrite(ts))
        encoded = EncodedBinlog(binlog_pb2.Prewrite, ts, 0, [body[:7], body[7:]])
        client.write_encoded_binlog(encoded)
        with pytest.raises(ValueError, match="already written"):
            encoded.take()
        client.write_binlog(commit(ts, tso_client.get_ts()))
        big_ts = tso_client.get_ts()
        big = binlog_pb2.Binlog(tp=binlog_pb2.Prewrite, start_ts=big_ts, prewrite_key=b"k", prewrite_value=bytes(limit))
        with pytest.raises(BinlogTooLargeError, match=f"more than max_message_size {limit}") as exc_info:
            client.write_binlog(big)
        assert not exc_info.value.retriable
        with pytest.raises(BinlogTooLargeError):
            client.write_encoded_binlog(EncodedBinlog(binlog_pb2.Prewrite, big_ts, 0, [gogo.marshal_binlog(big)]))
        assert client.metrics.writes(pump.node_id) == 2  # the oversized prewrite never left the client
        assert client.metrics.failures(pump.node_id) == 0
    (got,) = pull_past(pump, cluster_id, tso_client.get_ts()).values()
    assert (got.start_ts, got.prewrite_value) == (ts, prewrite_value(ts))


def test_readme_example_runs(
    tmp_path: Path, etcd_server: EtcdProcess, cluster_id: int, request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    start_pumps(tmp_path, etcd_server, request, 1)
    blocks = [b for b in README_PY_BLOCK.findall(README.read_text()) if "PumpsClient(" in b]
    assert len(blocks) == 1
    code = blocks[0].replace('"http://127.0.0.1:2379"', repr(etcd_server.url))
    exec(compile(code, "README.md pump client example", "exec"), {})
    assert "('pump0', 'online', True, " in capsys.readouterr().out


def test_construction_errors(etcd_server: EtcdProcess, pd_server: PDProcess) -> None:
    with pytest.raises(NoPumpError, match="no pump found in etcd"):
        PumpsClient(etcd_server.url)
    wrong = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(PumpClientError, match=r"cannot reach etcd at 127\.0\.0\.1:\d+"):
        PumpsClient(wrong, connect_timeout=1.0)
    assert time.monotonic() - started < 10
    with pytest.raises(ConfigError, match="unknown pump client strategy"):
        PumpsClient(etcd_server.url, strategy="round-robin")


def test_missing_cluster_id_is_a_clear_error(etcd_server: EtcdProcess) -> None:
    with pytest.raises(PumpClientError, match=r"no cluster id at /pd/cluster_id .*is pd-server running"):
        PumpsClient(etcd_server.url, connect_timeout=0.5)


# ---------------------------------------------------------------------------------- scripted pumps

Script = Callable[[binlog_pb2.Binlog], "tuple[grpc.StatusCode, str] | None"]


class ScriptedPump(pump_pb2_grpc.PumpServicer):  # type: ignore[misc]
    """An in-process binlog.Pump whose answer to each binlog comes from `script` (None: success)."""

    def __init__(self, node_id: str, registry: Registry) -> None:
        self.node_id = node_id
        self.script: Script = lambda b: None
        self.calls: list[binlog_pb2.Binlog] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pump_pb2_grpc.add_PumpServicer_to_server(self, self.server)
        self.addr = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()
        self.registry = registry
        self.publish(NodeState.ONLINE)

    def publish(self, state: NodeState, score: int = 0) -> None:
        self.registry.upsert(NodeKind.PUMP, NodeStatus(self.node_id, self.addr, state, score=score))

    def WriteBinlog(self, request: pump_pb2.WriteBinlogReq, context: grpc.ServicerContext) -> pump_pb2.WriteBinlogResp:
        b = binlog_pb2.Binlog.FromString(request.payload)
        with self.lock:
            self.calls.append(b)
        failure = self.script(b)
        if failure is not None:
            context.abort(*failure)
        return pump_pb2.WriteBinlogResp()

    def seen(self, tp: int | None = None, start_ts: int | None = None) -> int:
        with self.lock:
            return sum(
                1
                for b in self.calls
                if (tp is None or b.tp == tp) and (start_ts is None or b.start_ts == start_ts) and b.start_ts
            )

    def probes(self) -> int:
        with self.lock:
            return sum(1 for b in self.calls if b.start_ts == 0 and b.commit_ts == 0)


@pytest.fixture
def scripted(etcd_server: EtcdProcess, etcd: EtcdClient) -> Iterator[Callable[[str], ScriptedPump]]:
    etcd.put(CLUSTER_ID_KEY, "42")
    registry = Registry(etcd)
    made: list[ScriptedPump] = []

    def make(node_id: str) -> ScriptedPump:
        pump = ScriptedPump(node_id, registry)
        made.append(pump)
        return pump

    yield make
    for pump in made:
        pump.server.stop(None)


UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, "no online: pausing")
INTERNAL = (grpc.StatusCode.INTERNAL, "write binlog failed: disk on fire")


def test_last_resort_pass_tries_unavailable_online_pumps(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a, b = scripted("a"), scripted("b")
    a.script = lambda binlog: INTERNAL
    b_failures = [1]

    def b_script(binlog: binlog_pb2.Binlog) -> tuple[grpc.StatusCode, str] | None:
        if b_failures[0] > 0:
            b_failures[0] -= 1
            return UNAVAILABLE
        return None

    b.script = b_script
    with PumpsClient(etcd_server.url, write_timeout=0.3, retry_interval=0.01, max_err_nums=0) as client:
        client.write_binlog(prewrite(100))
        assert [(p.node_id, p.available) for p in client.pumps()] == [("a", False), ("b", True)]
        assert b.seen(binlog_pb2.Prewrite, 100) == 2  # once in the loop, once in the last-resort pass
        client.write_binlog(commit(100, 101))
        assert b.seen(binlog_pb2.Commit, 100) == 1
        assert a.seen(binlog_pb2.Commit) == 0

        b.script = lambda binlog: INTERNAL
        with pytest.raises(PumpClientError, match="write binlog start_ts=200 failed, the last error node_id=b"):
            client.write_binlog(prewrite(200))
        assert client.metrics.given_up(PREWRITE) == 1


def test_a_copy_left_by_a_timed_out_prewrite_attempt_gets_a_rollback(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    """A pump that answers after the attempt deadline still stored the prewrite: once the prewrite went
    to another pump, the slow one gets a rollback of that start_ts (in the background, after a probe found
    it answering), so its copy neither waits for a commit nor is committed by its resolver.  The pump
    that took the prewrite gets none, and a refusal (nothing stored) gets none."""
    a, b = scripted("a"), scripted("b")

    def slow_prewrites(binlog: binlog_pb2.Binlog) -> None:
        if binlog.tp == binlog_pb2.Prewrite:
            time.sleep(0.6)  # then stored: the call returns OK after the client gave up on it

    a.script = slow_prewrites
    with PumpsClient(
        etcd_server.url, strategy="hash", attempt_timeout=0.2, retry_interval=0.01, probe_interval=0.2
    ) as client:
        client.write_binlog(prewrite(10))  # hash: 10 % 2 -> a, which times out; then b
        assert client.prewrite_pump(10) == "b"
        assert (a.seen(binlog_pb2.Prewrite, 10), b.seen(binlog_pb2.Prewrite, 10)) == (1, 1)
        assert client.metrics.withdrawals() == 1
        wait_for(lambda: a.seen(binlog_pb2.Rollback, 10) == 1, DEADLINE, "the rollback of start_ts=10 on a")
        client.write_binlog(commit(10, 11))
        assert client.prewrite_pump(10) is None
        assert (a.seen(binlog_pb2.Commit), b.seen(binlog_pb2.Commit, 10)) == (0, 1)
        assert b.seen(binlog_pb2.Rollback) == 0

        a.script = lambda binlog: (grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full")
        b.script = lambda binlog: (grpc.StatusCode.RESOURCE_EXHAUSTED, "disk full")
        with pytest.raises(PumpFullError):
            client.write_binlog(prewrite(12))
        assert client.metrics.withdrawals() == 1  # a refused prewrite was not stored: nothing to roll back


def test_commit_goes_only_to_its_pump_and_never_raises(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a, b = scripted("a"), scripted("b")
    with PumpsClient(etcd_server.url, strategy="hash", commit_timeout=0.5, retry_interval=0.02) as client:
        client.write_binlog(prewrite(11))  # hash: 11 % 2 -> b
        assert (a.seen(), b.seen()) == (0, 1)
        b.script = lambda binlog: INTERNAL if binlog.tp == binlog_pb2.Commit else None
        started = time.monotonic()
        client.write_binlog(commit(11, 12))  # retried every 0.2 s for 0.5 s, then dropped
        assert 0.5 <= time.monotonic() - started < 5
        assert 2 <= b.seen(binlog_pb2.Commit, 11) <= 5  # every 0.2 s for 0.5 s (fewer on a loaded machine)
        assert a.seen() == 0
        assert client.metrics.given_up(COMMIT) == 1
        assert client.tracked_txns == 0

        client.write_binlog(rollback(999))  # unknown start_ts: logged and dropped
        assert client.metrics.given_up(COMMIT) == 2
        assert a.seen() + b.seen(binlog_pb2.Rollback) == 0


def test_async_commits_retry_in_the_background_and_close_waits_for_them(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a = scripted("a")
    failures = [2]

    def script(binlog: binlog_pb2.Binlog) -> tuple[grpc.StatusCode, str] | None:
        if binlog.tp == binlog_pb2.Commit and failures[0] > 0:
            failures[0] -= 1
            return UNAVAILABLE
        return None

    a.script = script
    client = PumpsClient(etcd_server.url, retry_interval=0.02)
    client.write_binlog(prewrite(5))
    client.write_binlog(prewrite(7))
    first = client.write_binlog_async(commit(5, 6))
    assert first.result(timeout=10) is None
    assert a.seen(binlog_pb2.Commit, 5) == 3
    a.script = lambda binlog: INTERNAL
    second = client.write_binlog_async(commit(7, 8))
    started = time.monotonic()
    client.close(timeout=0.5)  # waits 0.5 s for it, then abandons it
    assert 0.4 <= time.monotonic() - started < 10
    assert second.done()
    assert second.result() is None
    assert client.metrics.given_up(COMMIT) == 1
    client.close()  # idempotent
    with pytest.raises(PumpClientError, match="closed"):
        client.write_binlog(prewrite(9))


def test_overflowing_start_ts_map_drops_the_oldest_commit(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a = scripted("a")
    with PumpsClient(etcd_server.url, max_tracked_txns=2) as client:
        for ts in (1, 2, 3):
            client.write_binlog(prewrite(ts))
        assert client.tracked_txns == 2
        for ts in (1, 2, 3):
            client.write_binlog(commit(ts, ts + 10))
        assert [a.seen(binlog_pb2.Commit, ts) for ts in (1, 2, 3)] == [0, 1, 1]
        assert client.metrics.given_up(COMMIT) == 1


def test_prober_and_watch_bring_pumps_in_and_out(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a = scripted("a")
    a.script = lambda binlog: UNAVAILABLE
    with PumpsClient(etcd_server.url, probe_interval=0.1, max_err_nums=0, write_timeout=0.2, retry_interval=0.01) as c:
        with pytest.raises(PumpClientError):
            c.write_binlog(prewrite(1))
        assert info(c, "a") == (NodeState.ONLINE, False)
        wait_for(lambda: a.probes() >= 2, DEADLINE, "probes of the unavailable pump")
        a.script = lambda binlog: None
        wait_for(lambda: info(c, "a") == (NodeState.ONLINE, True), DEADLINE, "the probe to bring the pump back")

        b = scripted("b")  # a pump registered later is picked up by the watch
        wait_for(lambda: [p.node_id for p in c.pumps()] == ["a", "b"], DEADLINE, "the new pump")
        a.publish(NodeState.PAUSED)
        wait_for(lambda: info(c, "a") == (NodeState.PAUSED, False), DEADLINE, "pump a paused")
        for ts in range(10, 20):
            c.write_binlog(prewrite(ts))
        assert b.seen(binlog_pb2.Prewrite) == 10
        assert a.seen(binlog_pb2.Prewrite) == 2  # only the failed prewrite: in the loop and the last resort
        probes = a.probes()
        assert c.probe_once() == []  # a paused pump is not probed
        assert a.probes() == probes


def test_score_strategy_follows_published_scores(
    scripted: Callable[[str], ScriptedPump], etcd_server: EtcdProcess
) -> None:
    a, b = scripted("a"), scripted("b")
    a.publish(NodeState.ONLINE, score=100)
    b.publish(NodeState.ONLINE, score=0)
    with PumpsClient(etcd_server.url, strategy="score") as client:
        for ts in range(1, 201):
            client.write_binlog(prewrite(ts))
        assert b.seen(binlog_pb2.Prewrite) <= 2  # weight 0.01 against 100: expected 0.02
        b.publish(NodeState.ONLINE, score=100)
        a.publish(NodeState.ONLINE, score=1)
        wait_for(lambda: [p.score for p in client.pumps()] == [1, 100], DEADLINE, "new scores")
        for ts in range(1000, 1200):
            client.write_binlog(prewrite(ts))
        assert b.seen(binlog_pb2.Prewrite) >= 180
