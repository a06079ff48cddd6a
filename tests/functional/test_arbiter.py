"""The arbiter as a real process: Tansu (behind a TCP proxy the tests can cut) -> arbiter -> MariaDB.

Messages are what the drainer's kafka sink writes: `drainer.relay_codec.encode_txn` records with a
`commit_ts` header (a few without it, as the original drainer wrote them), produced to partition 0.
Each test has its own topic and database; the checkpoint table goes into that database too
(`down.checkpoint-schema`), so dropping it leaves nothing behind.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from common import tso
from common.events import DDL, DML, DMLType, TableShape, Txn
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, IndexInfo, Job, JobType, TableInfo
from common.schema.types import check_value, parse_type
from drainer.relay_codec import encode_txn
from tests.functional.arbiterutil import WAIT, ArbiterProcess
from tests.harness.kafka import TansuBroker
from tests.harness.metricfacts import GO_RUNTIME, Exposition, original_metrics
from tests.harness.mysql import MySQLDSN, unique_db_name
from tests.harness.tcpproxy import TcpProxy
from tools.procs import free_port

pytestmark = pytest.mark.functional


COLUMNS = (
    ("id", "bigint"),
    ("u", "int unsigned"),
    ("name", "varchar(40)"),
    ("price", "decimal(10,2)"),
    ("at", "datetime(3)"),
    ("ts", "timestamp(6)"),
    ("day", "date"),
    ("ratio", "double"),
    ("data", "blob"),
    ("kind", "enum('a','b','c')"),
    ("doc", "json"),
)
CREATE = (
    "CREATE TABLE t (id BIGINT PRIMARY KEY, u INT UNSIGNED, name VARCHAR(40), price DECIMAL(10,2), "
    "at DATETIME(3), ts TIMESTAMP(6) NULL, day DATE, ratio DOUBLE, data BLOB, kind ENUM('a','b','c'), doc JSON)"
)


def shape(db: str) -> TableShape:
    cols = []
    for i, (name, text) in enumerate(COLUMNS):
        ct, canonical = parse_type(text)
        cols.append(ColumnInfo(id=i + 1, name=name, offset=i, type_text=canonical, ctype=ct))
    info = TableInfo(id=100, name="t", columns=tuple(cols), indices=(IndexInfo(1, "PRIMARY", ("id",), True, True),))
    return TableShape.of(db, info)


def row(i: int, s: TableShape, *, name: str = "") -> tuple[Any, ...]:
    values = {
        "id": i,
        "u": 4_000_000_000 + i,
        "name": name or f"row {i} ✓",
        "price": Decimal(f"{i}.25"),
        "at": dt.datetime(2024, 5, 1, 10, 0, 0, 123000),
        "ts": dt.datetime(2024, 5, 1, 10, 0, 0, 654321, tzinfo=dt.UTC),
        "day": dt.date(2024, 2, 29),
        "ratio": i / 4,
        "data": bytes([i % 256, 0, 255]),
        "kind": "abc"[i % 3],
        "doc": {"i": i, "tags": ["x", None]},
    }
    return tuple(check_value(c, values[c.name]) for c in s.columns)


@dataclass
class Topic:
    """Transactions produced to one topic, and the rows they leave downstream."""

    name: str
    db: str
    shape: TableShape
    next_ts: int = field(default_factory=lambda: tso.compose(tso.now_ms() - 60_000, 0))
    rows: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    last_ts: int = 0
    produced: int = 0

    def ts(self) -> int:
        self.next_ts += 1 << 18
        return self.next_ts

    def ddl(self) -> Txn:
        ts = self.ts()
        job = Job(1, JobType.CREATE_TABLE, 1, self.db, 2, "t", 1, CREATE)
        return Txn(ts, ddl=DDL(self.db, "t", CREATE, job, InfoSchema()))

    def inserts(self, *ids: int) -> Txn:
        ts = self.ts()
        dmls = []
        for i in ids:
            self.rows[i] = row(i, self.shape)
            dmls.append(DML(DMLType.INSERT, self.shape, values=self.rows[i], commit_ts=ts))
        return Txn(ts, dmls=dmls)

    def update(self, i: int, name: str) -> Txn:
        ts = self.ts()
        old, new = self.rows[i], row(i, self.shape, name=name)
        self.rows[i] = new
        return Txn(ts, dmls=[DML(DMLType.UPDATE, self.shape, values=new, old_values=old, commit_ts=ts)])

    def delete(self, i: int) -> Txn:
        ts = self.ts()
        old = self.rows.pop(i)
        return Txn(ts, dmls=[DML(DMLType.DELETE, self.shape, old_values=old, commit_ts=ts)])


class Kafka:
    def __init__(self, broker: TansuBroker, proxy: TcpProxy) -> None:
        self.broker = broker
        self.proxy = proxy
        self.bootstrap = proxy.address
        from confluent_kafka import Producer

        self.producer = Producer(
            {"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 5, "message.max.bytes": 8 << 20}
        )

    def produce(self, topic: Topic, *txns: Txn, header: bool = True) -> None:
        for t in txns:
            payload = encode_txn(t)
            assert payload is not None
            headers: list[tuple[str, str | bytes | None]] | None = (
                [("commit_ts", str(t.commit_ts).encode())] if header else None
            )
            self.producer.produce(topic.name, payload, partition=0, headers=headers)
            topic.last_ts = max(topic.last_ts, t.commit_ts)
            topic.produced += 1
        assert self.producer.flush(WAIT) == 0

    def produce_raw(self, topic: str, value: bytes) -> None:
        self.producer.produce(topic, value, partition=0)
        assert self.producer.flush(WAIT) == 0

    def topic_names(self) -> set[str]:
        return set(self.broker.admin().list_topics(timeout=WAIT).topics)


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kafka]:
    """One Tansu broker for the module, reached through a proxy it advertises (so cutting it cuts every client)."""
    broker_port, proxy_port = free_port(), free_port()
    while proxy_port == broker_port:
        proxy_port = free_port()
    proxy = TcpProxy("127.0.0.1", proxy_port, "127.0.0.1", broker_port)
    proxy.start()
    broker = TansuBroker(tmp_path_factory.mktemp("tansu"), port=broker_port)
    argv = broker.process.argv
    argv[argv.index("--advertised-listener-url") + 1] = f"tcp://{proxy.address}"
    try:
        broker.start()
        yield Kafka(broker, proxy)
    finally:
        broker.kill9()  # memory storage, nothing to keep; a SIGTERM waits ~5 s for connected clients
        proxy.close()


@pytest.fixture
def topic(kafka: Kafka, mysql_server: MySQLDSN) -> Iterator[Topic]:
    db = unique_db_name("arb")
    conn = mysql_server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{db}`")
    finally:
        conn.close()
    t = Topic(name=f"{db}_obinlog", db=db, shape=shape(db))
    try:
        yield t
    finally:
        conn = mysql_server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        finally:
            conn.close()


def arbiter_for(tmp_path: Path, kafka: Kafka, dsn: MySQLDSN, topic: Topic, *extra: str) -> ArbiterProcess:
    """The arbiter reading `topic` through the cuttable proxy, its checkpoint in the topic's database."""
    return ArbiterProcess(tmp_path, kafka.bootstrap, dsn, topic.name, topic.db, *extra)


