"""The arbiter's pure parts: config, start-offset search, duplicates, commit_ts of a message, the byte queue."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from arbiter.app import ArbiterApp, decode_message
from arbiter.bytequeue import ByteQueue
from arbiter.config import DEFAULT_MAX_MESSAGE_SIZE, ArbiterConfig, load_config, parse_args
from arbiter.metrics import ArbiterMetrics
from arbiter.position import Dedup, first_offset_after, header_commit_ts, message_commit_ts
from arbiter.reader import Message, ReaderError, consumer_config
from common.errors import CodecError, ConfigError
from common.events import DML, DMLType, TableShape, Txn
from common.schema.model import ColumnInfo, IndexInfo, TableInfo
from common.schema.types import parse_type
from drainer.relay_codec import ShapeCache, encode_txn

JOIN = 5.0

# ---------------------------------------------------------------------------------------------- config


def test_defaults_are_the_originals() -> None:
    cfg = load_config(flags={"up.topic": "t"})
    assert cfg.addr == "127.0.0.1:8251"
    assert (cfg.up.kafka_addrs, cfg.up.kafka_version, cfg.up.initial_commit_ts) == ("127.0.0.1:9092", "0.8.2.0", 0)
    d = cfg.down
    assert (d.host, d.port, d.user, d.password) == ("localhost", 3306, "root", "")
    assert (d.worker_count, d.batch_size, d.safe_mode) == (16, 64, False)
    assert d.checkpoint_schema == "tidb_binlog"
    assert cfg.up.kafka_max_message_size == DEFAULT_MAX_MESSAGE_SIZE == 1 << 30
    assert cfg.metrics.interval == 15
    assert cfg.ignored_keys() == []


def test_topic_is_required() -> None:
    with pytest.raises(ConfigError, match=r"'up\.topic' is required"):
        load_config()


def test_toml_file_is_strict(tmp_path: Path) -> None:
    f = tmp_path / "arbiter.toml"
    f.write_text('[up]\ntopic = "t"\nkafka-adrs = "x:1"\n')
    with pytest.raises(ConfigError, match=r"unknown key 'up.kafka-adrs' \(did you mean 'up.kafka-addrs'\?\)"):
        load_config(f)


def test_the_original_sample_loads(tmp_path: Path) -> None:
    f = tmp_path / "arbiter.toml"
    f.write_text(
        '[up]\ninitial-commit-ts = 0\nkafka-addrs = "127.0.0.1:9092"\nkafka-version = "0.8.2.0"\ntopic = "x"\n'
        "message-buffer-size = 1\nsarama-buffer-size = 1\n"
        '[down]\nhost = "localhost"\nport = 3306\nuser = "root"\npassword = ""\n'
        '[metrics]\naddr = "127.0.0.1:9091"\ninterval = 15\n'
    )
    cfg = load_config(f)
    assert cfg.up.topic == "x"
    warnings = cfg.ignored_keys()
    assert len(warnings) == 3
    assert any("'metrics.addr' is ignored" in w for w in warnings)
    assert any("'up.message-buffer-size' is ignored" in w for w in warnings)


def test_the_sample_config_in_deploy_loads() -> None:
    cfg = load_config(Path(__file__).resolve().parents[2] / "deploy" / "arbiter.toml")
    assert cfg == ArbiterConfig(up=cfg.up)  # every other key at its default
    assert cfg.up.topic


@pytest.mark.parametrize(
    ("flags", "why"),
    [
        ({"up.kafka-version": "latest"}, "invalid value for 'up.kafka-version': expected a Kafka version"),
        ({"up.kafka-version": "2"}, "expected a Kafka version of dotted numbers"),
        ({"up.kafka-addrs": "a:1,b"}, "'b' is not host:port"),
        ({"up.kafka-addrs": " , "}, "must name at least one broker"),
        ({"up.kafka-max-message-size": "100"}, "invalid value for 'up.kafka-max-message-size': must be between 1024"),
        ({"up.kafka-max-message-size": "3GiB"}, "must be between 1024 and"),
        ({"up.initial-commit-ts": "-1"}, "'up.initial-commit-ts': must be >= 0"),
        ({"up.connect-timeout": "0s"}, "'up.connect-timeout': must be > 0"),
        ({"down.port": "0"}, "'down.port': must be a port number"),
        ({"down.worker-count": "0"}, "'down.worker-count': must be >= 1"),
        ({"down.checkpoint-schema": "a`b"}, "'down.checkpoint-schema': must be a schema name"),
        ({"down.encrypted_password": "not base64!"}, "'down.encrypted_password'"),
        ({"addr": "8251"}, "'addr': must be host:port"),
    ],
)
def test_bad_values_name_their_key(flags: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(flags={"up.topic": "t", **flags})
    assert why in str(info.value)


def test_environment_uses_the_original_prefix_and_flags_win() -> None:
    env = {"BINLOG_SERVER_UP_TOPIC": "from-env", "BINLOG_SERVER_DOWN_PORT": "3307"}
    cfg, _ = parse_args(["--down.port", "3308", "--up.kafka-addrs", "k1:9092, k2:9092"], env=env)
    assert cfg.up.topic == "from-env"
    assert cfg.down.port == 3308
    assert cfg.up.brokers == "k1:9092,k2:9092"


def test_consumer_is_sized_by_the_config() -> None:
    cfg = load_config(flags={"up.topic": "t", "up.kafka-max-message-size": "8MiB", "up.queue-bytes": "4MiB"})
    conf = consumer_config(cfg.up, kafka_log_on=True, error_cb=lambda err: None)
    assert conf["fetch.max.bytes"] == 8 << 20
    assert conf["receive.message.max.bytes"] == (8 << 20) + (1 << 20)
    assert conf["queued.max.messages.kbytes"] == 2048  # half: a batch taken from it shares the budget
    assert conf["enable.auto.commit"] is False
    assert conf["bootstrap.servers"] == "127.0.0.1:9092"


# --------------------------------------------------------------------------------------- start offset


class Topic:
    """A fake partition: offset -> commit_ts, counting reads (gaps allowed: the next message is read)."""

    def __init__(self, ts: dict[int, int]) -> None:
        self.ts = ts
        self.reads = 0

    def commit_ts_at(self, offset: int) -> int:
        self.reads += 1
        return self.ts[min(o for o in self.ts if o >= offset)]

    @property
    def bounds(self) -> tuple[int, int]:
        return min(self.ts), max(self.ts) + 1


def search(t: Topic, after: int) -> int:
    low, high = t.bounds
    return first_offset_after(low, high, after, t.commit_ts_at)


def test_search_finds_the_first_message_after_the_checkpoint_in_log_reads() -> None:
    t = Topic({o: 100 + 10 * o for o in range(1000)})
    assert search(t, 105) == 1
    assert search(t, 110) == 2
    assert search(t, 99) == 0
    assert search(t, 100 + 10 * 999) == 1000  # nothing after it: the end
    t.reads = 0
    assert search(t, 5000) == 491
    assert t.reads <= 11


def test_search_with_zero_reads_nothing() -> None:
    t = Topic({5: 10, 6: 20})
    assert search(t, 0) == 5
    assert t.reads == 0
    assert first_offset_after(7, 7, 123, t.commit_ts_at) == 7


def test_search_over_a_drainer_resend_never_skips_a_transaction() -> None:
    """The drainer restarted at its checkpoint 30 and sent 40, 50 again: every ts above a checkpoint is found
    at or after the offset the search gives (the duplicates are dropped later)."""
    seq = [10, 20, 30, 40, 50, 40, 50, 60, 70]
    t = Topic(dict(enumerate(seq)))
    for checkpoint in range(0, 80, 5):
        start = search(t, checkpoint)
        wanted = {ts for ts in seq if ts > checkpoint}
        assert wanted <= set(seq[start:]), (checkpoint, start)


def test_search_with_offset_gaps() -> None:
    t = Topic({0: 10, 5: 20, 6: 30, 20: 40})
    assert search(t, 20) == 6
    assert search(t, 30) == 7  # offsets 7..19 hold nothing: reading there yields offset 20
    assert search(t, 40) == 21


def test_dedup_drops_what_is_not_above_the_last() -> None:
    d = Dedup(30)
    assert [d.accept(ts) for ts in (20, 30, 40, 40, 35, 50)] == [False, False, True, False, False, True]
    assert (d.last, d.skipped) == (50, 4)


# ------------------------------------------------------------------------------------ message commit_ts


def table() -> TableShape:
    ct, canonical = parse_type("bigint")
    col = ColumnInfo(id=1, name="id", offset=0, type_text=canonical, ctype=ct)
    info = TableInfo(id=1, name="t", columns=(col,), indices=(IndexInfo(1, "PRIMARY", ("id",), True, True),))
    return TableShape.of("db", info)


def record(ts: int, *ids: int) -> bytes:
    s = table()
    payload = encode_txn(Txn(ts, dmls=[DML(DMLType.INSERT, s, values=(i,), commit_ts=ts) for i in ids]))
    assert payload is not None
    return payload


def test_commit_ts_from_the_header_else_the_binlog() -> None:
    assert header_commit_ts(None) is None
    assert header_commit_ts([("other", b"1")]) is None
    assert header_commit_ts([("other", b"1"), ("commit_ts", b"417455000000000000")]) == 417455000000000000
    assert message_commit_ts([("commit_ts", b"42")], b"") == 42  # the header alone: nothing decoded
    assert message_commit_ts(None, record(77, 1)) == 77


@pytest.mark.parametrize(
    ("headers", "value", "why"),
    [
        ([("commit_ts", b"12a")], b"", "header commit_ts is not a decimal commit_ts: b'12a'"),
        ([("commit_ts", None)], b"", "not a decimal commit_ts"),
        ([("commit_ts", b"-5")], b"", "not a decimal commit_ts"),
        (None, b"\x08\x00\x10garbage\xff", "not a slave.binlog.Binlog (11 bytes)"),
        (None, b"", "not a slave.binlog.Binlog (0 bytes): no commit_ts"),
        (None, None, "no commit_ts"),
    ],
)
def test_a_message_without_a_usable_commit_ts_is_a_codec_error(
    headers: list[tuple[str, bytes | None]] | None, value: bytes | None, why: str
) -> None:
    with pytest.raises(CodecError) as info:
        message_commit_ts(headers, value)
    assert why in str(info.value)


def test_decode_message_gives_the_transaction() -> None:
    txn = decode_message(Message(3, 77, record(77, 1, 2)), ShapeCache(), "topic")
    assert txn.commit_ts == 77
    assert [d.values for d in txn.dmls] == [(1,), (2,)]


def test_decode_message_refuses_a_header_that_disagrees_and_garbage() -> None:
    with pytest.raises(ReaderError) as info:
        decode_message(Message(3, 78, record(77, 1)), ShapeCache(), "tp")
    assert "message at offset 3 of topic tp: its header says commit_ts 78, its binlog 77" in str(info.value)
    with pytest.raises(ReaderError) as info:
        decode_message(Message(9, 1, b"\xff\xff\xff"), ShapeCache(), "tp")
    assert "message at offset 9 of topic tp: not a slave.binlog.Binlog" in str(info.value)


def test_metrics_count_rows_and_transactions() -> None:
    m = ArbiterMetrics(lambda: 5, lambda: 7)
    s = table()
    m.handed(Txn(1, dmls=[DML(DMLType.INSERT, s, values=(1,)), DML(DMLType.DELETE, s, old_values=(1,))]))
    m.handed(Txn(2, dmls=[DML(DMLType.UPDATE, s, values=(2,), old_values=(1,)), DML(DMLType.INSERT, s, values=(3,))]))
    text = m.render().decode()
    assert 'binlog_arbiter_event{type="Insert"} 2.0' in text
    assert 'binlog_arbiter_event{type="Update"} 1.0' in text
    assert 'binlog_arbiter_event{type="Delete"} 1.0' in text
    assert 'binlog_arbiter_event{type="DDL"} 0.0' in text
    assert 'binlog_arbiter_event{type="Txn"} 2.0' in text
    assert 'binlog_arbiter_queue_size{name="kafka_reader"} 5.0' in text
    assert 'binlog_arbiter_queue_size{name="loader_input"} 7.0' in text


# ------------------------------------------------------------------------------------------ byte queue


def test_queue_is_bounded_by_bytes() -> None:
    q: ByteQueue[str] = ByteQueue(100)
    assert q.put("a", 60)
    done = threading.Event()

    def put() -> None:
        q.put("b", 60)
        done.set()

    t = threading.Thread(target=put)
    t.start()
    assert not done.wait(0.1)  # 120 > 100: waits
    assert (len(q), q.nbytes) == (1, 60)
    assert q.get(0) == "a"
    assert done.wait(JOIN)
    t.join(JOIN)
    assert q.nbytes == 60
    assert q.get(0) == "b"
    assert q.get(0.01) is None


def test_put_many_keeps_the_byte_bound_and_the_order() -> None:
    q: ByteQueue[int] = ByteQueue(100)
    assert q.put(0, 60)
    done = threading.Event()

    def put_many() -> None:
        q.put_many([(1, 30), (2, 30), (3, 40)])
        done.set()

    t = threading.Thread(target=put_many)
    t.start()
    taken: list[int] = []
    while len(taken) < 4:  # each item is admitted only with room for it; the taker sees them at once
        got = q.get(JOIN)
        assert got is not None
        taken.append(got)
        assert q.nbytes <= 100
    assert done.wait(JOIN)
    t.join(JOIN)
    assert taken == [0, 1, 2, 3]
    assert (len(q), q.nbytes) == (0, 0)


def test_put_many_stops_once_closed() -> None:
    q: ByteQueue[int] = ByteQueue(10)
    results: list[object] = []
    t = threading.Thread(target=lambda: results.append(q.put_many([(1, 10), (2, 10), (3, 10)])))
    t.start()
    deadline = time.monotonic() + JOIN
    while len(q) < 1 and time.monotonic() < deadline:  # the first is in, the second waits for room
        time.sleep(0.001)
    q.close()
    t.join(JOIN)
    assert results == [False]
    assert q.get(0) is None


def test_queue_admits_an_oversized_item_alone() -> None:
    q: ByteQueue[str] = ByteQueue(10)
    assert q.put("big", 1000)
    assert q.get(0) == "big"


def test_close_wakes_a_waiting_put_and_get() -> None:
    q: ByteQueue[str] = ByteQueue(10)
    q.put("a", 10)
    results: list[object] = []
    t = threading.Thread(target=lambda: results.append(q.put("b", 10)))
    t.start()
    q.close()  # whether the put is waiting yet or comes after: it returns False
    t.join(JOIN)
    assert results == [False]
    assert q.get(None) is None
    assert q.finished


def test_close_intake_lets_the_queue_drain() -> None:
    q: ByteQueue[int] = ByteQueue(100)
    for i in range(3):
        q.put(i, 10)
    q.close_intake()
    assert not q.put(9, 1)
    assert not q.finished
    assert [q.get(0), q.get(0), q.get(0)] == [0, 1, 2]
    assert q.get(None) is None
    assert q.finished


# ----------------------------------------------------------------------------------------- safe mode


class FakeSink:
    def __init__(self) -> None:
        self.safe: list[bool] = []

    def set_safe_mode(self, on: bool) -> None:
        self.safe.append(on)


@pytest.mark.parametrize("configured", [False, True])
def test_the_safe_mode_period_after_an_unclean_stop_ends_in_the_configured_value(configured: bool) -> None:
    app = ArbiterApp(load_config(flags={"up.topic": "t", "down.safe-mode": configured}))
    sink = FakeSink()
    app.sink = sink  # type: ignore[assignment]
    app.safe_mode = True
    app._safe_until = time.monotonic() + 60
    app._end_safe_mode()
    assert (sink.safe, app.safe_mode) == ([], True)  # not yet
    app._safe_until = time.monotonic() - 1
    app._end_safe_mode()
    assert (sink.safe, app.safe_mode) == ([configured], configured)
    app._end_safe_mode()
    assert sink.safe == [configured]  # once


# ------------------------------------------------------------------------------------------ DDL barrier


class _LaggingLoader:
    """A loader (our Sink interface) that applies what it holds only when flushed; records the events."""

    def __init__(self, app: ArbiterApp, events: list[tuple[str, int]]) -> None:
        self.app = app
        self.events = events
        self.held: list[int] = []

    def add(self, txn: Txn) -> None:
        self.events.append(("add", txn.commit_ts))
        self.held.append(txn.commit_ts)

    def flush(self, timeout: float | None = None) -> None:
        for ts in self.held:
            self.app._on_success(ts)
        self.held.clear()


class _Checkpoint:
    def __init__(self, events: list[tuple[str, int]]) -> None:
        self.events = events

    def save(self, ts: int, status: int) -> None:
        self.events.append(("save", ts))


def test_a_ddl_runs_only_after_everything_before_it_is_applied_and_the_checkpoint_saved_there() -> None:
    """Else a crash after the DDL replays DMLs of the old shape against the new table: a DML naming a
    dropped column fails at every restart (MySQL error 1054)."""
    from common.events import DDL
    from common.schema.infoschema import InfoSchema
    from common.schema.model import Job, JobType

    cfg, _ = parse_args(["--up.topic", "t"])
    app = ArbiterApp(cfg)
    events: list[tuple[str, int]] = []
    app.sink = _LaggingLoader(app, events)  # type: ignore[assignment]
    app.checkpoint = _Checkpoint(events)  # type: ignore[assignment]
    query = "ALTER TABLE t DROP COLUMN v"
    job = Job(2, JobType.DROP_COLUMN, 1, "db", 1, "t", 2, query)
    drop = encode_txn(Txn(20, ddl=DDL("db", "t", query, job, InfoSchema())))
    assert drop is not None
    for m in (Message(0, 10, record(10, 1)), Message(1, 20, drop), Message(2, 30, record(30, 2))):
        app.queue.put(m, len(m.value))
    app.queue.close_intake()
    app._apply_loop()
    assert app.fatal is None
    assert events == [("add", 10), ("save", 10), ("add", 20), ("save", 20), ("add", 30)]


def test_a_checkpoint_save_never_moves_it_back() -> None:
    cfg, _ = parse_args(["--up.topic", "t"])
    app = ArbiterApp(cfg)
    events: list[tuple[str, int]] = []
    app.checkpoint = _Checkpoint(events)  # type: ignore[assignment]
    assert app._save(50, 1)
    assert app._save(40, 1)  # the saver read applied_ts before a barrier saved 50
    assert events == [("save", 50), ("save", 50)]
    assert app.saved_ts == 50


def test_the_safe_mode_period_after_an_unclean_stop_counts_from_the_first_transaction() -> None:
    """A start that waits minutes for the broker or the topic must not use up the replay's safe mode."""
    cfg, _ = parse_args(["--up.topic", "t"])
    app = ArbiterApp(cfg, safe_mode_duration=60)
    events: list[tuple[str, int]] = []
    app.sink = _LaggingLoader(app, events)  # type: ignore[assignment]
    app._safe_period_pending = True  # what start() leaves after finding status 1
    app._end_safe_mode()
    assert app._safe_until is None  # nothing read yet: the period has not started
    app.queue.put(Message(0, 10, record(10, 1)), 1)
    app.queue.close_intake()
    before = time.monotonic()
    app._apply_loop()
    until: float | None = app._safe_until  # (a fresh name: mypy keeps the None narrowed from above)
    assert until is not None
    assert until >= before + 60
    assert events == [("add", 10)]


