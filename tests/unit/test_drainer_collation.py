"""The charset and collation of a table created downstream (common.sql.collation, pure)."""

from __future__ import annotations

import pytest

from common.sql.collation import Choice, downstream_collation, with_table_options

MARIADB = {"utf8mb4_bin": "utf8mb4", "utf8mb4_nopad_bin": "utf8mb4", "utf8mb4_general_ci": "utf8mb4",
           "latin1_bin": "latin1", "latin1_nopad_bin": "latin1", "latin1_swedish_ci": "latin1"}  # fmt: skip
MYSQL8 = {"utf8mb4_bin": "utf8mb4", "utf8mb4_0900_bin": "utf8mb4", "utf8mb4_0900_ai_ci": "utf8mb4"}
OLD = {"utf8mb4_bin": "utf8mb4", "utf8mb4_general_ci": "utf8mb4"}


@pytest.mark.parametrize(
    ("charset", "collate", "available", "want"),
    [
        ("utf8mb4", "utf8mb4_bin", MARIADB, Choice("utf8mb4", "utf8mb4_nopad_bin")),
        ("", "", MARIADB, Choice("utf8mb4", "utf8mb4_nopad_bin")),  # not recorded: what the writer meant
        ("utf8mb4", "utf8mb4_bin", MYSQL8, Choice("utf8mb4", "utf8mb4_0900_bin")),
        ("latin1", "latin1_bin", MARIADB, Choice("latin1", "latin1_nopad_bin")),
        ("utf8mb4", "utf8mb4_general_ci", MARIADB, Choice("utf8mb4", "utf8mb4_general_ci")),  # asked for, exists
    ],
)
def test_collation_mapping(charset: str, collate: str, available: dict[str, str], want: Choice) -> None:
    assert downstream_collation(charset, collate, available) == want


def test_no_nopad_binary_keeps_bin_with_a_warning() -> None:
    c = downstream_collation("utf8mb4", "utf8mb4_bin", OLD)
    assert (c.charset, c.collate) == ("utf8mb4", "utf8mb4_bin")
    assert "trailing spaces collide" in c.warning


def test_unknown_collation_falls_back_to_binary_never_case_insensitive() -> None:
    c = downstream_collation("utf8mb4", "utf8mb4_0900_as_cs", MARIADB)
    assert (c.charset, c.collate) == ("utf8mb4", "utf8mb4_nopad_bin")
    assert "utf8mb4_0900_as_cs" in c.warning
    assert "utf8mb4_nopad_bin" in c.warning
    c = downstream_collation("gbk", "gbk_chinese_ci", OLD)
    assert (c.charset, c.collate) == ("utf8mb4", "utf8mb4_bin")
    assert "gbk_chinese_ci" in c.warning
    assert "trailing spaces" in c.warning


Q = "CREATE TABLE `t` (\n  `k` varchar(16) NOT NULL,\n  PRIMARY KEY (`k`)\n)"


@pytest.mark.parametrize(
    ("query", "want"),
    [
        (Q, Q + " DEFAULT CHARSET=cs COLLATE=co"),
        (Q + ";\n", Q + " DEFAULT CHARSET=cs COLLATE=co"),
        (Q + " ENGINE=InnoDB", Q + " ENGINE=InnoDB DEFAULT CHARSET=cs COLLATE=co"),
        (Q + " COMMENT='no collate here'", Q + " COMMENT='no collate here' DEFAULT CHARSET=cs COLLATE=co"),
        (
            "create table `a)b` (`c(` int DEFAULT ')')",
            "create table `a)b` (`c(` int DEFAULT ')') DEFAULT CHARSET=cs COLLATE=co",
        ),
        # the statement names its own options, or is not a plain column list: as it is
        (Q + " DEFAULT CHARSET=latin1", None),
        (Q + " CHARACTER SET latin1", None),
        (Q + " collate=utf8mb4_general_ci", None),
        ("CREATE TABLE t LIKE u", None),
        ("CREATE TABLE t AS SELECT count(*) AS n FROM u", None),
        ("CREATE TABLE t (id int) PARTITION BY HASH(id) PARTITIONS 2", None),
        ("CREATE DATABASE d", None),
        ("ALTER TABLE t ADD COLUMN c varchar(3)", None),
    ],
)
def test_table_options_are_appended_only_to_a_plain_create_table(query: str, want: str | None) -> None:
    assert with_table_options(query, "cs", "co") == (query if want is None else want)