@pytest.fixture
def arbiters(request: pytest.FixtureRequest) -> Iterator[list[ArbiterProcess]]:
    """Every arbiter a test starts: killed at the end, its log printed when the test failed."""
    started: list[ArbiterProcess] = []
    yield started
    rep = getattr(request.node, "rep_call", None)
    for a in started:
        if rep is not None and rep.failed:
            print(f"\n===== arbiter log ({a.process.log_path}) =====\n{a.process.log_tail(80)}")
        a.process.kill9()


def downstream(dsn: MySQLDSN, topic: Topic) -> dict[int, tuple[Any, ...]]:
    conn = dsn.connect(topic.db)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cur.execute("SELECT * FROM t ORDER BY id")
            rows = cur.fetchall()
    finally:
        conn.close()
    return {int(r[0]): tuple(r) for r in rows}


def expected(topic: Topic) -> dict[int, tuple[Any, ...]]:
    """The rows as pymysql reads them back: TIMESTAMP naive UTC, JSON as text."""
    out = {}
    for i, values in topic.rows.items():
        v = list(values)
        v[5] = v[5].replace(tzinfo=None)
        v[10] = json.dumps(v[10])
        out[i] = tuple(v)
    return out


def same_rows(got: dict[int, tuple[Any, ...]], want: dict[int, tuple[Any, ...]]) -> bool:
    if got.keys() != want.keys():
        return False
    for i, g in got.items():
        w = want[i]
        if g[:10] != w[:10] or json.loads(g[10]) != json.loads(w[10]):
            return False
    return True


# ---------------------------------------------------------------------------------------------------- tests


