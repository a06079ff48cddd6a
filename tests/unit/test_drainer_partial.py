"""sync-mode 2 (drainer/sinks/partial.py): shapes and DMLs cut down to the downstream's columns."""

from __future__ import annotations

import pytest

from common.events import DMLType
from common.sql.render import Renderer
from drainer.sinks.partial import (
    PartialColumnError,
    PartialColumns,
    project_shape,
    relaxed_sql_mode,
    writable_columns,
)
from tests.unit.test_drainer_sql import Schema, dele, ins, upd
from upstream.ddl import Column


@pytest.fixture
def schema() -> Schema:
    s = Schema()
    s.create_db("d")
    s.create_table(
        "d",
        "t",
        [Column("id", "INT"), Column("u", "INT"), Column("extra", "INT"), Column("v", "INT")],
        primary_key=["id"],
        unique_keys=[["u", "extra"], ["v"]],
    )
    return s


def test_project_shape_drops_columns_and_the_keys_that_used_them(schema: Schema) -> None:
    t = schema.shape("d", "t")
    same, keep = project_shape(t, frozenset({"id", "u", "extra", "v"}))
    assert same is t
    assert keep == (0, 1, 2, 3)
    cut, keep = project_shape(t, frozenset({"id", "u", "v", "only_downstream"}))
    assert keep == (0, 1, 3)
    assert cut.names == ("id", "u", "v")
    assert cut.unique_keys == ((0,), (2,))  # (u, extra) lost extra; v moved to position 2


def test_missing_primary_key_column_or_every_column_is_an_error(schema: Schema) -> None:
    t = schema.shape("d", "t")
    with pytest.raises(PartialColumnError, match=r"column `id` of the primary key of `d`.`t` is missing downstream"):
        project_shape(t, frozenset({"u", "v"}))
    with pytest.raises(PartialColumnError, match=r"no column of `d`.`t` exists downstream"):
        project_shape(t, frozenset({"other"}))


def test_project_cuts_values_and_caches_until_evicted(schema: Schema) -> None:
    t = schema.shape("d", "t")
    reads: list[tuple[str, str]] = []
    downstream = {"t": frozenset({"id", "u", "v"})}

    def read(db: str, table: str) -> frozenset[str] | None:
        reads.append((db, table))
        return downstream.get(table)

    cols = PartialColumns()
    dmls = [ins(t, 1, 2, 3, 4), upd(t, (1, 2, 3, 4), (1, 5, 6, 7)), dele(t, 1, 5, 6, 7)]
    out = cols.project(dmls, read)
    assert [(d.tp, d.values, d.old_values) for d in out] == [
        (DMLType.INSERT, (1, 2, 4), None),
        (DMLType.UPDATE, (1, 5, 7), (1, 2, 4)),
        (DMLType.DELETE, None, (1, 5, 7)),
    ]
    assert Renderer("mysql").render(out[1:2]) == [
        ("UPDATE `d`.`t` SET `id`=%s,`u`=%s,`v`=%s WHERE `id`=%s LIMIT 1", [1, 5, 7, 1])
    ]
    cols.project(dmls, read)
    assert reads == [("d", "t")]  # cached
    downstream["t"] = frozenset({"id", "u", "extra", "v"})
    cols.evict()
    assert cols.project(dmls, read) is dmls  # nothing missing now: the same DMLs
    assert reads == [("d", "t"), ("d", "t")]
    downstream.clear()
    cols.evict()
    assert cols.project(dmls, read) is dmls  # no such table downstream: left to fail as in sync-mode 1


def test_generated_columns_are_not_writable_and_strict_mode_is_relaxed() -> None:
    rows = [("id", ""), ("V", "VIRTUAL GENERATED"), ("s", "STORED GENERATED"), ("w", "auto_increment")]
    assert writable_columns(rows) == frozenset({"id", "w"})
    assert writable_columns([]) is None
    assert relaxed_sql_mode("STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO") == "ERROR_FOR_DIVISION_BY_ZERO"
    assert relaxed_sql_mode("ANSI_QUOTES,STRICT_TRANS_TABLES") == "ANSI_QUOTES"
    assert relaxed_sql_mode("STRICT_TRANS_TABLES") == ""
    assert relaxed_sql_mode("STRICT_ALL_TABLES") == "STRICT_ALL_TABLES"


def test_columns_with_an_expression_default_are_writable() -> None:
    """MySQL 8 and TiDB show EXTRA = DEFAULT_GENERATED for a column with an expression default
    (DEFAULT CURRENT_TIMESTAMP, DEFAULT (uuid())): an ordinary column, whose values must be written;
    MariaDB's older spellings of generated columns (VIRTUAL, PERSISTENT) are still generated."""
    rows = [
        ("id", ""),
        ("created", "DEFAULT_GENERATED"),
        ("updated", "DEFAULT_GENERATED on update CURRENT_TIMESTAMP"),
        ("v", "VIRTUAL"),
        ("p", "PERSISTENT"),
        ("pg", "PERSISTENT GENERATED"),
    ]
    assert writable_columns(rows) == frozenset({"id", "created", "updated"})
