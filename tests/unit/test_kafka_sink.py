"""The Kafka sink's core without a broker: the ack window, the watchdog, and `KafkaSink` on a fake producer.

The fake implements our `MessageProducer` interface: sends are recorded, and the test decides which
message is acknowledged or fails; the callbacks run on the sink's delivery thread, in its next poll.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from common.errors import CodecError
from common.events import Txn
from drainer import canal_json
from drainer.relay_codec import encode_txn
from drainer.sinks.base import SinkError
from drainer.sinks.kafka import COMMIT_TS_HEADER, KafkaSink, default_topic, secondary_binlog_messages
from drainer.sinks.kafka_producer import (
    FRAMING_HEADROOM,
    LIBRDKAFKA_MAX_MESSAGE_BYTES,
    ProduceRefusedError,
    Report,
    effective_max_message_size,
    producer_config,
)
from drainer.sinks.kafka_window import AckWindow, Verdict, Watchdog
from tests.unit.test_drainer_relay import ddl_txn, txn

WAIT = 10.0


def wait_until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


# ----------------------------------------------------------------------------------------- ack window


def test_window_reports_in_order_when_acks_come_out_of_order() -> None:
    w = AckWindow(1000)
    a = w.append(10, [5, 5])
    b = w.append(11, [7])
    w.append(12, [])  # empty: complete at once, but behind 10 and 11
    w.acked(b, 7)
    assert w.pop_ready() == []
    w.acked(a, 5)
    assert w.pop_ready() == []
    assert (w.pending_messages, w.pending_bytes, w.oldest_pending()) == (1, 5, 10)
    w.acked(a, 5)
    assert w.pop_ready() == [10, 11, 12]
    assert (w.pending_messages, w.pending_bytes, w.oldest_pending(), w.last_reported) == (0, 0, None, 12)
    stats = w.stats("t")
    assert (stats.messages, stats.bytes, stats.acked_commit_ts) == (3, 17, 12)


def test_window_empty_txns_alone_are_ready() -> None:
    w = AckWindow(10)
    w.append(1, [])
    w.append(2, [])
    assert w.pop_ready() == [1, 2]


def test_window_failed_entry_blocks_everything_after_it() -> None:
    w = AckWindow(100)
    a = w.append(1, [3])
    b = w.append(2, [3])
    c = w.append(3, [3])
    w.acked(a, 3)
    w.failed(b, "boom")
    w.acked(c, 3)
    assert w.pop_ready() == [1]
    assert w.pop_ready() == []
    assert w.oldest_pending() == 2


def test_window_budget_admits_one_large_txn_alone() -> None:
    w = AckWindow(100)
    assert w.has_room(500)  # nothing pending: one larger than the budget goes alone
    e = w.append(1, [500])
    assert not w.has_room(1)
    w.acked(e, 500)
    assert w.has_room(100)
    w.append(2, [60])
    assert w.has_room(40)
    assert not w.has_room(41)


def test_window_refuses_disorder_and_extra_acks() -> None:
    w = AckWindow(100)
    e = w.append(5, [1])
    with pytest.raises(ValueError, match="commit_ts=5 added after commit_ts=5"):
        w.append(5, [])
    w.acked(e, 1)
    with pytest.raises(ValueError, match="more acknowledgements"):
        w.acked(e, 1)


# ------------------------------------------------------------------------------------------- watchdog


def test_watchdog_warns_every_interval_then_fails() -> None:
    d = Watchdog(ack_timeout=100, warn_interval=30)
    d.sent(0.0, pending_before=0)
    assert d.tick(29.9, 1) is Verdict.OK
    assert d.tick(30.0, 1) is Verdict.WARN
    assert d.tick(45.0, 1) is Verdict.OK
    assert d.tick(60.0, 1) is Verdict.WARN
    assert d.tick(99.0, 1) is Verdict.WARN
    assert d.tick(100.0, 1) is Verdict.FAIL


def test_watchdog_clock_restarts_at_acks_and_at_a_first_send() -> None:
    d = Watchdog(ack_timeout=10, warn_interval=30)
    d.sent(0.0, pending_before=0)
    d.sent(8.0, pending_before=1)  # more behind a pending one: no restart
    assert d.tick(10.0, 2) is Verdict.FAIL
    d.acked(10.0)
    assert d.tick(19.0, 1) is Verdict.OK
    assert d.tick(500.0, 0) is Verdict.OK  # nothing pending: never a failure
    d.sent(500.0, pending_before=0)
    assert d.tick(505.0, 1) is Verdict.OK


# ------------------------------------------------------------------------------------- fake producer


@dataclass
class Sent:
    value: bytes
    headers: list[tuple[str, bytes]]
    token: Any


@dataclass
class FakeProducer:
    """Our MessageProducer: records sends; `ack(i)` / `fail(i, why)` are delivered in the next poll."""

    sent: list[Sent] = field(default_factory=list)
    reports: deque[tuple[int, str | None]] = field(default_factory=deque)
    full: int = 0
    """The next `full` sends raise BufferError."""
    refuse: str = ""
    closed: bool = False
    polls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, value: bytes, headers: list[tuple[str, bytes]], token: Any) -> None:
        with self.lock:
            if self.refuse:
                raise ProduceRefusedError(self.refuse)
            if self.full:
                self.full -= 1
                raise BufferError("queue full")
            self.sent.append(Sent(value, headers, token))

    def poll(self, timeout: float) -> list[Report]:
        with self.lock:
            batch = list(self.reports)
            self.reports.clear()
            self.polls += 1
            served = [(self.sent[i].token, why) for i, why in batch]
        time.sleep(min(timeout, 0.001))
        return served

    def close(self, timeout: float) -> None:
        self.closed = True

    def ack(self, *indexes: int) -> None:
        with self.lock:
            self.reports.extend((i, None) for i in indexes)

    def fail(self, i: int, why: str) -> None:
        with self.lock:
            self.reports.append((i, why))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sized(*sizes: int) -> Callable[[Txn], list[bytes]]:
    """An encoder giving every non-empty txn messages of these sizes."""

    def encode(t: Txn) -> list[bytes]:
        return [] if t.is_empty else [bytes([i % 256]) * n for i, n in enumerate(sizes)]

    return encode


@dataclass
class Rig:
    sink: KafkaSink
    producer: FakeProducer
    reported: list[int]
    fatal: list[Callable[[str], None]]


@pytest.fixture
def make() -> Iterator[Callable[..., Rig]]:
    rigs: list[Rig] = []

    def build(
        *,
        encoder: Callable[[Txn], list[bytes]] | None = None,
        budget: int = 1 << 20,
        max_message_size: int = 1 << 20,
        ack_timeout: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> Rig:
        producer = FakeProducer()
        fatal: list[Callable[[str], None]] = []

        def factory(on_fatal: Callable[[str], None]) -> FakeProducer:
            fatal.append(on_fatal)
            return producer

        sink = KafkaSink(
            factory,
            topic="7_obinlog",
            brokers="k1:9092",
            encoder=encoder or sized(10),
            max_message_size=max_message_size,
            max_inflight_bytes=budget,
            ack_timeout=ack_timeout,
            warn_interval=30.0,
            poll_interval=0.001,
            clock=clock,
        )
        reported: list[int] = []
        sink.start(reported.append)
        rig = Rig(sink, producer, reported, fatal)
        rigs.append(rig)
        return rig

    yield build
    for r in rigs:
        r.sink.close()


def empty(ts: int) -> Txn:
    return Txn(ts)


def data(ts: int) -> Txn:
    return txn(ts, ts)


# ------------------------------------------------------------------------------------------ sink


def test_out_of_order_acks_are_reported_in_order_with_empty_txns(make: Callable[..., Rig]) -> None:
    r = make(encoder=sized(10, 20))
    r.sink.add(empty(1))
    r.sink.add(data(2))  # messages 0, 1
    r.sink.add(empty(3))
    r.sink.add(data(4))  # messages 2, 3
    r.sink.add(empty(5))
    wait_until(lambda: r.reported == [1], "the leading empty txn")
    r.producer.ack(3, 2, 1)
    wait_until(lambda: r.producer.polls > 5, "a few polls")
    assert r.reported == [1]
    assert r.sink.inflight_bytes == 10
    assert r.sink.stats().pending_messages == 1
    r.producer.ack(0)
    r.sink.flush(WAIT)
    assert r.reported == [1, 2, 3, 4, 5]
    st = r.sink.stats()
    assert (st.messages, st.bytes, st.pending_messages, st.pending_bytes, st.acked_commit_ts) == (4, 60, 0, 0, 5)
    assert r.sink.status() == {"type": "kafka", **st.to_json()}


def test_every_message_carries_its_commit_ts_header(make: Callable[..., Rig]) -> None:
    r = make(encoder=sized(3, 4))
    r.sink.add(data(417_455_000_000_000_123))
    assert [s.headers for s in r.producer.sent] == [[(COMMIT_TS_HEADER, b"417455000000000123")]] * 2
    assert [len(s.value) for s in r.producer.sent] == [3, 4]


def test_secondary_binlog_messages_are_the_relay_records(make: Callable[..., Rig]) -> None:
    r = make(encoder=secondary_binlog_messages)
    t, d = txn(10, 1, 2), ddl_txn(11, "db", "ALTER TABLE t ADD COLUMN c INT")
    r.sink.add(t)
    r.sink.add(d)
    r.sink.add(empty(12))
    assert [s.value for s in r.producer.sent] == [encode_txn(t), encode_txn(d)]
    r.producer.ack(0, 1)
    r.sink.flush(WAIT)
    assert r.reported == [10, 11, 12]


def test_add_waits_while_unacknowledged_bytes_fill_the_budget(make: Callable[..., Rig]) -> None:
    r = make(encoder=sized(60), budget=100)
    r.sink.add(data(1))
    done = threading.Event()

    def second() -> None:
        r.sink.add(data(2))
        done.set()

    t = threading.Thread(target=second)
    t.start()
    assert not done.wait(0.2), "the second txn must wait: 60 + 60 > 100"
    assert len(r.producer.sent) == 1
    r.producer.ack(0)
    assert done.wait(WAIT)
    t.join()
    r.producer.ack(1)
    r.sink.flush(WAIT)
    assert r.reported == [1, 2]


def test_no_ack_warns_then_fails_naming_the_broker_and_oldest_txn(
    make: Callable[..., Rig], caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    r = make(encoder=sized(10), ack_timeout=100.0, clock=clock)
    r.sink.add(empty(1))
    r.sink.add(data(2))
    r.sink.add(data(3))
    wait_until(lambda: r.reported == [1], "the empty txn")
    with caplog.at_level(logging.WARNING, logger="drainer.sinks.kafka"):
        clock.now += 31
        wait_until(lambda: "no acknowledgement from Kafka at k1:9092 for 31s" in caplog.text, "the warning")
    assert "2 messages (20 bytes) pending, the oldest at commit_ts=2" in caplog.text
    assert r.sink.error() is None
    clock.now += 70
    wait_until(lambda: r.sink.error() is not None, "the ack timeout")
    message = str(r.sink.error())
    assert "no acknowledgement from Kafka at k1:9092 for 101s" in message
    assert "kafka-ack-timeout = 100s" in message
    assert "the oldest at commit_ts=2" in message
    assert "checkpoint stays at or below commit_ts=1" in message
    with pytest.raises(SinkError, match="kafka-ack-timeout"):
        r.sink.add(data(4))
    with pytest.raises(SinkError, match="kafka-ack-timeout"):
        r.sink.flush(1)
    assert r.reported == [1]


def test_a_failed_message_fails_the_sink_and_nothing_after_it_is_reported(make: Callable[..., Rig]) -> None:
    r = make(encoder=sized(10))
    for ts in (1, 2, 3):
        r.sink.add(data(ts))
    r.producer.ack(0, 2)
    r.producer.fail(1, "_MSG_TIMED_OUT: Local: Message timed out")
    wait_until(lambda: r.sink.error() is not None, "the failure")
    assert str(r.sink.error()) == (
        "kafka sink: the message of commit_ts=2 failed: _MSG_TIMED_OUT: Local: Message timed out"
    )
    wait_until(lambda: r.producer.polls > 5, "a few polls")
    assert r.reported == [1]
    with pytest.raises(SinkError, match="commit_ts=2 failed"):
        r.sink.add(data(4))


def test_a_fatal_producer_error_fails_the_sink(make: Callable[..., Rig]) -> None:
    r = make()
    r.sink.add(data(1))
    r.fatal[0]("_FATAL: idempotent producer: epoch bumped")
    assert str(r.sink.error()) == "kafka sink: _FATAL: idempotent producer: epoch bumped"
    with pytest.raises(SinkError, match="epoch bumped"):
        r.sink.flush(1)


def test_a_txn_over_the_message_limit_fails_after_what_came_before(make: Callable[..., Rig]) -> None:
    sizes = {1: 10, 2: 10, 3: 101}

    def encode(t: Txn) -> list[bytes]:
        return [b"x" * sizes[t.commit_ts]]

    r = make(encoder=encode, max_message_size=100)
    r.sink.add(data(1))
    r.sink.add(data(2))
    r.producer.ack(0, 1)
    with pytest.raises(SinkError) as info:
        r.sink.add(data(3))
    message = str(info.value)
    assert "commit_ts=3 is a message of 101 bytes, over the limit of 100 bytes" in message
    assert "kafka-max-message-size = 100" in message
    assert "max.message.bytes" in message
    assert 'protocol = "canal-json"' in message
    assert r.reported == [1, 2]  # what came before was acknowledged and reported first
    assert len(r.producer.sent) == 2
    with pytest.raises(SinkError, match="commit_ts=3 is a message"):
        r.sink.add(data(4))


def test_the_limit_counts_librdkafkas_own_cap() -> None:
    assert effective_max_message_size(100) == 100
    assert effective_max_message_size(1 << 30) == LIBRDKAFKA_MAX_MESSAGE_BYTES - FRAMING_HEADROOM


def test_a_full_local_queue_is_retried(make: Callable[..., Rig]) -> None:
    r = make()
    r.producer.full = 3
    r.sink.add(data(1))
    assert len(r.producer.sent) == 1
    r.producer.ack(0)
    r.sink.flush(WAIT)
    assert r.reported == [1]


def test_a_message_refused_locally_fails_the_sink(make: Callable[..., Rig]) -> None:
    r = make()
    r.producer.refuse = "MSG_SIZE_TOO_LARGE: Broker: Message size too large"
    with pytest.raises(SinkError, match=r"refused commit_ts=1: MSG_SIZE_TOO_LARGE"):
        r.sink.add(data(1))
    assert r.sink.error() is not None


def test_an_encoding_error_fails_the_sink(make: Callable[..., Rig]) -> None:
    def bad(t: Txn) -> list[bytes]:
        raise CodecError("column v: str value 'x' does not fit")

    r = make(encoder=bad)
    with pytest.raises(SinkError, match=r"cannot encode commit_ts=9: column v"):
        r.sink.add(data(9))


def test_flush_times_out_and_close_is_idempotent(make: Callable[..., Rig]) -> None:
    r = make()
    r.sink.add(data(1))
    with pytest.raises(TimeoutError, match="1 transactions not acknowledged"):
        r.sink.flush(0.05)
    r.sink.close()
    r.sink.close()
    assert r.producer.closed
    assert r.reported == []
    with pytest.raises(SinkError, match="closed"):
        r.sink.add(data(2))


def test_start_failure_is_raised() -> None:
    def factory(on_fatal: Callable[[str], None]) -> FakeProducer:
        raise SinkError("kafka sink: cannot reach Kafka at kafka-addrs = k1:9092 within 30s")

    sink = KafkaSink(factory, topic="t", brokers="k1:9092", max_message_size=10, max_inflight_bytes=10, ack_timeout=1)
    with pytest.raises(SinkError, match="cannot reach Kafka"):
        sink.start(lambda ts: None)
    sink.close()


def test_canal_json_messages_go_out_in_order(make: Callable[..., Rig]) -> None:
    from drainer.sinks.kafka import canal_json_encoder

    r = make(encoder=canal_json_encoder(1 << 20))
    t = txn(417_455_000_000_000_001, 1, 2)
    r.sink.add(t)
    want = canal_json.encode_txn(t, max_message_size=1 << 20)

    def but_ts(values: list[bytes]) -> list[dict[str, Any]]:  # `ts` is the clock at encoding, in ms
        return [{**json.loads(v), "ts": 0} for v in values]

    assert but_ts([s.value for s in r.producer.sent]) == but_ts(want)
    r.producer.ack(*range(len(want)))
    r.sink.flush(WAIT)
    assert r.reported == [t.commit_ts]


def test_default_topic() -> None:
    assert default_topic(6_800_000_000_000_000_001) == "6800000000000000001_obinlog"


# ------------------------------------------------------------------------------------- producer config


def test_producer_config_maps_our_keys() -> None:
    conf = producer_config(
        addrs="a:1,b:2",
        client_id="tidb_binlog",
        kafka_version="2.1.0",
        max_messages=1024,
        max_message_size=1 << 20,
        max_inflight_bytes=16 << 20,
    )
    assert conf["bootstrap.servers"] == "a:1,b:2"
    assert conf["client.id"] == "tidb_binlog"
    assert (conf["enable.idempotence"], conf["acks"], conf["message.timeout.ms"]) == (True, "all", 0)
    # a message refused for good must stop the producer, not leave a gap later messages are written after
    assert conf["enable.gapless.guarantee"] is True
    assert conf["message.max.bytes"] == (1 << 20) + FRAMING_HEADROOM
    assert conf["batch.num.messages"] == 1024
    assert conf["batch.size"] == 1_000_000  # librdkafka's default, under the limit
    assert conf["queue.buffering.max.kbytes"] == (16 << 10) + 1024 + 4
    assert "broker.version.fallback" not in conf


def test_producer_config_old_versions_set_the_fallback_and_the_default_size_is_capped() -> None:
    conf = producer_config(
        addrs="a:1",
        client_id="c",
        kafka_version="0.8.2.0",
        max_messages=1,
        max_message_size=1 << 30,
        max_inflight_bytes=1,
    )
    assert conf["broker.version.fallback"] == "0.8.2"
    assert conf["api.version.request"] is True
    assert conf["message.max.bytes"] == LIBRDKAFKA_MAX_MESSAGE_BYTES
    assert conf["batch.size"] == 1_000_000


def test_producer_batches_never_exceed_a_limit_below_librdkafkas_batch_size() -> None:
    """A broker refuses a batch over its message.max.bytes even when each message in it fits."""
    conf = producer_config(
        addrs="a:1",
        client_id="c",
        kafka_version="2.1.0",
        max_messages=1024,
        max_message_size=512 << 10,
        max_inflight_bytes=1 << 20,
    )
    assert conf["batch.size"] == 512 << 10


def test_without_confluent_kafka_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from drainer.sinks.kafka_producer import ConfluentProducer

    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # import fails as if not installed
    with pytest.raises(SinkError, match=r"db-type kafka: confluent-kafka is not installed; install the kafka extra"):
        ConfluentProducer({"bootstrap.servers": "k:1"}, "t", on_fatal=lambda why: None)


# ------------------------------------------------------------------------------------------- metrics


def test_kafka_metrics_are_read_from_the_sink(make: Callable[..., Rig]) -> None:
    from common import tso
    from drainer.merger import Merger
    from drainer.metrics import DrainerMetrics

    r = make(encoder=sized(10, 5))
    ts = tso.compose(1_700_000_000_123, 0)
    r.sink.add(data(ts))
    r.sink.add(data(ts + 1))
    r.producer.ack(0, 1)
    wait_until(lambda: r.reported == [ts], "the first txn")
    text = DrainerMetrics.for_drainer(dict, Merger(0), r.sink).render().decode()
    assert "binlog_drainer_kafka_messages_total 2.0" in text
    assert "binlog_drainer_kafka_bytes_total 15.0" in text
    assert "binlog_drainer_kafka_pending_messages 2.0" in text
    assert "binlog_drainer_kafka_pending_bytes 15.0" in text
    assert "binlog_drainer_kafka_acked_commit_ts 1.700000000123e+12" in text
    assert "binlog_drainer_kafka" not in DrainerMetrics().render().decode()
