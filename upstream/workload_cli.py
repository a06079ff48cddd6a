"""`binlog-workload`: drive the upstream writer with a workload and report what it did.

    binlog-workload --workload bank --etcd http://127.0.0.1:2379 --threads 8 --duration 30s
    binlog-workload --workload bigtxn --txn-size 200MiB --txns 3 --json

The writer finds pd-server and the pumps through etcd, as in TiDB.  Progress goes to stderr
once a second on one line; the summary (``--json``: one JSON object) goes to stdout and
includes the workload's invariant check.  Exit status: 0 when the check is clean, 1 when it
found problems, a thread crashed or the writer could not start, 2 for a bad option (one line
on stderr).  Ctrl-C or SIGTERM stops cleanly: transactions in flight finish, the check runs,
the writer closes; a second Ctrl-C aborts.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys
import threading
from types import FrameType
from typing import Any, TextIO

from common.cli import fail
from common.config import ArgumentParser, parse_duration, parse_size, run_command
from common.dsn import parse_dsn
from common.errors import BinlogError, ConfigError
from common.logsetup import setup_logging
from common.tls import client_tls_from_flags
from common.txnstatus import DEFAULT_STATUS_ROW_TTL
from common.version import add_version_flag
from upstream.workloads import WORKLOADS, Workload, WorkloadOptions, make_workload, runner

log = logging.getLogger(__name__)

PROG = "binlog-workload"
DEFAULT_ETCD = "http://127.0.0.1:2379"
DEFAULT_STORE = "sqlite:upstream.db"
"""``./upstream.db`` (``sqlite:///path`` is an absolute path)."""
DEFAULT_THREADS = 4
DEFAULT_DURATION = 10.0
STRATEGIES = ("range", "hash", "score")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError("must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("must be >= 0")
    return value


def _duration(text: str) -> float:
    value = parse_duration(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def _size(text: str) -> int:
    value = parse_size(text)
    if value < 1:
        raise ValueError("must be at least 1 byte")
    return value


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ValueError("must be between 0 and 1")
    return value


for _fn, _name in (
    (_positive_int, "positive integer"),
    (_non_negative_int, "integer >= 0"),
    (_duration, "duration"),
    (_size, "size"),
    (_ratio, "ratio"),
):
    _fn.__name__ = _name  # argparse names the type in "invalid <name> value: ..."


def build_parser() -> ArgumentParser:
    d = WorkloadOptions()
    p = ArgumentParser(
        prog=PROG, description="Drive the upstream writer with a workload; print progress and a summary."
    )
    p.add_argument("--workload", required=True, choices=sorted(WORKLOADS), help="what to run")
    add_version_flag(p)
    p.add_argument(
        "--etcd", default=DEFAULT_ETCD, metavar="URL[,URL...]", help=f"etcd endpoints (default {DEFAULT_ETCD})"
    )
    p.add_argument(
        "--store", default=DEFAULT_STORE, metavar="DSN",
        help=f"sqlite:///abs/path.db, sqlite:rel.db or mysql://user:pass@host:port/db (default {DEFAULT_STORE})",
    )  # fmt: skip
    p.add_argument("--mysql-db-prefix", default="", metavar="TEXT", help="prefix of the MySQL databases of the tables")
    p.add_argument("--threads", type=_positive_int, default=DEFAULT_THREADS, help=f"(default {DEFAULT_THREADS})")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--duration", type=_duration, metavar="SECONDS", help="run this long (default 10s), e.g. 30, 2m")
    stop.add_argument("--txns", type=_positive_int, metavar="N", help="run N transactions (or DDLs) in all")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a random one, printed)")
    p.add_argument("--no-binlog", action="store_true", help="write without binlog (no pumps needed)")
    p.add_argument("--strategy", choices=STRATEGIES, default="range", help="pump selection (default range)")
    p.add_argument(
        "--lock-ttl", type=_duration, default=None, metavar="SECONDS",
        help="lock TTL of a pending txn-status row (default: the writer's, 10s)",
    )  # fmt: skip
    p.add_argument(
        "--status-row-ttl", type=_duration, default=DEFAULT_STATUS_ROW_TTL, metavar="SECONDS",
        help="a transaction's txn-status row exists this long after its start_ts at the latest; "
        f"the pumps' [upstream] status-row-ttl must be at least this (default {DEFAULT_STATUS_ROW_TTL:g}s)",
    )  # fmt: skip
    p.add_argument("--ssl-ca", default="", metavar="FILE", help="CA certificate (PEM): TLS to etcd, pd-server, pumps")
    p.add_argument("--ssl-cert", default="", metavar="FILE", help="client certificate (PEM) for TLS")
    p.add_argument("--ssl-key", default="", metavar="FILE", help="client private key (PEM) for TLS")
    p.add_argument("--database", default="", metavar="NAME", help="logical database (default: the workload's name)")
    p.add_argument("--attempts", type=_positive_int, default=d.attempts, help="tries per transaction")
    g = p.add_argument_group("bank")
    g.add_argument("--accounts", type=_positive_int, default=d.accounts, help=f"(default {d.accounts})")
    g.add_argument("--initial-balance", type=_non_negative_int, default=d.initial_balance)
    g = p.add_argument_group("sysbench and ddl")
    g.add_argument("--tables", type=_positive_int, default=d.tables, help=f"(default {d.tables})")
    g.add_argument(
        "--table-size", type=_positive_int, default=d.table_size, help=f"rows or ids (default {d.table_size})"
    )
    g.add_argument("--rows-per-txn", type=_positive_int, default=d.rows_per_txn, help=f"(default {d.rows_per_txn})")
    g.add_argument("--row-size", type=_size, default=d.row_size, help=f"bytes per sysbench row (default {d.row_size})")
    g.add_argument("--ddl-ratio", type=_ratio, default=d.ddl_ratio, help=f"share of DDL (default {d.ddl_ratio})")
    g = p.add_argument_group("bigtxn")
    g.add_argument("--txn-size", type=_size, default=d.txn_size, help="bytes per transaction (default 16MiB)")
    g.add_argument("--blob-size", type=_size, default=d.blob_size, help="bytes per row (default 1MiB)")
    g.add_argument("--keep-batches", type=_non_negative_int, default=d.keep_batches, help="0 = keep all (default 4)")
    g = p.add_argument_group("output")
    g.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    g.add_argument("--quiet", action="store_true", help="no progress line")
    g.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "warn", "error"))
    return p


