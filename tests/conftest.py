"""Fixtures that run real servers on loopback: etcd, pd-server, MySQL.

Every process writes a log under the test's tmp dir; when a test fails the
tail of each log is printed with the test's report.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from common.etcd import EtcdClient
from common.pd_client import TSOClient
from tests.harness.mysql import MySQLDSN, find_mysql, unique_db_name
from tools.localcluster import EtcdProcess, PDProcess
from tools.procs import ManagedProcess

_CI = os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def _dump_logs_if_failed(request: pytest.FixtureRequest, processes: list[ManagedProcess]) -> None:
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        for proc in processes:
            print(f"\n===== {proc.name} log ({proc.log_path}) =====\n{proc.log_tail(60)}")


@pytest.fixture
def etcd_server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[EtcdProcess]:
    server = EtcdProcess(tmp_path / "etcd")
    server.start()
    yield server
    _dump_logs_if_failed(request, [server.process])
    server.stop()


@pytest.fixture
def etcd(etcd_server: EtcdProcess) -> Iterator[EtcdClient]:
    client = EtcdClient(etcd_server.url, retry_for=15.0)
    yield client
    client.close()


@pytest.fixture
def pd_server(etcd_server: EtcdProcess, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[PDProcess]:
    server = PDProcess(tmp_path / "pd", etcd_server.url)
    server.start()
    yield server
    _dump_logs_if_failed(request, [server.process])
    server.stop()


@pytest.fixture
def tso_client(etcd: EtcdClient, pd_server: PDProcess) -> Iterator[TSOClient]:
    client = TSOClient(etcd)
    yield client
    client.close()


@pytest.fixture(scope="session")
def mysql_server() -> Iterator[MySQLDSN]:
    dsn, how, private = find_mysql()
    if dsn is None:
        if _CI:
            pytest.fail(f"CI=true but no MySQL is available: {how}")
        pytest.skip(f"no MySQL available: {how}")
    yield dsn
    if private is not None:
        private.stop()


@pytest.fixture
def mysql_db(mysql_server: MySQLDSN) -> Iterator[MySQLDSN]:
    """A uniquely named, empty database, dropped after the test."""
    name = unique_db_name()
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}`")
    finally:
        conn.close()
    yield mysql_server.with_database(name)
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
    finally:
        conn.close()


@pytest.fixture
def keep_root_logging() -> Iterator[None]:
    """For tests that call a command's `main`, which sets up logging on the root logger: give the
    next test the handlers and level it had."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
            h.close()
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)
