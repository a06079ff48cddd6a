"""pd-server against an etcd that stops answering for longer than the leader lease (SIGSTOP / SIGCONT).

The leader lease (3 s) runs out while etcd is frozen.  Once etcd answers again pd-server must end
the old term, campaign again and serve timestamps above every earlier one within seconds, and
SIGTERM must stop it within a bound, even while etcd is still frozen.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest

from common.errors import TSOError, UnavailableError
from common.etcd import EtcdClient
from common.pb import pd_pb2, pd_pb2_grpc
from common.pd_client import TSOClient, read_leader
from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import wait_for

pytestmark = pytest.mark.functional

RECOVERY_BOUND = 10.0
"""Seconds after etcd answers again within which pd-server must hand out a timestamp."""
STOP_BOUND = 10.0
"""Seconds within which SIGTERM must end pd-server with status 0, whatever etcd does."""


@contextlib.contextmanager
def frozen(etcd_server: EtcdProcess) -> Iterator[None]:
    """etcd stopped (SIGSTOP) inside the block, running again (SIGCONT) after it, whatever happens."""
    pid = etcd_server.process.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def direct_tso(addr: str, timeout: float = 1.0) -> int | None:
    """One timestamp straight from pd-server's gRPC port, or None when it does not serve one."""
    with grpc.insecure_channel(addr) as channel:
        try:
            resp = pd_pb2_grpc.PDStub(channel).Tso(pd_pb2.TsoRequest(count=1), timeout=timeout)
        except grpc.RpcError:
            return None
    return int((resp.first.physical << 18) | resp.first.logical)


def sigterm_and_wait(pd_server: PDProcess) -> tuple[int | None, float]:
    """SIGTERM pd-server; its exit status (None if it is still running after STOP_BOUND) and the time taken."""
    proc = pd_server.process.proc
    assert proc is not None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    with contextlib.suppress(Exception):
        proc.wait(STOP_BOUND)
    return proc.poll(), time.monotonic() - t0


class TsoUser:
    """A TSOClient user asking for a timestamp in a loop, as a writer does; keeps what it got, in order."""

    def __init__(self, client: TSOClient) -> None:
        self._client = client
        self.got: list[tuple[float, int]] = []  # (monotonic time obtained, ts)
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tso-user", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ts = self._client.get_ts(timeout=2.0)
            except (UnavailableError, TSOError):
                self.failures += 1
                continue
            self.got.append((time.monotonic(), ts))
            self._stop.wait(0.01)

    def got_since(self, t: float) -> bool:
        return any(at >= t for at, _ in self.got)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        assert not self._thread.is_alive(), "the TSO user is stuck in get_ts()"


@pytest.mark.parametrize("freeze_s", [5, 10, 30])
def test_pd_server_serves_again_after_etcd_freezes_longer_than_the_lease(
    etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, freeze_s: int
) -> None:
    pid = pd_server.process.pid
    client = TSOClient(etcd, timeout=5.0)
    user: TsoUser | None = None
    try:
        before = [client.get_ts() for _ in range(20)]
        old_leader = read_leader(etcd)
        assert old_leader is not None
        user = TsoUser(client)
        wait_for(lambda: len(user.got) >= 5, 10, "the TSO user to get timestamps")
        with frozen(etcd_server):
            time.sleep(freeze_s)  # the fault itself: etcd does not answer for freeze_s seconds
        resumed = time.monotonic()
        probe: list[int] = []

        def served() -> bool:
            ts = direct_tso(pd_server.addr)
            if ts is not None:
                probe.append(ts)
            return ts is not None

        wait_for(served, RECOVERY_BOUND, f"a timestamp from pd-server within {RECOVERY_BOUND}s of etcd answering")
        recovery = time.monotonic() - resumed
        print(f"etcd frozen {freeze_s}s: pd-server served again {recovery:.2f}s after SIGCONT")
        leader = read_leader(etcd)
        assert leader is not None
        assert leader.addr == pd_server.addr
        assert leader.token != old_leader.token  # a new term, not the old one carried over
        wait_for(lambda: user.got_since(resumed), RECOVERY_BOUND, "the TSOClient user to get a timestamp again")
        user.stop()
        after = [client.get_ts() for _ in range(20)]

        got = [ts for _, ts in user.got]
        assert all(a < b for a, b in itertools.pairwise(got)), "the TSO user saw a timestamp go backwards"
        assert min(got) > max(before)
        assert probe[0] > max(before)
        assert min(after) > max([*got, probe[0]])
        assert after == sorted(set(after))
        assert pd_server.process.alive
        assert pd_server.process.pid == pid  # the same process recovered: nothing restarted it
    finally:
        if user is not None:
            user.stop()
        client.close()
    status, took = sigterm_and_wait(pd_server)
    assert status == 0, f"pd-server did not stop within {STOP_BOUND}s of SIGTERM (status {status})"
    print(f"SIGTERM after the freeze: pd-server exited in {took:.2f}s")


@pytest.mark.parametrize("when", ["at_once", "after_the_term_ended"])
def test_sigterm_stops_pd_server_while_etcd_is_frozen(
    etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, when: str
) -> None:
    # serving before the freeze (a one-shot probe with a 1 s deadline failed under load: the fixture's
    # readiness and the first call on a fresh channel are not the same moment)
    wait_for(lambda: direct_tso(pd_server.addr) is not None, 15, "pd-server to serve before the freeze")
    with frozen(etcd_server):
        if when == "after_the_term_ended":
            # the lease cannot be kept alive: pd-server stops serving (refuses or does not answer)
            wait_for(lambda: direct_tso(pd_server.addr) is None, 15, "pd-server to stop serving")
        status, took = sigterm_and_wait(pd_server)
        print(f"SIGTERM with etcd frozen ({when}): status {status} after {took:.2f}s")
        assert status == 0, f"pd-server did not stop within {STOP_BOUND}s of SIGTERM while etcd was frozen"
