"""The Kafka sink's producer: librdkafka settings, and confluent-kafka behind our `MessageProducer` interface.

`MessageProducer` is all `drainer.sinks.kafka.KafkaSink` uses of a producer (unit tests give it a fake):
`send` one message to partition 0 of the topic with a token, `poll` to collect the delivery reports (the
tokens of the messages acknowledged or failed since the last poll, in one list: the sink takes its lock
once per poll, not once per message), `close`. `ConfluentProducer` implements it with confluent-kafka,
imported only here and only when the kafka sink is used (the `kafka` extra). Building one reaches the
brokers and prepares the topic (docs of `drainer.sinks.kafka`). librdkafka's own log lines go to the
`drainer.sinks.kafka_producer.librdkafka` logger at DEBUG; its non-fatal errors are logged as WARNINGs,
each kind at most once per `warn_interval`; a fatal one (e.g. the idempotent producer's) goes to the sink.

`producer_config` maps our keys to librdkafka's:

    bootstrap.servers          kafka-addrs
    client.id                  kafka-client-id (default tidb_binlog, as the original's)
    enable.idempotence, acks   true, all
    enable.gapless.guarantee   true: a message the broker refuses for good (e.g. over its message.max.bytes)
                               is a fatal producer error, so no later message is written after the gap it
                               would leave (without it librdkafka fails that one message and goes on; a
                               consumer dropping commit_ts not above the last seen would then drop the
                               refused transaction when the drainer re-sends it)
    message.max.bytes          kafka-max-message-size + 4 KiB of framing, at most librdkafka's 1e9
    queue.buffering.max.kbytes max-inflight-bytes + one message (the sink's byte budget comes first)
    batch.num.messages         kafka-max-messages (the original's sarama Flush.MaxMessages)
    batch.size                 librdkafka's 1 MB, at most kafka-max-message-size: a batch of several messages
                               never exceeds the limit the broker is configured with (a broker refuses a
                               batch over its message.max.bytes even when each message fits); one larger
                               message still goes alone
    message.timeout.ms         0: never give up locally; kafka-ack-timeout decides
    broker.version.fallback    kafka-version, only when it is below 0.10: librdkafka asks the broker for its
                               API versions (api.version.request) and uses this only when a broker cannot
                               answer.  Idempotence and headers need brokers of 0.11 or later.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from functools import partial
from typing import Any, Final, Protocol

from common.cli import MissingExtraError, import_extra
from drainer.config_syncer import parse_kafka_version
from drainer.sinks.base import SinkError
from drainer.sinks.kafka_window import DEFAULT_WARN_INTERVAL

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "FRAMING_HEADROOM",
    "LIBRDKAFKA_MAX_MESSAGE_BYTES",
    "ConfluentProducer",
    "MessageProducer",
    "ProduceRefusedError",
    "ProducerFactory",
    "Report",
    "effective_max_message_size",
    "producer_config",
]

log = logging.getLogger(__name__)
_rdkafka_log = logging.getLogger(__name__ + ".librdkafka")

LIBRDKAFKA_MAX_MESSAGE_BYTES: Final = 1_000_000_000
"""librdkafka's upper bound of `message.max.bytes`."""
LIBRDKAFKA_BATCH_BYTES: Final = 1_000_000
"""librdkafka's default `batch.size`."""
FRAMING_HEADROOM: Final = 4096
"""Bytes of record-batch framing and headers around one value, on top of kafka-max-message-size."""
MAX_QUEUE_KBYTES: Final = 2_147_483_647
QUEUE_MAX_MESSAGES: Final = 10_000_000
"""librdkafka's local queue never limits us by count: the byte budget does."""
DEFAULT_START_TIMEOUT: Final = 30.0
"""Seconds to reach the brokers and prepare the topic at start (at most kafka-ack-timeout)."""
PARTITION: Final = 0
BROKER_DEFAULT_REPLICATION: Final = -1
"""CreateTopics' "use the broker's default.replication.factor" (brokers 2.4 and later)."""

Report = tuple[Any, str | None]
"""A delivery report: the token given to `send`, and None (acknowledged) or the producer's error text."""


