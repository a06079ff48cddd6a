"""Benchmark of the Kafka path: the drainer's Kafka sink vs a bare producer, the arbiter vs the MySQL sink.

A Tansu broker (tests/harness/kafka.py, memory storage) started here and killed with SIGKILL at the end,
and MariaDB at ``--mysql`` (default ``root@127.0.0.1:3306``) with a fresh database ``bench_kafka_<hex>``,
dropped at the end.  The history: ``--txns`` upstream transactions of ``--rows-per-txn`` (10) INSERTs
into ``sbtest(id BIGINT PRIMARY KEY, k INT, c CHAR(120), pad CHAR(60))`` (sysbench's rows, about 200
bytes), commit_ts ascending, built before any clock starts.

1. ``sink``, for protocol ``secondary-binlog`` and ``canal-json``: messages/s and MB/s (message values)
   onto a fresh topic each run:

   * ``sink``: the drainer's KafkaSink built by ``drainer.sinks.kafka.kafka_sink`` from a ``[syncer.to]``
     with defaults (as the drainer builds it); ``start()`` (connect, create the topic) is not timed;
     timed: ``add()`` of every transaction (encoding included) and ``flush()`` until every commit_ts is
     reported;
   * ``bare``: confluent-kafka's Producer with the sink's librdkafka settings (``producer_config``:
     idempotence, acks=all, the same batch and queue settings, librdkafka's default linger) producing
     the same messages, encoded before the clock with the same encoder (canal-json's ``ts`` field is
     the encoding time, so those bytes differ in that field only), with the same ``commit_ts`` header,
     to partition 0, then ``flush()``; no delivery callback;
   * ``sink_pre``: the sink again, its encoder replaced by a lookup of the pre-encoded messages: the
     sink's own cost (ack window, delivery callbacks, reporting) without the encoding.

   ``ratio`` = sink / bare (target >= 0.7); ``ratio_pre`` = sink_pre / bare.  Checks (untimed): every
   topic read to its end holds every message once, ``commit_ts`` headers in order; the sink reported
   every commit_ts, in order.
2. ``arbiter``: rows/s applying the history into a freshly truncated table (and a fresh checkpoint):

   * ``arbiter``: the real ``python -m arbiter.main`` process (its defaults: 16 workers, batch 64)
     reading a topic pre-filled (untimed) with the history's secondary-binlog messages.  Its
     ``/status`` is polled (every ``START_POLL`` s until ``received_ts`` moves, then every
     ``STATUS_POLL`` s); the rate counts from the first poll that shows a message received (rows
     already applied by then subtracted, known from the history) to the first poll that shows the last
     commit_ts applied.  Process start, connecting, finding the start offset are excluded;
     ``arbiter_start_s`` (spawn to that first poll) is reported apart;
   * ``mysql_sink``: ``MySQLSink`` with the arbiter's worker count, batch size and byte budget, in this
     process (connections opened by ``start()``, untimed); from the first ``add()`` until ``flush()``
     returns with every commit_ts reported.

   ``ratio`` = arbiter / mysql_sink (target >= 0.8).  Checks: row count and SUM(k) after each run; the
   arbiter exits 0 on SIGTERM.  ``cpu_us_per_row``: CPU per row of the arbiter process and of the broker over
   the timed span, and of this process over the MySQL sink's run (where to look when the ratio is low).

Runs alternate (baseline first in even runs, last in odd ones); medians over ``--runs`` (5; ``--quick``:
2 runs of a small history).  The machine's load average is recorded before and after.  One JSON object
goes to stdout, progress to stderr; exit status 1 if a check failed.  Targets are reported, not asserted.

Usage: ``python bench/kafka_sink.py [--txns N] [--runs N] [--quick] [--parts sink,arbiter]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import random
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's packages, also when the venv's editable install is another one

import pymysql  # noqa: E402
from _pumpbench import TempDir, cpu_seconds, env_info, install_sigterm, log, median  # noqa: E402

from arbiter.config import DEFAULT_BATCH_SIZE, DEFAULT_MAX_INFLIGHT_BYTES, DEFAULT_WORKER_COUNT  # noqa: E402
from common import tso  # noqa: E402
from common.events import DML, DMLType, TableShape, Txn  # noqa: E402
from common.schema.infoschema import InfoSchema  # noqa: E402
from drainer.config_syncer import DEFAULT_MAX_INFLIGHT_BYTES as DRAINER_INFLIGHT  # noqa: E402
from drainer.config_syncer import ToConfig  # noqa: E402
from drainer.sinks.kafka import COMMIT_TS_HEADER, KafkaSink, kafka_sink  # noqa: E402
from drainer.sinks.kafka_producer import producer_config  # noqa: E402
from drainer.sinks.mysql import MySQLSink  # noqa: E402
from tests.harness.kafka import TansuBroker  # noqa: E402
from tools.procs import ManagedProcess, free_port, port_open, python_module_argv  # noqa: E402
from upstream.ddl import Column, Planner  # noqa: E402
from upstream.workloads.gen import sysbench_text  # noqa: E402

SINK_TARGET: Final = 0.7
ARBITER_TARGET: Final = 0.8
PROTOCOLS: Final = ("secondary-binlog", "canal-json")
PARTS: Final = ("sink", "arbiter")
STATUS_POLL: Final = 0.05
"""Seconds between the arbiter's /status polls once it runs (more often would take CPU from it)."""
START_POLL: Final = 0.01
"""Seconds between the polls until the arbiter has received its first message."""
WAIT: Final = 600.0
"""Seconds any one timed section may take before the run is abandoned."""
READ_TIMEOUT: Final = 120.0
COLUMNS: Final = [
    Column("id", "BIGINT"),
    Column("k", "INT", nullable=False, default=0),
    Column("c", "CHAR(120)", nullable=False, default=""),
    Column("pad", "CHAR(60)", nullable=False, default=""),
]
ROW_BYTES: Final = 8 + 4 + 120 + 60
_QUIET: Final = logging.getLogger("bench.librdkafka")
_QUIET.setLevel(logging.ERROR)  # the sink's settings draw librdkafka's deprecation notes (kafka-version 0.8.2)
Row = tuple[int, int, str, str]
Message = tuple[bytes, list[tuple[str, str | bytes | None]]]


