"""A real pump process: each transaction is served at most once, and a cut value-log tail leaves no
dangling index entries behind (across SIGTERM, kill -9 and index rebuilds)."""

from __future__ import annotations

import os
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.errors import CorruptRecordError
from common.etcd import EtcdClient
from common.pb import binlog_pb2
from common.pd_client import TSOClient, read_cluster_id
from common.vlog_record import HEADER_SIZE, parse_header
from pump.storage.entry import is_fake
from pump.storage.index import Index
from pump.storage.vlog import file_name
from tests.functional.pumputil import PumpClient
from tests.functional.test_pump_e2e import start_pump
from tests.harness.metricfacts import Exposition
from tools.localcluster import EtcdProcess, PDProcess, PumpProcess

pytestmark = pytest.mark.functional
IGNORED = "binlog_pump_storage_ignored_decision_count"
STORAGE_ERRORS = "binlog_pump_storage_error_count"


@pytest.fixture
def cluster_id(etcd: EtcdClient, pd_server: PDProcess) -> int:
    cid = read_cluster_id(etcd)
    assert cid is not None
    return cid


@pytest.fixture
def pump(tmp_path: Path, etcd_server: EtcdProcess, pd_server: PDProcess, request: pytest.FixtureRequest) -> PumpProcess:
    return start_pump(tmp_path, etcd_server, request)


@pytest.fixture
def client(pump: PumpProcess, cluster_id: int) -> Iterator[PumpClient]:
    c = PumpClient(pump.addr, cluster_id)
    yield c
    c.close()


def scrape(pump: PumpProcess, name: str) -> float:
    """Sum of every sample `name` on the pump's /metrics (0 when absent)."""
    with urllib.request.urlopen(f"http://{pump.status_addr}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return Exposition.parse(text).total(name)


def log_since(pump: PumpProcess, mark: int) -> list[str]:
    with open(pump.process.log_path, "rb") as f:
        f.seek(mark)
        return f.read().decode(errors="replace").splitlines()


def log_mark(pump: PumpProcess) -> int:
    return pump.process.log_path.stat().st_size


def txn(client: PumpClient, tso: TSOClient) -> tuple[int, int]:
    start = tso.get_ts()
    client.prewrite(start)
    commit_ts = tso.get_ts()
    client.commit(start, commit_ts)
    return start, commit_ts


def commits_of(client: PumpClient, top: int) -> list[tuple[int, int]]:
    pulled = client.pull_until(0, top)
    ts = [b.commit_ts for b in pulled]
    assert ts == sorted(set(ts)), "duplicates or disorder"
    return [(b.start_ts, b.commit_ts) for b in pulled if b.tp == binlog_pb2.Commit]


# ------------------------------------------------------------------------------ served once


def test_a_decided_transaction_is_served_once_across_restarts_and_rebuilds(
    pump: PumpProcess, cluster_id: int, tso_client: TSOClient
) -> None:
    client = PumpClient(pump.addr, cluster_id)
    try:
        mark = log_mark(pump)
        start = tso_client.get_ts()
        client.prewrite(start)
        c1 = tso_client.get_ts()
        client.commit(start, c1)
        client.commit(start, tso_client.get_ts())  # a second commit: acknowledged, ignored
        client.commit(start, c1)  # the client's retry of the same commit after a timeout
        client.rollback(start)  # a rollback after the commit
        _, top = txn(client, tso_client)
        got = commits_of(client, top)
        assert [c for c in got if c[0] == start] == [(start, c1)]
        assert scrape(pump, IGNORED) == 3
        warned = [line for line in log_since(pump, mark) if "already decided" in line and f"start_ts={start}" in line]
        assert len(warned) == 1, warned
        assert "WARNING" in warned[0]

        for how in ("SIGTERM", "kill -9", "kill -9 and the index deleted"):
            if how == "SIGTERM":
                pump.stop()
            else:
                pump.kill9()
            if how.endswith("deleted"):
                shutil.rmtree(pump.data_dir / "kv")
            pump.start()
            client.close()
            client = PumpClient(pump.addr, cluster_id)
            client.commit(start, tso_client.get_ts())  # yet another commit after the restart
            _, top = txn(client, tso_client)
            got = commits_of(client, top)
            assert [c for c in got if c[0] == start] == [(start, c1)], how
            assert scrape(pump, IGNORED) >= 1, how
    finally:
        client.close()


# -------------------------------------------------------------------------- cut vlog tail


def records_from(path: Path, offset: int) -> Iterator[binlog_pb2.Binlog]:
    """The binlogs of the records in `path` from `offset` on (stops at a footer or the end)."""
    data = path.read_bytes()
    pos = offset
    while pos + HEADER_SIZE <= len(data):
        try:
            length, _ = parse_header(data[pos : pos + HEADER_SIZE])
        except CorruptRecordError:
            return  # the footer
        yield binlog_pb2.Binlog.FromString(data[pos + HEADER_SIZE : pos + HEADER_SIZE + length])
        pos += HEADER_SIZE + length


def entries_of(binlogs: Iterator[binlog_pb2.Binlog]) -> int:
    """Index entries of these records: one `ts:`/`late:` each, one `done:` per decided transaction."""
    n = 0
    for b in binlogs:
        n += 1
        if b.tp == binlog_pb2.Commit or (b.tp == binlog_pb2.Rollback and not is_fake(b.tp, b.start_ts, b.commit_ts)):
            n += 1
    return n


@pytest.mark.parametrize("cut", ["mid-record", "whole records"])
def test_index_entries_past_a_cut_vlog_tail_are_dropped_once(
    pump: PumpProcess, client: PumpClient, tso_client: TSOClient, cut: str
) -> None:
    written = [txn(client, tso_client) for _ in range(12)]
    pump.stop()
    idx = Index(pump.data_dir / "kv")
    try:
        if cut == "mid-record":  # inside the last commit's record
            ptr = idx.get(written[-1][1])
            kept = written[:-1]
        else:  # at the start of the third last prewrite: whole records (and transactions) cut off
            ptr = idx.get(written[-3][0])
            kept = written[:-3]
    finally:
        idx.close()
    assert ptr is not None
    path = pump.data_dir / "value" / file_name(ptr.fid)
    assert sorted(pump.data_dir.joinpath("value").iterdir())[-1] == path
    dropped = entries_of(records_from(path, ptr.offset))
    os.truncate(path, ptr.offset + (HEADER_SIZE + 3 if cut == "mid-record" else 0))

    mark = log_mark(pump)
    pump.start()
    notes = [line for line in log_since(pump, mark) if "past the end of the value log" in line]
    assert len(notes) == 1, notes
    assert "WARNING" in notes[0]
    assert f"dropped={dropped}" in notes[0]
    errors_before = scrape(pump, STORAGE_ERRORS)
    for _ in range(3):
        assert commits_of(client, kept[-1][1]) == kept
    assert scrape(pump, STORAGE_ERRORS) == errors_before == 0
    after = log_since(pump, mark)
    assert not [line for line in after if "unreadable binlog skipped" in line or "bad record magic" in line]
    assert not [line for line in after if " ERROR " in line]
    more = [txn(client, tso_client) for _ in range(3)]  # writes go on after the cut
    assert commits_of(client, more[-1][1]) == kept + more

    pump.stop()  # a clean restart drops nothing more
    mark = log_mark(pump)
    pump.start()
    assert commits_of(client, more[-1][1]) == kept + more
    assert not [line for line in log_since(pump, mark) if "past the end of the value log" in line]
