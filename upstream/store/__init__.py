"""Where the upstream writer keeps its tables: an sqlite file or a MySQL database."""

from __future__ import annotations

from common.dsn import MySQLDSN, parse_dsn
from common.sql.dialect import StoreError
from upstream.store.base import DuplicateKeyError, Row, Session, Store


def open_store(dsn: str, *, mysql_db_prefix: str = "") -> Store:
    """A store from ``sqlite:///path`` (or a bare path) or ``mysql://user:pass@host:port/db``."""
    from upstream.store.mysql import MySQLStore
    from upstream.store.sqlite import SqliteStore

    parsed = parse_dsn(dsn)
    if isinstance(parsed, MySQLDSN):
        return MySQLStore(parsed, dsn, mysql_db_prefix)
    return SqliteStore(parsed.path, dsn)


__all__ = ["DuplicateKeyError", "Row", "Session", "Store", "StoreError", "open_store"]
