"""Column types: parse_type, check_value at the boundaries, DEFAULT literals, codec agreement."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.codec import ColumnType, MySQLType, decode_row, encode_row, flatten, to_float32, unflatten
from common.schema.defaults import default_literal, default_value
from common.schema.model import ColumnInfo, SchemaError
from common.schema.types import (
    TIME_MAX,
    TIMESTAMP_MAX,
    TIMESTAMP_MIN,
    ValueCheckError,
    check_type_value,
    check_value,
    is_integer_type,
    parse_type,
)

T = MySQLType
FAST = settings(max_examples=60, deadline=None, database=None)
UTC = dt.UTC


def col(type_text: str, *, nullable: bool = True, default: str | None = None, name: str = "c") -> ColumnInfo:
    ct, canon = parse_type(type_text)
    return ColumnInfo(1, name, 0, canon, ct, nullable=nullable, default=default)


def through_row(value: Any, ct: ColumnType) -> Any:
    """flatten -> row bytes -> decode -> unflatten."""
    return unflatten(decode_row(encode_row([1], [flatten(value, ct)]))[1], ct)


# ----------------------------------------------------------------------------- parse_type

PARSE_CASES = [
    # text, tp, flen, decimal, unsigned, charset, elems, canonical
    ("TINYINT", T.TINY, 4, 0, False, "utf8mb4", (), "tinyint(4)"),
    ("tinyint unsigned", T.TINY, 3, 0, True, "utf8mb4", (), "tinyint(3) unsigned"),
    ("TinyInt(1)", T.TINY, 1, 0, False, "utf8mb4", (), "tinyint(1)"),
    ("BOOL", T.TINY, 1, 0, False, "utf8mb4", (), "tinyint(1)"),
    ("boolean", T.TINY, 1, 0, False, "utf8mb4", (), "tinyint(1)"),
    ("SMALLINT", T.SHORT, 6, 0, False, "utf8mb4", (), "smallint(6)"),
    ("smallint  UNSIGNED", T.SHORT, 5, 0, True, "utf8mb4", (), "smallint(5) unsigned"),
    ("MEDIUMINT", T.INT24, 9, 0, False, "utf8mb4", (), "mediumint(9)"),
    ("mediumint unsigned", T.INT24, 8, 0, True, "utf8mb4", (), "mediumint(8) unsigned"),
    ("INT", T.LONG, 11, 0, False, "utf8mb4", (), "int(11)"),
    ("integer", T.LONG, 11, 0, False, "utf8mb4", (), "int(11)"),
    ("INT UNSIGNED", T.LONG, 10, 0, True, "utf8mb4", (), "int(10) unsigned"),
    ("int(5) signed", T.LONG, 5, 0, False, "utf8mb4", (), "int(5)"),
    ("BIGINT", T.LONGLONG, 20, 0, False, "utf8mb4", (), "bigint(20)"),
    ("bigint unsigned", T.LONGLONG, 20, 0, True, "utf8mb4", (), "bigint(20) unsigned"),
    ("FLOAT", T.FLOAT, 12, -1, False, "utf8mb4", (), "float"),
    ("DOUBLE", T.DOUBLE, 22, -1, False, "utf8mb4", (), "double"),
    ("double  precision", T.DOUBLE, 22, -1, False, "utf8mb4", (), "double"),
    ("REAL", T.DOUBLE, 22, -1, False, "utf8mb4", (), "double"),
    ("DECIMAL", T.NEW_DECIMAL, 10, 0, False, "utf8mb4", (), "decimal(10,0)"),
    ("decimal(5)", T.NEW_DECIMAL, 5, 0, False, "utf8mb4", (), "decimal(5,0)"),
    ("NUMERIC( 7 , 3 )", T.NEW_DECIMAL, 7, 3, False, "utf8mb4", (), "decimal(7,3)"),
    ("dec(65,30)", T.NEW_DECIMAL, 65, 30, False, "utf8mb4", (), "decimal(65,30)"),
    ("fixed(1,1)", T.NEW_DECIMAL, 1, 1, False, "utf8mb4", (), "decimal(1,1)"),
    ("CHAR", T.STRING, 1, 0, False, "utf8mb4", (), "char(1)"),
    ("char(255)", T.STRING, 255, 0, False, "utf8mb4", (), "char(255)"),
    ("VARCHAR(20)", T.VARCHAR, 20, 0, False, "utf8mb4", (), "varchar(20)"),
    ("varchar(16383)", T.VARCHAR, 16383, 0, False, "utf8mb4", (), "varchar(16383)"),
    ("TINYTEXT", T.TINY_BLOB, 255, 0, False, "utf8mb4", (), "tinytext"),
    ("TEXT", T.BLOB, 65535, 0, False, "utf8mb4", (), "text"),
    ("MediumText", T.MEDIUM_BLOB, 16777215, 0, False, "utf8mb4", (), "mediumtext"),
    ("LONGTEXT", T.LONG_BLOB, 4294967295, 0, False, "utf8mb4", (), "longtext"),
    ("BINARY", T.STRING, 1, 0, False, "binary", (), "binary(1)"),
    ("binary(16)", T.STRING, 16, 0, False, "binary", (), "binary(16)"),
    ("VARBINARY(65535)", T.VARCHAR, 65535, 0, False, "binary", (), "varbinary(65535)"),
    ("TINYBLOB", T.TINY_BLOB, 255, 0, False, "binary", (), "tinyblob"),
    ("BLOB", T.BLOB, 65535, 0, False, "binary", (), "blob"),
    ("mediumblob", T.MEDIUM_BLOB, 16777215, 0, False, "binary", (), "mediumblob"),
    ("LONGBLOB", T.LONG_BLOB, 4294967295, 0, False, "binary", (), "longblob"),
    ("DATE", T.DATE, 10, 0, False, "utf8mb4", (), "date"),
    ("DATETIME", T.DATETIME, 19, 0, False, "utf8mb4", (), "datetime"),
    ("datetime(0)", T.DATETIME, 19, 0, False, "utf8mb4", (), "datetime"),
    ("DATETIME(6)", T.DATETIME, 26, 6, False, "utf8mb4", (), "datetime(6)"),
    ("TIMESTAMP", T.TIMESTAMP, 19, 0, False, "utf8mb4", (), "timestamp"),
    ("timestamp(3)", T.TIMESTAMP, 23, 3, False, "utf8mb4", (), "timestamp(3)"),
    ("TIME", T.DURATION, 10, 0, False, "utf8mb4", (), "time"),
    ("time(4)", T.DURATION, 15, 4, False, "utf8mb4", (), "time(4)"),
    ("YEAR", T.YEAR, 4, 0, True, "utf8mb4", (), "year(4)"),
    ("year(4)", T.YEAR, 4, 0, True, "utf8mb4", (), "year(4)"),
    ("JSON", T.JSON, -1, 0, False, "utf8mb4", (), "json"),
    ("ENUM('a','B')", T.ENUM, 1, -1, False, "utf8mb4", ("a", "B"), "enum('a','B')"),
    ("enum( 'it''s' , \"say \"\"hi\"\"\", 'back\\\\slash', 'pad  ' )", T.ENUM, 10, -1, False, "utf8mb4",
     ("it's", 'say "hi"', "back\\slash", "pad"), "enum('it''s','say \"hi\"','back\\\\slash','pad')"),
    ("enum('x\\'y','a\\nb')", T.ENUM, 3, -1, False, "utf8mb4", ("x'y", "a\nb"), "enum('x''y','a\nb')"),
    ("SET('a','b','c')", T.SET, 5, -1, False, "utf8mb4", ("a", "b", "c"), "set('a','b','c')"),
    ("set('')", T.SET, 0, -1, False, "utf8mb4", ("",), "set('')"),
    ("BIT", T.BIT, 1, 0, False, "binary", (), "bit(1)"),
    ("bit(64)", T.BIT, 64, 0, False, "binary", (), "bit(64)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("text", "tp", "flen", "decimal", "unsigned", "charset", "elems", "canonical"),
    PARSE_CASES,
    ids=[c[0] for c in PARSE_CASES],
)
def test_parse_type(
    text: str,
    tp: MySQLType,
    flen: int,
    decimal: int,
    unsigned: bool,
    charset: str,
    elems: tuple[str, ...],
    canonical: str,
) -> None:
    ct, canon = parse_type(text)
    assert ct == ColumnType(tp, flen, decimal, unsigned, charset, elems)
    assert canon == canonical
    # canonical text is a fixed point
    assert parse_type(canon) == (ct, canon)


def test_set_and_enum_flen_follow_members() -> None:
    assert parse_type("enum('a','bcd','ef')")[0].flen == 3
    assert parse_type("set('a','bcd','ef')")[0].flen == 1 + 3 + 2 + 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "unknown column type"),
        ("foo", "unknown column type 'foo'"),
        ("varchar2(10)", "unknown column type"),
        ("int unsigned zerofill", "unsupported attribute"),
        ("int unsigned unsigned", "unsupported attribute"),
        ("int signed unsigned", "unsupported attribute"),
        ("varchar(10) unsigned", "only applies to integer types"),
        ("float unsigned", "only applies to integer types"),
        ("int(0)", "display width"),
        ("int(256)", "display width"),
        ("int(1,2)", "wrong number of arguments"),
        ("int(", "missing ')'"),
        ("int(x)", "bad length"),
        ("int(-1)", "bad length"),
        ("int(11) extra", "unsupported attribute"),
        ("int(11) (3)", "unexpected"),
        ("DECIMAL(66)", "precision must be 1..65"),
        ("decimal(0)", "precision must be 1..65"),
        ("decimal(40,31)", "scale must be at most 30"),
        ("decimal(5,6)", "larger than precision"),
        ("decimal(1,2,3)", "wrong number of arguments"),
        ("float(10,2)", "FLOAT takes no length"),
        ("double(10)", "DOUBLE takes no length"),
        ("text(100)", "TEXT takes no length"),
        ("json(1)", "JSON takes no length"),
        ("date(1)", "DATE takes no length"),
        ("char(256)", "at most 255"),
        ("binary(256)", "at most 255"),
        ("VARCHAR", "VARCHAR needs a length"),
        ("varbinary", "VARBINARY needs a length"),
        ("varchar(16384)", "at most 16383"),
        ("varbinary(65536)", "at most 65535"),
        ("BIT(65)", "BIT width must be 1..64"),
        ("bit(0)", "BIT width must be 1..64"),
        ("datetime(7)", "fractional seconds precision"),
        ("time(10)", "fractional seconds precision"),
        ("year(2)", "only YEAR(4)"),
        ("enum", "needs a member list"),
        ("enum()", "expected a quoted member"),
        ("enum('a'", "expected ',' or ')'"),
        ("enum('a", "unterminated quoted string"),
        ("enum('a''", "unterminated quoted string"),
        ("enum('a',)", "expected a quoted member"),
        ("enum(a,b)", "expected a quoted member"),
        ("enum('a' 'b')", "expected ',' or ')'"),
        ("enum('a','A')", "duplicate member 'A'"),
        ("set('a','b ','b')", "duplicate member"),
        ("set('a,b')", "contains ','"),
        ("set(" + ",".join(f"'m{i}'" for i in range(65)) + ")", "more than 64 members"),
        ("enum('a') unsigned", "only applies to integer types"),
    ],
)
def test_parse_type_rejects(text: str, message: str) -> None:
    with pytest.raises(SchemaError, match=None) as info:
        parse_type(text)
    assert message in str(info.value)
    assert repr(text) in str(info.value) or text == ""


def test_is_integer_type() -> None:
    for text in ("tinyint", "smallint", "mediumint", "int", "bigint unsigned", "year", "bool"):
        assert is_integer_type(parse_type(text)[0]), text
    for text in ("float", "decimal", "bit(8)", "varchar(3)", "date", "enum('a')"):
        assert not is_integer_type(parse_type(text)[0]), text


# ----------------------------------------------------------------------------- check_value: integers

INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}


@pytest.mark.parametrize("name", list(INT_BITS))
@pytest.mark.parametrize("unsigned", [False, True])
def test_int_ranges(name: str, unsigned: bool) -> None:
    bits = INT_BITS[name]
    c = col(f"{name} unsigned" if unsigned else name)
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    for v in (lo, hi, 0, 1):
        assert check_value(c, v) == v
        assert type(check_value(c, v)) is int
    for v in (lo - 1, hi + 1):
        with pytest.raises(ValueCheckError, match=rf"column c: {v} is out of range {lo}\.\.{hi}"):
            check_value(c, v)


@pytest.mark.parametrize("value", [True, False, "1", 1.0, Decimal(1), b"1"])
def test_int_rejects_non_int(value: object) -> None:
    with pytest.raises(ValueCheckError, match="is not an int"):
        check_value(col("int"), value)


def test_year() -> None:
    c = col("year")
    for v in (0, 1901, 2024, 2155):
        assert check_value(c, v) == v
    for v in (1, 1900, 2156, -1):
        with pytest.raises(ValueCheckError, match=r"1901\.\.2155 or 0"):
            check_value(c, v)
    with pytest.raises(ValueCheckError, match="not an int"):
        check_value(c, "2020")


# ----------------------------------------------------------------------------- floats, decimals


def test_float_rounds_to_float32() -> None:
    c = col("float")
    assert check_value(c, 0.1) == to_float32(0.1) != 0.1
    assert check_value(c, 3) == 3.0
    assert type(check_value(c, 3)) is float
    assert check_value(c, 3.4028234663852886e38) == 3.4028234663852886e38
    assert check_value(c, -1e-46) == 0.0  # underflows to (negative) zero like MySQL
    for bad in (1e39, -1e39, float("inf"), float("nan")):
        with pytest.raises(ValueCheckError, match="FLOAT"):
            check_value(c, bad)
    with pytest.raises(ValueCheckError, match="not a float"):
        check_value(c, "1.5")


def test_double() -> None:
    c = col("double")
    assert check_value(c, 0.1) == 0.1
    assert check_value(c, 1.7976931348623157e308) == 1.7976931348623157e308
    assert check_value(c, 5e-324) == 5e-324
    assert check_value(c, 2**70) == float(2**70)
    for bad in (float("inf"), float("-inf"), float("nan")):
        with pytest.raises(ValueCheckError, match="not finite"):
            check_value(c, bad)
    with pytest.raises(ValueCheckError, match="out of range"):
        check_value(c, 10**400)
    for bad2 in (True, Decimal("1.5"), "1.5"):
        with pytest.raises(ValueCheckError):
            check_value(c, bad2)


@pytest.mark.parametrize(
    ("type_text", "value", "expected"),
    [
        ("decimal(5,2)", "999.99", "999.99"),
        ("decimal(5,2)", "-999.99", "-999.99"),
        ("decimal(5,2)", "999.994", "999.99"),
        ("decimal(5,2)", "1.005", "1.01"),  # half away from zero, as MySQL
        ("decimal(5,2)", "-1.005", "-1.01"),
        ("decimal(5,2)", "1.004999", "1.00"),
        ("decimal(5,2)", 5, "5.00"),
        ("decimal(5,2)", Decimal("1.5"), "1.50"),
        ("decimal(5,2)", Decimal("-0.001"), "0.00"),  # no negative zero
        ("decimal(5,2)", " 12.5 ", "12.50"),
        ("decimal(5,2)", "1e2", "100.00"),
        ("decimal(5,2)", Decimal("1E-7"), "0.00"),
        ("decimal(10,0)", "9999999999", "9999999999"),
        ("decimal(10,0)", "-9999999999.4", "-9999999999"),
        ("decimal(1,1)", "0.9", "0.9"),
        ("decimal(1,1)", "-0.94", "-0.9"),
        ("decimal(65,30)", "9" * 35 + "." + "9" * 30, "9" * 35 + "." + "9" * 30),
        ("decimal(65,30)", "1e-30", "0." + "0" * 29 + "1"),
        ("decimal(65,0)", "9" * 65, "9" * 65),
    ],
)
def test_decimal_accepts(type_text: str, value: object, expected: str) -> None:
    got = check_value(col(type_text), value)
    assert isinstance(got, Decimal)
    assert f"{got:f}" == expected  # exactly s fraction digits
    assert got.as_tuple().exponent == -int(type_text.rstrip(")").split(",")[1])


@pytest.mark.parametrize(
    ("type_text", "value", "message"),
    [
        ("decimal(5,2)", "1000", r"out of range for DECIMAL\(5,2\) \(at most 3 integer digits\)"),
        ("decimal(5,2)", "999.995", "out of range"),  # rounds up to 1000.00
        ("decimal(5,2)", "-1000", "out of range"),
        ("decimal(1,1)", "1", "out of range"),
        ("decimal(1,1)", "0.95", "out of range"),
        ("decimal(65,30)", "1" + "0" * 35, "out of range"),
        ("decimal(10,0)", "1e100", "out of range"),
        ("decimal(10,0)", "1e1000000", "out of range"),
        ("decimal(5,2)", "abc", "not a decimal number"),
        ("decimal(5,2)", "", "not a decimal number"),
        ("decimal(5,2)", "NaN", "not finite"),
        ("decimal(5,2)", Decimal("Infinity"), "not finite"),
        ("decimal(5,2)", 1.5, "not a Decimal, int or str"),
        ("decimal(5,2)", True, "not a Decimal, int or str"),
    ],
)
def test_decimal_rejects(type_text: str, value: object, message: str) -> None:
    with pytest.raises(ValueCheckError, match=message):
        check_value(col(type_text), value)


# ----------------------------------------------------------------------------- strings


def test_varchar_counts_characters() -> None:
    c = col("varchar(3)")
    assert check_value(c, "") == ""
    assert check_value(c, "abc") == "abc"
    assert check_value(c, "日本語") == "日本語"  # 3 characters, 9 bytes
    assert check_value(c, "😀😀😀") == "😀😀😀"  # 3 characters, 12 bytes
    assert check_value(c, "a  ") == "a  "  # VARCHAR keeps trailing spaces
    with pytest.raises(ValueCheckError, match="longer than 3 characters"):
        check_value(c, "abcd")
    with pytest.raises(ValueCheckError, match="longer than 3 characters"):
        check_value(c, "日本語x")
    with pytest.raises(ValueCheckError, match="not a str"):
        check_value(c, b"abc")
    with pytest.raises(ValueCheckError, match="utf8mb4"):
        check_value(c, "\ud800")


def test_char_drops_trailing_spaces() -> None:
    c = col("char(3)")
    assert check_value(c, "ab   ") == "ab"
    assert check_value(c, "abc     ") == "abc"
    assert check_value(c, "   ") == ""
    assert check_value(c, " a") == " a"
    assert check_value(c, "a\t") == "a\t"
    with pytest.raises(ValueCheckError, match="longer than 3 characters"):
        check_value(c, "abcd")
    assert check_value(col("char(0)"), "") == ""


@pytest.mark.parametrize(
    ("type_text", "limit"), [("tinytext", 255), ("text", 65535)]
)  # medium/long limits are checked the same way
def test_text_counts_utf8_bytes(type_text: str, limit: int) -> None:
    c = col(type_text)
    assert check_value(c, "x" * limit) == "x" * limit
    with pytest.raises(ValueCheckError, match=f"longer than {limit} bytes in UTF-8"):
        check_value(c, "x" * (limit + 1))
    n = limit // 2  # 'é' is 2 bytes: n characters fit, n + 1 do not
    assert check_value(c, "é" * n) == "é" * n
    with pytest.raises(ValueCheckError, match="bytes in UTF-8"):
        check_value(c, "é" * (n + 1))


def test_text_accepts_large_values() -> None:
    v = "a" * 70000
    assert check_value(col("mediumtext"), v) == v
    assert check_value(col("longtext"), v) == v


def test_binary_pads_to_length() -> None:
    c = col("binary(4)")
    assert check_value(c, b"ab") == b"ab\x00\x00"
    assert check_value(c, b"") == b"\x00" * 4
    assert check_value(c, bytearray(b"abcd")) == b"abcd"
    assert check_value(c, memoryview(b"a\x00")) == b"a\x00\x00\x00"
    assert type(check_value(c, bytearray(b"abcd"))) is bytes
    with pytest.raises(ValueCheckError, match="longer than 4 bytes"):
        check_value(c, b"abcde")
    with pytest.raises(ValueCheckError, match="not bytes"):
        check_value(c, "ab")


def test_varbinary_and_blobs_count_bytes() -> None:
    c = col("varbinary(3)")
    assert check_value(c, b"") == b""
    assert check_value(c, b"\x00\x00\x00") == b"\x00\x00\x00"
    with pytest.raises(ValueCheckError, match="longer than 3 bytes"):
        check_value(c, b"abcd")
    tb = col("tinyblob")
    assert check_value(tb, bytes(255)) == bytes(255)
    with pytest.raises(ValueCheckError, match="longer than 255 bytes"):
        check_value(tb, bytes(256))
    b = col("blob")
    assert check_value(b, bytes(65535)) == bytes(65535)
    with pytest.raises(ValueCheckError, match="longer than 65535 bytes"):
        check_value(b, bytes(65536))
    assert check_value(col("longblob"), bytes(70000)) == bytes(70000)
    with pytest.raises(ValueCheckError, match="not bytes"):
        check_value(b, "text")


# ----------------------------------------------------------------------------- dates and times


def test_date() -> None:
    c = col("date")
    for v in (dt.date(1, 1, 1), dt.date(2024, 2, 29), dt.date(9999, 12, 31)):
        assert check_value(c, v) == v
    with pytest.raises(ValueCheckError, match=r"not a datetime\.date"):
        check_value(c, dt.datetime(2020, 1, 1))
    with pytest.raises(ValueCheckError, match=r"not a datetime\.date"):
        check_value(c, "2020-01-01")


@pytest.mark.parametrize(
    ("fsp", "usec", "expected"),
    [
        (0, 499999, (0, 0)),
        (0, 500000, (1, 0)),
        (3, 123456, (0, 123000)),
        (3, 123499, (0, 123000)),
        (3, 123500, (0, 124000)),
        (3, 999500, (1, 0)),
        (6, 999999, (0, 999999)),
    ],
)
def test_datetime_rounds_to_fsp(fsp: int, usec: int, expected: tuple[int, int]) -> None:
    c = col(f"datetime({fsp})")
    got = check_value(c, dt.datetime(2020, 1, 1, 0, 0, 0, usec))
    assert got == dt.datetime(2020, 1, 1, 0, 0, expected[0], expected[1])


def test_datetime_bounds() -> None:
    c = col("datetime")
    assert check_value(c, dt.datetime(1, 1, 1)) == dt.datetime(1, 1, 1)
    assert check_value(c, dt.datetime(9999, 12, 31, 23, 59, 59)) == dt.datetime(9999, 12, 31, 23, 59, 59)
    with pytest.raises(ValueCheckError, match="overflows when rounded"):
        check_value(c, dt.datetime(9999, 12, 31, 23, 59, 59, 500000))
    with pytest.raises(ValueCheckError, match="time-zone aware"):
        check_value(c, dt.datetime(2020, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueCheckError, match=r"not a datetime\.datetime"):
        check_value(c, dt.date(2020, 1, 1))


def test_timestamp_normalizes_to_utc() -> None:
    c = col("timestamp(6)")
    plus8 = dt.timezone(dt.timedelta(hours=8))
    got = check_value(c, dt.datetime(2020, 1, 1, 8, 0, 0, 5, tzinfo=plus8))
    assert got == dt.datetime(2020, 1, 1, 0, 0, 0, 5, tzinfo=UTC)
    assert isinstance(got, dt.datetime)
    assert got.tzinfo is UTC
    naive = check_value(c, dt.datetime(2020, 1, 1, 8))  # naive means UTC
    assert naive == dt.datetime(2020, 1, 1, 8, tzinfo=UTC)
    assert isinstance(naive, dt.datetime)
    assert naive.tzinfo is UTC


def test_timestamp_range() -> None:
    c0, c6 = col("timestamp"), col("timestamp(6)")
    assert check_value(c0, TIMESTAMP_MIN) == TIMESTAMP_MIN
    assert check_value(c6, TIMESTAMP_MAX) == TIMESTAMP_MAX
    last = TIMESTAMP_MAX.replace(microsecond=0)
    assert check_value(c0, last) == last
    with pytest.raises(ValueCheckError, match="out of range for TIMESTAMP"):
        check_value(c0, TIMESTAMP_MAX)  # .999999 rounds up past the limit at fsp 0
    with pytest.raises(ValueCheckError, match="out of range for TIMESTAMP"):
        check_value(c0, dt.datetime(1970, 1, 1, 0, 0, 0))
    with pytest.raises(ValueCheckError, match="out of range for TIMESTAMP"):
        check_value(c0, dt.datetime(2038, 1, 19, 3, 14, 8))
    with pytest.raises(ValueCheckError, match="out of range for TIMESTAMP"):
        check_value(c0, dt.datetime(2038, 1, 19, 3, 14, 7, 500000))  # rounds to :08
    with pytest.raises(ValueCheckError, match="out of range for TIMESTAMP"):
        check_value(c0, dt.datetime(1970, 1, 1, 7, 59, 59, tzinfo=dt.timezone(dt.timedelta(hours=8))))
    with pytest.raises(ValueCheckError, match=r"not a datetime\.datetime"):
        check_value(c0, 0)


def test_time() -> None:
    c0, c6, c1 = col("time"), col("time(6)"), col("time(1)")
    for v in (TIME_MAX, -TIME_MAX, dt.timedelta(0), dt.timedelta(days=-1)):
        assert check_value(c0, v) == v
    assert check_value(c0, dt.timedelta(seconds=-1, microseconds=500000)) == dt.timedelta(seconds=-1)  # -0.5 -> -1
    assert check_value(c0, dt.timedelta(microseconds=499999)) == dt.timedelta(0)
    assert check_value(c1, dt.timedelta(microseconds=-150000)) == dt.timedelta(microseconds=-200000)
    assert check_value(c6, dt.timedelta(microseconds=-1)) == dt.timedelta(microseconds=-1)
    for bad in (TIME_MAX + dt.timedelta(seconds=1), -TIME_MAX - dt.timedelta(microseconds=1)):
        with pytest.raises(ValueCheckError, match="out of range for TIME"):
            check_value(c6, bad)
    with pytest.raises(ValueCheckError, match="out of range for TIME"):
        check_value(c0, TIME_MAX + dt.timedelta(microseconds=500000))  # rounds past the limit
    with pytest.raises(ValueCheckError, match=r"not a datetime\.timedelta"):
        check_value(c0, "01:00:00")


# ----------------------------------------------------------------------------- JSON, ENUM, SET, BIT


def test_json() -> None:
    c = col("json")
    doc = {"a": [1, 2.5, None, True, "x"], "日本": {"n": (1, 2)}}
    assert check_value(c, doc) == {"a": [1, 2.5, None, True, "x"], "日本": {"n": [1, 2]}}
    scalars: list[object] = ["str", 0, -(2**63), 2**64 - 1, 1.0, [], {}, False]
    for v in scalars:
        assert check_value(c, v) == v
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    assert check_value(c, deep) == deep
    for bad, message in [
        ({1: 2}, "not a str JSON object key"),
        (float("nan"), "not finite"),
        ([float("inf")], "not finite"),
        (2**64, "64-bit range"),
        (-(2**63) - 1, "64-bit range"),
        ({1, 2}, "not a JSON value"),
        (b"x", "not a JSON value"),
        (["\udc00"], "utf8mb4"),
        ([deep], "deeper than 100"),
    ]:
        with pytest.raises(ValueCheckError, match=message):
            check_value(c, bad)


def test_enum() -> None:
    c = col("enum('a','B','c d')")
    assert check_value(c, "a") == "a"
    assert check_value(c, "A") == "a"
    assert check_value(c, "b") == "B"
    assert check_value(c, "C D") == "c d"
    for bad in ("", "z", "a ", "B,a"):
        with pytest.raises(ValueCheckError, match="not a member of ENUM"):
            check_value(c, bad)
    with pytest.raises(ValueCheckError, match="not a str"):
        check_value(c, 1)
    assert check_value(col("enum('','x')"), "") == ""


def test_set() -> None:
    c = col("set('a','B','c')")
    assert check_value(c, "") == ""
    assert check_value(c, "c,a") == "a,c"
    assert check_value(c, "b") == "B"
    assert check_value(c, ["C", "a", "a"]) == "a,c"
    assert check_value(c, ("c", "b", "a")) == "a,B,c"
    assert check_value(c, frozenset({"B"})) == "B"
    assert check_value(c, set()) == ""
    for bad in ("z", "a,,c", "a,", ["a", "z"]):
        with pytest.raises(ValueCheckError, match="not a member of SET"):
            check_value(c, bad)
    with pytest.raises(ValueCheckError, match="not a str"):
        check_value(c, [1])
    with pytest.raises(ValueCheckError, match="collection of member names"):
        check_value(c, 3)


def test_bit() -> None:
    b1, b10, b64 = col("bit"), col("bit(10)"), col("bit(64)")
    assert check_value(b1, 0) == b"\x00"
    assert check_value(b1, 1) == b"\x01"
    assert check_value(b10, 1023) == b"\x03\xff"
    assert check_value(b10, b"\x01") == b"\x00\x01"
    assert check_value(b10, b"\x00\x00\x02") == b"\x00\x02"
    assert check_value(b64, 2**64 - 1) == b"\xff" * 8
    assert check_value(b64, b"") == bytes(8)
    for c, bad in ((b1, 2), (b10, 1024), (b10, b"\x04\x00"), (b64, 2**64), (b1, -1)):
        with pytest.raises(ValueCheckError, match=r"does not fit BIT\("):
            check_value(c, bad)
    for bad2 in ("1", True, 1.0):
        with pytest.raises(ValueCheckError, match="not an int or bytes"):
            check_value(b1, bad2)


def test_null() -> None:
    for text in ("int", "varchar(3)", "json", "bit(3)", "timestamp"):
        assert check_value(col(text), None) is None
        with pytest.raises(ValueCheckError, match="column c: NULL in a NOT NULL column"):
            check_value(col(text, nullable=False), None)
    assert check_type_value(parse_type("int")[0], None) is None


def test_error_names_column_and_truncates_value() -> None:
    with pytest.raises(ValueCheckError) as info:
        check_value(col("varchar(5)", name="title"), "x" * 1000)
    msg = str(info.value)
    assert msg.startswith("column title: 'xxxxx")
    assert "..." in msg
    assert "longer than 5 characters" in msg
    assert len(msg) < 150
    assert isinstance(info.value, SchemaError)


# ----------------------------------------------------------------------------- defaults

DEFAULT_CASES = [
    # type text, value, literal default_literal writes
    ("int", 5, "'5'"),
    ("int", -2147483648, "'-2147483648'"),
    ("bigint unsigned", 2**64 - 1, "'18446744073709551615'"),
    ("tinyint(1)", 0, "'0'"),
    ("year", 2024, "'2024'"),
    ("float", 0.1, "'0.1'"),
    ("float", 3.4028234663852886e38, "'3.4028235e+38'"),
    ("double", 0.1 + 0.2, "'0.30000000000000004'"),
    ("double", -1e300, "'-1e+300'"),
    ("decimal(5,2)", Decimal("1.5"), "'1.50'"),
    ("decimal(65,30)", Decimal("-1e-30"), "'-0.000000000000000000000000000001'"),
    ("char(4)", "ab", "'ab'"),
    ("varchar(20)", "it's a \\ \0 x", "'it''s a \\\\ \\0 x'"),
    ("varchar(5)", "", "''"),
    ("varchar(5)", "日本", "'日本'"),
    ("binary(3)", b"a", "X'610000'"),
    ("varbinary(3)", b"", "X''"),
    ("date", dt.date(2000, 2, 29), "'2000-02-29'"),
    ("date", dt.date(1, 1, 1), "'0001-01-01'"),
    ("datetime", dt.datetime(2020, 1, 2, 3, 4, 5), "'2020-01-02 03:04:05'"),
    ("datetime(3)", dt.datetime(2020, 1, 2, 3, 4, 5, 120000), "'2020-01-02 03:04:05.120'"),
    ("timestamp", dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC), "'2020-01-02 03:04:05'"),
    ("timestamp(6)", TIMESTAMP_MAX, "'2038-01-19 03:14:07.999999'"),
    ("time", -TIME_MAX, "'-838:59:59'"),
    ("time(2)", dt.timedelta(hours=1, microseconds=10000), "'01:00:00.01'"),
    ("enum('a','B')", "B", "'B'"),
    ("set('a','b','c')", "a,c", "'a,c'"),
    ("set('a','b','c')", "", "''"),
    ("bit(8)", b"\x05", "b'101'"),
    ("bit(8)", b"\x00", "b'0'"),
    ("bit(64)", b"\xff" * 8, "b'" + "1" * 64 + "'"),
]


@pytest.mark.parametrize(("type_text", "value", "literal"), DEFAULT_CASES, ids=[str(c[:2]) for c in DEFAULT_CASES])
def test_default_literal_round_trip(type_text: str, value: object, literal: str) -> None:
    c = col(type_text)
    assert default_literal(c.ctype, value) == literal
    for nullable in (True, False):
        cd = col(type_text, default=literal, nullable=nullable)
        assert default_value(cd) == check_value(c, value)


@pytest.mark.parametrize(
    ("type_text", "literal", "expected"),
    [
        ("int", "5", 5),
        ("int", "-5", -5),
        ("int", "'7'", 7),
        ("int", "TRUE", 1),
        ("int", "false", 0),
        ("int", "0x10", 16),
        ("int", "1e2", 100),
        ("int", "  'N'  ".replace("N", "3"), 3),
        ("tinyint unsigned", "255", 255),
        ("double", "1.5e3", 1500.0),
        ("float", "0.1", to_float32(0.1)),
        ("decimal(5,2)", "1.005", Decimal("1.01")),
        ("decimal(5,2)", "'-3'", Decimal("-3.00")),
        ("varchar(10)", "5", "5"),
        ("varchar(10)", '"say ""hi"""', 'say "hi"'),
        ("varchar(10)", "'a\\nb\\tc'", "a\nb\tc"),
        ("varchar(10)", "'a\\%b'", "a\\%b"),
        ("varchar(10)", "X'6869'", "hi"),
        ("char(3)", "'ab  '", "ab"),
        ("binary(2)", "'a'", b"a\x00"),
        ("varbinary(4)", "0xff00", b"\xff\x00"),
        ("varbinary(4)", "x'f'", b"\x0f"),
        ("bit(4)", "b'1010'", b"\x0a"),
        ("bit(4)", "0b11", b"\x03"),
        ("bit(4)", "7", b"\x07"),
        ("bit(16)", "0x0102", b"\x01\x02"),
        ("date", "'2020-1-2'", dt.date(2020, 1, 2)),
        ("datetime", "'2020-01-02'", dt.datetime(2020, 1, 2)),
        ("datetime", "'2020-01-02T03:04:05'", dt.datetime(2020, 1, 2, 3, 4, 5)),
        ("datetime(2)", "'2020-01-02 03:04:05.125'", dt.datetime(2020, 1, 2, 3, 4, 5, 130000)),
        ("timestamp", "'2020-01-02 03:04:05'", dt.datetime(2020, 1, 2, 3, 4, 5, tzinfo=UTC)),
        ("time", "'-00:00:01'", dt.timedelta(seconds=-1)),
        ("time(6)", "'838:59:59.000000'", TIME_MAX),
        ("enum('a','B')", "'b'", "B"),
        ("set('a','b')", "'b,a'", "a,b"),
        ("int", "NULL", None),
        ("int", "null", None),
    ],
)
def test_default_value_parses_literals(type_text: str, literal: str, expected: object) -> None:
    assert default_value(col(type_text, default=literal)) == expected


