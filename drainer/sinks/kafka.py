"""Kafka sink (`db-type = "kafka"`): every transaction as messages on partition 0 of one topic.

Messages (docs/formats.md#kafka-messages): topic `[syncer.to] topic-name` (default `<cluster id>_obinlog`),
partition 0 always, key null, header `commit_ts` (decimal ASCII) on every message.  The value follows
`[syncer.to] protocol`:

* ``secondary-binlog`` (default, the original's): one `slave.binlog.Binlog` per DML transaction and one
  per DDL, encoded by :func:`drainer.relay_codec.encode_txn` (docs/formats.md#relay-records).  A DDL
  message carries the query as the upstream ran it, with the schema in `ddl_data.schema_name`, as the
  original's Kafka translator wrote it (the ``use `db`; <query>;`` form is the pb file sink's);
* ``canal-json``: the messages of :func:`drainer.canal_json.encode_txn`, which splits a transaction into
  row messages no larger than kafka-max-message-size.

Nothing is sent for an empty transaction (fake binlog, everything filtered) or a skipped DDL; it is
still reported, in order.

Delivery: confluent-kafka (librdkafka) with `enable.idempotence`, `acks=all`, no local delivery timeout.
The syncer thread encodes and produces; a delivery thread polls the producer, counts the acknowledgements
of each poll (a batch, under one lock) in an `AckWindow` (drainer/sinks/kafka_window.py) and reports each
commit_ts once it and every transaction before it is acknowledged. So the checkpoint never passes an
unacknowledged message, and a restart after any failure sends the unacknowledged ones again: at-least-
once, and a consumer drops duplicates by the `commit_ts` header (ascending on the partition).

Memory: `add()` waits while the unacknowledged message bytes would exceed `max_inflight_bytes`
(`[syncer] max-inflight-bytes`); librdkafka's own queue is sized to hold that much plus one message.

Failures (each a `SinkError`; the drainer stops with exit status 1, its checkpoint before the failed
transaction): the broker not reachable at start (within `start_timeout`); a message larger than
kafka-max-message-size (named with its commit_ts, size and the limit; everything before it is first
given the chance to be acknowledged); a message the producer gives up on; a fatal producer error;
nothing acknowledged for `ack_timeout` while messages are pending (a WARNING every `warn_interval`
before that: 30 s, or a quarter of a shorter kafka-ack-timeout).

Topic at start: all topics are listed (a metadata request for one topic would auto-create it on some
brokers, with their default partition count); a missing topic is created with one partition (and the
broker's default replication factor, or 1 where the broker cannot take that); a topic with more than
one partition gets a WARNING, since only partition 0 is written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NoReturn

from common.errors import CodecError
from common.events import Txn
from drainer import canal_json
from drainer.config_syncer import KAFKA_TOPIC_SUFFIX
from drainer.relay_codec import encode_txn as encode_secondary_binlog
from drainer.sinks.base import OnSuccess, Sink, SinkError
from drainer.sinks.kafka_producer import (
    DEFAULT_START_TIMEOUT,
    ConfluentProducer,
    MessageProducer,
    ProduceRefusedError,
    ProducerFactory,
    Report,
    effective_max_message_size,
    producer_config,
)
from drainer.sinks.kafka_window import DEFAULT_WARN_INTERVAL, AckWindow, Entry, KafkaStats, Verdict, Watchdog

if TYPE_CHECKING:
    from drainer.config_syncer import ToConfig

__all__ = [
    "COMMIT_TS_HEADER",
    "KafkaSink",
    "canal_json_encoder",
    "default_topic",
    "kafka_sink",
    "secondary_binlog_messages",
    "warning_interval",
]

log = logging.getLogger(__name__)

COMMIT_TS_HEADER: Final = "commit_ts"
POLL_INTERVAL: Final = 0.05
"""Seconds the delivery thread waits in one poll; also the latency of reporting empty transactions."""
CLOSE_TIMEOUT: Final = 5.0

Encoder = Callable[[Txn], list[bytes]]
"""The messages of one transaction, in order ([] for nothing to send)."""


# ----------------------------------------------------------------------------------------- encoders


def secondary_binlog_messages(txn: Txn) -> list[bytes]:
    """protocol = "secondary-binlog": one `slave.binlog.Binlog` per transaction, none for an empty one."""
    record = encode_secondary_binlog(txn)
    return [] if record is None else [record]


def canal_json_encoder(max_message_size: int) -> Encoder:
    """protocol = "canal-json": `drainer.canal_json.encode_txn`, splitting at `max_message_size`."""

    def encode(txn: Txn) -> list[bytes]:
        return canal_json.encode_txn(txn, max_message_size=max_message_size)

    return encode


# --------------------------------------------------------------------------------------------- sink


class KafkaSink(Sink):
    """See the module doc.  `producer_factory` builds the producer in `start()`."""

    name = "kafka"

    def __init__(
        self,
        producer_factory: ProducerFactory,
        *,
        topic: str,
        brokers: str,
        encoder: Encoder = secondary_binlog_messages,
        max_message_size: int,
        max_inflight_bytes: int,
        ack_timeout: float,
        warn_interval: float = DEFAULT_WARN_INTERVAL,
        poll_interval: float = POLL_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._factory = producer_factory
        self.topic = topic
        self._brokers = brokers
        self._encode = encoder
        self._configured_max = max_message_size
        self._max_message = effective_max_message_size(max_message_size)
        self._ack_timeout = ack_timeout
        self._poll_interval = poll_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._window = AckWindow(max_inflight_bytes)
        self._watchdog = Watchdog(ack_timeout, warn_interval)
        self._added = 0
        self._reported = 0
        self._error: BaseException | None = None
        self._closing = False
        self._closed = False
        self._on_success: OnSuccess | None = None
        self._producer: MessageProducer | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------------- lifecycle
    def start(self, on_success: OnSuccess) -> None:
        with self._cv:
            if self._thread is not None or self._closing:
                raise SinkError("kafka sink: start() called twice or after close()")
            self._on_success = on_success
        producer = self._factory(self._fatal)
        with self._cv:
            self._producer = producer
            self._thread = threading.Thread(target=self._run, name="kafka-sink", daemon=True)
            self._thread.start()
        log.info(
            "kafka sink started: brokers %s topic %s, max message %d bytes, in-flight budget %d bytes, ack timeout %gs",
            self._brokers,
            self.topic,
            self._max_message,
            self._window.budget,
            self._ack_timeout,
        )

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = self._closing = True
            self._cv.notify_all()
            thread, producer = self._thread, self._producer
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if producer is not None:
            try:
                producer.close(CLOSE_TIMEOUT)
            except Exception as exc:  # a close that fails has nothing left to lose
                log.warning("kafka sink: closing the producer failed: %s", exc)
        log.info("kafka sink closed: topic %s, %d transactions reported", self.topic, self._reported)

    def error(self) -> BaseException | None:
        return self._error

    @property
    def inflight_bytes(self) -> int:
        """Bytes of messages produced and not yet acknowledged."""
        return self._window.pending_bytes

    def stats(self) -> KafkaStats:
        with self._cv:
            return self._window.stats(self.topic)

    def status(self) -> dict[str, object]:
        """GET /status's `sink`: {"type": "kafka", "topic", "messages", "bytes", "pending_messages",
        "pending_bytes", "acked_commit_ts"} (messages and bytes: acknowledged since start)."""
        return {"type": "kafka", **self.stats().to_json()}

    # ---------------------------------------------------------------------------------------- add
    def add(self, txn: Txn) -> None:
        if self._error is not None:
            self._raise_if_failed()
        ts = txn.commit_ts
        try:
            messages = self._encode(txn)
        except (CodecError, ValueError, TypeError) as exc:
            self._fail_now(SinkError(f"kafka sink: cannot encode commit_ts={ts}: {exc}"), exc)
        sizes = [len(m) for m in messages]
        size, largest = sum(sizes), max(sizes, default=0)
        if largest > self._max_message:
            self._too_large(ts, largest)
        window = self._window
        with self._lock:  # the condition's own lock, entered without the Python-level Condition.__enter__
            if self._error is not None or self._closing or not window.has_room(size):
                self._wait_for_room(ts, size)
            pending_before = window.pending_messages
            entry = window.append(ts, sizes)
            if sizes and not pending_before:
                self._watchdog.sent(self._clock(), pending_before)
            self._added += 1
        headers = [(COMMIT_TS_HEADER, str(ts).encode())]
        for m in messages:
            self._send(entry, m, headers)

    def _wait_for_room(self, ts: int, size: int) -> None:
        """Under the lock: wait until `size` bytes fit the budget; raises once the sink failed or closes."""
        while self._error is None and not self._closing and not self._window.has_room(size):
            self._cv.wait()
        self._raise_if_failed()
        if self._closing:
            raise SinkError(f"kafka sink is closed; commit_ts={ts} not sent")

    def _send(self, entry: Entry, value: bytes, headers: list[tuple[str, bytes]]) -> None:
        producer = self._producer
        assert producer is not None
        token = (entry, len(value))
        while True:
            try:
                producer.send(value, headers, token)
                return
            except BufferError:  # librdkafka's queue is full: the delivery thread frees it
                with self._cv:
                    self._raise_if_failed()
                    if self._closing:
                        raise SinkError(f"kafka sink is closed; commit_ts={entry.commit_ts} not sent") from None
                    self._cv.wait(self._poll_interval)
            except ProduceRefusedError as exc:
                self._fail_now(SinkError(f"kafka sink: the producer refused commit_ts={entry.commit_ts}: {exc}"), exc)

    def _too_large(self, ts: int, size: int) -> None:
        """Stop at a message over the limit; what was added before it may still be acknowledged first."""
        try:
            self.flush(self._ack_timeout)
        except (SinkError, TimeoutError) as exc:
            log.warning("kafka sink: transactions before commit_ts=%d not all acknowledged: %s", ts, exc)
        limit = self._max_message
        note = "" if limit == self._configured_max else f" (librdkafka sends at most {limit} bytes)"
        self._fail_now(
            SinkError(
                f"kafka sink: the transaction at commit_ts={ts} is a message of {size} bytes, over the limit of "
                f"{limit} bytes ([syncer.to] kafka-max-message-size = {self._configured_max}{note}); nothing from "
                "it on is sent and the checkpoint stays before it. Raise kafka-max-message-size together with the "
                "broker's message.max.bytes and the topic's max.message.bytes (and the consumers' fetch sizes), "
                'or set [syncer.to] protocol = "canal-json", which splits a transaction into row messages'
            )
        )

    def flush(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            target = self._added
            while self._reported < target:
                self._raise_if_failed()
                if self._closing:
                    raise SinkError("kafka sink closed before everything was acknowledged")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(
                        f"kafka sink: {target - self._reported} transactions not acknowledged in {timeout}s"
                    )
                self._cv.wait(remaining)
            self._raise_if_failed()

    # ----------------------------------------------------------------------------------- delivery
    def _delivered(self, reports: list[Report]) -> None:
        """The delivery reports of one poll, under the lock: tokens are (entry, message size)."""
        acked = False
        for (entry, size), error in reports:
            if error is None:
                self._window.acked(entry, size)
                acked = True
            elif not self._closing:  # while closing, unsent messages are dropped on purpose
                self._window.failed(entry, error)
                self._set_error(SinkError(f"kafka sink: the message of commit_ts={entry.commit_ts} failed: {error}"))
        if acked:
            self._watchdog.acked(self._clock())

    def _run(self) -> None:
        producer = self._producer
        on_success = self._on_success
        assert producer is not None
        assert on_success is not None
        try:
            while True:
                reports = producer.poll(self._poll_interval)
                with self._cv:
                    if reports:
                        self._delivered(reports)
                    ready = self._window.pop_ready()
                    pending = self._window.pending_messages
                    verdict = self._watchdog.tick(self._clock(), pending) if self._error is None else Verdict.OK
                    closing = self._closing
                    if reports:
                        self._cv.notify_all()
                for ts in ready:
                    on_success(ts)
                if ready:
                    with self._cv:
                        self._reported += len(ready)
                        self._cv.notify_all()
                if verdict is not Verdict.OK:
                    self._alarm(verdict)
                if closing:
                    return
        except BaseException as exc:
            self._fatal(f"delivery thread failed: {exc}")
            if not isinstance(exc, Exception):
                raise

    def _alarm(self, verdict: Verdict) -> None:
        with self._cv:
            w = self._window
            silent = self._watchdog.silent_for(self._clock())
            pending, pending_bytes, oldest = w.pending_messages, w.pending_bytes, w.oldest_pending()
            last = w.last_reported
        if verdict is Verdict.WARN:
            log.warning(
                "kafka sink: no acknowledgement from Kafka at %s for %.0fs: %d messages (%d bytes) pending, the "
                "oldest at commit_ts=%s; the drainer stops after kafka-ack-timeout = %gs",
                self._brokers,
                silent,
                pending,
                pending_bytes,
                oldest,
                self._ack_timeout,
            )
            return
        self._fatal(
            f"no acknowledgement from Kafka at {self._brokers} for {silent:.0f}s ([syncer.to] kafka-ack-timeout = "
            f"{self._ack_timeout:g}s): {pending} messages ({pending_bytes} bytes) pending, the oldest at "
            f"commit_ts={oldest}; the checkpoint stays at or below commit_ts={last}, and a restart sends the "
            "unacknowledged transactions again"
        )

    # ------------------------------------------------------------------------------------- errors
    def _fatal(self, why: str) -> None:
        with self._cv:
            self._set_error(SinkError(f"kafka sink: {why}"))
            self._cv.notify_all()

    def _set_error(self, error: SinkError) -> None:
        """Under the lock: the first failure wins."""
        if self._error is None:
            self._error = error
            log.error("%s", error)

    def _fail_now(self, error: SinkError, cause: BaseException | None = None) -> NoReturn:
        with self._cv:
            self._set_error(error)
            self._cv.notify_all()
        raise error from cause

    def _raise_if_failed(self) -> None:
        error = self._error
        if error is not None:
            raise error if isinstance(error, SinkError) else SinkError(str(error))


# ------------------------------------------------------------------------------------------ config


def warning_interval(ack_timeout: float) -> float:
    """Seconds between the "no acknowledgement" WARNINGs: 30, or a quarter of a shorter kafka-ack-timeout."""
    return min(DEFAULT_WARN_INTERVAL, ack_timeout / 4)


def default_topic(cluster_id: int) -> str:
    return f"{cluster_id}{KAFKA_TOPIC_SUFFIX}"


def kafka_sink(to: ToConfig, *, cluster_id: int, max_inflight_bytes: int) -> KafkaSink:
    """The sink of `[syncer.to]` (db-type kafka); nothing connects before `start()`."""
    topic = to.topic_name or default_topic(cluster_id)
    canal = to.protocol == "canal-json"
    limit = effective_max_message_size(to.kafka_max_message_size)
    encoder = canal_json_encoder(limit) if canal else secondary_binlog_messages
    conf = producer_config(
        addrs=to.kafka_addrs,
        client_id=to.kafka_client_id,
        kafka_version=to.kafka_version,
        max_messages=to.kafka_max_messages,
        max_message_size=to.kafka_max_message_size,
        max_inflight_bytes=max_inflight_bytes,
    )
    start_timeout = min(DEFAULT_START_TIMEOUT, to.kafka_ack_timeout)
    warn_interval = warning_interval(to.kafka_ack_timeout)

    def factory(on_fatal: Callable[[str], None]) -> MessageProducer:
        return ConfluentProducer(
            conf, topic, on_fatal=on_fatal, start_timeout=start_timeout, warn_interval=warn_interval
        )

    return KafkaSink(
        factory,
        topic=topic,
        brokers=to.kafka_addrs,
        encoder=encoder,
        max_message_size=to.kafka_max_message_size,
        max_inflight_bytes=max_inflight_bytes,
        ack_timeout=to.kafka_ack_timeout,
        warn_interval=warn_interval,
    )