class ProduceRefusedError(Exception):
    """The producer refused a message locally (too large, unknown topic ...); the text says why."""


class MessageProducer(Protocol):
    """What the sink needs of a Kafka producer bound to one topic and partition 0."""

    def send(self, value: bytes, headers: list[tuple[str, bytes]], token: Any) -> None:
        """Queue one message; raises BufferError when the local queue is full, ProduceRefusedError when refused.
        `token` comes back in the message's delivery report."""
        ...

    def poll(self, timeout: float) -> list[Report]:
        """The delivery reports that arrive within `timeout` seconds (waiting only while there is none), also
        serving the producer's logs and errors.  Called from one thread."""
        ...

    def close(self, timeout: float) -> None:
        """Drop what is not yet sent and release the producer."""
        ...


ProducerFactory = Callable[[Callable[[str], None]], MessageProducer]
"""Builds the producer (connecting and preparing the topic); its argument is called with a fatal error."""


def effective_max_message_size(configured: int) -> int:
    """The largest value sent: kafka-max-message-size, within what librdkafka can send with our framing."""
    return max(1, min(configured, LIBRDKAFKA_MAX_MESSAGE_BYTES - FRAMING_HEADROOM))


# ----------------------------------------------------------------------------------------- producer


def producer_config(
    *,
    addrs: str,
    client_id: str,
    kafka_version: str,
    max_messages: int,
    max_message_size: int,
    max_inflight_bytes: int,
) -> dict[str, Any]:
    """librdkafka settings of the sink's producer (without callbacks); see the module doc."""
    message_max = min(effective_max_message_size(max_message_size) + FRAMING_HEADROOM, LIBRDKAFKA_MAX_MESSAGE_BYTES)
    queue_kbytes = min(MAX_QUEUE_KBYTES, max(1, math.ceil((max_inflight_bytes + message_max) / 1024)))
    conf: dict[str, Any] = {
        "bootstrap.servers": addrs,
        "client.id": client_id,
        "enable.idempotence": True,
        "acks": "all",
        "enable.gapless.guarantee": True,  # a refused message stops the producer: never a gap in the topic
        "message.max.bytes": message_max,
        "queue.buffering.max.kbytes": queue_kbytes,
        "queue.buffering.max.messages": QUEUE_MAX_MESSAGES,
        "batch.num.messages": max_messages,
        "batch.size": min(LIBRDKAFKA_BATCH_BYTES, effective_max_message_size(max_message_size)),
        "message.timeout.ms": 0,  # never give up locally: kafka-ack-timeout decides
    }
    version = parse_kafka_version(kafka_version)
    if version < (0, 10):
        # librdkafka asks a broker for its API versions (0.10+); this is what it assumes when that fails
        conf["api.version.request"] = True
        conf["broker.version.fallback"] = ".".join(str(n) for n in version[:3])
    return conf


class _LibrdkafkaLog:
    """librdkafka's log lines (connection attempts, retries) at DEBUG: the sink reports their outcome itself."""

    def log(self, level: int, msg: str, *args: object) -> None:
        _rdkafka_log.log(level if level >= logging.CRITICAL else logging.DEBUG, msg, *args)