def _server(text: str) -> dict[str, Any]:
    user_pw, _, hostport = text.rpartition("@")
    user, _, password = (user_pw or "root").partition(":")
    host, _, port = hostport.partition(":")
    return {"host": host or "127.0.0.1", "port": int(port or 3306), "user": user or "root", "password": password}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------------------------------ topics


def topic_headers(broker: TansuBroker, topic: str, expected: int) -> list[int]:
    """The commit_ts headers of every message of partition 0 (read to the end of the partition); what
    was read when `expected` messages did not arrive in time."""
    try:
        msgs = broker.read_all(topic, at_least=expected, timeout=READ_TIMEOUT)
    except TimeoutError as exc:
        log(f"reading {topic}: {exc}")
        return []
    headers = [dict(m.headers() or []).get(COMMIT_TS_HEADER) for m in msgs]
    return [int(ts) if isinstance(ts, bytes) else -1 for ts in headers]


def check_topic(got: list[int], want: list[int], what: str) -> str | None:
    if got == want:
        return None
    return f"{what}: the topic holds {len(got)} messages, expected {len(want)} (or commit_ts headers out of order)"


# ------------------------------------------------------------------------------------------- bench


class Bench:
    def __init__(self, args: argparse.Namespace, broker: TansuBroker, workdir: Path) -> None:
        self.args = args
        self.broker = broker
        self.workdir = workdir
        self.server = _server(args.mysql)
        self.db = f"bench_kafka_{uuid.uuid4().hex[:8]}"
        self.errors: list[str] = []
        schema = InfoSchema()
        ids = itertools.count(1)
        schema.apply(Planner(schema, lambda n: next(ids), start_ts=1).create_database(self.db))
        job = Planner(schema, lambda n: next(ids), start_ts=1).create_table(
            self.db, "sbtest", COLUMNS, primary_key=["id"]
        )
        schema.apply(job)
        self.create_query = job.query
        self.shape = TableShape.of(self.db, schema.table(self.db, "sbtest"))
        self.rows, self.txns = self.history()
        self.want_ts = [t.commit_ts for t in self.txns]
        self.topics = itertools.count(1)
        self.warmup = self.topic("warmup")
        broker.create_topic(self.warmup)

    def history(self) -> tuple[list[Row], list[Txn]]:
        rng = random.Random(self.args.seed)
        per = self.args.rows_per_txn
        base_ms = tso.now_ms() - 3_600_000
        rows: list[Row] = []
        txns: list[Txn] = []
        for t in range(self.args.txns):
            ts = tso.compose(base_ms + t, 0)
            dmls = []
            for i in range(t * per + 1, (t + 1) * per + 1):
                r = (i, rng.randint(0, 1 << 30), sysbench_text(rng, 120), sysbench_text(rng, 60))
                rows.append(r)
                dmls.append(DML(DMLType.INSERT, self.shape, values=r, size=ROW_BYTES, commit_ts=ts))
            txns.append(Txn(commit_ts=ts, dmls=dmls, size=per * ROW_BYTES))
        return rows, txns

    def topic(self, what: str) -> str:
        return f"bench-{what}-{next(self.topics)}"

    # ------------------------------------------------------------------------------ sink vs bare
    def to_config(self, topic: str, protocol: str) -> ToConfig:
        return ToConfig(kafka_addrs=self.broker.bootstrap, topic_name=topic, protocol=protocol)  # type: ignore[arg-type]

    def build_sink(self, topic: str, protocol: str) -> KafkaSink:
        return kafka_sink(self.to_config(topic, protocol), cluster_id=1, max_inflight_bytes=DRAINER_INFLIGHT)

    def encode_all(self, protocol: str) -> list[list[Message]]:
        encode = self.build_sink("unused", protocol)._encode  # the sink's own encoder; nothing connects
        return [[(m, [(COMMIT_TS_HEADER, str(t.commit_ts).encode())]) for m in encode(t)] for t in self.txns]

    def run_sink(self, protocol: str, pre: dict[int, list[bytes]] | None) -> tuple[float, str]:
        topic = self.topic("sink-pre" if pre else "sink")
        sink = self.build_sink(topic, protocol)
        if pre is not None:
            sink._encode = lambda txn: pre[txn.commit_ts]  # the sink's cost without encoding
        reported: list[int] = []
        sink.start(reported.append)
        try:
            t0 = time.perf_counter()
            for txn in self.txns:
                sink.add(txn)
            sink.flush(WAIT)
            elapsed = time.perf_counter() - t0
        finally:
            sink.close()
        if reported != self.want_ts:
            self.errors.append(f"{protocol} sink: reported {len(reported)} commit_ts of {len(self.want_ts)}, in order")
        return elapsed, topic

    def run_bare(self, protocol: str, messages: list[Message]) -> tuple[float, str]:
        from confluent_kafka import Producer

        topic = self.topic("bare")
        self.broker.create_topic(topic)
        conf = self.to_config(topic, protocol)
        producer = Producer(
            producer_config(
                addrs=conf.kafka_addrs,
                client_id=conf.kafka_client_id,
                kafka_version=conf.kafka_version,
                max_messages=conf.kafka_max_messages,
                max_message_size=conf.kafka_max_message_size,
                max_inflight_bytes=DRAINER_INFLIGHT,
            ),
            logger=_QUIET,
        )
        # connected, and the idempotent producer's id obtained, before the clock
        producer.produce(self.warmup, value=b"warm-up", partition=0)
        if producer.flush(30):
            raise RuntimeError("the bare producer's warm-up message was not acknowledged")
        produce, poll = producer.produce, producer.poll
        t0 = time.perf_counter()
        for value, headers in messages:
            while True:
                try:
                    produce(topic, value=value, partition=0, headers=headers)
                    break
                except BufferError:
                    poll(0.05)
        left = producer.flush(WAIT)
        elapsed = time.perf_counter() - t0
        if left:
            self.errors.append(f"{protocol} bare: {left} messages not flushed")
        return elapsed, topic

    def measure_sink(self, protocol: str) -> dict[str, Any]:
        per_txn = self.encode_all(protocol)
        messages = [m for ms in per_txn for m in ms]
        want_headers = [t.commit_ts for t, ms in zip(self.txns, per_txn, strict=True) for _ in ms]
        pre = {t.commit_ts: [m for m, _ in ms] for t, ms in zip(self.txns, per_txn, strict=True)}
        count, nbytes = len(messages), sum(len(m) for m, _ in messages)
        log(f"{protocol}: {count} messages, {nbytes / 1e6:.1f} MB")
        secs: dict[str, list[float]] = {"bare": [], "sink": [], "sink_pre": []}
        for run in range(self.args.runs):
            order = ("bare", "sink", "sink_pre") if run % 2 == 0 else ("sink_pre", "sink", "bare")
            for mode in order:
                if mode == "bare":
                    elapsed, topic = self.run_bare(protocol, messages)
                else:
                    elapsed, topic = self.run_sink(protocol, pre if mode == "sink_pre" else None)
                secs[mode].append(elapsed)
                bad = check_topic(topic_headers(self.broker, topic, count), want_headers, f"{protocol} {mode}")
                if bad:
                    self.errors.append(bad)
                per_s = count / elapsed
                log(
                    f"{protocol:16} run {run + 1} {mode:8} {per_s:7.0f} msgs/s {per_s * nbytes / count / 1e6:5.1f} MB/s"
                )

        def rate(mode: str) -> float:
            return median([count / s for s in secs[mode]])

        sink, bare, sink_pre = rate("sink"), rate("bare"), rate("sink_pre")
        return {
            "messages": count,
            "bytes": nbytes,
            "sink_msgs_per_s": round(sink),
            "sink_mb_per_s": round(sink * nbytes / count / 1e6, 2),
            "bare_msgs_per_s": round(bare),
            "bare_mb_per_s": round(bare * nbytes / count / 1e6, 2),
            "ratio": round(sink / bare, 3),
            "sink_pre_msgs_per_s": round(sink_pre),
            "ratio_pre": round(sink_pre / bare, 3),
            "target_ratio": SINK_TARGET,
            "target_met": sink / bare >= SINK_TARGET,
            "runs_msgs_per_s": {k: [round(count / s) for s in v] for k, v in secs.items()},
        }

    # ------------------------------------------------------------------------ arbiter vs mysql sink
    def sql(self, *queries: str, db: str | None = None) -> tuple[Any, ...] | None:
        conn = pymysql.connect(**self.server, database=db, autocommit=True)
        try:
            with conn.cursor() as cur:
                for q in queries:
                    cur.execute(q)
                found: tuple[Any, ...] | None = cur.fetchone()
                return found
        finally:
            conn.close()

    def setup_db(self) -> None:
        self.sql(f"CREATE DATABASE `{self.db}` DEFAULT CHARACTER SET utf8mb4")
        self.sql(self.create_query, db=self.db)

    def drop_db(self) -> None:
        self.sql(f"DROP DATABASE IF EXISTS `{self.db}`")

    def reset(self) -> None:
        self.sql("TRUNCATE TABLE sbtest", "DROP TABLE IF EXISTS arbiter_checkpoint", db=self.db)

    def check_rows(self, what: str) -> None:
        got = self.sql("SELECT COUNT(*), COALESCE(SUM(k), 0) FROM sbtest", db=self.db)
        want = (len(self.rows), sum(r[1] for r in self.rows))
        if got is None or tuple(map(int, got)) != want:
            self.errors.append(f"{what}: table has (rows, SUM(k)) = {got}, expected {want}")

    def rows_at(self, ts: int) -> int:
        """Rows applied once everything up to commit_ts `ts` is."""
        n = 0
        for t in self.txns:
            if t.commit_ts > ts:
                break
            n += len(t.dmls)
        return n

    def run_mysql_sink(self) -> tuple[float, float]:
        """(rows/s from the first add() to the last success report, this process's CPU µs per row)."""
        sink = MySQLSink(
            **self.server,
            worker_count=DEFAULT_WORKER_COUNT,
            txn_batch=DEFAULT_BATCH_SIZE,
            max_inflight_bytes=DEFAULT_MAX_INFLIGHT_BYTES,
        )
        reported: list[int] = []
        sink.start(reported.append)
        try:
            t0, cpu0 = time.perf_counter(), time.process_time()
            for txn in self.txns:
                sink.add(txn)
            sink.flush(WAIT)
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            sink.close()
        if reported != self.want_ts:
            self.errors.append("mysql sink: success reports missing or out of order")
        return len(self.rows) / elapsed, cpu * 1e6 / len(self.rows)

    def run_arbiter(self, topic: str) -> tuple[float, float, float, float]:
        """(rows/s from the first /status that shows a message received to the first that shows the last
        commit_ts applied, rows applied by the first subtracted; seconds from spawn to that first one;
        CPU µs per row of the arbiter and of the broker over the same span)."""
        port = free_port()
        argv = python_module_argv(
            "arbiter.main",
            "--up.topic",
            topic,
            "--up.kafka-addrs",
            self.broker.bootstrap,
            "--down.host",
            self.server["host"],
            "--down.port",
            str(self.server["port"]),
            "--down.user",
            self.server["user"],
            "--down.password",
            self.server["password"],
            "--down.checkpoint-schema",
            self.db,
            "--addr",
            f"127.0.0.1:{port}",
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = ManagedProcess("arbiter", argv, self.workdir / f"arbiter-{port}.log", env=env, cwd=ROOT)
        url = f"http://127.0.0.1:{port}/status"
        last = self.want_ts[-1]
        t_spawn = time.perf_counter()
        proc.start()
        try:
            proc.wait_ready(lambda: port_open("127.0.0.1", port), 60)
            first: tuple[float, int] | None = None
            pid, broker_pid = proc.pid, self.broker.process.pid
            assert pid is not None
            assert broker_pid is not None
            cpu0 = (0.0, 0.0)
            deadline = time.monotonic() + WAIT
            while True:
                with urllib.request.urlopen(url, timeout=5) as resp:
                    status = json.loads(resp.read())
                now = time.perf_counter()
                if first is None and int(status["received_ts"]) > 0:
                    first = (now, int(status["applied_ts"]))
                    cpu0 = (cpu_seconds(pid), cpu_seconds(broker_pid))
                if int(status["applied_ts"]) >= last:
                    cpu = (cpu_seconds(pid) - cpu0[0], cpu_seconds(broker_pid) - cpu0[1])
                    break
                if time.monotonic() > deadline or proc.proc is None or proc.proc.poll() is not None:
                    raise RuntimeError(f"arbiter did not reach commit_ts {last}; log tail:\n{proc.log_tail(40)}")
                time.sleep(STATUS_POLL if first else START_POLL)
        finally:
            code = proc.stop(30)
        if code != 0:
            self.errors.append(f"arbiter exited with status {code}")
        assert first is not None
        if first[1] >= last or now <= first[0]:  # all applied by the first poll: too short to time
            self.errors.append("arbiter: applied everything before the first /status poll; raise --txns")
            return float("nan"), first[0] - t_spawn, float("nan"), float("nan")
        moved = len(self.rows) - self.rows_at(first[1])
        return moved / (now - first[0]), first[0] - t_spawn, cpu[0] * 1e6 / moved, cpu[1] * 1e6 / moved

    def measure_arbiter(self) -> dict[str, Any]:
        topic = self.topic("arbiter")
        self.broker.create_topic(topic)
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.broker.bootstrap, "acks": "all", "linger.ms": 5})
        for value, headers in (m for ms in self.encode_all("secondary-binlog") for m in ms):
            while True:
                try:
                    producer.produce(topic, value=value, partition=0, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        if producer.flush(WAIT):
            raise RuntimeError("the arbiter's topic could not be filled")
        rates: dict[str, list[float]] = {"mysql_sink": [], "arbiter": []}
        start: list[float] = []
        cpu: dict[str, list[float]] = {"mysql_sink": [], "arbiter": [], "broker": []}
        for run in range(self.args.runs):
            order = ("mysql_sink", "arbiter") if run % 2 == 0 else ("arbiter", "mysql_sink")
            for mode in order:
                self.reset()
                if mode == "arbiter":
                    rate, started, own, broker = self.run_arbiter(topic)
                    start.append(started)
                    cpu["arbiter"].append(own)
                    cpu["broker"].append(broker)
                else:
                    rate, own = self.run_mysql_sink()
                    cpu["mysql_sink"].append(own)
                rates[mode].append(rate)
                self.check_rows(mode)
                log(f"arbiter run {run + 1} {mode:10} {rate:9.0f} rows/s")
        arbiter, mysql_sink = median(rates["arbiter"]), median(rates["mysql_sink"])
        return {
            "rows": len(self.rows),
            "workers": DEFAULT_WORKER_COUNT,
            "batch": DEFAULT_BATCH_SIZE,
            "arbiter_rows_per_s": round(arbiter),
            "mysql_sink_rows_per_s": round(mysql_sink),
            "ratio": round(arbiter / mysql_sink, 3),
            "arbiter_start_s": round(median(start), 2),
            "cpu_us_per_row": {k: round(median(v), 1) for k, v in cpu.items()},
            "target_ratio": ARBITER_TARGET,
            "target_met": arbiter / mysql_sink >= ARBITER_TARGET,
            "runs_rows_per_s": {k: [round(v) for v in vs] for k, vs in rates.items()},
        }


def _choices(text: str, allowed: Sequence[str], what: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    if not out or not set(out) <= set(allowed):
        raise argparse.ArgumentTypeError(f"{what}: choose from {','.join(allowed)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    ap.add_argument("--mysql", default="root@127.0.0.1:3306", help="user[:password]@host:port of the server")
    ap.add_argument("--txns", type=int, default=20_000, help="transactions in the history (default 20000)")
    ap.add_argument("--rows-per-txn", type=int, default=10, help="INSERTs per transaction (default 10)")
    ap.add_argument("--runs", type=int, default=5, help="runs; medians are reported (default 5)")
    parts: Callable[[str], list[str]] = lambda s: _choices(s, PARTS, "--parts")  # noqa: E731
    protocols: Callable[[str], list[str]] = lambda s: _choices(s, PROTOCOLS, "--protocols")  # noqa: E731
    ap.add_argument("--parts", type=parts, default=list(PARTS), help="sink,arbiter (default both)")
    ap.add_argument("--protocols", type=protocols, default=list(PROTOCOLS), help="sink protocols (default both)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (broker and arbiter logs)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 runs of 1000 transactions")
    args = ap.parse_args()
    if args.quick:
        args.txns, args.runs = 1000, 2
    if args.txns < 1 or args.runs < 1 or args.rows_per_txn < 1:
        ap.error("--txns, --runs and --rows-per-txn must be >= 1")
    install_sigterm()
    load_before = load_average()
    tmp = TempDir(args.keep, "bench-kafka-")
    broker = TansuBroker(tmp.path)
    results: dict[str, Any] = {}
    bench: Bench | None = None
    try:
        broker.start()
        log(f"tansu at {broker.bootstrap}; building {args.txns} transactions")
        bench = Bench(args, broker, tmp.path)
        if "sink" in args.parts:
            results["sink"] = {p: bench.measure_sink(p) for p in args.protocols}
        if "arbiter" in args.parts:
            bench.setup_db()
            try:
                results["arbiter"] = bench.measure_arbiter()
            finally:
                bench.drop_db()
    finally:
        broker.kill9()
        tmp.cleanup()
    errors = bench.errors if bench else []
    met = [r["target_met"] for r in results.get("sink", {}).values()]
    if "arbiter" in results:
        met.append(results["arbiter"]["target_met"])
    out = {
        "bench": "kafka_sink",
        "txns": args.txns,
        "rows_per_txn": args.rows_per_txn,
        "runs": args.runs,
        "results": results,
        "target_met": all(met),
        "errors": errors,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "env": env_info(),
    }
    print(json.dumps(out, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