class _DownCheckpoint:
    def save(self, ts: int, status: int) -> None:
        from arbiter.checkpoint import CheckpointError

        raise CheckpointError("cannot save the checkpoint: MySQL error 2013: Lost connection")


def test_a_ddl_whose_barrier_cannot_be_saved_is_not_run_while_stopping() -> None:
    """Draining after a reader failure: a checkpoint that cannot be saved must not hold the stop forever."""
    from common.events import DDL
    from common.schema.infoschema import InfoSchema
    from common.schema.model import Job, JobType

    cfg, _ = parse_args(["--up.topic", "t"])
    app = ArbiterApp(cfg)
    events: list[tuple[str, int]] = []
    app.sink = _LaggingLoader(app, events)  # type: ignore[assignment]
    app.checkpoint = _DownCheckpoint()  # type: ignore[assignment]
    query = "ALTER TABLE t DROP COLUMN v"
    drop = encode_txn(
        Txn(20, ddl=DDL("db", "t", query, Job(2, JobType.DROP_COLUMN, 1, "db", 1, "t", 2, query), InfoSchema()))
    )
    assert drop is not None
    for m in (Message(0, 10, record(10, 1)), Message(1, 20, drop)):
        app.queue.put(m, len(m.value))
    app.queue.close_intake()
    app._shutdown.set()  # the reader failed: the queue is drained, nothing more
    app._apply_loop()
    assert events == [("add", 10)]  # the DDL did not run: it stays above the checkpoint
