"""`ArbiterApp`: Kafka topic (the drainer's kafka sink) -> MySQL, with a checkpoint per topic.

    KafkaReader ─► ByteQueue (up.queue-bytes) ─► applier: decode ─► MySQLSink (loader) ─► downstream
    (partition 0, from the first                 (drainer.decode_record)        │ on_success(commit_ts)
     commit_ts above the checkpoint)                                            ▼
                                                    saver, every SAVE_INTERVAL: arbiter_checkpoint(ts, 1)

Start-up (`start()`): the downstream (the checkpoint table created if missing, the topic's row
read; none: `up.initial-commit-ts`) -> the Kafka brokers answer within `up.connect-timeout` ->
the loader's connections -> the row saved with status 1 -> HTTP on `addr` -> saver, applier and
reader threads.  Any failure here is one error line and exit status 1.

Safe mode: `[down] safe-mode`, or, when the row said status 1 (the last run did not stop cleanly,
so transactions above its ts may be partly applied), on for `INIT_SAFE_MODE_DURATION` (5 minutes,
as the original) from the first transaction handed to the loader, and then as configured.

The checkpoint is the last commit_ts the loader reported applied (with everything before it), saved
every second while it moves; it is never ahead of the downstream and never moves back.  A DDL is a
barrier with a checkpoint on each side: everything before it is applied and the checkpoint saved there
before the DDL runs, so a crash after it never replays DMLs of the old table shape against the new one
(a dropped column fails every restart); the replay starts at the DDL itself, whose repeat fails with an
ignorable "already exists / does not exist" error.

Shut-down (`close()`, idempotent, each step logged): 1. stop reading Kafka (what the queue holds is
dropped: it is above the checkpoint and read again next time); 2. stop the applier; 3. wait for the
loader to apply what it holds (`FLUSH_TIMEOUT`); 4. save the row: status 0 when everything handed to
the loader is applied, 1 when the loader failed (the downstream may hold part of what is above ts);
5. close the loader and stop HTTP.  SIGTERM / SIGINT exit 0.  A message that is not a binlog stops
the arbiter with exit status 1, after what came before it is applied (when the reader met it, the
queue is drained first): the row's ts stays below it, so the next start meets it again.  A
downstream error stops it with exit status 1 and status 1.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

from arbiter.bytequeue import ByteQueue
from arbiter.checkpoint import STATUS_NORMAL, STATUS_RUNNING, CheckpointError, MySQLCheckpoint
from arbiter.config import ArbiterConfig
from arbiter.http_api import start_http
from arbiter.metrics import ArbiterMetrics
from arbiter.position import parse_binlog
from arbiter.reader import KafkaReader, Message, ReaderError
from common import tso
from common.cli import import_extra
from common.daemon import need, shutdown_step
from common.errors import BinlogError, CodecError
from common.events import Txn
from common.httpserver import StatusServer
from drainer import MySQLSink, ShapeCache, SinkError, decode_record

__all__ = ["INIT_SAFE_MODE_DURATION", "ArbiterApp"]

log = logging.getLogger(__name__)

INIT_SAFE_MODE_DURATION: Final = 300.0
"""Seconds of safe mode after a start that finds status 1 (the original's 5 minutes)."""
SAVE_INTERVAL: Final = 1.0
"""Seconds between checkpoint saves (the original's 1 s)."""
FLUSH_TIMEOUT: Final = 300.0
"""Seconds a stop waits for the loader to apply what it holds."""
APPLY_POLL: Final = 0.2
WARN_INTERVAL: Final = 10.0


class ArbiterApp:
    """One arbiter process's parts and lifecycle; also the HTTP API's backend."""

    def __init__(
        self,
        cfg: ArbiterConfig,
        *,
        safe_mode_duration: float = INIT_SAFE_MODE_DURATION,
        save_interval: float = SAVE_INTERVAL,
    ) -> None:
        self.cfg = cfg
        self.topic = cfg.up.topic
        self._safe_mode_duration = safe_mode_duration
        self._save_interval = save_interval
        self._shutdown = threading.Event()
        self._close_lock = threading.Lock()
        self._closed = False
        self.fatal: BaseException | None = None
        self.queue: ByteQueue[Message] = ByteQueue(cfg.up.queue_bytes)
        self.metrics = ArbiterMetrics(lambda: self.queue.nbytes, self._loader_bytes)
        self.sink: MySQLSink | None = None
        self.checkpoint: MySQLCheckpoint | None = None
        self.reader: KafkaReader | None = None
        self.http: StatusServer | None = None
        self._applier: threading.Thread | None = None
        self._applier_stop = threading.Event()
        self._saver: threading.Thread | None = None
        self._saver_stop = threading.Event()
        self._marked_running = False
        self._drain = False
        """Apply what the queue holds before stopping (the reader failed; everything queued is good)."""
        self._safe_until: float | None = None
        self._safe_period_pending = False
        """The forced safe mode's period is still to start: it counts from the first transaction handed to
        the loader, so a start that waits for the broker or the topic does not use up the replay's cover."""
        self._last_save_warning = 0.0
        self._save_lock = threading.Lock()
        """The applier's barrier saves and the saver thread share the checkpoint's one connection."""
        self.applied_ts = 0
        self.saved_ts = 0
        self.saved_status = STATUS_NORMAL
        self.safe_mode = cfg.down.safe_mode
        self.duplicates = 0

    # ------------------------------------------------------------------------------------ start
    def start(self) -> None:
        """Build and start everything; on failure what was built is closed and the error raised."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        cfg, down = self.cfg, self.cfg.down
        import_extra("confluent_kafka", "confluent-kafka", "kafka")  # a missing package first, before any I/O
        self.sink = sink = MySQLSink(
            host=down.host,
            port=down.port,
            user=down.user,
            password=cfg.down_password,
            worker_count=down.worker_count,
            txn_batch=down.batch_size,
            safe_mode=down.safe_mode,
            max_inflight_bytes=down.max_inflight_bytes,
            tls=cfg.down_tls(),
        )
        sink.set_observer(self.metrics)
        self.checkpoint = cp = MySQLCheckpoint(
            sink.connect, self.topic, schema=down.checkpoint_schema, where=down.where
        )
        cp.ensure()
        row = cp.load()
        unclean = False
        if row is None:
            start_ts = cfg.up.initial_commit_ts
            log.info(
                "no checkpoint for topic %s in %s: starting after up.initial-commit-ts %d",
                self.topic,
                cp.table,
                start_ts,
            )
        else:
            start_ts, unclean = row.ts, row.status == STATUS_RUNNING
            self.saved_status = row.status
            log.info("checkpoint topic=%s ts=%d status=%d", self.topic, row.ts, row.status)
        self.applied_ts = self.saved_ts = start_ts
        self.metrics.saved(start_ts)

        self.reader = reader = KafkaReader(
            cfg.up,
            self.queue,
            on_fatal=self._on_reader_fatal,
            on_duplicate=self._on_duplicate,
            kafka_log_on=cfg.open_sarama_log,
        )
        reader.connect()
        if unclean and not down.safe_mode:
            sink.set_safe_mode(True)
            self.safe_mode = True
            self._safe_period_pending = True  # the period starts with the first transaction handed over
            log.info(
                "the last run did not stop cleanly (checkpoint status 1): safe mode on for %gs from the first "
                "transaction, then [down] safe-mode (%s)",
                self._safe_mode_duration,
                down.safe_mode,
            )
        try:
            sink.start(self._on_success)
        except SinkError as exc:
            raise SinkError(f"cannot start the loader on [down] {down.where}: {exc}") from None
        cp.save(start_ts, STATUS_RUNNING)
        self._marked_running = True
        self.saved_status = STATUS_RUNNING
        self.http = start_http(self, cfg.addr)
        self._saver = threading.Thread(target=self._save_loop, name="arbiter-checkpoint", daemon=True)
        self._saver.start()
        self._applier = threading.Thread(target=self._apply_loop, name="arbiter-apply", daemon=True)
        self._applier.start()
        reader.start(start_ts)
        log.info(
            "arbiter is running: topic %s from commit_ts above %d into %s, HTTP %s",
            self.topic,
            start_ts,
            down.where,
            self.http.addr,
        )

    # ------------------------------------------------------------------------------------ apply
    def _apply_loop(self) -> None:
        shapes = ShapeCache()
        sink = need(self.sink, "the loader")
        try:
            while not self._applier_stop.is_set():
                msg = self.queue.get(APPLY_POLL)
                if msg is None:
                    if self.queue.finished:
                        return
                    continue
                txn = decode_message(msg, shapes, self.topic)
                del msg
                if self._safe_period_pending:
                    self._safe_period_pending = False
                    self._safe_until = time.monotonic() + self._safe_mode_duration
                ddl = txn.ddl is not None and not txn.ddl.skip
                if ddl and not self._barrier():
                    return
                sink.add(txn)
                self.metrics.handed(txn)
                if ddl and not self._barrier():
                    return
        except BaseException as exc:
            self._on_fatal(exc)

    def _barrier(self) -> bool:
        """Wait until the loader applied everything handed to it, then save the checkpoint there (see the
        module doc: a DDL is a barrier); False when stopping meanwhile."""
        sink = need(self.sink, "the loader")
        while True:
            if self._applier_stop.is_set():
                return False
            try:
                sink.flush(APPLY_POLL)
                break
            except TimeoutError:
                continue
        while not self._save(self.applied_ts, STATUS_RUNNING):
            # stopping (also while draining after a reader failure): the DDL stays above the checkpoint
            if self._shutdown.is_set() or self._applier_stop.wait(APPLY_POLL):
                return False
        return True

    def _on_success(self, commit_ts: int) -> None:
        """The loader applied `commit_ts` and everything before it (called in order, from its thread)."""
        self.applied_ts = commit_ts
        self.metrics.applied(commit_ts)

    def _on_duplicate(self) -> None:
        self.duplicates += 1
        self.metrics.duplicates.inc()

    # ------------------------------------------------------------------------------- checkpoint
    def _save_loop(self) -> None:
        while not self._saver_stop.wait(self._save_interval):
            sink = self.sink
            if sink is not None and sink.error() is not None:
                self._on_fatal(need(sink.error()))
                return
            self._end_safe_mode()
            ts = self.applied_ts
            if ts != self.saved_ts:
                self._save(ts, STATUS_RUNNING)

    def _end_safe_mode(self) -> None:
        if self._safe_until is None or time.monotonic() < self._safe_until:
            return
        self._safe_until = None
        self.safe_mode = self.cfg.down.safe_mode
        need(self.sink, "the loader").set_safe_mode(self.safe_mode)
        log.info("the safe mode period after an unclean stop is over: safe mode %s", "on" if self.safe_mode else "off")

    def _save(self, ts: int, status: int) -> bool:
        """Save (ts, status), never below what was saved (the saver may have read `applied_ts` before a
        barrier saved a later one); False when the downstream refused it."""
        with self._save_lock:
            ts = max(ts, self.saved_ts)
            try:
                need(self.checkpoint, "the checkpoint").save(ts, status)
            except CheckpointError as exc:
                now = time.monotonic()
                if now - self._last_save_warning >= WARN_INTERVAL:
                    self._last_save_warning = now
                    log.warning("%s; retrying", exc)
                return False
            self.saved_ts, self.saved_status = ts, status
            self.metrics.saved(ts)
            return True

    # -------------------------------------------------------------------------------------- run
    def run(self) -> int:
        """Run until SIGTERM / SIGINT or a failure, then close; the exit status."""
        self._shutdown.wait()
        self.close()
        return 1 if self.fatal is not None else 0

    def request_pause(self) -> None:
        """SIGTERM / SIGINT: stop cleanly."""
        self._shutdown.set()

    def _on_reader_fatal(self, exc: BaseException) -> None:
        """The reader cannot go on (a message that is not a binlog, a fatal client error): what it read
        before is applied before the arbiter stops."""
        if self.fatal is None:
            self._drain = True
        self._on_fatal(exc)

    def _on_fatal(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
            log.error("arbiter stops: %s", exc)
        self._shutdown.set()

    # ------------------------------------------------------------------------------------ close
    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._shutdown.set()
        drain = self._drain
        log.info("close 1/5: stop reading Kafka")
        if drain:
            self.queue.close_intake()
        else:
            self.queue.close()
        if self.reader is not None:
            shutdown_step("close the Kafka reader", self.reader.close)
        log.info("close 2/5: stop the applier%s", " once it has taken what was read" if drain else "")
        if not drain:
            self._applier_stop.set()
        if self._applier is not None:
            self._applier.join()
        self.queue.close()
        log.info("close 3/5: apply what the loader holds")
        sink = self.sink
        clean = sink is not None and sink.error() is None and self._marked_running
        if sink is not None and clean:
            try:
                sink.flush(FLUSH_TIMEOUT)
            except (BinlogError, TimeoutError) as exc:
                clean = False
                log.error("the loader could not apply what it holds: %s", exc)
        log.info("close 4/5: save the checkpoint")
        self._saver_stop.set()
        if self._saver is not None:
            self._saver.join()
        if self._marked_running:
            status = STATUS_NORMAL if clean else STATUS_RUNNING
            if not self._save(self.applied_ts, status):
                log.error("the checkpoint could not be saved at ts=%d status=%d", self.applied_ts, status)
            else:
                log.info("checkpoint saved topic=%s ts=%d status=%d", self.topic, self.applied_ts, status)
        log.info("close 5/5: close the loader, stop HTTP")
        if sink is not None:
            shutdown_step("close the loader", sink.close)
        if self.checkpoint is not None:
            shutdown_step("close the checkpoint", self.checkpoint.close)
        if self.http is not None:
            shutdown_step("stop HTTP", self.http.stop)
        log.info("arbiter closed")

    # ------------------------------------------------------------------------------------ HTTP
    def _loader_bytes(self) -> int:
        return 0 if self.sink is None else self.sink.inflight_bytes

    def status(self) -> dict[str, object]:
        reader = self.reader
        offset = -1 if reader is None else reader.position
        high = -1 if reader is None else reader.high_watermark
        applied = self.applied_ts
        return {
            "topic": self.topic,
            "partition": 0,
            "checkpoint_ts": self.saved_ts,
            "checkpoint_status": self.saved_status,
            "applied_ts": applied,
            "received_ts": 0 if reader is None else reader.received_ts,
            "offset": offset,
            "high_watermark": high,
            "lag_messages": max(0, high - offset) if offset >= 0 and high >= 0 else None,
            "lag_seconds": round(max(0.0, tso.lag_seconds(applied)), 3) if applied > 0 else None,
            "safe_mode": self.safe_mode,
            "queue_bytes": self.queue.nbytes,
            "loader_bytes": self._loader_bytes(),
            "duplicates": self.duplicates,
            "kafka_error": "" if reader is None else reader.last_error,
        }

    def metrics_text(self) -> bytes:
        return self.metrics.render()


def decode_message(msg: Message, shapes: ShapeCache, topic: str) -> Txn:
    """The transaction of one message; ReaderError naming its offset when it does not decode."""
    where = f"message at offset {msg.offset} of topic {topic}"
    try:
        b = parse_binlog(msg.value)
        if b.commit_ts != msg.commit_ts:
            raise CodecError(f"its header says commit_ts {msg.commit_ts}, its binlog {b.commit_ts}")
        return decode_record(b, shapes)
    except CodecError as exc:
        raise ReaderError(f"{where}: {exc}; the arbiter stops before it (its checkpoint stays below it)") from None
