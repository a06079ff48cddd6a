"""The original drainer's v2 table rules: `[syncer.binlog-filter-rule.NAME]` and `[[syncer.table-migrate-rule]]`.

    [syncer.binlog-filter-rule.no-deletes]
    ignore-event = ["delete"]                  # event types, below
    ignore-sql = ["^ALTER TABLE .* DROP"]      # regular expressions searched in DDL text, always ignoring case

    [[syncer.table-migrate-rule]]
    source = { schema = "shop_*", table = "orders" }   # tidb-tools wildcards
    binlog-filter-rule = ["no-deletes"]                # names of the filter rules above
    target = { schema = "merged", table = "orders" }   # plain names; table "" keeps the table's own name

Matching is tidb-tools' table selector (`pkg/table-rule-selector`): `*` matches any run of characters and
may only end a pattern, `?` one character, `[a-z]` / `[!a-z]` a character class; a source with an empty
`table` is a schema-level rule (it matches every table of the schema, and the schema itself for
CREATE / DROP DATABASE), and table pattern `*` also matches the schema itself.  Names and patterns are
compared ignoring case unless `[syncer] case-sensitive = true`.  As in the original, the sources are **not**
an allow-list: tables no rule names are replicated as usual (use `replicate-do-db` / `-table` for that).

Filtering (`v2_event_rules`, applied by `common.filters.Filter`): every filter rule named by a
migrate rule applies to the rule's source; rules with the same source are combined (their event lists
joined in order).  An event list is read in order as tidb-tools does: the first of `all`, `all dml` /
`all ddl` (of the event's class), `none`, `none dml` / `none ddl` or the event's own name decides.  The
event names are tidb-tools binlog-filter's (:data:`EVENT_TYPES`, plus its aliases `create schema`,
`drop schema`, `add index`); anything else is refused at start.  Ours: `all ddl` also drops a DDL of no
listed type (ALTER DATABASE, CREATE SEQUENCE, ...); the original matched those only by `ignore-sql`.

Routing (:class:`Router`, tidb-tools `pkg/table-router`): a table-level rule wins over a schema-level
one; a table that two rules of the same level match is an error naming both.  The original routed only
for db-type oracle; ours routes for the SQL sinks (docs in drainer/sinks/routing.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from common.errors import BinlogError

__all__ = [
    "EVENT_TYPES",
    "BinlogFilterRule",
    "Router",
    "RoutingError",
    "RuleSource",
    "RuleTarget",
    "TableMigrateRule",
    "V2EventRule",
    "WildcardPattern",
    "check_rules",
    "v2_event_rules",
]

DML_EVENTS: Final = ("insert", "update", "delete")
DDL_EVENTS: Final = (
    "create database",
    "drop database",
    "create table",
    "drop table",
    "truncate table",
    "rename table",
    "create index",
    "drop index",
    "create view",
    "drop view",
    "alter table",
)
EVENT_TYPES: Final = ("all", "all dml", "all ddl", "none", "none dml", "none ddl", *DML_EVENTS, *DDL_EVENTS)
"""tidb-tools binlog-filter's event types (`pkg/binlog-filter/filter.go`)."""
EVENT_ALIASES: Final = {"create schema": "create database", "drop schema": "drop database", "add index": "create index"}
UNCLASSIFIED_DDL: Final = "all ddl"
"""Put in a rule's expanded event set when it also drops DDLs of no listed type (see the module doc)."""


class RoutingError(BinlogError):
    """A table that two route rules of the same level match (the original's error too)."""


def canonical_event(name: str) -> str:
    """An `ignore-event` entry as its event type (lower case, aliases resolved); ValueError naming the
    accepted ones for anything else."""
    event = name.strip().lower()
    event = EVENT_ALIASES.get(event, event)
    if event not in EVENT_TYPES:
        raise ValueError(
            f"unknown event type {name!r}: expected one of {', '.join(repr(e) for e in EVENT_TYPES)} "
            f"(or {', '.join(repr(a) for a in EVENT_ALIASES)}); match other DDL kinds, such as an ALTER TABLE "
            "that adds a column, with ignore-sql"
        )
    return event


def check_wildcard(pattern: str) -> None:
    """A tidb-tools wildcard: `*` only at the end (ValueError otherwise)."""
    star = pattern.find("*")
    if star >= 0 and star != len(pattern) - 1:
        raise ValueError(f"pattern {pattern!r}: '*' may only end a pattern (tidb-tools wildcards)")


def _plain_name(value: str) -> None:
    if any(ch in value for ch in "*?["):
        raise ValueError(f"{value!r}: a target is a plain name, not a pattern")


