"""The audit as the functional tests use it: a list of differences, empty when equal (see common/audit.py)."""

from __future__ import annotations

import sqlite3
from typing import Any

from common.audit import mysql_reader, sqlite_reader
from tools.audit import audit
from upstream.database import Database


def audit_mysql(up: Database, conn: Any) -> list[str]:
    """`conn`: a pymysql connection to the downstream (tables under their logical database names)."""
    return audit(up, mysql_reader(conn)).problems()


def audit_sqlite(up: Database, conn: sqlite3.Connection) -> list[str]:
    """`conn`: an sqlite3 connection to the sqlite sink's file."""
    return audit(up, sqlite_reader(conn)).problems()
