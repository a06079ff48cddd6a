"""Audit a writer's tables against their downstream: the by-key audit of :mod:`common.audit` bound to a
running upstream writer (:class:`upstream.Database`), and its command.

    python -m tools.audit --etcd http://127.0.0.1:2379 --upstream sqlite:///up.db \\
        --downstream sqlite:///playground-data/drainer/downstream.db     # or mysql://root@127.0.0.1:3306
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import pymysql

from common.audit import EXAMPLES, AuditResult, DialectReader, MySQLServer, audit_schema, mysql_reader, sqlite_reader
from common.config import ArgumentParser, run_command
from common.dsn import SqliteDSN, parse_dsn
from common.errors import BinlogError, ConfigError
from upstream import Database

__all__ = ["audit", "audit_mysql_server", "audit_sqlite_file", "main"]


def audit(up: Database, downstream: DialectReader, *, examples: int = EXAMPLES) -> AuditResult:
    """Compare every table of the writer's schema, read through its own store, with its downstream table."""
    s = up.store.session()
    try:
        upstream = DialectReader(up.store.dsn, up.store.dialect(), s.query_all)
        return audit_schema(up.schema, upstream, downstream, examples=examples)
    finally:
        s.close()


def audit_sqlite_file(up: Database, path: Path, *, examples: int = EXAMPLES) -> AuditResult:
    """Audit against an sqlite downstream file (only read)."""
    if not path.is_file():
        raise FileNotFoundError(f"no downstream sqlite file at {path}")
    conn = sqlite3.connect(path, timeout=30.0)
    try:
        return audit(up, sqlite_reader(conn, f"sqlite:{path}"), examples=examples)
    finally:
        conn.close()


def audit_mysql_server(up: Database, server: MySQLServer, *, examples: int = EXAMPLES) -> AuditResult:
    conn = server.connect()
    try:
        return audit(up, mysql_reader(conn, server.describe()), examples=examples)
    finally:
        conn.close()


# --------------------------------------------------------------------------------------- command
def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m tools.audit", description="Compare every upstream table with its downstream table."
    )
    p.add_argument("--etcd", required=True, metavar="URL", help="etcd of the writer (where its schema is)")
    p.add_argument("--upstream", required=True, metavar="DSN", help="the writer's store, e.g. sqlite:///up.db")
    p.add_argument(
        "--downstream", required=True, metavar="URL", help="sqlite:///path.db or mysql://user:pass@host:port"
    )
    p.add_argument("--examples", type=int, default=EXAMPLES, help=f"examples per difference (default {EXAMPLES})")
    return p


@run_command(prog="audit")
def main(argv: list[str] | None = None) -> int:
    """Audit a kept playground (or any writer + drainer pair); 0 when every table is equal, 1 otherwise."""
    args = build_parser().parse_args(argv)
    server = MySQLServer.parse(args.downstream) if args.downstream.lower().startswith("mysql:") else None

    try:
        with Database(args.etcd, args.upstream, binlog=False) as db:
            if server is not None:
                result = audit_mysql_server(db, server, examples=args.examples)
            else:
                dsn = parse_dsn(args.downstream)
                if not isinstance(dsn, SqliteDSN):
                    raise ConfigError(f"--downstream {args.downstream!r}: expected sqlite:///path or mysql://...")
                result = audit_sqlite_file(db, dsn.path, examples=args.examples)
    except (BinlogError, OSError, pymysql.MySQLError) as exc:
        if isinstance(exc, ConfigError):
            raise
        print(f"audit: {exc}", file=sys.stderr)
        return 1
    print(result.render())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
