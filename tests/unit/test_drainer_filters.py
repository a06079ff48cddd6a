"""Filter: do/ignore lists, ~regex patterns, case sensitivity, commit_ts skips and event rules."""

from __future__ import annotations

import pytest

from common.events import DMLType
from common.filters import Filter, NamePattern, ddl_event
from drainer.config import EventFilterRule, TableName, load_config
from drainer.config_syncer import syncer_filter


def test_defaults_skip_system_schemas_and_the_checkpoint() -> None:
    f = syncer_filter(load_config(env={}).syncer)
    assert f.skip_table("mysql", "user")
    assert f.skip_table("information_schema", "tables")
    assert f.skip_table("Performance_Schema", "x")
    assert f.skip_table("tidb_binlog", "checkpoint")
    assert f.skip_table("TIDB_BINLOG", "")
    assert not f.skip_table("test", "t")
    assert not f.skip_table("mysqlx", "t")
    assert not f.skip_txn(5)
    assert not f.skip_dml("test", "t", DMLType.DELETE)
    assert not f.skip_ddl("test", "t", "drop table t")


def test_configured_checkpoint_schema_is_skipped_too() -> None:
    f = syncer_filter(load_config(flags={"syncer.to.checkpoint.schema": "cp"}, env={}).syncer)
    assert f.skip_table("cp", "checkpoint")
    assert f.skip_table("tidb_binlog", "checkpoint")


def test_exact_names_ignore_case_and_are_not_regexes() -> None:
    f = Filter(ignore_schemas=["Shop"], ignore_tables=[TableName("crm", "a.b")])
    assert f.skip_table("shop", "t")
    assert f.skip_table("SHOP", "t")
    assert f.skip_table("crm", "A.B")
    assert not f.skip_table("crm", "axb")
    assert not f.skip_table("shopping", "t")


def test_regex_patterns_are_searched_ignoring_case() -> None:
    f = Filter(ignore_tables=[TableName("~^te", "~log$")])
    assert f.skip_table("test", "access_log")
    assert f.skip_table("TEMP", "LOG")
    assert not f.skip_table("atest", "log")
    assert not f.skip_table("test", "logs")
    assert NamePattern("~b").matches("abc")


def test_allow_list_table_or_db() -> None:
    f = Filter(do_dbs=["shop"], do_tables=[TableName("crm", "~^cust")])
    assert not f.skip_table("shop", "anything")
    assert not f.skip_table("crm", "customers")
    assert f.skip_table("crm", "orders")
    assert f.skip_table("other", "t")


def test_deny_list_applies_after_the_allow_list() -> None:
    f = Filter(do_dbs=["shop"], ignore_tables=[TableName("shop", "secret")], ignore_schemas=["mysql"])
    assert not f.skip_table("shop", "t")
    assert f.skip_table("shop", "secret")
    assert f.skip_table("mysql", "t")


def test_skip_schema_for_database_level_ddls() -> None:
    f = Filter(do_dbs=["shop"], do_tables=[TableName("~^crm", "customers")], ignore_schemas=["crm_old"])
    assert not f.skip_schema("shop")
    assert not f.skip_schema("CRM")  # a do-table lives there
    assert f.skip_schema("crm_old")  # allowed by the do-table regex, then ignored
    assert f.skip_schema("other")
    assert f.skip_schema("tidb_binlog")
    f = Filter(ignore_schemas=["mysql"], ignore_tables=[TableName("a", "t")])
    assert f.skip_schema("MySQL")
    assert not f.skip_schema("a")  # ignore-table names a table, not the schema
    assert not f.skip_schema("test")


def test_allow_list_does_not_open_the_checkpoint_schema() -> None:
    f = Filter(do_dbs=["tidb_binlog"])
    assert f.skip_table("tidb_binlog", "checkpoint")


def test_case_sensitive() -> None:
    f = Filter(ignore_schemas=["Shop"], ignore_tables=[TableName("~^A", "t")], case_sensitive=True)
    assert f.skip_table("Shop", "t")
    assert not f.skip_table("shop", "t")
    assert f.skip_table("Ab", "t")
    assert not f.skip_table("ab", "t")
    assert not f.skip_table("Ab", "T")


def test_skip_txn_by_commit_ts() -> None:
    f = syncer_filter(load_config(flags={"syncer.ignore-txn-commit-ts": "10,30"}, env={}).syncer)
    assert f.skip_txn(10)
    assert f.skip_txn(30)
    assert not f.skip_txn(20)


def test_dml_event_rules_per_table_pattern() -> None:
    f = Filter(
        event_rules=[
            EventFilterRule("shop", "audit_*", ("delete",)),
            EventFilterRule("~^crm$", "*", ("insert", "update")),
            EventFilterRule("logs", "t?", ("all dml",)),
        ]
    )
    assert f.skip_dml("shop", "audit_2024", DMLType.DELETE)
    assert f.skip_dml("SHOP", "Audit_x", DMLType.DELETE)
    assert not f.skip_dml("shop", "audit_2024", DMLType.INSERT)
    assert not f.skip_dml("shop", "orders", DMLType.DELETE)
    assert f.skip_dml("crm", "any", DMLType.INSERT)
    assert f.skip_dml("crm", "any", DMLType.UPDATE)
    assert not f.skip_dml("crm", "any", DMLType.DELETE)
    assert not f.skip_dml("crm2", "any", DMLType.INSERT)
    for tp in DMLType:
        assert f.skip_dml("logs", "t1", tp)
    assert not f.skip_dml("logs", "t12", DMLType.INSERT)