class WildcardPattern:
    """One tidb-tools wildcard pattern (see the module doc)."""

    __slots__ = ("_regex", "text")

    def __init__(self, text: str, *, case_sensitive: bool = False) -> None:
        check_wildcard(text)
        self.text = text
        parts: list[str] = []
        i = 0
        while i < len(text):
            ch = text[i]
            close = text.find("]", i + 1) if ch == "[" else -1
            if ch == "*":
                parts.append(".*")
            elif ch == "?":
                parts.append(".")
            elif close > i + 1:
                body = text[i + 1 : close]
                negate = body.startswith("!") and len(body) > 1
                body = body[1:] if negate else body
                parts.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\").replace("^", "\\^") + "]")
                i = close
            else:
                parts.append(re.escape(ch))
            i += 1
        self._regex = re.compile("".join(parts), 0 if case_sensitive else re.IGNORECASE)

    def matches(self, name: str) -> bool:
        return self._regex.fullmatch(name) is not None

    def __repr__(self) -> str:
        return f"WildcardPattern({self.text!r})"


# ------------------------------------------------------------------------------------------------ config


def _events(values: tuple[str, ...]) -> None:
    for value in values:
        canonical_event(value)


def _regexes(values: tuple[str, ...]) -> None:
    for value in values:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"bad regular expression {value!r}: {exc}") from None


@dataclass(frozen=True)
class BinlogFilterRule:
    """`[syncer.binlog-filter-rule.NAME]`: what to drop of the tables of the migrate rules naming it."""

    ignore_event: tuple[str, ...] = field(default=(), metadata={"validate": _events})
    ignore_sql: tuple[str, ...] = field(default=(), metadata={"validate": _regexes})


@dataclass(frozen=True)
class RuleSource:
    """`source = { schema, table }` of a table-migrate-rule: wildcards; table "" = the whole schema."""

    schema: str = ""
    table: str = ""

    def validate(self) -> None:
        if not self.schema:
            raise ValueError("'schema' of a table-migrate-rule source must not be empty")
        check_wildcard(self.schema)
        check_wildcard(self.table)


@dataclass(frozen=True)
class RuleTarget:
    """`target = { schema, table }` of a table-migrate-rule: plain names; table "" = the table's own name."""

    schema: str = ""
    table: str = ""

    def validate(self) -> None:
        if not self.schema:
            raise ValueError("'schema' of a table-migrate-rule target must not be empty")
        _plain_name(self.schema)
        _plain_name(self.table)


@dataclass(frozen=True)
class TableMigrateRule:
    """`[[syncer.table-migrate-rule]]`: filter rules and an optional route for the tables of one source."""

    source: RuleSource | None = None
    binlog_filter_rule: tuple[str, ...] = ()
    target: RuleTarget | None = None

    def validate(self) -> None:
        if self.source is None:
            what = "target" if self.target is not None else "binlog-filter-rule"
            raise ValueError(f"a table-migrate-rule with a {what} needs a source = {{ schema = ..., table = ... }}")


def check_rules(filters: Mapping[str, BinlogFilterRule], rules: Sequence[TableMigrateRule], *, key: str) -> None:
    """Cross-rule checks: every filter rule name exists; no two routes share a source.  ValueError naming
    the key (`key` is the migrate rules' key path, e.g. "syncer.table-migrate-rule")."""
    sources: dict[tuple[str, str], int] = {}
    for i, rule in enumerate(rules):
        for name in rule.binlog_filter_rule:
            if name not in filters:
                known = ", ".join(repr(n) for n in sorted(filters)) or "none are defined"
                raise ValueError(
                    f"'{key}[{i}].binlog-filter-rule' names {name!r}, which is not a [syncer.binlog-filter-rule.NAME] "
                    f"table (defined: {known})"
                )
        if rule.target is not None and rule.source is not None:
            src = (rule.source.schema, rule.source.table)
            if src in sources:
                raise ValueError(f"'{key}[{i}]' routes source {src[0]}.{src[1] or '*'} again (see [{sources[src]}])")
            sources[src] = i


# ------------------------------------------------------------------------------------------------ filtering


@dataclass(frozen=True, slots=True)
class V2EventRule:
    """A combined filter rule for one source (the patterns of `Filter`'s v2 rules)."""

    schema: str
    table: str
    events: tuple[str, ...]
    sql: tuple[str, ...]


def v2_event_rules(filters: Mapping[str, BinlogFilterRule], rules: Iterable[TableMigrateRule]) -> list[V2EventRule]:
    """The filter rules of every migrate rule, combined per source in rule order (the original's
    `combineFilterRules`).  Call `check_rules` first."""
    combined: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for rule in rules:
        if rule.source is None or not rule.binlog_filter_rule:
            continue
        events, sql = combined.setdefault((rule.source.schema, rule.source.table), ([], []))
        for name in rule.binlog_filter_rule:
            f = filters[name]
            events += [canonical_event(e) for e in f.ignore_event]
            sql += f.ignore_sql
    return [V2EventRule(s, t, tuple(e), tuple(q)) for (s, t), (e, q) in combined.items()]