def test_applies_the_topic_and_resumes_after_a_clean_stop(
    tmp_path: Path, kafka: Kafka, mysql_server: MySQLDSN, topic: Topic, arbiters: list[ArbiterProcess]
) -> None:
    kafka.broker.create_topic(topic.name)
    first = [topic.ddl(), topic.inserts(1, 2, 3), topic.inserts(4), topic.update(2, "two"), topic.delete(3)]
    kafka.produce(topic, *first)
    kafka.produce(topic, first[2])  # the same transaction again: applied once
    again = topic.inserts(5)
    kafka.produce(topic, again, header=False)  # as the original drainer wrote it
    a = arbiter_for(tmp_path, kafka, mysql_server, topic)
    arbiters.append(a.start())
    a.wait_checkpoint(topic.last_ts)
    assert same_rows(downstream(mysql_server, topic), expected(topic))
    st = a.status()
    assert st["topic"] == topic.name
    assert st["applied_ts"] == topic.last_ts
    assert st["checkpoint_status"] == 1
    assert st["duplicates"] == 1
    assert st["safe_mode"] is False
    assert st["offset"] == topic.produced
    text = a.metrics()
    assert "binlog_arbiter_checkpoint_tso " in text
    assert 'binlog_arbiter_event{type="Insert"} 5.0' in text
    assert 'binlog_arbiter_queue_size{name="kafka_reader"}' in text
    assert "binlog_arbiter_duplicate_messages_total 1.0" in text
    served = Exposition.parse(text)
    for m in original_metrics("arbiter"):  # the original's series: exact name (no _total added) and type
        assert served.types.get(m.name) == (None if m.status == GO_RUNTIME else m.type), m.name
    assert "skip repeated binlog" in a.process.log_since_start()

    assert a.stop() == 0
    assert a.checkpoint() == (topic.last_ts, 0)
    log_text = a.process.log_since_start()
    assert "safe mode on" not in log_text

    # 120 more transactions: the restart finds the first one after the checkpoint by binary search
    before = topic.produced
    kafka.produce(topic, *[topic.inserts(100 + i) for i in range(120)])
    arbiters.append(b := arbiter_for(tmp_path, kafka, mysql_server, topic).start())
    b.wait_checkpoint(topic.last_ts)
    b.wait_log(f"starting at offset {before} (first commit_ts above")
    assert same_rows(downstream(mysql_server, topic), expected(topic))
    assert b.status()["duplicates"] == 0
    b.process.proc.send_signal(signal.SIGINT)  # type: ignore[union-attr]
    assert b.exit_status() == 0
    assert b.checkpoint() == (topic.last_ts, 0)


def test_kill9_mid_stream_then_restart_applies_every_row_once_in_safe_mode(
    tmp_path: Path, kafka: Kafka, mysql_server: MySQLDSN, topic: Topic, arbiters: list[ArbiterProcess]
) -> None:
    kafka.broker.create_topic(topic.name)
    kafka.produce(topic, topic.ddl(), *[topic.inserts(*range(10 * i, 10 * i + 10)) for i in range(30)])
    a = arbiter_for(tmp_path, kafka, mysql_server, topic, "--down.batch-size", "8")
    arbiters.append(a.start())
    a.wait_checkpoint(applied := topic.last_ts)

    # the table locked: the next transactions are read and handed to the loader, which cannot apply them
    lock = mysql_server.connect(topic.db)
    try:
        with lock.cursor() as cur:
            cur.execute("LOCK TABLES t WRITE")
        tail = [topic.inserts(*range(1000 + 5 * i, 1005 + 5 * i)) for i in range(60)]
        kafka.produce(topic, *tail, *[topic.update(10 * i, f"after {i}") for i in range(20)], topic.delete(11))
        a.process.wait_ready(lambda: a.status()["received_ts"] == topic.last_ts, WAIT)
        assert a.status()["loader_bytes"] > 0
        a.process.kill9()
    finally:
        lock.close()
    assert a.checkpoint() == (applied, 1)

    arbiters.append(b := arbiter_for(tmp_path, kafka, mysql_server, topic).start())
    b.wait_log("safe mode on for 300s")
    b.wait_checkpoint(topic.last_ts)
    assert same_rows(downstream(mysql_server, topic), expected(topic))
    assert b.status()["safe_mode"] is True
    assert b.stop() == 0
    assert b.checkpoint() == (topic.last_ts, 0)


def test_waits_for_a_missing_topic_reads_partition_0_and_rides_out_a_broker_cut(
    tmp_path: Path, kafka: Kafka, mysql_server: MySQLDSN, topic: Topic, arbiters: list[ArbiterProcess]
) -> None:
    a = arbiter_for(tmp_path, kafka, mysql_server, topic)
    arbiters.append(a.start())
    a.wait_log(f"topic {topic.name} does not exist on")
    assert topic.name not in kafka.topic_names()  # waiting did not create it
    kafka.broker.create_topic(topic.name, partitions=2)
    kafka.produce(topic, topic.ddl(), topic.inserts(1, 2))
    a.wait_checkpoint(topic.last_ts)
    a.wait_log(f"topic {topic.name} has 2 partitions: only partition 0 is read")

    kafka.proxy.cut()
    a.wait_log("; retrying")
    assert a.process.alive
    kafka.proxy.restore()
    kafka.produce(topic, topic.inserts(3), topic.update(1, "one"))
    a.wait_checkpoint(topic.last_ts)
    assert same_rows(downstream(mysql_server, topic), expected(topic))
    assert a.stop() == 0


