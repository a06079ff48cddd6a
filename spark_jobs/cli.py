"""`binlog-spark`: the PySpark jobs' command (`replay`, `export-ddl`; `audit`, `audit-binlog` from
`spark_jobs.audit.cli`).

    binlog-spark replay --from-pumps DIR [DIR...] | --from-files DIR
                        | --from-pump-addrs HOST:PORT [...] | --from-cluster   (live pumps, over gRPC)
                        --to mysql://user:pass@host:port | --to sqlite:///path.db | --to-parquet DIR
                        [--pd-urls URL | --ddl-history FILE] [--start-ts TS] [--stop-ts TS]
                        [--tables db.t,...] [--db-prefix P] [--master local[*]] [--log-level warn]
    binlog-spark export-ddl --pd-urls URL --out FILE

Common flags (`--master`, `--log-level`) go before or after the subcommand.  Every subcommand sets
`func(args) -> exit status`.  Errors: one line on stderr; exit 1 for a job that cannot run or fails
(2 for a bad command line).

PySpark is the spark extra (`pip install 'tidb-binlog-py[spark]'`), not a dependency of the daemons.
Without it `--help` and `export-ddl` (no Spark) still work; a subcommand that runs Spark fails with one
line naming the extra, with the status of a job that cannot run (1; 2 for the audits, whose 1 means
"differs").  Input (directories, DDL history, target connection) is checked before
the Spark session starts, so bad input fails fast and writes nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any, Final

from common.cli import MissingExtraError, fail, import_extra, positive_float, positive_int
from common.config import run_command
from common.config.cli import ArgumentParser
from common.errors import BinlogError, ConfigError
from common.version import add_version_flag
from spark_jobs.audit import cli as audit_cli

__all__ = ["build_parser", "main"]

log = logging.getLogger(__name__)

PROG: Final = "binlog-spark"
EXIT_FAILED: Final = 1
LOG_LEVELS: Final = ("debug", "info", "warn", "error")
NO_SPARK_COMMANDS: Final = frozenset({"export-ddl"})
"""Subcommands that run without PySpark."""


def _ts(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TSO (an integer)") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"a TSO cannot be negative, got {n}")
    return n


def _conf_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key.strip(), value


def _tables(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _add_common(p: argparse.ArgumentParser, *, top: bool) -> None:
    """`--master` and `--log-level`: with defaults on the top parser, given-only on subcommands."""
    from spark_jobs.session import DEFAULT_MASTER

    kw: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    try:
        p.add_argument(
            "--master",
            metavar="URL",
            help=(
                f"Spark master: local[N], spark://host:7077, yarn, k8s://... (default {DEFAULT_MASTER}; under "
                "spark-submit, its --master)"
            ),
            **({"default": None} if top else kw),
        )
        p.add_argument(
            "--conf",
            action="append",
            type=_conf_pair,
            metavar="KEY=VALUE",
            help="a Spark setting, e.g. spark.executor.memory=4g (repeatable)",
            **({"default": []} if top else kw),
        )
        p.add_argument(
            "--log-level",
            choices=LOG_LEVELS,
            help="log level of the job and of Spark (default warn)",
            **({"default": "warn"} if top else kw),
        )
    except argparse.ArgumentError:
        pass  # the subcommand declares them itself


def _add_replay(sub: Any) -> None:
    from common.pull import DEFAULT_IDLE_TIMEOUT
    from spark_jobs.readers.pump_net import DEFAULT_WINDOWS_PER_PUMP
    from spark_jobs.readers.ranges import DEFAULT_SPLIT_SIZE
    from spark_jobs.replay.write import DEFAULT_BATCH_ROWS

    p = sub.add_parser(
        "replay",
        help="rebuild a downstream from binlog history (final image per row as of stop-ts)",
        description=(
            "Read binlog history from pump data directories or a drainer file sink, compact it to the final "
            "image of every row as of --stop-ts (deletes as tombstones), create the target tables at their "
            "final schema and write the rows in parallel. Idempotent: a second run gives the same tables."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-pumps", nargs="+", metavar="DIR", help="pump data directories (value/*.vlog)")
    src.add_argument("--from-files", metavar="DIR", help="a drainer file-sink directory (binlog-* files)")
    src.add_argument(
        "--from-pump-addrs",
        nargs="+",
        metavar="HOST:PORT",
        help="live pumps' gRPC addresses: their history is read with PullBinlogs, no pump disk needed",
    )
    src.add_argument("--from-cluster", action="store_true", help="live pumps, as registered in the etcd of --pd-urls")
    net = p.add_argument_group("reading live pumps (--from-pump-addrs, --from-cluster)")
    net.add_argument("--cluster-id", type=_ts, metavar="ID", help="the cluster id (default: read from --pd-urls)")
    net.add_argument(
        "--windows-per-pump",
        type=positive_int,
        default=DEFAULT_WINDOWS_PER_PUMP,
        metavar="N",
        help=f"read tasks per pump, each a slice of the commit_ts window (default {DEFAULT_WINDOWS_PER_PUMP})",
    )
    net.add_argument(
        "--pull-timeout",
        type=positive_float,
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help=f"fail when a pump sends nothing for this long (default {DEFAULT_IDLE_TIMEOUT:g})",
    )
    p.add_argument("--ssl-ca", default="", metavar="FILE", help="CA of a TLS cluster: etcd, pd-server, pumps (PEM)")
    p.add_argument("--ssl-cert", default="", metavar="FILE", help="this client's certificate for them (PEM)")
    p.add_argument("--ssl-key", default="", metavar="FILE", help="its key (PEM)")
    p.add_argument("--to", metavar="URL", help="mysql://user:pass@host:port or sqlite:///path.db")
    p.add_argument("--to-parquet", metavar="DIR", help="write the final images as parquet files instead")
    p.add_argument("--db-prefix", default="", metavar="P", help="MySQL target: write database d as P+d")
    hist = p.add_mutually_exclusive_group()
    hist.add_argument("--pd-urls", metavar="URL", help="etcd of the cluster (reads the DDL history)")
    hist.add_argument("--ddl-history", metavar="FILE", help="a DDL history export (binlog-spark export-ddl)")
    p.add_argument("--start-ts", type=_ts, metavar="TS", help="only changes committed after TS")
    p.add_argument(
        "--stop-ts",
        type=_ts,
        metavar="TS",
        help="only changes committed at or before TS (live pumps: default a fresh TSO from --pd-urls)",
    )
    p.add_argument("--tables", type=_tables, action="extend", metavar="DB.T,...", help="only these tables")
    p.add_argument(
        "--split-size",
        type=positive_int,
        default=DEFAULT_SPLIT_SIZE,
        metavar="BYTES",
        help=f"bytes of a file per read task (default {DEFAULT_SPLIT_SIZE})",
    )
    p.add_argument(
        "--batch-rows",
        type=positive_int,
        default=DEFAULT_BATCH_ROWS,
        metavar="N",
        help=f"rows per REPLACE / DELETE statement (default {DEFAULT_BATCH_ROWS})",
    )
    p.add_argument(
        "--files-tz", metavar="ZONE", help="time zone the drainer wrote TIMESTAMP text in (default: this host's)"
    )
    p.set_defaults(func=replay_main)


def _add_export(sub: Any) -> None:
    p = sub.add_parser(
        "export-ddl",
        help="write the DDL history from etcd to a JSON file (replay --ddl-history reads it)",
        description="Read every DDL job at /tidb/ddl/history/ in etcd and write them to FILE as JSON.",
    )
    p.add_argument("--pd-urls", required=True, metavar="URL", help="etcd of the cluster")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the export")
    p.set_defaults(func=export_main)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="PySpark jobs over binlog history: bulk replay and audit.")
    _add_common(p, top=True)
    add_version_flag(p)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=ArgumentParser)
    _add_replay(sub)
    _add_export(sub)
    audit_cli.add_parsers(sub)
    for sp in sub.choices.values():
        _add_common(sp, top=False)
    return p


def _setup_logging(level: str) -> None:
    from common.logsetup import setup_logging

    setup_logging("warning" if level == "warn" else level)
    # py4j logs every gateway call at INFO / DEBUG: keep it out of the job's own log.
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _one_line(exc: BaseException) -> str:
    """The message of a failure, also one that reached us through Spark (a task's Python exception
    ends its traceback with `module.Error: message`)."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        for marker in ("spark_jobs.errors.", "common.errors."):
            if marker in line:
                _, _, rest = line.partition(marker)
                _, _, message = rest.partition(": ")
                return message or rest
    for line in reversed(lines):
        if "Error" in line or "Exception" in line:
            return line
    return lines[-1] if lines else type(exc).__name__


