"""The audit as the functional tests use it: a list of differences, empty when equal (see tools/audit.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

from tools.audit import audit, mysql_reader, sqlite_reader
from upstream.database import Database


def audit_mysql(up: Database, conn: Any) -> list[str]:
    """`conn`: a pymysql connection to the downstream (tables under their logical database names)."""
    return audit(up, mysql_reader(conn)).problems()


def audit_sqlite(up: Database, conn: sqlite3.Connection) -> list[str]:
    """`conn`: an sqlite3 connection to the sqlite sink's file."""
    return audit(up, sqlite_reader(conn)).problems()