def test_no_default() -> None:
    assert default_value(col("int")) is None
    assert default_value(col("int", nullable=False)) is None
    assert default_literal(parse_type("int")[0], None) == "NULL"


@pytest.mark.parametrize(
    ("type_text", "literal", "nullable", "message"),
    [
        ("int", "NULL", False, "DEFAULT NULL on a NOT NULL column"),
        ("int", "'x'", True, "DEFAULT does not fit"),
        ("int", "1.5", True, "not an integer"),
        ("int", "'300", True, "unterminated"),
        ("int", "'3' x", True, "unexpected"),
        ("int", "3 + 4", True, "cannot parse DEFAULT"),
        ("tinyint", "300", True, "invalid DEFAULT: column c: 300 is out of range"),
        ("varchar(2)", "'abc'", True, "invalid DEFAULT"),
        ("timestamp", "CURRENT_TIMESTAMP", True, "non-constant DEFAULT"),
        ("datetime", "now()", True, "non-constant DEFAULT"),
        ("timestamp", "'1960-01-01 00:00:00'", True, "out of range for TIMESTAMP"),
        ("date", "'2020-02-30'", True, "DEFAULT does not fit DATE"),
        ("date", "'yesterday'", True, "DEFAULT does not fit DATE"),
        ("date", "0x01", True, "DEFAULT does not fit DATE"),
        ("time", "'10:61:00'", True, "DEFAULT does not fit DURATION"),
        ("text", "'x'", True, "cannot have a DEFAULT"),
        ("blob", "'x'", True, "cannot have a DEFAULT"),
        ("json", "'{}'", True, "cannot have a DEFAULT"),
        ("enum('a')", "'b'", True, "not a member of ENUM"),
        ("varchar(5)", "X'ff'", True, "DEFAULT does not fit"),
    ],
)
def test_default_value_rejects(type_text: str, literal: str, nullable: bool, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        default_value(col(type_text, default=literal, nullable=nullable))


def test_default_literal_rejects() -> None:
    with pytest.raises(SchemaError, match="cannot have a DEFAULT"):
        default_literal(parse_type("json")[0], {})
    with pytest.raises(ValueCheckError, match="column default: 300 is out of range"):
        default_literal(parse_type("tinyint")[0], 300)


# ----------------------------------------------------------------------------- codec agreement (Hypothesis)

TYPE_TEXTS = [
    *(f"{n}{u}" for n in INT_BITS for u in ("", " unsigned")),
    "year",
    "float",
    "double",
    "decimal(5,2)",
    "decimal(10,0)",
    "decimal(65,30)",
    "decimal(20,10)",
    "char(3)",
    "varchar(5)",
    "tinytext",
    "text",
    "binary(4)",
    "varbinary(6)",
    "blob",
    "date",
    "datetime",
    "datetime(3)",
    "datetime(6)",
    "timestamp",
    "timestamp(6)",
    "time",
    "time(2)",
    "time(6)",
    "json",
    "enum('a','B','c d')",
    "set('a','B','c')",
    "bit(1)",
    "bit(10)",
    "bit(64)",
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(exclude_categories=["Cs"]), max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4),
    max_leaves=12,
)