def test_a_message_that_is_not_a_binlog_stops_it_before_that_message(
    tmp_path: Path, kafka: Kafka, mysql_server: MySQLDSN, topic: Topic, arbiters: list[ArbiterProcess]
) -> None:
    kafka.broker.create_topic(topic.name)
    kafka.produce(topic, topic.ddl(), topic.inserts(1))
    kafka.produce_raw(topic.name, b"\x08\x00\x10not a binlog\xff\xff")
    a = arbiter_for(tmp_path, kafka, mysql_server, topic)
    arbiters.append(a.start(ready=False))
    assert a.exit_status() == 1
    log_text = a.process.log_since_start()
    assert f"message at offset 2 of topic {topic.name}" in log_text, log_text
    # what came before it is applied and checkpointed (status 0: nothing above ts was touched)
    assert a.checkpoint() == (topic.last_ts, 0)
    assert same_rows(downstream(mysql_server, topic), expected(topic))
    a.start(ready=False)  # the restart meets it again (its start offset search already does)
    assert a.exit_status() == 1
    assert f"message at offset 2 of topic {topic.name}" in a.process.log_since_start()


@pytest.mark.parametrize("blob", [300 << 10, 2 << 20], ids=["read-then-refused", "fetch-refused-by-librdkafka"])
def test_a_message_over_the_size_limit_stops_it_naming_the_key(
    tmp_path: Path, kafka: Kafka, mysql_server: MySQLDSN, topic: Topic, arbiters: list[ArbiterProcess], blob: int
) -> None:
    kafka.broker.create_topic(topic.name)
    kafka.produce(topic, ddl := topic.ddl())
    big = topic.inserts(1)
    values = big.dmls[0].values
    assert values is not None
    big.dmls[0].values = (*values[:8], b"x" * blob, *values[9:])
    kafka.produce(topic, big)
    a = arbiter_for(tmp_path, kafka, mysql_server, topic, "--up.kafka-max-message-size", "64KiB")
    arbiters.append(a.start(ready=False))
    assert a.exit_status() == 1
    log_text = a.process.log_since_start()
    assert "the topic holds a message larger than up.kafka-max-message-size (65536 bytes) allows; raise it" in log_text
    cp = a.checkpoint()
    if blob < 1 << 20:  # within librdkafka's receive limit (the key + 1 MiB): read, and refused by its size
        assert f"message at offset 1 of topic {topic.name} partition 0 is 30" in log_text
        assert cp == (ddl.commit_ts, 0)  # the DDL before it is applied
    else:  # librdkafka refuses the fetch response holding it (and whatever came with it)
        assert cp in ((0, 0), (ddl.commit_ts, 0))


def test_unreachable_broker_fails_the_start_with_one_clear_line(
    tmp_path: Path, mysql_server: MySQLDSN, topic: Topic, kafka: Kafka, arbiters: list[ArbiterProcess]
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    a = arbiter_for(tmp_path, kafka, mysql_server, topic, "--up.kafka-addrs", dead, "--up.connect-timeout", "1s")
    arbiters.append(a)
    started = time.monotonic()
    a.start(ready=False)
    assert a.exit_status() == 1
    assert time.monotonic() - started < WAIT
    log_text = a.process.log_since_start()
    assert f"arbiter: cannot reach Kafka at up.kafka-addrs '{dead}' within 1s (up.connect-timeout)" in log_text
    assert a.checkpoint() is None  # nothing was marked running


def test_a_downstream_that_refuses_the_login_fails_the_start_with_mysqls_message(
    tmp_path: Path, mysql_server: MySQLDSN, topic: Topic, kafka: Kafka, arbiters: list[ArbiterProcess]
) -> None:
    a = arbiter_for(tmp_path, kafka, mysql_server, topic, "--down.password", "not-the-password")
    arbiters.append(a.start(ready=False))
    assert a.exit_status() == 1
    log_text = a.process.log_since_start()
    where = f"{mysql_server.user}@{mysql_server.host}:{mysql_server.port}"
    assert f"arbiter: cannot connect to [down] {where} (for checkpoint" in log_text
    assert "MySQL error 1045: Access denied" in log_text
