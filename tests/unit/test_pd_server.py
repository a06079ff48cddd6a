"""PDServer's terms against an in-memory etcd: leadership lost while saving the window, a lease that
expired, and close() while etcd does not answer at all."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from typing import cast

import pytest

from common import tso
from common.etcd import EtcdClient, KeyValue
from common.pd_client import LEADER_KEY, TIMESTAMP_KEY
from pd.allocator import TsoAllocator
from pd.server import _CLOSE_THREADS_BOUND, _REVOKE_BOUND, PDServer
from tools.procs import wait_for


class FakeEtcd:
    """The calls PDServer makes, on a dict; `freeze()` makes every call block until `thaw()`."""

    tls = None

    def __init__(self) -> None:
        self._mu = threading.Lock()
        self._running = threading.Event()
        self._running.set()
        self._ids = itertools.count(1)
        self.kv: dict[str, tuple[str, int]] = {}  # key -> (value, lease)
        self.leases: set[int] = set()
        self.blocked: list[str] = []  # calls waiting for thaw()

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def _gate(self, what: str) -> None:
        if self._running.is_set():
            return
        with self._mu:
            self.blocked.append(what)
        self._running.wait()

    def get(self, key: str, *, retry_for: float | None = None) -> KeyValue | None:
        self._gate("get")
        with self._mu:
            found = self.kv.get(key)
        return None if found is None else KeyValue(key, found[0].encode(), 1, 1, found[1])

    def create(self, key: str, value: str, *, lease: int | None = None) -> bool:
        self._gate("create")
        with self._mu:
            if key in self.kv:
                return False
            self.kv[key] = (value, lease or 0)
            return True

    def put_if_value(self, key: str, value: str, *, guard_key: str, guard_value: str) -> bool:
        self._gate("put_if_value")
        with self._mu:
            if self.kv.get(guard_key, ("", 0))[0] != guard_value:
                return False
            self.kv[key] = (value, 0)
            return True

    def grant_lease(self, ttl: int) -> int:
        self._gate("grant_lease")
        with self._mu:
            lease = next(self._ids)
            self.leases.add(lease)
            return lease

    def refresh_lease(self, lease_id: int) -> int:
        self._gate("refresh_lease")
        with self._mu:
            return 3 if lease_id in self.leases else 0

    def revoke_lease(self, lease_id: int) -> None:
        self._gate("revoke_lease")
        self.expire(lease_id)

    def expire(self, lease_id: int) -> None:
        with self._mu:
            self.leases.discard(lease_id)
            for key in [k for k, (_, lease) in self.kv.items() if lease == lease_id]:
                del self.kv[key]

    def leader_lease(self) -> int:
        with self._mu:
            return self.kv[LEADER_KEY][1]

    def saved_upper(self) -> int:
        with self._mu:
            return int(self.kv[TIMESTAMP_KEY][0])


@pytest.fixture
def etcd() -> Iterator[FakeEtcd]:
    fake = FakeEtcd()
    yield fake
    fake.thaw()  # let daemon threads still blocked in a call finish


@pytest.fixture
def server(etcd: FakeEtcd) -> Iterator[PDServer]:
    srv = PDServer(cast(EtcdClient, etcd), "127.0.0.1:0", lease_ttl=3, campaign_timeout=5)
    srv.start()
    yield srv
    srv.close(grace=0.1)


def _serving(server: PDServer) -> TsoAllocator:
    alloc = server.serving_allocator()
    assert alloc is not None
    return alloc


def _new_term(server: PDServer, old: TsoAllocator) -> TsoAllocator:
    def changed() -> bool:
        alloc = server.serving_allocator()
        return alloc is not None and alloc is not old

    wait_for(changed, 10, "a new pd term serving")
    return _serving(server)


def test_leadership_lost_while_saving_the_window_ends_the_term_and_a_new_one_serves(
    etcd: FakeEtcd, server: PDServer
) -> None:
    old = _serving(server)
    before = old.allocate()
    with etcd._mu:  # /pd/leader is gone, the lease still refreshes: the tick's guarded save is what fails
        del etcd.kv[LEADER_KEY]
    new = _new_term(server, old)  # old code: the tick thread deadlocked in invalidate(), no new term ever
    assert not old.valid
    after = new.allocate()
    assert after > before
    assert tso.physical(after) > old.saved_upper - 1  # the new window starts above the old one


def test_a_lease_that_expired_ends_the_term_and_the_new_allocator_starts_above_the_saved_window(
    etcd: FakeEtcd, server: PDServer
) -> None:
    old = _serving(server)
    handed = [old.allocate() for _ in range(100)]
    etcd.expire(etcd.leader_lease())  # as etcd does when keep-alives stopped arriving for a TTL
    new = _new_term(server, old)
    assert not old.valid
    first = new.allocate()
    assert first > max(handed)
    assert tso.physical(first) > old.saved_upper - 1


def test_close_is_bounded_while_etcd_does_not_answer(etcd: FakeEtcd, server: PDServer) -> None:
    alloc = _serving(server)
    etcd.freeze()
    wait_for(lambda: "refresh_lease" in etcd.blocked, 5, "the lease keep-alive to block on etcd")
    t0 = time.monotonic()
    server.close(grace=0.5)
    took = time.monotonic() - t0
    bound = 0.5 + 1 + _CLOSE_THREADS_BOUND + _REVOKE_BOUND + 1.0  # close()'s own bound, plus slack
    assert took < bound, f"close() took {took:.1f}s with etcd frozen"
    assert not alloc.valid
    assert server.serving_allocator() is None