class ConfluentProducer:
    """`MessageProducer` on confluent-kafka: reaches the brokers and prepares the topic when built."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        *,
        on_fatal: Callable[[str], None],
        start_timeout: float = DEFAULT_START_TIMEOUT,
        warn_interval: float = DEFAULT_WARN_INTERVAL,
    ) -> None:
        try:
            confluent_kafka = import_extra("confluent_kafka", "confluent-kafka", "kafka")
        except MissingExtraError as exc:
            raise SinkError(f"db-type kafka: {exc}") from None
        self._ck = confluent_kafka
        self.topic = topic
        self.addrs = str(conf["bootstrap.servers"])
        self._on_fatal = on_fatal
        self._warn_interval = warn_interval
        self._warned: dict[int, float] = {}
        self._served: list[tuple[Any, Any]] = []
        """(token, librdkafka error or None) of the delivery reports served since the last poll()."""
        conf = dict(conf, error_cb=self._error_cb)
        self._producer = confluent_kafka.Producer(conf, logger=_LibrdkafkaLog())
        try:
            self._prepare_topic(start_timeout)
        except BaseException:
            self._producer.purge()
            raise

    def _prepare_topic(self, timeout: float) -> None:
        partitions = self._partitions(timeout)
        if partitions == 0:
            self._create_topic(timeout)
            partitions = self._partitions(timeout) or 1
        if partitions > 1:
            log.warning(
                "kafka topic %s has %d partitions: the drainer writes partition 0 only, so consumers must read "
                "partition 0 (nothing is lost)",
                self.topic,
                partitions,
            )
        log.info("kafka sink: brokers %s, topic %s (%d partition(s)), partition 0", self.addrs, self.topic, partitions)

    def _partitions(self, timeout: float) -> int:
        """The topic's partition count, 0 when it does not exist; all topics are listed (asking for one
        by name may auto-create it with the broker's default partition count)."""
        try:
            meta = self._producer.list_topics(timeout=timeout)
        except self._ck.KafkaException as exc:
            raise SinkError(
                f"kafka sink: cannot reach Kafka at kafka-addrs = {self.addrs} within {timeout:g}s: {_text(exc)}"
            ) from None
        found = meta.topics.get(self.topic)
        return 0 if found is None or found.error is not None else len(found.partitions)

    def _create_topic(self, timeout: float) -> None:
        """One partition; the broker's default replication factor, else 1 (brokers before 2.4 need one)."""
        ck = self._ck
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient({"bootstrap.servers": self.addrs, "socket.timeout.ms": int(timeout * 1000)})
        failure = ""
        for replication in (BROKER_DEFAULT_REPLICATION, 1):
            futures = admin.create_topics([NewTopic(self.topic, num_partitions=1, replication_factor=replication)])
            try:
                futures[self.topic].result(timeout=timeout)
            except ck.KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if err is not None and err.code() == ck.KafkaError.TOPIC_ALREADY_EXISTS:
                    return  # created meanwhile by someone else
                failure = _text(exc)
                continue
            except TimeoutError:
                failure = f"no answer in {timeout:g}s"
                continue
            how = "the broker's default" if replication == BROKER_DEFAULT_REPLICATION else str(replication)
            log.info("kafka sink: created topic %s with 1 partition, replication factor %s", self.topic, how)
            return
        raise SinkError(
            f"kafka sink: cannot create topic {self.topic} at kafka-addrs = {self.addrs}: {failure}; "
            "create it with one partition, or set [syncer.to] topic-name"
        )

    def _error_cb(self, err: Any) -> None:
        if err.fatal():
            self._on_fatal(f"{err.name()}: {err.str()}")
            return
        now = time.monotonic()
        code = err.code()
        if now - self._warned.get(code, -math.inf) >= self._warn_interval:
            self._warned[code] = now
            log.warning("kafka producer (brokers %s): %s: %s", self.addrs, err.name(), err.str())

    def send(self, value: bytes, headers: list[tuple[str, bytes]], token: Any) -> None:
        try:
            self._producer.produce(
                self.topic,
                value=value,
                key=None,
                partition=PARTITION,
                headers=headers,
                on_delivery=partial(self._delivered, token),
            )
        except self._ck.KafkaException as exc:
            raise ProduceRefusedError(_text(exc)) from None

    def _delivered(self, token: Any, err: Any, _msg: Any) -> None:
        """librdkafka's delivery report, on the thread in poll(): only noted (a C-level append)."""
        self._served.append((token, err))

    def poll(self, timeout: float) -> list[Report]:
        self._producer.poll(timeout)
        served, self._served = self._served, []
        return [(token, None if err is None else f"{err.name()}: {err.str()}") for token, err in served]

    def close(self, timeout: float) -> None:
        self._producer.purge()
        self._producer.flush(timeout)


def _text(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "name") and hasattr(err, "str"):
        return f"{err.name()}: {err.str()}"
    return str(exc)
