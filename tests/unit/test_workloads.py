"""Pure parts of the workloads and of `binlog-workload`: arguments, generators, invariants, retry loop, runner."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import random
import re
import struct
import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Any, cast

import pytest

from common.errors import BinlogError, ConfigError
from common.schema.infoschema import InfoSchema
from common.schema.model import ColumnInfo, SchemaError
from common.schema.types import check_value, parse_type
from upstream.database import retry_backoff
from upstream.ddl import Column, Planner
from upstream.errors import CommitUnknownError, WriteConflictError
from upstream.workload_cli import Progress, main, parse_args, print_summary
from upstream.workloads import TxnOutcome, Workload, WorkloadOptions, make_workload, run_txn, runner
from upstream.workloads.bank import BankWorkload, balance_problems, transfer_amount
from upstream.workloads.bigtxn import BigTxnWorkload, batch_problems, row_sizes
from upstream.workloads.ddl import (
    EXTRA_KINDS,
    base_columns,
    extra_kind,
    feasible_ops,
    index_candidates,
    model_problems,
    next_number,
    row_problems,
    row_values,
    string_key_tables,
    string_keys,
)
from upstream.workloads.gen import (
    TYPES_COLUMNS,
    payload,
    random_time,
    random_timestamp,
    sysbench_text,
    types_changes,
    types_row,
)
from upstream.workloads.sysbench import SysbenchWorkload, Tally, layout_for, tally_problems


# ------------------------------------------------------------------------------------ arguments
def test_arguments_build_the_workload_and_its_options() -> None:
    args, wl = parse_args(
        [
            "--workload",
            "bigtxn",
            "--etcd",
            "http://a:1,http://b:2",
            "--store",
            "sqlite:x.db",
            "--threads",
            "3",
            "--txns",
            "7",
            "--seed",
            "5",
            "--no-binlog",
            "--strategy",
            "hash",
            "--txn-size",
            "200MiB",
            "--blob-size",
            "4MiB",
            "--keep-batches",
            "0",
            "--json",
        ]
    )
    assert isinstance(wl, BigTxnWorkload)
    assert (args.threads, args.txns, args.duration, args.seed) == (3, 7, None, 5)
    assert args.no_binlog
    assert args.strategy == "hash"
    assert args.json
    assert (wl.options.txn_size, wl.options.blob_size, wl.options.keep_batches) == (200 << 20, 4 << 20, 0)
    assert wl.db_name == "bigtxn"


def test_defaults_run_ten_seconds_with_a_random_seed_printed_later() -> None:
    args, wl = parse_args(["--workload", "bank", "--database", "mybank"])
    assert args.duration == 10.0
    assert args.txns is None
    assert isinstance(args.seed, int)
    assert args.store == "sqlite:upstream.db"
    assert args.strategy == "range"
    assert not args.no_binlog
    assert isinstance(wl, BankWorkload)
    assert wl.table == "mybank.accounts"
    args, _ = parse_args(["--workload", "ddl", "--duration", "1m30s"])
    assert args.duration == 90.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("--workload nope", "invalid choice"),
        ("", "--workload"),
        ("--workload bank --threads 0", "--threads"),
        ("--workload bank --threads x", "--threads"),
        ("--workload bank --duration -1", "--duration"),
        ("--workload bank --duration 5 --txns 3", "not allowed with"),
        ("--workload bank --row-size lots", "--row-size"),
        ("--workload ddl --ddl-ratio 1.5", "--ddl-ratio"),
        ("--workload bank --strategy best", "--strategy"),
        ("--workload bank --store redis://x", "unsupported scheme"),
        ("--workload bank --accounts 1", "at least 2 accounts"),
        ("--workload sysbench --row-size 4", "row size must be at least"),
        ("--workload bigtxn --blob-size 1GiB", "--blob-size must be between"),
        ("--workload bank --dur 3", "unrecognized arguments"),
    ],
)
def test_bad_arguments_are_config_errors(argv: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_args(argv.split())


def test_a_bad_argument_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--workload", "bank", "--threads", "-3"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("binlog-workload: config error: command line: argument --threads")
    assert err.count("\n") == 1


# ------------------------------------------------------------------------------------ generators
def _col(name: str, type_text: str, nullable: bool = True) -> ColumnInfo:
    ctype, text = parse_type(type_text)
    return ColumnInfo(1, name, 0, text, ctype, nullable=nullable)


def test_types_rows_are_valid_for_every_column_and_reproducible() -> None:
    cols = {c.name: _col(c.name, c.type, c.nullable) for c, _ in TYPES_COLUMNS}
    nulls = 0
    for i in range(300):
        row = types_row(random.Random(i), i)
        assert row == types_row(random.Random(i), i)
        assert row["id"] == i
        for name, value in row.items():
            if name == "id":
                continue
            nulls += value is None
            assert check_value(cols[name], value) is not None or value is None
        for name, value in types_changes(random.Random(i)).items():
            check_value(cols[name], value)
    assert nulls > 0


def test_float_values_survive_float32_and_six_digit_printing() -> None:
    gen = {c.name: g for c, g in TYPES_COLUMNS}["c_float"]
    rng = random.Random(1)
    for _ in range(1000):
        v = gen(rng)
        assert struct.unpack("<f", struct.pack("<f", v))[0] == v
        assert float(f"{v:.6g}") == v


def test_time_values_stay_in_their_ranges() -> None:
    rng = random.Random(2)
    for _ in range(2000):
        ts = random_timestamp(rng, 6)
        assert (
            dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC) <= ts <= dt.datetime(2038, 1, 19, 3, 14, 7, tzinfo=dt.UTC)
        )
        t = random_time(rng, 2)
        assert abs(t) < dt.timedelta(hours=838, minutes=59, seconds=59)
        assert t.microseconds % 10_000 == 0


def test_sysbench_text_and_payload_have_the_asked_length() -> None:
    rng = random.Random(3)
    for n in (0, 1, 11, 12, 120, 5000, 100_000):
        text = sysbench_text(rng, n)
        assert len(text) == n
        assert set(text) <= set("0123456789-")
        assert len(payload(rng, n)) == n


def test_layout_follows_the_row_size() -> None:
    assert layout_for(192) == layout_for(192)
    small = layout_for(192)
    assert (small.c_type, small.c_length, small.pad_length, small.row_size) == ("CHAR(120)", 120, 60, 192)
    assert layout_for(12).row_size == 12
    assert layout_for(300).c_type == "VARCHAR(255)"
    assert layout_for(1000).c_type == "TEXT"
    assert layout_for(1 << 20).c_type == "MEDIUMTEXT"
    with pytest.raises(ValueError, match="too large"):
        layout_for(1 << 25)


def test_a_big_transaction_is_split_into_rows_lazily() -> None:
    assert list(row_sizes(10, 4)) == [4, 4, 2]
    assert list(row_sizes(8, 4)) == [4, 4]
    sizes = row_sizes(300 << 20, 1 << 20)
    assert next(sizes) == 1 << 20  # a generator: nothing is allocated up front
    assert sum(sizes) == 299 << 20


# ------------------------------------------------------------------------------------ invariants
def test_bank_balances() -> None:
    amount = transfer_amount(random.Random(4))
    assert amount.as_tuple().exponent == -2
    assert Decimal("0.01") <= amount <= Decimal(100)
    assert balance_problems([Decimal(5), Decimal(-3), Decimal(8)], 3, Decimal(10)) == []
    problems = balance_problems([Decimal(5), Decimal(4)], 3, Decimal(10))
    assert problems == ["bank: 2 accounts, expected 3", "bank: sum of balances is 9, expected 10 (off by -1)"]


class FakeRowsDB:
    """The part of Database that `check` reads: rows of a table."""

    def __init__(self, tables: dict[tuple[str, str], list[tuple[int, dict[str, Any]]]]) -> None:
        self.tables = tables

    def rows(self, db: str, name: str) -> list[tuple[int, dict[str, Any]]]:
        return self.tables[(db, name)]


def test_bank_check_reads_the_accounts() -> None:
    wl = BankWorkload(WorkloadOptions(accounts=3))
    wl.ids, wl.expected_total = [1, 2, 3], Decimal(30)
    rows = [(i, {"id": i, "balance": Decimal(b)}) for i, b in ((1, 5), (2, 20), (3, 5))]
    assert wl.check(cast(Any, FakeRowsDB({("bank", "accounts"): rows}))) == []
    rows[0][1]["balance"] = Decimal("5.01")
    assert wl.check(cast(Any, FakeRowsDB({("bank", "accounts"): rows}))) == [
        "bank: sum of balances is 30.01, expected 30 (off by 0.01)"
    ]


def test_sysbench_tally() -> None:
    t = Tally(10, 100)
    t.add(-1, -7)
    assert tally_problems("s", t, 9, 93, exact=True) == []
    assert tally_problems("s", t, 8, 90, exact=True) == [
        "sysbench: s has 8 rows, expected 9",
        "sysbench: s has sum(k) = 90, expected 93",
    ]
    assert tally_problems("s", t, 8, 90, exact=False) == []


def test_sysbench_check_compares_with_the_tally() -> None:
    wl = SysbenchWorkload(WorkloadOptions(tables=1, table_size=5))
    wl.tallies["sbtest1"] = Tally(2, 7)
    rows = [(1, {"id": 1, "k": 3, "c": "x", "pad": "p"}), (4, {"id": 4, "k": 4, "c": "y", "pad": ""})]
    assert wl.check(cast(Any, FakeRowsDB({("sbtest", "sbtest1"): rows}))) == []
    rows.append((5, {"id": 5, "k": 1, "c": "", "pad": ""}))
    assert wl.check(cast(Any, FakeRowsDB({("sbtest", "sbtest1"): rows}))) == [
        "sysbench: sbtest1 has 3 rows, expected 2",
        "sysbench: sbtest1 has sum(k) = 8, expected 7",
    ]


def test_bigtxn_batches_must_be_whole() -> None:
    batches = {7: (3, 30), 8: (2, 5)}
    good = [(7, 0, 1, 10), (7, 1, 1, 10), (7, 2, 1, 10), (8, 0, 1, 4), (8, 1, 1, 1)]
    assert batch_problems(batches, good, []) == []
    torn = [r for r in good if r[:2] != (7, 1)] + [(9, 0, 1, 1)]
    assert batch_problems(batches, torn, ["bad crc"]) == [
        "bad crc",
        "bigtxn: 1 row(s) of batch 9 without a batches row",
        "bigtxn: batch 7 has rows [0, 2], expected 0..2",
    ]
    short = [*good[:4], (8, 1, 1, 2)]
    assert batch_problems(batches, short, []) == ["bigtxn: batch 8 holds 6 bytes, expected 5"]


def test_ddl_types_model_against_the_store() -> None:
    model: dict[int, tuple[int, dict[str, Any] | None]] = {1: (5, {"id": 1, "a": 1}), 2: (6, None), 3: (7, {"id": 3})}
    assert model_problems(model, {1: {"id": 1, "a": 1}, 3: {"id": 3}, 9: {"id": 9}}) == []
    assert model_problems(model, {1: {"id": 1, "a": 2}, 2: {"id": 2}}) == [
        "ddl: types row 1 differs in a (a: wrote 1, read 2)",
        "ddl: types row 2 was deleted but is in the store",
        "ddl: types row 3 is missing from the store",
    ]
    many = {i: (1, {"id": i}) for i in range(10)}
    assert len(model_problems(many, {}, limit=3)) == 4


# ------------------------------------------------------------------------------------ ddl planning
def _schema_with(*tables: tuple[str, list[Column], list[list[str]]]) -> InfoSchema:
    schema = InfoSchema()
    ids = itertools.count(1)

    def alloc(n: int) -> int:
        first = next(ids)
        for _ in range(n - 1):
            next(ids)
        return first

    schema.apply(Planner(schema, alloc, 1).create_database("d"))
    for name, cols, indexes in tables:
        schema.apply(Planner(schema, alloc, 1).create_table("d", name, cols, primary_key=["id"], indexes=indexes))
    return schema


def test_ddl_chooses_only_possible_operations() -> None:
    extras = [Column("x1_int", "INT"), Column("x2_txt", "TEXT"), Column("x3_nn", "INT", nullable=False, default=1)]
    schema = _schema_with(
        ("t0", base_columns(0), []), ("t1", base_columns(1) + extras, [["x1_int"], ["k"], ["x3_nn"], ["k", "x3_nn"]])
    )
    t0, t1 = schema.table("d", "t0"), schema.table("d", "t1")
    assert t0.pk_is_handle
    assert not t1.pk_is_handle
    ops0 = feasible_ops(t0, n_tables=2, min_tables=1, max_tables=4)
    assert set(ops0) == {"add_column", "add_index", "truncate", "rename", "create", "drop"}
    assert index_candidates(t0) == ["k"]
    ops1 = feasible_ops(t1, n_tables=4, min_tables=1, max_tables=4)
    assert set(ops1) == {"add_column", "drop_column", "drop_index", "truncate", "rename", "drop"}  # 4 indexes
    assert index_candidates(t1) == []  # x2_txt is TEXT: not indexable
    assert extra_kind("x2_txt") is EXTRA_KINDS["txt"]
    assert extra_kind("k") is None
    assert extra_kind("x9_zzz") is None
    assert next_number(["t0", "t7", "types", "t3x"], __import__("re").compile(r"^t(\d+)$")) == 8
    row = row_values(random.Random(1), t1)
    assert set(row) <= {"k", "v", "x1_int", "x2_txt", "x3_nn"}
    for name, value in row.items():
        check_value(t1.column(name), value)


def test_extra_column_defaults_are_valid() -> None:
    for name, kind in EXTRA_KINDS.items():
        schema = _schema_with(("t0", base_columns(0), []))
        p = Planner(schema, lambda n: 100, 1)
        job = p.add_column("d", "t0", Column(f"x1_{name}", kind.type, nullable=kind.nullable, default=kind.default))
        assert job.table is not None
        col = job.table.column(f"x1_{name}")
        check_value(col, kind.gen(random.Random(0)))


def test_row_problems() -> None:
    schema = _schema_with(("t0", base_columns(0), []))
    t = schema.table("d", "t0")
    assert row_problems("t0", t, [(1, {"id": 1, "k": 0, "v": None})]) == []
    assert row_problems("t0", t, [(1, {"id": 1, "k": None, "v": None})]) == [
        "ddl: t0 row 1 has NULL in NOT NULL column(s) k"
    ]
    assert "has columns" in row_problems("t0", t, [(1, {"id": 1, "k": 0})])[0]


# ------------------------------------------------------------------------------------ retry loop
class FakeTxn:
    def __init__(self, db: FakeTxnDB) -> None:
        self.db = db
        self.state = type("S", (), {"value": "active"})()
        self.commit_ts = 0
        self.rolled_back = False

    def commit(self) -> int:
        fail = self.db.commit_errors.pop(0) if self.db.commit_errors else None
        if fail is not None:
            self.state.value = "rolled back"
            raise fail
        self.state.value = "committed"
        self.commit_ts = next(self.db.ts)
        return self.commit_ts

    def rollback(self) -> None:
        if self.state.value == "active":
            self.state.value = "rolled back"
            self.rolled_back = True


class FakeTxnDB:
    def __init__(self, commit_errors: list[BaseException | None]) -> None:
        self.commit_errors = commit_errors
        self.ts = itertools.count(100)
        self.schema = type("Schema", (), {"version": 1})()
        self.txns: list[FakeTxn] = []

    def begin(self) -> FakeTxn:
        t = FakeTxn(self)
        self.txns.append(t)
        return t


def _run(db: FakeTxnDB, body: Callable[[Any], Any], **kw: Any) -> tuple[TxnOutcome, Any]:
    return run_txn(cast(Any, db), body, **kw)


def test_retry_waits_are_spread_by_half_around_the_doubling_delays() -> None:
    """Transactions that conflicted on the same rows must not retry in lockstep (Database.run, run_txn)."""
    firsts = [next(retry_backoff().delays()) for _ in range(200)]
    assert all(0.002 <= d <= 0.006 for d in firsts)
    assert max(firsts) - min(firsts) > 0.002
    assert [retry_backoff().nth(n) for n in range(8)] == [0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.2, 0.2]


def test_run_txn_counts_retries_of_retriable_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("upstream.workloads.base.backoff", lambda attempt: 0.0)
    db = FakeTxnDB([WriteConflictError("x"), WriteConflictError("y"), None])
    outcome, result = _run(db, lambda txn: "r")
    assert outcome.committed
    assert outcome.retries == 2
    assert outcome.commit_ts == 100
    assert result == "r"
    assert outcome.commit_latency >= 0

    db = FakeTxnDB([WriteConflictError("x")] * 5)
    outcome, result = _run(db, lambda txn: 1, attempts=3)
    assert not outcome.committed
    assert outcome.retries == 2
    assert result is None
    assert outcome.error.startswith("gave up after 3 attempts: WriteConflictError: x")


def test_run_txn_stops_at_non_retriable_errors_unless_retry_if_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("upstream.workloads.base.backoff", lambda attempt: 0.0)

    def body(txn: Any) -> None:
        raise SchemaError("no table t")

    db = FakeTxnDB([])
    outcome, _ = _run(db, body)
    assert not outcome.committed
    assert outcome.retries == 0
    assert outcome.error == "SchemaError: no table t"
    assert db.txns[0].rolled_back

    seen: list[int] = []

    def retry_if(exc: BinlogError, version: int) -> bool:
        seen.append(version)
        return len(seen) < 3

    outcome, _ = _run(FakeTxnDB([]), body, retry_if=retry_if)
    assert outcome.retries == 2
    assert seen == [1, 1, 1]

    outcome, _ = _run(FakeTxnDB([CommitUnknownError("lost")]), lambda txn: None)
    assert outcome.unknown
    assert not outcome.committed
    assert "lost" in outcome.error


def test_run_txn_lets_bugs_through_after_rolling_back() -> None:
    db = FakeTxnDB([])

    def body(txn: Any) -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        _run(db, body)
    assert db.txns[0].rolled_back


# ------------------------------------------------------------------------------------ runner
class CountingWorkload(Workload):
    name = "counting"

    def __init__(self, outcome: Callable[[int], TxnOutcome]) -> None:
        super().__init__(WorkloadOptions())
        self.calls = itertools.count()
        self.outcome = outcome

    def run_once(self, db: Any, rng: random.Random) -> TxnOutcome:
        return self.outcome(next(self.calls))


def test_runner_runs_exactly_the_transaction_budget() -> None:
    wl = CountingWorkload(lambda i: TxnOutcome(i % 5 != 0, retries=1, commit_latency=0.001 * i, kind="dml"))
    r = runner.run(cast(Any, None), wl, threads=4, seed=1, txns=100)
    s = r.summary()
    assert (s["txns"], s["committed"], s["failed"], s["retried"]) == (100, 80, 20, 100)
    assert not r.crashed
    assert not r.interrupted
    assert s["commit_latency_ms"]["max"] == pytest.approx(99.0)


def test_runner_stops_on_request_and_on_a_crash() -> None:
    stop = threading.Event()

    def outcome(i: int) -> TxnOutcome:
        if i == 30:
            stop.set()
        return TxnOutcome(True, kind="ddl" if i % 2 else "dml", nbytes=10)

    r = runner.run(cast(Any, None), CountingWorkload(outcome), threads=2, seed=1, duration=600, stop=stop)
    s = r.summary()
    assert r.interrupted
    assert 31 <= s["committed"] <= 32
    assert s["ddl"] + len(r.stats.latencies) == s["committed"]
    assert s["bytes_committed"] == 10 * s["committed"]

    def crash(i: int) -> TxnOutcome:
        if i == 5:
            raise RuntimeError("boom")
        return TxnOutcome(True)

    r = runner.run(cast(Any, None), CountingWorkload(crash), threads=2, seed=1, duration=600)
    assert len(r.crashed) == 1
    assert "RuntimeError: boom" in r.crashed[0]


def test_runner_reports_progress() -> None:
    snaps: list[runner.Snapshot] = []
    enough = threading.Event()

    def outcome(i: int) -> TxnOutcome:
        enough.wait(60)  # each transaction waits until two progress reports were made
        return TxnOutcome(True)

    def on_progress(s: runner.Snapshot) -> None:
        snaps.append(s)
        if len(snaps) >= 2:
            enough.set()

    r = runner.run(
        cast(Any, None), CountingWorkload(outcome), threads=1, seed=1, txns=3, on_progress=on_progress,
        progress_interval=0.01,
    )  # fmt: skip
    assert r.stats.committed == 3
    assert len(snaps) >= 2
    assert "committed 0  failed 0  retried 0" in snaps[0].line()


def test_runner_arguments() -> None:
    wl = CountingWorkload(lambda i: TxnOutcome(True))
    with pytest.raises(ValueError, match="exactly one"):
        runner.run(cast(Any, None), wl, threads=1, seed=1)
    with pytest.raises(ValueError, match="threads"):
        runner.run(cast(Any, None), wl, threads=0, seed=1, txns=1)


def test_percentile_and_progress_line() -> None:
    assert runner.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert runner.percentile([1.0, 2.0, 3.0, 4.0], 0.99) == 4.0
    s1 = runner.Snapshot(1.0, 10, 1, 2, 0, 0, 0)
    s2 = runner.Snapshot(2.0, 30, 1, 2, 3, 0, 4_000_000)
    assert s2.line(s1) == "    2.0s  committed 30  failed 1  retried 2  20.0 txn/s  ddl 3  2.0 MB/s"


def test_progress_lines_and_summary_text() -> None:
    err = io.StringIO()
    p = Progress(err, enabled=True)
    p(runner.Snapshot(1.0, 5, 0, 0, 0, 0, 0))
    p.message("stopping")
    assert err.getvalue().splitlines() == ["    1.0s  committed 5  failed 0  retried 0  5.0 txn/s", "stopping"]
    quiet = io.StringIO()
    Progress(quiet, enabled=False)(runner.Snapshot(1.0, 5, 0, 0, 0, 0, 0))
    assert quiet.getvalue() == ""

    result = runner.RunResult(runner.Stats(committed=2, latencies=[0.01, 0.02]), 2.0, [], False)
    summary = {
        "workload": "bank", "store": "sqlite:x", "binlog": True, "strategy": "range", "threads": 1, "seed": 3,
        **result.summary(), "workload_info": {"accounts": 2}, "check": [], "ok": True,
    }  # fmt: skip
    out = io.StringIO()
    print_summary(summary, False, out)
    text = out.getvalue()
    assert "workload bank: 2 committed, 0 failed" in text
    assert text.endswith("check: ok\n")
    out = io.StringIO()
    print_summary({**summary, "check": ["bad"]}, True, out)
    assert json.loads(out.getvalue())["check"] == ["bad"]


def test_make_workload() -> None:
    assert make_workload("ddl", WorkloadOptions()).db_name == "ddltest"
    with pytest.raises(ValueError, match="unknown workload"):
        make_workload("tpcc", WorkloadOptions())


def test_ddl_string_keys_differ_only_in_case_and_where_exact_in_trailing_spaces() -> None:
    exact, padded = string_keys(True), string_keys(False)
    assert len(set(exact)) == len(exact)
    assert {"a", "A", "a "} <= set(exact)
    assert {"a", "A"} <= set(padded)
    # a PAD SPACE store (MySQL utf8mb4_bin) ignores trailing spaces: none of its keys may differ only in them
    assert len({k.rstrip(" ") for k in padded}) == len(padded)
    schema = InfoSchema()
    ids = itertools.count(1)
    schema.apply(Planner(schema, lambda n: next(ids), 1).create_database("d"))
    for name, (columns, pk) in string_key_tables().items():
        assert not re.match(r"^t\d+$", name)  # DDL never picks them
        schema.apply(Planner(schema, lambda n: next(ids), 1).create_table("d", name, columns, primary_key=pk))
        t = schema.table("d", name)
        assert not t.pk_is_handle
        assert t.primary_key is not None
        assert all(t.column(c).type_text == "varchar(16)" for c in t.primary_key.columns)
