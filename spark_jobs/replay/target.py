"""Replay targets: where the final images go, parsed from the command line (pure: no connection here).

--to mysql://user:pass@host:port[/]   MySQL/MariaDB; tables under their logical database names,
                                      or `<db-prefix><db>` with --db-prefix
--to sqlite:///path.db                an sqlite file laid out like the upstream sqlite store
                                      (tables "db.t", hidden `_tidb_rowid` handle), as the
                                      drainer's sqlite sink writes it
--to-parquet DIR                      parquet files of the final images: schema, table, key,
                                      values (canonical JSON), commit_ts; partitioned by schema
                                      and table; rewritten whole on every run
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from spark_jobs.errors import TargetError

__all__ = ["MySQLTarget", "ParquetTarget", "SqliteTarget", "Target", "parse_target"]


@dataclass(frozen=True)
class MySQLTarget:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    db_prefix: str = ""

    def describe(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}" + (
            f" (databases {self.db_prefix}*)" if self.db_prefix else ""
        )

    def physical_db(self, db: str) -> str:
        return self.db_prefix + db


@dataclass(frozen=True)
class SqliteTarget:
    path: Path

    def describe(self) -> str:
        return f"sqlite:{self.path}"


@dataclass(frozen=True)
class ParquetTarget:
    path: Path

    def describe(self) -> str:
        return f"parquet:{self.path}"


Target = MySQLTarget | SqliteTarget | ParquetTarget


def parse_target(to: str | None, to_parquet: str | None, db_prefix: str = "") -> Target:
    """The one target given; TargetError naming what is wrong."""
    if bool(to) == bool(to_parquet):
        raise TargetError("give exactly one of --to mysql://... | sqlite:///... and --to-parquet DIR")
    if to_parquet:
        if db_prefix:
            raise TargetError("--db-prefix applies to a MySQL target only")
        return ParquetTarget(Path(to_parquet))
    assert to is not None
    scheme, sep, rest = to.partition(":")
    if sep and scheme.lower() == "sqlite":
        if db_prefix:
            raise TargetError("--db-prefix applies to a MySQL target only")
        path = rest
        if rest.startswith("//"):
            host, _, tail = rest[2:].partition("/")
            if host:
                raise TargetError(f"--to {to}: sqlite takes no host; use sqlite:///path.db")
            path = "/" + tail.lstrip("/")
        if not path:
            raise TargetError(f"--to {to}: sqlite needs a file path (sqlite:///path.db)")
        return SqliteTarget(Path(path))
    if sep and scheme.lower() == "mysql":
        parts = urlsplit(to)
        if not parts.hostname:
            raise TargetError(f"--to {to}: expected mysql://user:pass@host:port")
        if parts.path.strip("/") or parts.query or parts.fragment:
            raise TargetError(
                f"--to mysql://{parts.hostname}: give no database: tables keep their database names "
                "(use --db-prefix to put them in other databases)"
            )
        try:
            port = parts.port or 3306
        except ValueError as exc:
            raise TargetError(f"--to mysql://{parts.hostname}: bad port: {exc}") from None
        return MySQLTarget(
            parts.hostname, port, unquote(parts.username or "root"), unquote(parts.password or ""), db_prefix
        )
    raise TargetError(f"--to {to!r}: expected mysql://user:pass@host:port or sqlite:///path.db")