def _decides(events: Sequence[str], event: str, klass: str) -> bool:
    """tidb-tools' `matchEvent`: the first entry that speaks for `event` (of class "dml" / "ddl") decides."""
    for e in events:
        if e in ("all", f"all {klass}", event):
            return True
        if e in ("none", f"none {klass}"):
            return False
    return False


def expand_events(events: Sequence[str]) -> frozenset[str]:
    """The event types a list drops, as concrete names (plus :data:`UNCLASSIFIED_DDL` when it drops every DDL)."""
    dropped = {e for e in DML_EVENTS if _decides(events, e, "dml")}
    dropped |= {e for e in DDL_EVENTS if _decides(events, e, "ddl")}
    if _decides(events, "\0unclassified", "ddl"):
        dropped.add(UNCLASSIFIED_DDL)
    return frozenset(dropped)


class SourceMatcher:
    """Whether a (schema, table) is one of a rule source's, by tidb-tools selector semantics."""

    __slots__ = ("schema", "schema_level", "table")

    def __init__(self, schema: str, table: str, *, case_sensitive: bool) -> None:
        self.schema = WildcardPattern(schema, case_sensitive=case_sensitive)
        self.schema_level = not table
        self.table = WildcardPattern(table or "*", case_sensitive=case_sensitive)

    def matches(self, db: str, table: str) -> bool:
        return self.schema.matches(db) and (self.schema_level or self.table.matches(table))


# ------------------------------------------------------------------------------------------------ routing


@dataclass(frozen=True, slots=True)
class _Route:
    index: int
    where: SourceMatcher
    schema_level: bool
    target_schema: str
    target_table: str
    shared: bool
    """Other sources may land in the same target: DROP / TRUNCATE / RENAME of one of them are not run."""


class Router:
    """Routes (schema, table) to the downstream names of the table-migrate-rules with a target."""

    def __init__(self, rules: Sequence[TableMigrateRule], *, case_sensitive: bool = False) -> None:
        routes: list[_Route] = []
        targets: dict[tuple[str, str], int] = {}
        for rule in rules:
            if rule.source is None or rule.target is None:
                continue
            key = (_fold(rule.target.schema, case_sensitive), _fold(rule.target.table, case_sensitive))
            targets[key] = targets.get(key, 0) + 1
        for i, rule in enumerate(rules):
            src, dst = rule.source, rule.target
            if src is None or dst is None:
                continue
            key = (_fold(dst.schema, case_sensitive), _fold(dst.table, case_sensitive))
            wild = any(ch in src.schema for ch in "*?[") or (
                bool(dst.table) and (not src.table or any(ch in src.table for ch in "*?["))
            )
            routes.append(
                _Route(
                    i,
                    SourceMatcher(src.schema, src.table, case_sensitive=case_sensitive),
                    not src.table,
                    dst.schema,
                    dst.table,
                    wild or targets[key] > 1,
                )
            )
        self._routes = tuple(routes)
        self._cache: dict[tuple[str, str], tuple[str, str, bool]] = {}

    def __bool__(self) -> bool:
        return bool(self._routes)

    def route(self, db: str, table: str) -> tuple[str, str]:
        """The downstream (schema, table) of `db`.`table` (table "": of the schema itself)."""
        found = self._lookup(db, table)
        return found[0], found[1]

    def shared(self, db: str, table: str) -> bool:
        """True when `db`.`table` is routed into a target other sources may land in too."""
        return self._lookup(db, table)[2]

    def route_schema(self, db: str) -> str:
        """The downstream schema of `db` itself (schema-level rules only, as tidb-tools' Route with no table)."""
        return self.route(db, "")[0]

    def target_schemas(self, db: str) -> tuple[str, ...]:
        """The target schemas of every rule whose source schema matches `db` (CREATE DATABASE creates them)."""
        return tuple(dict.fromkeys(r.target_schema for r in self._routes if r.where.schema.matches(db)))

    def _lookup(self, db: str, table: str) -> tuple[str, str, bool]:
        key = (db, table)
        found = self._cache.get(key)
        if found is None:
            if len(self._cache) > 65536:
                self._cache.clear()
            found = self._cache[key] = self._find(db, table)
        return found

    def _find(self, db: str, table: str) -> tuple[str, str, bool]:
        matched = [r for r in self._routes if r.where.matches(db, table)]
        table_level = [r for r in matched if not r.schema_level]
        level = table_level if table and table_level else [r for r in matched if r.schema_level]
        if not level:
            return db, table, False
        if len(level) > 1:
            raise RoutingError(
                f"`{db}`.`{table}` matches {len(level)} table-migrate-rule routes of the same level "
                f"([{level[0].index}] and [{level[1].index}]): a table may be routed by one rule only; "
                "make the sources not overlap"
            )
        r = level[0]
        return r.target_schema, r.target_table or table, r.shared


def _fold(name: str, case_sensitive: bool) -> str:
    return name if case_sensitive else name.casefold()