def options_from_args(args: argparse.Namespace) -> WorkloadOptions:
    return WorkloadOptions(
        database=args.database,
        accounts=args.accounts,
        initial_balance=args.initial_balance,
        tables=args.tables,
        table_size=args.table_size,
        rows_per_txn=args.rows_per_txn,
        row_size=args.row_size,
        txn_size=args.txn_size,
        blob_size=args.blob_size,
        keep_batches=args.keep_batches,
        ddl_ratio=args.ddl_ratio,
        attempts=args.attempts,
    )


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Workload]:
    """Parsed arguments and the workload they describe; ConfigError for anything wrong."""
    args = build_parser().parse_args(argv)
    parse_dsn(args.store)  # a bad DSN is a ConfigError naming it
    if args.duration is None and args.txns is None:
        args.duration = DEFAULT_DURATION
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(2**31)
    try:
        workload = make_workload(args.workload, options_from_args(args))
    except ValueError as exc:
        raise ConfigError(f"{args.workload}: {exc}") from None
    return args, workload


class Progress:
    """The one-line progress report on a stream (rewritten in place on a terminal)."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.tty = enabled and stream.isatty()
        self.previous: runner.Snapshot | None = None
        self._dirty = False

    def __call__(self, snap: runner.Snapshot) -> None:
        if not self.enabled:
            return
        line = snap.line(self.previous)
        self.previous = snap
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")
            self._dirty = True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def message(self, text: str) -> None:
        self.end()
        self.stream.write(text + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self._dirty:
            self.stream.write("\n")
            self._dirty = False


def print_summary(summary: dict[str, Any], as_json: bool, out: TextIO) -> None:
    if as_json:
        out.write(json.dumps(summary, sort_keys=False, default=str) + "\n")
        return
    lat = summary["commit_latency_ms"]
    lines = [
        f"workload {summary['workload']}: {summary['committed']} committed, {summary['failed']} failed, "
        f"{summary['retried']} retries in {summary['elapsed_s']:.1f}s ({summary['txn_per_s']:.1f} txn/s)",
        f"commit latency: p50 {lat['p50']} ms, p99 {lat['p99']} ms, max {lat['max']} ms",
        f"store {summary['store']}, binlog {'on (' + summary['strategy'] + ')' if summary['binlog'] else 'off'}, "
        f"{summary['threads']} threads, seed {summary['seed']}",
    ]
    if summary["bytes_committed"]:
        lines.append(f"bytes committed: {summary['bytes_committed']} ({summary['mb_per_s']} MB/s)")
    if summary["workload_info"]:
        lines.append("workload: " + json.dumps(summary["workload_info"], default=str))
    lines += [f"error x{n}: {text}" for text, n in summary["errors"].items()]
    lines += [f"crash: {tb.strip().splitlines()[-1]}" for tb in summary["crashed"]]
    lines += [f"CHECK FAILED: {p}" for p in summary["check"]] or ["check: ok"]
    out.write("\n".join(lines) + "\n")


def _failed(args: argparse.Namespace, message: str) -> int:
    """The run could not start: one line on stderr (and a JSON summary with --json); status 1."""
    if args.json:
        sys.stdout.write(json.dumps({"workload": args.workload, "ok": False, "error": message}) + "\n")
    return fail(PROG, message, status=1)


def _check(workload: Workload, db: Any) -> list[str]:
    try:
        return workload.check(db)
    except BinlogError as exc:
        return [f"{workload.name}: the check could not run: {type(exc).__name__}: {exc}"]


@run_command(prog=PROG)
def main(argv: list[str] | None = None) -> int:
    args, workload = parse_args(argv)
    setup_logging(args.log_level)
    progress = Progress(sys.stderr, enabled=not args.quiet)

    from upstream.database import Database

    etcd = [u.strip() for u in args.etcd.split(",") if u.strip()]
    tls = client_tls_from_flags(args.ssl_ca, args.ssl_cert, args.ssl_key)  # ConfigError: one line, exit 2
    ttl = {} if args.lock_ttl is None else {"lock_ttl": args.lock_ttl}
    try:
        db = Database(
            etcd,
            args.store,
            binlog=not args.no_binlog,
            strategy=args.strategy,
            status_row_ttl=args.status_row_ttl,
            mysql_db_prefix=args.mysql_db_prefix,
            tls=tls,
            **ttl,
        )
    except ConfigError:
        raise
    except BinlogError as exc:
        return _failed(args, f"cannot start the writer: {exc}")
    try:
        try:
            workload.setup(db)
        except BinlogError as exc:
            hint = ""
            if any(s in str(exc) for s in ("doesn't exist", "no such table")):
                hint = " (the schema in etcd has tables this store lacks: one etcd cluster serves one store)"
            return _failed(args, f"{args.workload} setup failed: {exc}{hint}")
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if stop.is_set():
                raise KeyboardInterrupt
            stop.set()
            progress.message(f"{signal.Signals(signum).name}: finishing the transactions in flight (again to abort)")

        old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            result = runner.run(
                db, workload, threads=args.threads, seed=args.seed, duration=args.duration, txns=args.txns,
                stop=stop, on_progress=progress,
            )  # fmt: skip
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)
        progress.end()
        problems = _check(workload, db) if not result.crashed else ["not checked: a workload thread crashed"]
        summary = {
            "workload": workload.name,
            "store": parse_dsn(args.store).describe(),
            "binlog": not args.no_binlog,
            "strategy": args.strategy,
            "threads": args.threads,
            "seed": args.seed,
            **result.summary(),
            "workload_info": workload.describe(),
            "check": problems,
            "ok": not problems and not result.crashed,
        }
    finally:
        db.close()
    print_summary(summary, args.json, sys.stdout)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