def test_event_rules_are_case_sensitive_on_request() -> None:
    f = Filter(event_rules=[EventFilterRule("Shop", "*", ("all",))], case_sensitive=True)
    assert f.skip_dml("Shop", "t", DMLType.INSERT)
    assert not f.skip_dml("shop", "t", DMLType.INSERT)


def test_rules_from_the_config_add_up() -> None:
    cfg = load_config(
        flags={
            "syncer.event-filter": [
                {"schema-pattern": "s", "ignore-event": ["insert"]},
                {"schema-pattern": "s", "table-pattern": "t", "ignore-event": ["delete"]},
            ]
        },
        env={},
    )
    f = syncer_filter(cfg.syncer)
    assert f.skip_dml("s", "t", DMLType.INSERT)
    assert f.skip_dml("s", "t", DMLType.DELETE)
    assert not f.skip_dml("s", "u", DMLType.DELETE)
    assert not f.skip_dml("s", "t", DMLType.UPDATE)


@pytest.mark.parametrize(
    ("query", "event"),
    [
        ("CREATE DATABASE shop", "create database"),
        ("create schema if not exists `s`", "create database"),
        ("DROP DATABASE s", "drop database"),
        ("/* comment */ CREATE TABLE t (id int)", "create table"),
        ("-- c\ncreate temporary table t (id int)", "create table"),
        ("DROP TABLE IF EXISTS t", "drop table"),
        ("truncate table t", "truncate table"),
        ("TRUNCATE t", "truncate table"),
        ("RENAME TABLE a TO b", "rename table"),
        ("ALTER TABLE t ADD COLUMN c int", "alter table"),
        ("CREATE UNIQUE INDEX i ON t (c)", "create index"),
        ("DROP INDEX i ON t", "drop index"),
        ("CREATE OR REPLACE VIEW v AS SELECT 1", "create view"),
        ("create algorithm=merge definer=`root`@`%` sql security definer view v as select 1", "create view"),
        ("DROP VIEW v", "drop view"),
        ("ALTER DATABASE s CHARACTER SET utf8mb4", None),
        ("CREATE SEQUENCE seq", None),
        # comments between the words (the table-routing rewriter reads through them too: a shared target's
        # DROP TABLE with a comment inside must still be recognised, and so must an ignore-event rule's)
        ("DROP /* why */ TABLE t", "drop table"),
        ("drop/**/table t", "drop table"),
        ("DROP /*!40005 TEMPORARY */ TABLE t", "drop table"),
        ("TRUNCATE -- x\nTABLE t", "truncate table"),
        ("RENAME # x\n TABLE a TO b", "rename table"),
        ("ALTER /* c */ TABLE t ADD COLUMN c int", "alter table"),
        ("CREATE /* c */ UNIQUE /* d */ INDEX i ON t (c)", "create index"),
    ],
)
def test_ddl_event(query: str, event: str | None) -> None:
    assert ddl_event(query) == event


def test_ddl_rules_by_event_and_sql() -> None:
    f = Filter(
        event_rules=[
            EventFilterRule("shop", "*", ("drop table", "truncate table")),
            EventFilterRule("*", "*", (), (r"^ALTER\s+TABLE\s+\S+\s+DROP\s+COLUMN",)),
            EventFilterRule("logs", "*", ("all ddl",)),
        ]
    )
    assert f.skip_ddl("shop", "t", "DROP TABLE t")
    assert f.skip_ddl("shop", "t", "truncate t")
    assert not f.skip_ddl("shop", "t", "CREATE TABLE t (id int)")
    assert not f.skip_ddl("other", "t", "DROP TABLE t")
    assert f.skip_ddl("any", "t", "alter table t drop column c")
    assert not f.skip_ddl("any", "t", "alter table t add column c int")
    assert f.skip_ddl("logs", "t", "CREATE TABLE t (id int)")
    assert f.skip_ddl("logs", "", "CREATE DATABASE logs")
    assert f.skip_ddl("logs", "", "ALTER DATABASE logs CHARACTER SET utf8mb4")
    # DML rules do not touch DDLs and vice versa.
    assert not f.skip_dml("shop", "t", DMLType.DELETE)
    assert not Filter(event_rules=[EventFilterRule("s", "*", ("all dml",))]).skip_ddl("s", "t", "DROP TABLE t")


def test_database_level_ddl_matches_table_wildcard_only() -> None:
    f = Filter(event_rules=[EventFilterRule("s", "t*", ("create database",))])
    assert not f.skip_ddl("s", "", "CREATE DATABASE s")
    f = Filter(event_rules=[EventFilterRule("s", "*", ("create database",))])
    assert f.skip_ddl("s", "", "CREATE DATABASE s")


def test_sql_regex_case_follows_case_sensitive() -> None:
    rule = EventFilterRule("*", "*", (), ("^DROP",))
    assert Filter(event_rules=[rule]).skip_ddl("s", "t", "drop table t")
    assert not Filter(event_rules=[rule], case_sensitive=True).skip_ddl("s", "t", "drop table t")
    assert Filter(event_rules=[rule], case_sensitive=True).skip_ddl("s", "t", "DROP table t")
