"""Store value mapping on real stores: every column type into sqlite and MariaDB and back.

For each type: create a table with the ``*_decl`` functions, insert boundary values and NULL
with ``to_*``, read them back with ``from_*`` and compare with the :func:`check_value` result,
which also has to survive the row codec.  A NOT NULL column with a DEFAULT is then added with
ALTER TABLE and must read back as :func:`default_value` on the existing rows.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pymysql
import pytest

from common.codec import MySQLType, decode_row, encode_row, flatten, unflatten
from common.schema.defaults import default_literal, default_value
from common.schema.model import ColumnInfo
from common.schema.types import TIME_MAX, TIMESTAMP_MAX, TIMESTAMP_MIN, check_value, parse_type
from common.sql.values import (
    from_mysql,
    from_sqlite,
    mysql_decl,
    mysql_select_expr,
    sqlite_decl,
    to_mysql,
    to_sqlite,
)
from tests.harness.mysql import MySQLDSN

pytestmark = pytest.mark.functional

UTC = dt.UTC
PLUS8 = dt.timezone(dt.timedelta(hours=8))
I64 = 2**63
NASTY = 'it\'s \\ "q" \0 \n end'

# type text -> (values to insert, default value or None)
CASES: dict[str, tuple[list[Any], Any]] = {
    "tinyint": ([-128, 127, 0], -7),
    "tinyint unsigned": ([0, 255], 255),
    "smallint": ([-32768, 32767], None),
    "smallint unsigned": ([0, 65535], None),
    "mediumint": ([-8388608, 8388607], None),
    "mediumint unsigned": ([0, 16777215], None),
    "int": ([-(2**31), 2**31 - 1, 0], 42),
    "int unsigned": ([0, 2**32 - 1], None),
    "bigint": ([-I64, I64 - 1, 0], -I64),
    "bigint unsigned": ([0, 1, I64 - 1, I64, 2**64 - 1, 10**19], 2**64 - 1),
    "year": ([0, 1901, 2155, 2024], 2000),
    "float": ([0.0, 0.1, 1.2345678, -3.4028234663852886e38, 3.4028234663852886e38, 1.401298464324817e-45], 0.1),
    "double": ([0.0, 0.1 + 0.2, 1 / 3, -1.7976931348623157e308, 5e-324, 1e22], -2.5e-300),
    "decimal": ([Decimal(9999999999), -9999999999, "0.4"], None),
    "decimal(5,2)": (["-999.99", "999.99", "0.005", 0, "-0.001"], Decimal("1.5")),
    "decimal(65,30)": (["9" * 35 + "." + "9" * 30, "-" + "9" * 35 + "." + "9" * 30, "1e-30", "12345.6789"], "-1e-30"),
    "char(3)": (["", "abc", "é日😀", "a  ", " b"], "x"),
    "varchar(20)": (["", "a b  ", "日本語😀", NASTY, "x" * 20], NASTY),
    "tinytext": (["é" * 127, ""], None),
    "text": (["x" * 65535, "日本"], None),
    "mediumtext": (["y" * 70000], None),
    "longtext": (["z😀"], None),
    "binary(4)": ([b"", b"\x00\xffab", b"a", b"\xff"], b"\x01"),
    "varbinary(3)": ([b"", b"\x00\x00\x00", b"\xff", b"a\x00"], b"\x00"),
    "tinyblob": ([bytes(range(255))], None),
    "blob": ([b"\x00\xff" * 32767, b""], None),
    "mediumblob": ([bytes(70000)], None),
    "longblob": ([b"\x80"], None),
    "date": ([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2024, 2, 29)], dt.date(2000, 1, 1)),
    "datetime": ([dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59),
                  dt.datetime(2020, 1, 1, 0, 0, 0, 700000)], dt.datetime(2020, 1, 2, 3, 4, 5)),
    "datetime(3)": ([dt.datetime(2020, 1, 1, 0, 0, 0, 123456), dt.datetime(1000, 1, 1, 0, 0, 0, 999)], None),
    "datetime(6)": ([dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1, 1, 1, 0, 0, 0, 1)],
                    dt.datetime(2020, 1, 2, 3, 4, 5, 6)),
    "timestamp": ([TIMESTAMP_MIN, TIMESTAMP_MAX.replace(microsecond=0), dt.datetime(2020, 6, 1, 8, tzinfo=PLUS8),
                   dt.datetime(2000, 1, 1)], dt.datetime(2000, 1, 1, tzinfo=UTC)),
    "timestamp(6)": ([TIMESTAMP_MAX, TIMESTAMP_MIN.replace(microsecond=1)], TIMESTAMP_MAX),
    "time": ([TIME_MAX, -TIME_MAX, dt.timedelta(0), dt.timedelta(seconds=-1), dt.timedelta(hours=25)],
             dt.timedelta(hours=-1)),
    "time(6)": ([dt.timedelta(microseconds=-500000), TIME_MAX, dt.timedelta(microseconds=1)], None),
    "time(2)": ([dt.timedelta(microseconds=-1_234_567)], dt.timedelta(microseconds=10000)),
    "json": ([{"a": [1, 2.5, None, True, "x"], "日本": {"n": []}}, [], "str", 1, 2**64 - 1, -I64, 1.0, 1e300,
              False, {"k": "it's \\ \"q\""}], None),
    "enum('a','B','c d')": (["a", "b", "C D"], "B"),
    "set('x','y','z')": (["", "z,x", ["y", "x", "z"], "Y"], "x,z"),
    "bit(1)": ([0, 1], 1),
    "bit(10)": ([0, 1023, b"\x01\x00"], b"\x02\x01"),
    "bit(64)": ([2**64 - 1, 0, 2**63], 5),
}  # fmt: skip


def make_col(name: str, type_text: str, *, nullable: bool = True, default: Any = None) -> ColumnInfo:
    ct, canon = parse_type(type_text)
    literal = None if default is None else default_literal(ct, default)
    return ColumnInfo(1, name, 1, canon, ct, nullable=nullable, default=literal)


def through_row(value: Any, col: ColumnInfo) -> Any:
    return unflatten(decode_row(encode_row([1], [flatten(value, col.ctype)]))[1], col.ctype)


def expected_values(col: ColumnInfo, values: list[Any]) -> list[Any]:
    """check_value of every value (plus a trailing NULL), which the codec must preserve too."""
    out = [check_value(col, v) for v in values] + [None]
    for v in out:
        assert through_row(v, col) == v
    return out


# ----------------------------------------------------------------------------- sqlite


@pytest.fixture
def sqlite_conn(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    yield conn
    conn.close()


@pytest.mark.parametrize("type_text", list(CASES))
def test_sqlite_round_trip(sqlite_conn: sqlite3.Connection, type_text: str) -> None:
    values, default = CASES[type_text]
    col = make_col('v a"l', type_text)
    want = expected_values(col, values)
    sqlite_conn.execute(f'CREATE TABLE t ("id" INTEGER PRIMARY KEY, {sqlite_decl(col)})')
    for i, v in enumerate(want):
        sqlite_conn.execute('INSERT INTO t ("id", "v a""l") VALUES (?, ?)', (i, to_sqlite(col, v)))
    rows = sqlite_conn.execute('SELECT "v a""l" FROM t ORDER BY "id"').fetchall()
    assert [from_sqlite(col, r[0]) for r in rows] == want
    # equality lookups with to_sqlite parameters find each row
    for i, v in enumerate(want[:-1]):
        (n,) = sqlite_conn.execute('SELECT count(*) FROM t WHERE "v a""l" = ?', (to_sqlite(col, v),)).fetchone()
        # stored forms are compared: JSON 1 and 1.0 are equal in Python but different documents
        assert n == sum(1 for w in want[:-1] if to_sqlite(col, w) == to_sqlite(col, v)), (i, v)
        assert n >= 1
    if default is not None:
        dcol = make_col("d", type_text, nullable=False, default=default)
        sqlite_conn.execute(f"ALTER TABLE t ADD COLUMN {sqlite_decl(dcol)}")
        got = [from_sqlite(dcol, r[0]) for r in sqlite_conn.execute('SELECT "d" FROM t')]
        assert got == [default_value(dcol)] * len(want)
        assert default_value(dcol) == check_value(dcol, default)


def test_sqlite_bigint_unsigned_orders_and_compares_numerically(sqlite_conn: sqlite3.Connection) -> None:
    col = make_col("u", "bigint unsigned")
    values = [2**64 - 1, 0, I64, 10**19, I64 - 1, 5, 10**18]
    sqlite_conn.execute(f"CREATE TABLE t ({sqlite_decl(col)} PRIMARY KEY)")
    for v in values:
        sqlite_conn.execute("INSERT INTO t VALUES (?)", (to_sqlite(col, v),))
    got = [from_sqlite(col, r[0]) for r in sqlite_conn.execute('SELECT "u" FROM t ORDER BY "u"')]
    assert got == sorted(values)  # numeric order across the INTEGER and TEXT forms
    rows = sqlite_conn.execute('SELECT "u" FROM t WHERE "u" >= ? ORDER BY "u"', (to_sqlite(col, I64),))
    assert [from_sqlite(col, r[0]) for r in rows] == [I64, 10**19, 2**64 - 1]
    with pytest.raises(sqlite3.IntegrityError):
        sqlite_conn.execute("INSERT INTO t VALUES (?)", (to_sqlite(col, 2**64 - 1),))


def test_sqlite_not_null_and_rejects_foreign_raw(sqlite_conn: sqlite3.Connection) -> None:
    col = make_col("n", "int", nullable=False)
    sqlite_conn.execute(f"CREATE TABLE t ({sqlite_decl(col)})")
    with pytest.raises(sqlite3.IntegrityError):
        sqlite_conn.execute("INSERT INTO t VALUES (NULL)")
    with pytest.raises(Exception, match="sqlite returned 'x', which does not fit int"):
        from_sqlite(col, "x")
    with pytest.raises(Exception, match="which does not fit date"):
        from_sqlite(make_col("d", "date"), "2020-13-01")


# ----------------------------------------------------------------------------- MariaDB / MySQL


@pytest.fixture
def mysql_conn(mysql_db: MySQLDSN) -> Iterator[pymysql.connections.Connection[Any]]:
    conn = mysql_db.connect()
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute("SET sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO'")
    yield conn
    conn.close()


def run(conn: pymysql.connections.Connection[Any], sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


TABLE_OPTIONS = "DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"


@pytest.mark.parametrize("type_text", list(CASES))
def test_mysql_round_trip(mysql_conn: pymysql.connections.Connection[Any], type_text: str) -> None:
    values, default = CASES[type_text]
    col = make_col("v`al", type_text)
    want = expected_values(col, values)
    run(mysql_conn, f"CREATE TABLE t (`id` INT PRIMARY KEY, {mysql_decl(col)}) {TABLE_OPTIONS}")
    for i, v in enumerate(want):
        run(mysql_conn, "INSERT INTO t (`id`, `v``al`) VALUES (%s, %s)", (i, to_mysql(col, v)))
    rows = run(mysql_conn, f"SELECT {mysql_select_expr(col)} FROM t ORDER BY `id`")
    assert [from_mysql(col, r[0]) for r in rows] == want
    if col.ctype.tp != MySQLType.JSON:  # MariaDB's JSON is text: no document equality
        for v in want[:-1]:
            found = run(mysql_conn, "SELECT count(*) FROM t WHERE `v``al` = %s", (to_mysql(col, v),))
            assert found[0][0] == sum(1 for w in want[:-1] if to_mysql(col, w) == to_mysql(col, v)), v
    if default is not None:
        dcol = make_col("d", type_text, nullable=False, default=default)
        run(mysql_conn, f"ALTER TABLE t ADD COLUMN {mysql_decl(dcol)}")
        got = [from_mysql(dcol, r[0]) for r in run(mysql_conn, f"SELECT {mysql_select_expr(dcol)} FROM t")]
        assert got == [default_value(dcol)] * len(want)
        run(mysql_conn, "INSERT INTO t (`id`) VALUES (%s)", (len(want),))
        (row,) = run(mysql_conn, f"SELECT {mysql_select_expr(dcol)} FROM t WHERE `id` = %s", (len(want),))
        assert from_mysql(dcol, row[0]) == check_value(dcol, default)


def test_mysql_decl_text(mysql_conn: pymysql.connections.Connection[Any]) -> None:
    cols = [
        make_col("a", "INT UNSIGNED", nullable=False, default=7),
        make_col("b", "timestamp(3)"),
        make_col("c", "varchar(5)", default="it's"),
        make_col("d", "bit(4)", default=5),
        make_col("e", "binary(2)", default=b"a"),
    ]
    assert [mysql_decl(c) for c in cols] == [
        "`a` int(10) unsigned NOT NULL DEFAULT '7'",
        "`b` timestamp(3) NULL",
        "`c` varchar(5) DEFAULT 'it''s'",
        "`d` bit(4) DEFAULT b'101'",
        "`e` binary(2) DEFAULT X'6100'",
    ]
    assert [sqlite_decl(c) for c in cols] == [
        '"a" INTEGER NOT NULL DEFAULT 7',
        '"b" TEXT',
        "\"c\" TEXT DEFAULT 'it''s'",
        "\"d\" BLOB DEFAULT X'05'",
        "\"e\" BLOB DEFAULT X'6100'",
    ]
    run(mysql_conn, f"CREATE TABLE t ({', '.join(mysql_decl(c) for c in cols)}) {TABLE_OPTIONS}")
    shown = run(mysql_conn, "SHOW COLUMNS FROM t")
    assert [(r[0], r[1], r[2]) for r in shown] == [
        ("a", "int(10) unsigned", "NO"),
        ("b", "timestamp(3)", "YES"),
        ("c", "varchar(5)", "YES"),
        ("d", "bit(4)", "YES"),
        ("e", "binary(2)", "YES"),
    ]


def test_mysql_strict_mode_agrees_with_check_value(mysql_conn: pymysql.connections.Connection[Any]) -> None:
    """Values check_value rejects are also refused by MariaDB in strict mode (spot checks)."""
    cases = [("tinyint", 128), ("varchar(3)", "abcd"), ("decimal(5,2)", "1000"), ("enum('a')", "b")]
    for i, (type_text, bad) in enumerate(cases):
        col = make_col(f"c{i}", type_text)
        run(mysql_conn, f"CREATE TABLE t{i} ({mysql_decl(col)}) {TABLE_OPTIONS}")
        with pytest.raises(Exception, match=f"column c{i}"):
            check_value(col, bad)
        with pytest.raises(pymysql.err.MySQLError):
            run(mysql_conn, f"INSERT INTO t{i} VALUES (%s)", (bad,))
