"""v2 table rules: `[syncer.binlog-filter-rule.NAME]` + `[[syncer.table-migrate-rule]]` (common/table_rules.py),
DDL table-name rewriting (drainer/route_ddl.py) and the routing sink (drainer/sinks/routing.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from common.config import dump
from common.errors import ConfigError
from common.events import DDL, DMLType, Txn
from common.filters import Filter
from common.schema.infoschema import InfoSchema
from common.schema.model import Job, JobType
from common.table_rules import (
    BinlogFilterRule,
    Router,
    RoutingError,
    RuleSource,
    RuleTarget,
    TableMigrateRule,
    V2EventRule,
    WildcardPattern,
    expand_events,
    v2_event_rules,
)
from drainer.app import with_routing
from drainer.config import load_config
from drainer.config_syncer import syncer_filter, syncer_router
from drainer.route_ddl import rewrite_ddl
from drainer.sinks.base import OnSuccess, Sink
from drainer.sinks.routing import RoutingSink, route_ddl
from drainer.sinks.sqlite import RoutedSqliteDialect
from tests.unit.test_drainer_sql import Schema, ins
from upstream.ddl import Column

# The original's tests/binlogfilter/drainer.toml, rules as written there.
ORIGINAL_RULES = """
[syncer]
[[syncer.table-migrate-rule]]
binlog-filter-rule = ["truncate-table-filter","add-column-aaa-filter","delete-filter"]
source = { schema = "do_not_truncate_database*", table = "do_not_truncate_table*"}

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["add-column-aaa-filter"]
source = { schema = "do_not_add_col_database*", table = "do_not_add_col_table*" }

[[syncer.table-migrate-rule]]
binlog-filter-rule = ["delete-filter"]
source = { schema = "do_not_delete_database*", table = "do_not_delete_table*" }

[syncer.binlog-filter-rule]

[syncer.binlog-filter-rule.truncate-table-filter]
ignore-event = ["truncate table"]
ignore-sql = []

[syncer.binlog-filter-rule.add-column-aaa-filter]
ignore-event = []
ignore-sql = ["alter table .* add column aaa int"]

