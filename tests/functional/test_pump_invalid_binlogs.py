"""A real pump process refuses invalid binlogs at WriteBinlog (INVALID_ARGUMENT, nothing stored), so none
of them holds replication back or is served; an orphan commit is accepted and never served."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest

from common.etcd import EtcdClient
from common.pb import binlog_pb2, gogo
from common.pd_client import TSOClient, read_cluster_id
from tests.functional.pumputil import PumpClient, is_fake
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess

pytestmark = pytest.mark.functional
FAST = ["--gen-binlog-interval", "1", "--heartbeat-interval", "1"]
PULL_TIMEOUT = 30.0
"""Far below max-txn-timeout (600 s), for which an unknown type held the watermark."""


def refusal(client: PumpClient, payload: bytes) -> tuple[grpc.StatusCode, str]:
    try:
        client.write(payload)
    except grpc.RpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


def test_invalid_binlogs_are_refused_and_replication_goes_on(
    tmp_path: Path, etcd_server: EtcdProcess, etcd: EtcdClient, pd_server: PDProcess, tso_client: TSOClient,
    request: pytest.FixtureRequest,
) -> None:  # fmt: skip
    pump = PumpProcess(tmp_path, etcd_server.url, name="pump1", extra_args=FAST)
    pump.start()
    request.addfinalizer(pump.stop)
    cluster_id = read_cluster_id(etcd)
    assert cluster_id is not None
    client = PumpClient(pump.addr, cluster_id)
    client.wait_for_ready = False
    try:
        s1 = tso_client.get_ts()
        client.prewrite(s1)
        c1 = tso_client.get_ts()
        client.commit(s1, c1)

        unknown = refusal(client, gogo.encode_binlog(99, tso_client.get_ts(), prewrite_key=b"k", prewrite_value=b"v"))
        s3 = tso_client.get_ts()
        client.prewrite(s3)
        equal = refusal(client, gogo.encode_binlog(binlog_pb2.Commit, s3, s3))
        below = refusal(client, gogo.encode_binlog(binlog_pb2.Commit, s3, s3 - 1))
        zero_start = refusal(client, gogo.encode_binlog(binlog_pb2.Commit, 0, tso_client.get_ts()))
        orphan_start = tso_client.get_ts()
        orphan = refusal(client, gogo.encode_binlog(binlog_pb2.Commit, orphan_start, tso_client.get_ts()))
        c3 = tso_client.get_ts()
        client.commit(s3, c3)

        began = time.monotonic()
        pulled = client.pull_until(0, c3, timeout=PULL_TIMEOUT)
        took = time.monotonic() - began
        commits = [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit]
        assert commits == [(s1, c1), (s3, c3)]
        assert all(is_fake(b) for b in pulled if b.tp != binlog_pb2.Commit)
        assert took < PULL_TIMEOUT
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        assert unknown == (invalid, "invalid binlog: unknown binlog type 99")
        assert equal == (invalid, f"invalid binlog: commit_ts {s3} is not above start_ts {s3}")
        assert below == (invalid, f"invalid binlog: commit_ts {s3 - 1} is not above start_ts {s3}")
        assert zero_start == (invalid, "invalid binlog: commit has start_ts 0, must be > 0")
        assert orphan == (grpc.StatusCode.OK, "")  # accepted, never served (see pump/validate.py)
        assert "refused an invalid binlog" in pump.process.log_tail(200)
    finally:
        client.close()
