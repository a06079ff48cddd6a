"""The arbiter's Kafka side: partition 0 of `up.topic`, from the first transaction after the checkpoint.

confluent-kafka (librdkafka) Consumer, assigned to (topic, 0): no consumer group rebalancing, no
committed offsets (`enable.auto.commit = false`; the checkpoint in the downstream is the only position).

* **Start** (`connect`, on the caller's thread): the brokers must answer a metadata request for all
  topics within `up.connect-timeout`, else ReaderError naming `up.kafka-addrs`.
* **Topic** (reader thread): looked up in the list of all topics, never asked for by name (a broker
  that auto-creates topics would create it, with its default partition count).  A missing topic is
  waited for, with an INFO line and then a WARNING every `TOPIC_WAIT_LOG_INTERVAL` seconds; a topic
  with more than one partition gets a WARNING, and only partition 0 is read (the drainer's kafka sink
  writes only there).
* **Position**: the first offset in [low, high) watermarks whose commit_ts is above the checkpoint,
  by binary search (arbiter.position), reading one message per probe.
* **Reading**: each message's commit_ts (header `commit_ts`, else the decoded binlog); one not above
  the last taken is dropped as a duplicate; the rest go, undecoded, into a `ByteQueue` bounded by
  `up.queue-bytes` (the applier decodes them).  Messages are taken from librdkafka up to
  `CONSUME_BATCH` at a time (one call, one queue lock and one wake-up of the applier per batch, not
  per message).  librdkafka's own prefetch is bounded too (`queued.max.messages.kbytes` = half the
  budget: a batch taken from it and held while the queue has no room, plus the prefetch refilled
  behind it, stay within the one budget, as one prefetch of the whole budget did before batching);
  `up.kafka-max-message-size` sets `fetch.max.bytes` and `receive.message.max.bytes` so one message
  of that size can be fetched.
* **Errors**: a broker that goes away mid-run is a WARNING (at most every `WARN_INTERVAL` seconds);
  librdkafka reconnects and reading resumes where it was.  A message that is not a binlog stops the
  arbiter (`on_fatal`) naming its offset; one larger than `up.kafka-max-message-size` (librdkafka
  refuses the fetch response holding it) or a fatal client error stops it naming the key or the
  error.  Either way the checkpoint stays before it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from arbiter.bytequeue import ByteQueue
from arbiter.config import UpConfig
from arbiter.position import Dedup, first_offset_after, message_commit_ts
from common.cli import import_extra
from common.errors import BinlogError, CodecError

__all__ = ["KafkaReader", "Message", "ReaderError"]

log = logging.getLogger(__name__)
kafka_log = logging.getLogger("arbiter.kafka")
"""librdkafka's own log lines (with open-sarama-log)."""

PARTITION: Final = 0
POLL_INTERVAL: Final = 0.2
CONSUME_BATCH: Final = 64
"""Most messages taken from librdkafka per call (it hands over what it has prefetched, up to this many)."""
PREFETCH_SHARE: Final = 2
"""librdkafka may prefetch up.queue-bytes / PREFETCH_SHARE: a batch taken from its prefetch (held while the
queue has no room) and its refill together stay within up.queue-bytes."""
PROBE_TIMEOUT: Final = 5.0
"""Seconds of one metadata request while the start waits for the brokers."""
RETRY_INTERVAL: Final = 1.0
WARN_INTERVAL: Final = 10.0
TOPIC_WAIT_LOG_INTERVAL: Final = 30.0
RECEIVE_HEADROOM: Final = 1 << 20
"""receive.message.max.bytes above fetch.max.bytes (librdkafka wants at least 512 bytes more)."""
PARTITION_FETCH_BYTES: Final = 1 << 20
"""fetch.message.max.bytes: brokers return a larger first message whole anyway (KIP-74)."""
MAX_QUEUED_KBYTES: Final = 2097151
RECONNECT_BACKOFF_MAX_MS: Final = 2000
"""librdkafka's default is 10 s; a daemon that waits for its broker should notice it back sooner."""