[syncer.binlog-filter-rule.delete-filter]
ignore-event = ["delete"]
ignore-sql = []
"""


def v2_filter(*rules: V2EventRule, case_sensitive: bool = False) -> Filter:
    return Filter(v2_rules=rules, case_sensitive=case_sensitive)


# ------------------------------------------------------------------------------------------------ config


def test_the_original_binlogfilter_config_filters_as_its_test_expects(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, ORIGINAL_RULES), env={})
    f = syncer_filter(cfg.syncer)
    trunc, addcol, dele, plain = (
        ("do_not_truncate_database", "do_not_truncate_table1"),
        ("do_not_add_col_database1", "do_not_add_col_table1"),
        ("do_not_delete_database1", "do_not_delete_table1"),
        ("test", "do_not_filter"),
    )
    truncate = "TRUNCATE TABLE t"
    assert [f.skip_ddl(*t, truncate) for t in (trunc, addcol, dele, plain)] == [True, False, False, False]
    add_aaa = "ALTER TABLE t ADD COLUMN aaa int"
    assert [f.skip_ddl(*t, add_aaa) for t in (trunc, addcol, dele, plain)] == [True, True, False, False]
    assert [f.skip_dml(*t, DMLType.DELETE) for t in (trunc, addcol, dele, plain)] == [True, False, True, False]
    assert not any(f.skip_dml(*t, DMLType.INSERT) for t in (trunc, addcol, dele, plain))
    # the sources are not an allow-list: other tables replicate
    assert not f.skip_table("test", "do_not_filter")
    assert not syncer_router(cfg.syncer)  # no target: nothing routed


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "drainer.toml"
    path.write_text(text)
    return path


def test_rules_load_and_dump_back_equal(tmp_path: Path) -> None:
    text = ORIGINAL_RULES + '\n[[syncer.table-migrate-rule]]\nsource = { schema = "a" }\ntarget = { schema = "b" }\n'
    cfg = load_config(_write(tmp_path, text), env={})
    assert cfg.syncer.binlog_filter_rule["delete-filter"] == BinlogFilterRule(("delete",), ())
    assert cfg.syncer.table_migrate_rule[3] == TableMigrateRule(RuleSource("a", ""), (), RuleTarget("b", ""))
    again = load_config(_write(tmp_path, dump(cfg)), env={})
    assert again.syncer == cfg.syncer
    empty = load_config(env={})
    assert "binlog-filter-rule = {}" in dump(empty)
    assert load_config(_write(tmp_path, dump(empty)), env={}).syncer.binlog_filter_rule == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a", table = "b" }\nbinlog-filter-rule = ["nope"]\n',
            "'syncer.table-migrate-rule[0].binlog-filter-rule' names 'nope', which is not a "
            "[syncer.binlog-filter-rule.NAME] table (defined: none are defined)",
        ),
        (
            '[syncer.binlog-filter-rule.x]\nignore-event = ["add column"]\n',
            "invalid value for 'syncer.binlog-filter-rule.x.ignore-event': unknown event type 'add column'",
        ),
        (
            '[syncer.binlog-filter-rule.x]\nignore-sql = ["(unclosed"]\n',
            "invalid value for 'syncer.binlog-filter-rule.x.ignore-sql': bad regular expression '(unclosed'",
        ),
        (
            '[[syncer.table-migrate-rule]]\ntarget = { schema = "b" }\n',
            "a table-migrate-rule with a target needs a source",
        ),
        (
            '[[syncer.table-migrate-rule]]\nsource = { table = "t" }\ntarget = { schema = "b" }\n',
            "'schema' of a table-migrate-rule source must not be empty",
        ),
        (
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a*b" }\ntarget = { schema = "b" }\n',
            "pattern 'a*b': '*' may only end a pattern",
        ),
        (
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a" }\ntarget = { table = "t" }\n',
            "'schema' of a table-migrate-rule target must not be empty",
        ),
        (
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a" }\ntarget = { schema = "b*" }\n',
            "'b*': a target is a plain name, not a pattern",
        ),
        (
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a", table = "t" }\ntarget = { schema = "b" }\n'
            '[[syncer.table-migrate-rule]]\nsource = { schema = "a", table = "t" }\ntarget = { schema = "c" }\n',
            "'syncer.table-migrate-rule[1]' routes source a.t again (see [0])",
        ),
        (
            '[syncer.binlog-filter-rule.x]\nignore-events = ["insert"]\n',
            "unknown key 'syncer.binlog-filter-rule.x.ignore-events'",
        ),
        ('[syncer]\nbinlog-filter-rule = ["x"]\n', "expected a table of named tables"),
    ],
)
def test_bad_rules_are_refused_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    if not text.startswith("[syncer]"):
        text = "[syncer]\n" + text
    with pytest.raises(ConfigError) as err:
        load_config(_write(tmp_path, text), env={})
    assert message in str(err.value)


# ------------------------------------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("shop_*", ["shop_", "shop_1", "SHOP_eu"], ["shop", "xshop_1"]),
        ("t?", ["t1", "tx"], ["t", "t12"]),
        ("t[1-3]", ["t1", "t3"], ["t4", "t"]),
        ("t[!1-3]", ["t4", "tx"], ["t1"]),
        ("a.b", ["a.b", "A.B"], ["axb"]),
        ("*", ["", "anything"], []),
    ],
)
def test_wildcards_are_tidb_tools_ones(pattern: str, yes: list[str], no: list[str]) -> None:
    p = WildcardPattern(pattern)
    assert all(p.matches(n) for n in yes), yes
    assert not any(p.matches(n) for n in no), no


def test_case_sensitive_patterns() -> None:
    assert not WildcardPattern("Shop*", case_sensitive=True).matches("shop1")
    assert WildcardPattern("Shop*", case_sensitive=True).matches("Shop1")
    f = v2_filter(V2EventRule("Shop", "T", ("insert",), ()), case_sensitive=True)
    assert f.skip_dml("Shop", "T", DMLType.INSERT)
    assert not f.skip_dml("shop", "t", DMLType.INSERT)
    assert v2_filter(V2EventRule("Shop", "T", ("insert",), ())).skip_dml("shop", "t", DMLType.INSERT)


def test_ignore_sql_always_ignores_case_as_tidb_tools() -> None:
    f = v2_filter(V2EventRule("s", "t", (), ("^alter table .* drop",)), case_sensitive=True)
    assert f.skip_ddl("s", "t", "ALTER TABLE t DROP COLUMN c")
    assert not f.skip_ddl("s", "t", "ALTER TABLE t ADD COLUMN c int")


def test_event_lists_are_read_in_order_with_none_and_aliases() -> None:
    assert expand_events(["insert", "none"]) == {"insert"}
    assert expand_events(["none", "insert"]) == frozenset()
    assert expand_events(["none dml", "all"]) >= {"create table", "drop table", "all ddl"}
    assert "insert" not in expand_events(["none dml", "all"])
    assert expand_events(["all dml"]) == {"insert", "update", "delete"}
    cfg_rule = BinlogFilterRule(("Create Schema", "add index"), ())
    (rule,) = v2_event_rules({"r": cfg_rule}, [TableMigrateRule(RuleSource("s", "t"), ("r",))])
    assert rule.events == ("create database", "create index")


def test_all_ddl_also_drops_unclassified_ddls() -> None:
    f = v2_filter(V2EventRule("s", "*", ("all ddl",), ()))
    assert f.skip_ddl("s", "", "ALTER DATABASE s CHARACTER SET utf8mb4")
    assert f.skip_ddl("s", "t", "CREATE TABLE t (a int)")
    assert not f.skip_dml("s", "t", DMLType.INSERT)
    only_create = v2_filter(V2EventRule("s", "*", ("create table",), ()))
    assert not only_create.skip_ddl("s", "", "ALTER DATABASE s CHARACTER SET utf8mb4")


def test_schema_level_and_table_level_sources() -> None:
    schema_rule = v2_filter(V2EventRule("s", "", ("all",), ()))
    assert schema_rule.skip_ddl("s", "", "DROP DATABASE s")
    assert schema_rule.skip_dml("s", "any", DMLType.UPDATE)
    table_rule = v2_filter(V2EventRule("s", "t*", ("drop database", "delete"), ()))
    assert not table_rule.skip_ddl("s", "", "DROP DATABASE s")  # "t*" does not match the schema itself
    assert table_rule.skip_dml("s", "t1", DMLType.DELETE)
    star = v2_filter(V2EventRule("s", "*", ("drop database",), ()))
    assert star.skip_ddl("s", "", "DROP DATABASE s")  # "*" does


def test_rules_with_the_same_source_combine(tmp_path: Path) -> None:
    text = """[syncer]
