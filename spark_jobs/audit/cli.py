"""`binlog-spark audit` and `binlog-spark audit-binlog`: the subcommands (parse, check input, run, report).

Exit status, as diff(1) and sync-diff-inspector: 0 everything equal / consistent, 1 something
differs (a missing table, a row, a binlog finding), 2 the audit could not run (a bad flag or DSN,
a side that cannot be reached, a path that is not a pump data directory): one line on stderr.
Input is checked before the Spark session starts, so bad input fails in well under a second.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

from common.cli import non_negative_int, positive_int
from common.errors import BinlogError
from spark_jobs.audit.plan import DEFAULT_CHUNK_SIZE
from spark_jobs.audit.report import EXAMPLES

__all__ = ["add_parsers", "audit_binlog_main", "audit_main"]

BINLOG_EXAMPLES = 5
"""Examples per kind of binlog finding."""
EXIT_ERROR = 2
_R = TypeVar("_R")


class _Report(Protocol):
    @property
    def exit_status(self) -> int: ...

    def json_text(self) -> str: ...

    def render(self) -> str: ...


def _output_args(p: argparse.ArgumentParser, examples: int) -> None:
    p.add_argument("--format", choices=("table", "json"), default="table", help="stdout format (default table)")
    p.add_argument("--json", metavar="FILE", type=Path, help="also write the JSON report to FILE")
    p.add_argument(
        "--examples",
        type=non_negative_int,
        default=examples,
        help=f"examples per kind of difference (default {examples})",
    )


def add_parsers(subparsers: Any) -> None:
    """Add `audit` and `audit-binlog` to the `binlog-spark` subcommands (each sets `func(args) -> exit status`)."""
    a = subparsers.add_parser(
        "audit",
        help="compare upstream and downstream tables chunk by chunk, then row by row where they differ",
        description=(
            "Compare every upstream table (or --tables) with the downstream table of the same name: per key-range "
            "chunk checksums, then rows only in chunks that differ. Sides: sqlite:///path.db, "
            "mysql://user:pass@host:port[/db]. Exit 0 equal, 1 different, 2 error."
        ),
    )
    a.add_argument("--upstream", required=True, metavar="DSN", help="the writer's store (sqlite or MySQL)")
    a.add_argument("--downstream", required=True, metavar="DSN", help="the replica (sqlite or MySQL)")
    a.add_argument(
        "--tables", nargs="+", action="extend", metavar="DB.TABLE", help="only these tables (space or comma separated)"
    )
    a.add_argument(
        "--chunk-size",
        type=positive_int,
        default=DEFAULT_CHUNK_SIZE,
        metavar="N",
        help=f"rows per chunk (default {DEFAULT_CHUNK_SIZE})",
    )
    a.add_argument("--upstream-db-prefix", default="", metavar="P", help="MySQL upstream keeps database d as P+d")
    a.add_argument("--downstream-db-prefix", default="", metavar="P", help="MySQL downstream keeps database d as P+d")
    _output_args(a, EXAMPLES)
    a.set_defaults(func=audit_main)

    b = subparsers.add_parser(
        "audit-binlog",
        help="check the pumps' binlog streams (and against the upstream's txn-status store)",
        description=(
            "Every committed transaction of the txn-status store has exactly one commit record across the pumps "
            "with its commit_ts; every commit has its prewrite in the same pump; commit_ts are unique. "
            "Exit 0 consistent, 1 findings, 2 error."
        ),
    )
    b.add_argument("--pumps", nargs="+", required=True, metavar="DIR", help="pump data directories")
    b.add_argument(
        "--txn-status", metavar="DSN", help="the upstream's txn-status store (sqlite path or mysql://.../db)"
    )
    b.add_argument(
        "--since-ts", type=non_negative_int, default=0, metavar="TS", help="check only transactions with start_ts >= TS"
    )
    _output_args(b, BINLOG_EXAMPLES)
    b.set_defaults(func=audit_binlog_main)


def _fail(command: str, message: str) -> int:
    print(f"binlog-spark {command}: {message}", file=sys.stderr)
    return EXIT_ERROR


_RAISED = re.compile(r"^(?:[\w.]+\.)?\w+(?:Error|Exception): (.+)$")


def _spark_message(exc: BaseException) -> str:
    """The message of a Spark failure: a task's Python exception ends its traceback with
    ``module.SomeError: message``; the message is what is shown."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        m = _RAISED.match(line)
        if m:
            return m.group(1)
    return lines[-1] if lines else type(exc).__name__


def _spark_errors() -> tuple[type[BaseException], ...]:
    """How a failed Spark job reaches the driver (imported late: `--help` works without a JVM)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def _with_session(command: str, args: argparse.Namespace, job: Callable[[Any], _R]) -> _R:
    """Run `job(spark)` on a session for `--master`; stop it afterwards unless it was already running
    (a caller's session, such as the shared one of the tests, is left alone)."""
    from pyspark.sql import SparkSession

    from spark_jobs.session import make_session

    running = SparkSession.getActiveSession()
    spark = make_session(
        getattr(args, "master", None),
        app_name=f"binlog-spark {command}",
        conf=dict(getattr(args, "conf", None) or ()),
        log_level=getattr(args, "log_level", None) or "warn",
    )
    try:
        return job(spark)
    finally:
        if running is None:
            spark.stop()


def _emit(command: str, args: argparse.Namespace, report: _Report) -> int:
    text = report.json_text()
    if args.json is not None:
        try:
            args.json.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            return _fail(command, f"cannot write --json {args.json}: {exc}")
    print(text if args.format == "json" else report.render())
    return report.exit_status


def audit_main(args: argparse.Namespace) -> int:
    from spark_jobs.audit.job import execute, parse_tables, prepare
    from spark_jobs.audit.read import Endpoint

    try:
        up = Endpoint.parse(args.upstream, prefix=args.upstream_db_prefix)
        down = Endpoint.parse(args.downstream, prefix=args.downstream_db_prefix)
        tables = parse_tables(args.tables or [])
        prep = prepare(up, down, tables, chunk_size=args.chunk_size)
        report = prep.report
        if prep.plans:
            report = _with_session("audit", args, lambda spark: execute(spark, prep, examples=args.examples))
    except BinlogError as exc:
        return _fail("audit", str(exc))
    except _spark_errors() as exc:
        return _fail("audit", _spark_message(exc))
    return _emit("audit", args, report)


def audit_binlog_main(args: argparse.Namespace) -> int:
    from spark_jobs.audit.binlog import run_audit_binlog, status_endpoint
    from spark_jobs.readers.pump import find_pump_dirs

    try:
        find_pump_dirs(args.pumps)  # bad input fails before the session starts
        if args.txn_status:
            status_endpoint(args.txn_status)[0].connect().close()
        report = _with_session(
            "audit-binlog",
            args,
            lambda spark: run_audit_binlog(
                spark, args.pumps, txn_status=args.txn_status, since_ts=args.since_ts, examples=args.examples
            ),
        )
    except BinlogError as exc:
        return _fail("audit-binlog", str(exc))
    except _spark_errors() as exc:
        return _fail("audit-binlog", _spark_message(exc))
    return _emit("audit-binlog", args, report)