def replay_main(args: argparse.Namespace) -> int:
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    from common.tls import client_tls_from_flags
    from spark_jobs.readers.ddl import load_history
    from spark_jobs.replay.job import ReplayOptions, run_replay
    from spark_jobs.replay.target import MySQLTarget, parse_target
    from spark_jobs.replay.write import connect_mysql
    from spark_jobs.session import make_session

    try:
        target = parse_target(args.to, args.to_parquet, args.db_prefix)
        opts = ReplayOptions(
            target=target,
            pump_dirs=tuple(args.from_pumps or ()),
            files_dir=args.from_files,
            pd_urls=args.pd_urls,
            ddl_file=args.ddl_history,
            start_ts=args.start_ts,
            stop_ts=args.stop_ts,
            tables=tuple(args.tables or ()),
            split_size=args.split_size,
            batch_rows=args.batch_rows,
            files_tz=args.files_tz,
        )
        tls = client_tls_from_flags(args.ssl_ca, args.ssl_cert, args.ssl_key)  # ConfigError: one line, exit 2
        if args.from_pump_addrs or args.from_cluster:
            opts = _live_pumps(opts, args, tls)
        opts.check()
        _check_source(opts)
        jobs = load_history(pd_urls=opts.pd_urls, ddl_file=opts.ddl_file, tls=tls)
        if isinstance(target, MySQLTarget):
            connect_mysql(target).close()  # an unreachable target fails before any work
        spark = make_session(args.master, f"{PROG} replay", dict(args.conf), log_level=args.log_level)
        try:
            run_replay(spark, opts, jobs, out=lambda line: print(line, flush=True))
        finally:
            spark.stop()
    except ConfigError:
        raise
    except (BinlogError, PySparkException, Py4JError) as exc:
        print(f"{PROG} replay: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    return 0


def _live_pumps(opts: Any, args: argparse.Namespace, tls: Any) -> Any:
    """`opts` with the windows of the live pumps (probed; stop-ts fixed) for --from-pump-addrs / --from-cluster."""
    from dataclasses import replace

    from spark_jobs.readers.pump_net import live_windows

    windows, stop_ts = live_windows(
        addrs=args.from_pump_addrs,
        pd_urls=args.pd_urls,
        cluster_id=args.cluster_id,
        start_ts=args.start_ts,
        stop_ts=args.stop_ts,
        per_pump=args.windows_per_pump,
        tls=tls,
        idle_timeout=args.pull_timeout,
    )
    return replace(opts, pump_windows=tuple(windows), stop_ts=stop_ts)


def _check_source(opts: Any) -> None:
    if opts.pump_windows:
        return  # probed by _live_pumps
    if opts.pump_dirs:
        from spark_jobs.readers.pump import find_pump_dirs

        find_pump_dirs(list(opts.pump_dirs))
    else:
        from spark_jobs.readers.files import find_file_sink

        find_file_sink(opts.files_dir)


def export_main(args: argparse.Namespace) -> int:
    from spark_jobs.readers.ddl import jobs_from_etcd, write_export

    try:
        jobs = jobs_from_etcd(args.pd_urls)
        write_export(jobs, args.out)
    except ConfigError:
        raise
    except BinlogError as exc:
        print(f"{PROG} export-ddl: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{len(jobs)} DDL jobs written to {args.out}")
    return 0


@run_command(prog=PROG)
def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command not in NO_SPARK_COMMANDS:
        try:
            import_extra("pyspark", "pyspark", "spark")
        except MissingExtraError as exc:
            cannot_run = audit_cli.EXIT_ERROR if args.command in ("audit", "audit-binlog") else EXIT_FAILED
            return fail(PROG, str(exc), cannot_run)
    _setup_logging(args.log_level)
    status: int = args.func(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
