"""The etcd client over a connection whose peer vanished without a FIN or RST.

The compose test found it: a pump whose container was disconnected from its network and connected
again (a new address) kept its etcd connection "established", and every heartbeat timed out on it for
as long as it ran.  A TCP proxy in front of etcd turns the open connection into such a half-open one
(it drops everything both ways, sockets kept); the client must notice and dial again.
"""

from __future__ import annotations

import time

import pytest

from common.errors import EtcdUnavailableError
from common.etcd import EtcdClient
from tests.harness.tcpproxy import TcpProxy
from tools.localcluster import EtcdProcess
from tools.procs import free_port, wait_for

pytestmark = pytest.mark.functional
RECOVER_WITHIN = 30.0
"""Three calls of 2 s time out in a row, then the connections are replaced: well within this."""


def test_a_half_open_etcd_connection_is_dropped_and_dialled_again(etcd_server: EtcdProcess) -> None:
    host, port = etcd_server.url.removeprefix("http://").rsplit(":", 1)
    proxy = TcpProxy("127.0.0.1", free_port(), host, int(port))
    proxy.start()
    client = EtcdClient(f"http://{proxy.address}", timeout=2.0, retry_for=0.0)
    try:
        client.put("/half-open/before", "1")
        assert proxy.blackhole() >= 1  # the client's connection now leads nowhere
        cut_at = time.monotonic()
        failures: list[str] = []

        def put_works() -> bool:
            try:
                client.put("/half-open/after", "2")
            except EtcdUnavailableError as exc:
                failures.append(str(exc))
                return False
            return True

        wait_for(put_works, RECOVER_WITHIN, "a put over a new connection")
        took = time.monotonic() - cut_at
        kv = client.get("/half-open/after")
        assert kv is not None
        assert kv.value == b"2"
        assert proxy.accepted >= 2  # it dialled again
        assert client.renewals == 1
        print(f"recovered {took:.1f}s after the connection went half-open ({len(failures)} failed puts)")
    finally:
        client.close()
        proxy.close()
