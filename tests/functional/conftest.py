"""Fixtures of the functional tests that need a whole cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from common.dsn import MySQLDSN
from tests.functional.drainerutil import Cluster


@pytest.fixture
def cluster(tmp_path: Path, mysql_server: MySQLDSN, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """etcd, pd-server and pumps (2, or `indirect` param) with MariaDB downstream; logs printed on failure."""
    c = Cluster(tmp_path, mysql_server, pumps=getattr(request, "param", 2))
    yield c
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(c.logs())
    c.close()