[[syncer.table-migrate-rule]]
source = { schema = "s", table = "t" }
binlog-filter-rule = ["a"]
[[syncer.table-migrate-rule]]
source = { schema = "s", table = "t" }
binlog-filter-rule = ["b"]
[syncer.binlog-filter-rule.a]
ignore-event = ["insert"]
[syncer.binlog-filter-rule.b]
ignore-event = ["update"]
ignore-sql = ["^drop"]
"""
    f = syncer_filter(load_config(_write(tmp_path, text), env={}).syncer)
    assert f.skip_dml("s", "t", DMLType.INSERT)
    assert f.skip_dml("s", "t", DMLType.UPDATE)
    assert not f.skip_dml("s", "t", DMLType.DELETE)
    assert f.skip_ddl("s", "t", "DROP TABLE t")


# ------------------------------------------------------------------------------------------------ router


def rule(src: tuple[str, str], dst: tuple[str, str]) -> TableMigrateRule:
    return TableMigrateRule(RuleSource(*src), (), RuleTarget(*dst))


def test_router_table_rules_win_over_schema_rules() -> None:
    r = Router([rule(("s", ""), ("s2", "")), rule(("s", "t*"), ("m", "merged"))])
    assert r.route("s", "t1") == ("m", "merged")
    assert r.route("s", "x") == ("s2", "x")
    assert r.route("S", "X") == ("s2", "X")
    assert r.route("other", "t1") == ("other", "t1")
    assert r.route_schema("s") == "s2"
    assert r.target_schemas("s") == ("s2", "m")
    assert r.shared("s", "t1")  # a wildcard into a fixed table
    assert not r.shared("s", "x")  # the whole schema into one: each table keeps its own name


def test_router_overlapping_rules_are_an_error_naming_both() -> None:
    r = Router([rule(("s", "t*"), ("a", "")), rule(("s", "t1*"), ("b", ""))])
    assert r.route("s", "t2") == ("a", "t2")
    with pytest.raises(RoutingError, match=r"\[0\] and \[1\]"):
        r.route("s", "t1")


def test_router_case_sensitive() -> None:
    r = Router([rule(("S", "T"), ("d", "e"))], case_sensitive=True)
    assert r.route("S", "T") == ("d", "e")
    assert r.route("s", "t") == ("s", "t")


def test_two_rules_into_one_target_are_shared() -> None:
    r = Router([rule(("a", "t"), ("m", "t")), rule(("b", "t"), ("m", "t")), rule(("c", "u"), ("m", "u"))])
    assert r.shared("a", "t")
    assert r.shared("b", "t")
    assert not r.shared("c", "u")


# ------------------------------------------------------------------------------------------------ DDL text

ROUTER = Router([rule(("src", "t*"), ("dst", "merged")), rule(("s2", ""), ("s2x", "")), rule(("one", "a"), ("d", "b"))])


@pytest.mark.parametrize(
    ("query", "db", "expected"),
    [
        (
            "CREATE TABLE t1 (id int, c varchar(9) default 't1')",
            "src",
            "CREATE TABLE `dst`.`merged` (id int, c varchar(9) default 't1')",
        ),
        ("create table if not exists `src`.`t2` like x", "o", "create table if not exists `dst`.`merged` like `o`.`x`"),
        ("CREATE TABLE t1 (LIKE s2.q)", "src", "CREATE TABLE `dst`.`merged` (LIKE `s2x`.`q`)"),
        ("ALTER TABLE t1 ADD COLUMN aaa int", "src", "ALTER TABLE `dst`.`merged` ADD COLUMN aaa int"),
        ("/* hi */ alter table `t1` add index (x)", "src", "/* hi */ alter table `dst`.`merged` add index (x)"),
        ("ALTER TABLE t1 RENAME COLUMN a TO b", "src", "ALTER TABLE `dst`.`merged` RENAME COLUMN a TO b"),
        ("ALTER TABLE a RENAME TO one.z", "one", "ALTER TABLE `d`.`b` RENAME TO `one`.`z`"),
        ("TRUNCATE TABLE t1", "src", "TRUNCATE TABLE `dst`.`merged`"),
        ("truncate t1", "src", "truncate `dst`.`merged`"),
        ("DROP TABLE IF EXISTS t1, x.y", "src", "DROP TABLE IF EXISTS `dst`.`merged`, `x`.`y`"),
        ("RENAME TABLE one.a TO one.c, x.y TO one.a", "", "RENAME TABLE `d`.`b` TO `one`.`c`, `x`.`y` TO `d`.`b`"),
        ("CREATE UNIQUE INDEX i ON t1 (a)", "src", "CREATE UNIQUE INDEX i ON `dst`.`merged` (a)"),
        ("DROP INDEX i ON t1", "src", "DROP INDEX i ON `dst`.`merged`"),
        ("CREATE DATABASE IF NOT EXISTS s2", "", "CREATE DATABASE IF NOT EXISTS `s2x`"),
        ("DROP SCHEMA s2", "s2", "DROP SCHEMA `s2x`"),
        ("create table q (a int)", "s2", "create table `s2x`.`q` (a int)"),
    ],
)
def test_ddl_table_names_are_rewritten(query: str, db: str, expected: str) -> None:
    rw = rewrite_ddl(query, db, ROUTER.route, ROUTER.route_schema)
    assert rw.changed
    assert rw.query == expected


@pytest.mark.parametrize(
    ("query", "db"),
    [
        ("CREATE TABLE other (a int)", "src"),
        ("CREATE DATABASE src", ""),
        ("CREATE VIEW v AS SELECT * FROM t1", "src"),
        ("ALTER DATABASE CHARACTER SET utf8mb4", "src"),
    ],
)
def test_ddl_of_unrouted_or_unknown_statements_is_left_as_is(query: str, db: str) -> None:
    rw = rewrite_ddl(query, db, ROUTER.route, ROUTER.route_schema)
    assert (rw.changed, rw.query) == (False, query)


def ddl(query: str, db: str, table: str = "", jtype: JobType = JobType.CREATE_TABLE) -> DDL:
    return DDL(db, table, query, Job(1, jtype, 1, db, 1, table, 1, query), InfoSchema())


def test_routed_ddl_uses_the_target_schema_and_creates_it_first() -> None:
    out = route_ddl(ddl("CREATE TABLE t1 (a int)", "src", "t1"), ROUTER)
    assert (out.db, out.table, out.skip) == ("src", "merged", False)
    assert out.prelude == ("CREATE DATABASE IF NOT EXISTS `dst`",)
    whole = route_ddl(ddl("CREATE TABLE q (a int)", "s2", "q"), ROUTER)
    assert (whole.db, whole.query, whole.prelude) == (
        "s2x",
        "CREATE TABLE `s2x`.`q` (a int)",
        ("CREATE DATABASE IF NOT EXISTS `s2x`",),
    )
    create_db = route_ddl(ddl("CREATE DATABASE src", "", jtype=JobType.CREATE_SCHEMA), ROUTER)
    assert (create_db.query, create_db.prelude) == ("CREATE DATABASE src", ("CREATE DATABASE IF NOT EXISTS `dst`",))
    unrouted = ddl("CREATE TABLE zz (a int)", "src", "zz")
    assert route_ddl(unrouted, ROUTER) is unrouted


@pytest.mark.parametrize(
    "query",
    [
        "DROP TABLE t1",
        "TRUNCATE TABLE t1",
        "RENAME TABLE src.t1 TO src.u",
        "ALTER TABLE t1 RENAME TO u",
        "DROP /* a comment between the words */ TABLE t1",  # was run: the rewriter read it, ddl_event did not
        "TRUNCATE -- x\nTABLE t1",
    ],
)
def test_destructive_ddl_of_a_shared_target_is_not_run(query: str) -> None:
    out = route_ddl(ddl(query, "src", "t1"), ROUTER)
    assert out.skip
    assert out.query == query


def test_destructive_ddl_of_an_own_target_runs_routed() -> None:
    out = route_ddl(ddl("TRUNCATE TABLE a", "one", "a"), ROUTER)
    assert (out.skip, out.query) == (False, "TRUNCATE TABLE `d`.`b`")
    assert not route_ddl(ddl("ALTER TABLE t1 ADD COLUMN c int", "src", "t1"), ROUTER).skip


# ------------------------------------------------------------------------------------------------ sinks


class Recorder(Sink):
    def __init__(self) -> None:
        self.txns: list[Txn] = []

    def start(self, on_success: OnSuccess) -> None:
        pass

    def add(self, txn: Txn) -> None:
        self.txns.append(txn)

    def flush(self, timeout: float | None = None) -> None:
        pass

    def close(self) -> None:
        pass

    def error(self) -> BaseException | None:
        return None


def test_routing_sink_renames_dml_tables_and_ddls() -> None:
    schema = Schema()
    schema.create_db("src")
    create = schema.create_table("src", "t1", [Column("id", "INT"), Column("v", "VARCHAR(10)")], primary_key=["id"])
    schema.create_table("src", "zz", [Column("id", "INT")], primary_key=["id"])
    inner = Recorder()
    sink = RoutingSink(inner, ROUTER)
    routed_shape, plain_shape = schema.shape("src", "t1"), schema.shape("src", "zz")
    sink.add(Txn(5, ddl=create))
    sink.add(Txn(6, dmls=[ins(routed_shape, 1, "a"), ins(plain_shape, 2), ins(routed_shape, 3, "c")]))
    ddl_txn, dml_txn = inner.txns
    assert ddl_txn.ddl is not None
    assert ddl_txn.ddl.query.startswith("CREATE TABLE `dst`.`merged`")
    assert [(d.shape.db, d.shape.table, d.values) for d in dml_txn.dmls] == [
        ("dst", "merged", (1, "a")),
        ("src", "zz", (2,)),
        ("dst", "merged", (3, "c")),
    ]
    assert dml_txn.dmls[0].shape is dml_txn.dmls[2].shape  # one routed shape per table shape
    assert dml_txn.dmls[1].shape is plain_shape


def test_sqlite_ddl_statements_use_routed_names(tmp_path: Path) -> None:
    schema = Schema()
    schema.create_db("src")
    create = schema.create_table("src", "t1", [Column("id", "INT"), Column("v", "VARCHAR(10)")], primary_key=["id"])
    add_ix = schema.ddl(lambda p: p.add_index("src", "t1", "iv", ["v"]))
    truncate = schema.ddl(lambda p: p.truncate_table("src", "t1"))
    dialect = RoutedSqliteDialect(ROUTER)
    conn = sqlite3.connect(tmp_path / "d.db")
    for d in (create, add_ix):
        for sql in dialect.ddl_statements(d.job, d.before):
            conn.execute(sql)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert {"dst.merged", "dst.merged.iv"} <= names
    assert dialect.ddl_statements(truncate.job, truncate.before) == ['DELETE FROM "dst.merged"']


def test_the_deploy_sample_rules_load(tmp_path: Path) -> None:
    """The commented v2 rules of deploy/drainer.toml, uncommented, are a valid config."""
    sample = (Path(__file__).parents[2] / "deploy" / "drainer.toml").read_text().splitlines()
    start = sample.index("# [[syncer.table-migrate-rule]]")
    block = []
    for line in sample[start:]:
        if not line.startswith("#"):
            break
        block.append(line.removeprefix("#").removeprefix(" "))
    cfg = load_config(_write(tmp_path, "[syncer]\n" + "\n".join(block) + "\n"), env={})
    s = cfg.syncer
    assert set(s.binlog_filter_rule) == {"no-deletes", "no-truncate", "no-add-column-aaa"}
    assert syncer_router(s).route("shop_eu", "orders") == ("merged", "orders")
    f = syncer_filter(s)
    assert f.skip_dml("shop_eu", "orders", DMLType.DELETE)
    assert f.skip_ddl("logs", "t", "TRUNCATE TABLE t")
    assert f.skip_ddl("logs", "t", "ALTER TABLE t ADD COLUMN aaa int")
    assert not f.skip_ddl("logs", "t", "ALTER TABLE t ADD COLUMN bbb int")


ROUTE_RULE = (
    '[syncer]\n[[syncer.table-migrate-rule]]\nsource = { schema = "a", table = "t" }\ntarget = { schema = "b" }\n'
)


@pytest.mark.parametrize(("db_type", "routed"), [("mysql", True), ("tidb", True), ("sqlite", True), ("file", False)])
def test_the_drainer_routes_for_sql_sinks_only(
    tmp_path: Path, db_type: str, routed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = load_config(_write(tmp_path, ROUTE_RULE), env={}, flags={"syncer.db-type": db_type})
    inner = Recorder()
    sink = with_routing(cfg, inner)
    assert isinstance(sink, RoutingSink) is routed
    if routed:
        assert isinstance(sink, RoutingSink)
        assert sink.rewrite_ddl is (db_type != "sqlite")  # sqlite plans its DDL with routed names itself
    else:
        assert sink is inner
        assert "target is not applied for db-type file" in caplog.text
    unrouted = load_config(env={}, flags={"syncer.db-type": db_type})
    assert with_routing(unrouted, inner) is inner