class ReaderError(BinlogError):
    """The topic cannot be read (brokers unreachable at start, a message that is not a binlog)."""


class _StoppedError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Message:
    offset: int
    commit_ts: int
    value: bytes


def consumer_config(up: UpConfig, *, kafka_log_on: bool, error_cb: Callable[[Any], None]) -> dict[str, object]:
    """librdkafka settings of the arbiter's consumer (see the module docstring)."""
    size = up.kafka_max_message_size
    return {
        "bootstrap.servers": up.brokers,
        "group.id": f"arbiter-{up.topic}",  # required by the client; never joined, nothing committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest",
        "message.max.bytes": max(1000, min(size, 1_000_000)),
        "fetch.max.bytes": size,
        "fetch.message.max.bytes": min(size, PARTITION_FETCH_BYTES),
        "receive.message.max.bytes": size + RECEIVE_HEADROOM,
        "queued.max.messages.kbytes": max(1, min(MAX_QUEUED_KBYTES, up.queue_bytes // PREFETCH_SHARE // 1024)),
        "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
        "error_cb": error_cb,
        "logger": kafka_log if kafka_log_on else logging.getLogger("arbiter.kafka.off"),
    }


class KafkaReader:
    """Reads the topic into `queue` on its own thread (see the module docstring)."""

    def __init__(
        self,
        up: UpConfig,
        queue: ByteQueue[Message],
        *,
        on_fatal: Callable[[BaseException], None],
        on_duplicate: Callable[[], None] = lambda: None,
        kafka_log_on: bool = True,
    ) -> None:
        self.up = up
        self.topic = up.topic
        self.queue = queue
        self._on_fatal = on_fatal
        self._on_duplicate = on_duplicate
        self._kafka_log_on = kafka_log_on
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer: Any = None
        self._ck: Any = None
        self._last_warning = 0.0
        self.position = -1
        """The next offset to read (-1 until the start offset is known)."""
        self.high_watermark = -1
        self.received_ts = 0
        """The commit_ts of the last message taken (not a duplicate)."""
        self.last_error = ""
        self._client_fatal: ReaderError | None = None
        """Set by librdkafka's error callback (which must not raise); raised by the next poll."""
        if not kafka_log_on:
            logging.getLogger("arbiter.kafka.off").disabled = True

    # ---------------------------------------------------------------------------------------- start
    def connect(self) -> None:
        """Build the consumer and wait for the brokers to answer (ReaderError after up.connect-timeout)."""
        self._ck = ck = import_extra("confluent_kafka", "confluent-kafka", "kafka")
        self._consumer = ck.Consumer(consumer_config(self.up, kafka_log_on=self._kafka_log_on, error_cb=self._error))
        deadline = time.monotonic() + self.up.connect_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                self._consumer.list_topics(timeout=max(0.1, min(left, PROBE_TIMEOUT)))
                log.info("Kafka brokers %s answer", self.up.brokers)
                return
            except ck.KafkaException as exc:
                if time.monotonic() >= deadline or self._stop.is_set():
                    raise ReaderError(
                        f"cannot reach Kafka at up.kafka-addrs {self.up.kafka_addrs!r} within "
                        f"{self.up.connect_timeout:g}s (up.connect-timeout): {_kafka_text(exc)}"
                    ) from None

    def start(self, after_ts: int) -> None:
        """Read every transaction with commit_ts above `after_ts`, on a thread."""
        self._thread = threading.Thread(target=self._run, args=(after_ts,), name="arbiter-reader", daemon=True)
        self._thread.start()

    def _run(self, after_ts: int) -> None:
        try:
            self._wait_topic()
            low, high = self._retry("read the watermarks", self._watermarks)
            start = first_offset_after(low, high, after_ts, self._commit_ts_at)
            log.info(
                "topic %s partition %d: offsets [%d, %d), starting at offset %d (first commit_ts above %d)",
                self.topic,
                PARTITION,
                low,
                high,
                start,
                after_ts,
            )
            self._consume(start, Dedup(after_ts))
        except _StoppedError:
            return
        except BaseException as exc:
            self._on_fatal(exc)

    # ---------------------------------------------------------------------------------------- topic
    def _wait_topic(self) -> None:
        first = True
        next_log = 0.0
        while True:
            self._check_stop()
            meta = self._retry("list the topics", lambda: self._consumer.list_topics(timeout=PROBE_TIMEOUT))
            found = meta.topics.get(self.topic)
            if found is not None and found.error is None and found.partitions:
                n = len(found.partitions)
                if n > 1:
                    log.warning(
                        "topic %s has %d partitions: only partition %d is read (the drainer's kafka sink writes "
                        "only there); messages in other partitions are not applied",
                        self.topic,
                        n,
                        PARTITION,
                    )
                return
            now = time.monotonic()
            if now >= next_log:
                level = logging.INFO if first else logging.WARNING
                log.log(
                    level,
                    "topic %s does not exist on %s yet: waiting for it (the drainer's kafka sink creates it)",
                    self.topic,
                    self.up.brokers,
                )
                first = False
                next_log = now + TOPIC_WAIT_LOG_INTERVAL
            self._sleep(RETRY_INTERVAL)

    def _watermarks(self) -> tuple[int, int]:
        tp = self._ck.TopicPartition(self.topic, PARTITION)
        low, high = self._consumer.get_watermark_offsets(tp, timeout=PROBE_TIMEOUT)
        return int(low), int(high)

    # ---------------------------------------------------------------------------------------- search
    def _commit_ts_at(self, offset: int) -> int:
        """The commit_ts of the message at `offset` (or the first one after it)."""
        self._consumer.assign([self._ck.TopicPartition(self.topic, PARTITION, offset)])
        while True:
            msg = self._poll()
            if msg is None or msg.offset() < offset:
                continue
            ts = self._commit_ts(msg)
            log.debug("search: offset %d has commit_ts %d", msg.offset(), ts)
            return ts

    # ---------------------------------------------------------------------------------------- reading
    def _consume(self, start: int, dedup: Dedup) -> None:
        self._consumer.assign([self._ck.TopicPartition(self.topic, PARTITION, start)])
        self.position = start
        tp = self._ck.TopicPartition(self.topic, PARTITION)
        next_watermark = 0.0
        while True:
            now = time.monotonic()
            if now >= next_watermark:
                next_watermark = now + RETRY_INTERVAL
                self._cached_watermark(tp)
            self._check_stop()
            msgs = self._consumer.consume(CONSUME_BATCH, POLL_INTERVAL)
            if self._client_fatal is not None:
                raise self._client_fatal
            items: list[tuple[Message, int]] = []
            failure: ReaderError | None = None
            for msg in msgs:
                try:
                    taken = self._take(msg, dedup)
                except ReaderError as exc:
                    failure = exc
                    break
                if taken is not None:
                    items.append((taken, len(taken.value)))
            del msgs
            # what came before a message that stops the reader is queued first (it is applied before the stop)
            if items and not self.queue.put_many(items):
                raise _StoppedError
            if failure is not None:
                raise failure

    def _take(self, msg: Any, dedup: Dedup) -> Message | None:
        """The Message of one consumed message; None for a duplicate, an end of partition or a retriable
        error (logged); ReaderError when reading cannot go on."""
        err = msg.error()
        if err is not None:
            self._check_error(err)
            return None
        offset = msg.offset()
        ts = self._commit_ts(msg)
        self.position = offset + 1
        self.last_error = ""  # reading again
        if not dedup.accept(ts):
            self._on_duplicate()
            log.info("skip repeated binlog commit_ts=%d offset=%d (last taken %d)", ts, offset, dedup.last)
            return None
        self.received_ts = ts
        value = bytes(msg.value() or b"")
        if len(value) > self.up.kafka_max_message_size:
            raise ReaderError(
                f"message at offset {offset} of topic {self.topic} partition {PARTITION} is {len(value)} bytes: "
                f"the topic holds a message larger than up.kafka-max-message-size "
                f"({self.up.kafka_max_message_size} bytes) allows; raise it"
            )
        return Message(offset, ts, value)

    def _cached_watermark(self, tp: Any) -> None:
        try:
            _, high = self._consumer.get_watermark_offsets(tp, cached=True)
        except self._ck.KafkaException:
            return
        if high is not None and high >= 0:
            self.high_watermark = int(high)

    def _commit_ts(self, msg: Any) -> int:
        try:
            return message_commit_ts(msg.headers(), msg.value())
        except CodecError as exc:
            raise ReaderError(
                f"message at offset {msg.offset()} of topic {self.topic} partition {PARTITION}: {exc}; the arbiter "
                "stops before it (its checkpoint stays below it)"
            ) from None

    def _poll(self) -> Any:
        """One message, or None (nothing yet, or a retriable error logged); _StoppedError once stopping."""
        self._check_stop()
        msg = self._consumer.poll(POLL_INTERVAL)
        if self._client_fatal is not None:
            raise self._client_fatal
        if msg is None:
            return None
        err = msg.error()
        if err is None:
            return msg
        self._check_error(err)
        return None

    def _check_error(self, err: Any) -> None:
        """A consumed error: ReaderError when fatal or a size refusal, else logged (librdkafka retries)."""
        if err.code() == self._ck.KafkaError._PARTITION_EOF:
            return
        if err.fatal() or self._too_large(err):
            raise self._failure(err)
        self._warn(f"reading topic {self.topic}: {err.str()}")

    def _too_large(self, err: Any) -> bool:
        """A fetch response (or message) librdkafka refused for its size: retrying cannot help."""
        ck = self._ck
        code = err.code()
        return bool(
            code == ck.KafkaError.MSG_SIZE_TOO_LARGE
            or (code == ck.KafkaError._BAD_MSG and "receive.message.max.bytes" in err.str())
        )

    def _failure(self, err: Any) -> ReaderError:
        if self._too_large(err):
            return ReaderError(
                f"reading topic {self.topic} partition {PARTITION}: {err.str()}: the topic holds a message larger "
                f"than up.kafka-max-message-size ({self.up.kafka_max_message_size} bytes) allows; raise it"
            )
        return ReaderError(f"reading topic {self.topic} partition {PARTITION}: the Kafka client failed: {err.str()}")

    # ---------------------------------------------------------------------------------------- helpers
    def _error(self, err: Any) -> None:
        """librdkafka's error callback (on the thread that polls): brokers down, connection failures."""
        text = err.str() if hasattr(err, "str") else str(err)
        if self._ck is not None and (err.fatal() or self._too_large(err)):
            if self._client_fatal is None:
                self._client_fatal = self._failure(err)
            return
        self._warn(f"Kafka at {self.up.brokers}: {text}; retrying")

    def _warn(self, text: str) -> None:
        self.last_error = text
        now = time.monotonic()
        if now - self._last_warning >= WARN_INTERVAL:
            self._last_warning = now
            log.warning("%s", text)

    def _retry(self, what: str, fn: Callable[[], Any]) -> Any:
        while True:
            self._check_stop()
            try:
                return fn()
            except self._ck.KafkaException as exc:
                self._warn(f"cannot {what} of {self.up.brokers}: {_kafka_text(exc)}; retrying")
            self._sleep(RETRY_INTERVAL)

    def _check_stop(self) -> None:
        if self._stop.is_set():
            raise _StoppedError

    def _sleep(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise _StoppedError

    def close(self) -> None:
        """Stop the thread and close the consumer; idempotent.  Close the queue (or its intake) first: a
        put waiting for room holds the thread."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception as exc:  # closing must not hide why we stop
                log.debug("closing the Kafka consumer: %s", exc)


def _kafka_text(exc: BaseException) -> str:
    args = getattr(exc, "args", ())
    err: Any = args[0] if args else None
    return str(err.str()) if err is not None and hasattr(err, "str") else str(exc)