def raw_values(ct: ColumnType) -> st.SearchStrategy[Any]:
    """Values of the column's Python type, mostly valid and some beyond the limits."""
    tp = ct.tp
    text = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)
    if tp in (T.TINY, T.SHORT, T.INT24, T.LONG, T.LONGLONG):
        bits = {T.TINY: 8, T.SHORT: 16, T.INT24: 24, T.LONG: 32}.get(MySQLType(tp), 64)
        return st.integers(-(2**bits), 2**bits)
    if tp == T.YEAR:
        return st.integers(1890, 2160) | st.just(0)
    if tp in (T.FLOAT, T.DOUBLE):
        return st.floats(allow_nan=False) | st.integers(-(2**70), 2**70)
    if tp == T.NEW_DECIMAL:
        return st.decimals(allow_nan=False, allow_infinity=False, places=None) | st.integers(-(10**12), 10**12)
    if tp in (T.STRING, T.VARCHAR, T.BLOB, T.TINY_BLOB):
        return st.binary(max_size=8) if ct.is_binary else text
    if tp == T.DATE:
        return st.dates()
    if tp == T.DATETIME:
        return st.datetimes()
    if tp == T.TIMESTAMP:
        return st.datetimes(dt.datetime(1969, 12, 31), dt.datetime(2038, 1, 20)) | st.datetimes(
            dt.datetime(1970, 1, 2), dt.datetime(2038, 1, 18), timezones=st.timezones()
        )
    if tp == T.DURATION:
        return st.timedeltas(-TIME_MAX - dt.timedelta(seconds=1), TIME_MAX + dt.timedelta(seconds=1))
    if tp == T.JSON:
        return json_values
    if tp == T.ENUM:
        return st.sampled_from([*ct.elems, *(e.upper() for e in ct.elems), "zz"])
    if tp == T.SET:
        return st.lists(st.sampled_from([*ct.elems, "C"]), max_size=4) | st.sampled_from(["", "c,a", "a,B"])
    assert tp == T.BIT
    return st.integers(0, 2**ct.flen) | st.binary(max_size=9)


@st.composite
def checked_values(draw: st.DrawFn) -> tuple[ColumnInfo, object]:
    c = col(draw(st.sampled_from(TYPE_TEXTS)))
    raw = draw(raw_values(c.ctype))
    try:
        return c, check_value(c, raw)
    except ValueCheckError:
        return c, None


@FAST
@given(checked_values())
def test_checked_values_round_trip_through_the_codec(case: tuple[ColumnInfo, object]) -> None:
    c, v = case
    assert unflatten(flatten(v, c.ctype), c.ctype) == v
    assert through_row(v, c.ctype) == v
    # check_value is idempotent: its output is already normalized
    assert check_value(c, v) == v


@FAST
@given(checked_values())
def test_default_literal_round_trip_property(case: tuple[ColumnInfo, object]) -> None:
    c, v = case
    if v is None or c.ctype.tp in (T.JSON, T.BLOB, T.TINY_BLOB):
        return
    literal = default_literal(c.ctype, v)
    assert default_value(col(c.type_text, default=literal)) == v
