"""Which binlogs, tables, rows and DDLs the drainer replicates (docs/architecture.md#filters); pure, no I/O.

Table filter (`skip_table`; `skip_schema` for database-level DDLs), as the original's `pkg/filter`:

1. allow-list: when `replicate-do-db` or `replicate-do-table` is set, a table passes only if it matches a
   do-table entry **or** its schema matches a do-db entry;
2. deny-list: then a table that matches an `ignore-table` entry or whose schema is in `ignore-schemas` is
   skipped;
3. the checkpoint schema (`tidb_binlog`, and the configured `[syncer.to.checkpoint] schema`) is always skipped.

A name pattern starting with `~` is a regular expression, searched (not anchored); anything else is an exact
name. Matching ignores case unless `case-sensitive` (ours: the original always ignored case here).

Event filter (`skip_dml`, `skip_ddl`): `[[syncer.event-filter]]` rules whose schema-pattern and
table-pattern (shell wildcards or `~regex`) match drop DML rows by type (`insert`, `update`, `delete`,
`all dml`, `all`) and DDLs by type (`all ddl`, `all`, `create table`, ... classified from the query text) or
by a regular expression searched in the query (`ignore-sql`). `skip_dml` and `skip_ddl` look only at these
rules: call `skip_table` first. The syncer treats the two differently for DDLs (a table-filtered DDL is not
sent at all; a rule-filtered one is sent with `DDL.skip = True`, so SQL sinks still evict their caches).

The v2 `binlog-filter-rule`s of `[[syncer.table-migrate-rule]]`s come in as `v2_rules`
(`common.table_rules`): tidb-tools wildcards, their event lists expanded to the event names they drop,
their `ignore-sql` always ignoring case (as tidb-tools).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol, get_args

from common.events import DMLType
from common.table_rules import SourceMatcher, V2EventRule, expand_events

__all__ = [
    "CHECKPOINT_SCHEMA",
    "EVENT_NAMES",
    "EventFilterRule",
    "EventName",
    "Filter",
    "NamePattern",
    "TableName",
    "ddl_event",
    "name_pattern",
]

CHECKPOINT_SCHEMA: Final = "tidb_binlog"
"""The drainer's own schema (its checkpoint table), never replicated."""

EventName = Literal[
    "all",
    "all dml",
    "all ddl",
    "insert",
    "update",
    "delete",
    "create database",
    "drop database",
    "create table",
    "drop table",
    "truncate table",
    "rename table",
    "alter table",
    "create index",
    "drop index",
    "create view",
    "drop view",
]
EVENT_NAMES: Final[tuple[str, ...]] = get_args(EventName)


def _regex(text: str) -> None:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"bad regular expression {text!r}: {exc}") from None


def name_pattern(value: str) -> None:
    """A schema / table name pattern: non-empty; `~regex` must compile."""
    if not value:
        raise ValueError("must not be empty")
    if value.startswith("~"):
        if len(value) == 1:
            raise ValueError("'~' must be followed by a regular expression")
        _regex(value[1:])


def _regexes(values: tuple[str, ...]) -> None:
    for value in values:
        _regex(value)


@dataclass(frozen=True)
class TableName:
    """One `[[syncer.replicate-do-table]]` / `[[syncer.ignore-table]]` entry."""

    db_name: str = field(default="", metadata={"validate": name_pattern})
    tbl_name: str = field(default="", metadata={"validate": name_pattern})


@dataclass(frozen=True)
class EventFilterRule:
    """`[[syncer.event-filter]]`: drop DML rows or DDLs of matching tables (ours; see the module doc).

    schema-pattern / table-pattern: shell wildcards (`*`, `?`) or `~regex`; "*" matches every name, including
    the empty table name of a database-level DDL. ignore-event: event names (EVENT_NAMES). ignore-sql:
    regular expressions searched in DDL query text. Several matching rules add up.
    """

    schema_pattern: str = field(default="*", metadata={"validate": name_pattern})
    table_pattern: str = field(default="*", metadata={"validate": name_pattern})
    ignore_event: tuple[EventName, ...] = ()
    ignore_sql: tuple[str, ...] = field(default=(), metadata={"validate": _regexes})

    def validate(self) -> None:
        if not self.ignore_event and not self.ignore_sql:
            raise ValueError("an event-filter rule needs ignore-event or ignore-sql")


_DML_EVENTS: Final = {DMLType.INSERT: "insert", DMLType.UPDATE: "update", DMLType.DELETE: "delete"}

_LEADING_COMMENTS = re.compile(r"\A(?:\s+|/\*.*?\*/|(?:--|#)[^\n]*(?:\n|\Z))*", re.DOTALL)
_GAP: Final = r"(?:\s|/\*.*?\*/|(?:--|\#)[^\n]*(?:\n|\Z))+"
"""Space between two words of a statement: white space and comments (drainer.route_ddl reads through them too)."""


def _kind(pattern: str) -> re.Pattern[str]:
    """`pattern` with each ``_`` (between two words) standing for `_GAP`."""
    return re.compile(pattern.replace("_", _GAP), re.IGNORECASE | re.DOTALL)


_DDL_KINDS: Final = (
    ("create database", _kind(r"create_(?:database|schema)\b")),
    ("drop database", _kind(r"drop_(?:database|schema)\b")),
    (
        "create view",
        _kind(
            r"create_(?:or_replace_)?(?:algorithm\s*=\s*\w+_)?(?:definer\s*=\s*\S+_)?"
            r"(?:sql_security_\w+_)?view\b"
        ),
    ),
    ("drop view", _kind(r"drop_view\b")),
    ("create table", _kind(r"create_(?:temporary_)?table\b")),
    ("drop table", _kind(r"drop_(?:temporary_)?tables?\b")),
    ("truncate table", _kind(r"truncate\b")),
    ("rename table", _kind(r"rename_tables?\b")),
    ("create index", _kind(r"create_(?:unique_|fulltext_|spatial_)?index\b")),
    ("drop index", _kind(r"drop_index\b")),
    ("alter table", _kind(r"alter_(?:online_|ignore_)*table\b")),
)


def ddl_event(query: str) -> str | None:
    """The event name of a DDL query ("create table", "alter table", ...), or None if it has none of ours."""
    lead = _LEADING_COMMENTS.match(query)
    text = query[lead.end() :] if lead else query
    for name, pattern in _DDL_KINDS:
        if pattern.match(text):
            return name
    return None


class NamePattern:
    """One schema or table name pattern: exact name, `~regex`, or (wildcards=True) a shell wildcard."""

    __slots__ = ("_case_sensitive", "_exact", "_regex", "text")

    def __init__(self, text: str, *, case_sensitive: bool = False, wildcards: bool = False) -> None:
        self.text = text
        self._case_sensitive = case_sensitive
        flags = 0 if case_sensitive else re.IGNORECASE
        self._exact = text if case_sensitive else text.casefold()
        self._regex: re.Pattern[str] | None = None
        if text.startswith("~"):
            self._regex = re.compile(text[1:], flags)
        elif wildcards and any(ch in text for ch in "*?["):
            self._regex = re.compile(fnmatch.translate(text), flags)

    def matches(self, name: str) -> bool:
        if self._regex is not None:
            return self._regex.search(name) is not None
        return (name if self._case_sensitive else name.casefold()) == self._exact

    def __repr__(self) -> str:
        return f"NamePattern({self.text!r})"


@dataclass(frozen=True, slots=True)
class _TablePattern:
    db: NamePattern
    table: NamePattern

    def matches(self, db: str, table: str) -> bool:
        return self.db.matches(db) and self.table.matches(table)


class _Where(Protocol):
    def matches(self, db: str, table: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class _EventRule:
    where: _Where
    events: frozenset[str]
    sql: tuple[re.Pattern[str], ...]


class Filter:
    """The table and event filters of a drainer or reparo, built once from their config."""

    def __init__(
        self,
        *,
        ignore_schemas: Iterable[str] = (),
        ignore_tables: Iterable[TableName] = (),
        do_dbs: Iterable[str] = (),
        do_tables: Iterable[TableName] = (),
        ignore_txn_commit_ts: Iterable[int] = (),
        event_rules: Iterable[EventFilterRule] = (),
        v2_rules: Iterable[V2EventRule] = (),
        case_sensitive: bool = False,
        internal_schemas: Iterable[str] = (CHECKPOINT_SCHEMA,),
    ) -> None:
        cs = case_sensitive

        def names(patterns: Iterable[str]) -> tuple[NamePattern, ...]:
            return tuple(NamePattern(p, case_sensitive=cs) for p in patterns)

        def tables(entries: Iterable[TableName]) -> tuple[_TablePattern, ...]:
            return tuple(
                _TablePattern(NamePattern(t.db_name, case_sensitive=cs), NamePattern(t.tbl_name, case_sensitive=cs))
                for t in entries
            )

        self._ignore_dbs = names(ignore_schemas)
        self._ignore_tables = tables(ignore_tables)
        self._do_dbs = names(do_dbs)
        self._do_tables = tables(do_tables)
        self._internal = frozenset(s.casefold() for s in internal_schemas)
        self._ignore_ts = frozenset(ignore_txn_commit_ts)
        flags = 0 if cs else re.IGNORECASE
        self._rules = tuple(
            _EventRule(
                _TablePattern(
                    NamePattern(r.schema_pattern, case_sensitive=cs, wildcards=True),
                    NamePattern(r.table_pattern, case_sensitive=cs, wildcards=True),
                ),
                frozenset(r.ignore_event),
                tuple(re.compile(s, flags) for s in r.ignore_sql),
            )
            for r in event_rules
        ) + tuple(
            _EventRule(
                SourceMatcher(r.schema, r.table, case_sensitive=cs),
                expand_events(r.events),
                tuple(re.compile(q, re.IGNORECASE) for q in r.sql),  # always ignoring case, as tidb-tools
            )
            for r in v2_rules
        )
        self._table_cache: dict[tuple[str, str], bool] = {}
        self._dml_cache: dict[tuple[str, str, DMLType], bool] = {}

    # ------------------------------------------------------------------------------------------ tables

    def skip_table(self, db: str, table: str) -> bool:
        """True if changes of `db`.`table` are not replicated (table "" = the schema itself)."""
        key = (db, table)
        cached = self._table_cache.get(key)
        if cached is None:
            cached = self._table_cache[key] = self._skip_table(db, table)
        return cached

    def _skip_table(self, db: str, table: str) -> bool:
        if db.casefold() in self._internal:
            return True
        if (self._do_dbs or self._do_tables) and not (
            any(p.matches(db, table) for p in self._do_tables) or any(p.matches(db) for p in self._do_dbs)
        ):
            return True
        return any(p.matches(db, table) for p in self._ignore_tables) or any(p.matches(db) for p in self._ignore_dbs)

    def skip_schema(self, db: str) -> bool:
        """True if database-level DDLs of `db` (CREATE / DROP / ALTER DATABASE) are not replicated.

        The schema passes the allow-list when a do-db matches it or a do-table names it (its tables need
        it); then ignore-schemas applies (ignore-table entries name tables, so they do not). Pass the
        database the DDL is about, also for CREATE DATABASE (`Job.schema_name`).
        """
        key = (db, "\0schema")
        cached = self._table_cache.get(key)
        if cached is None:
            cached = self._table_cache[key] = self._skip_schema(db)
        return cached

    def _skip_schema(self, db: str) -> bool:
        if db.casefold() in self._internal:
            return True
        if (self._do_dbs or self._do_tables) and not (
            any(p.db.matches(db) for p in self._do_tables) or any(p.matches(db) for p in self._do_dbs)
        ):
            return True
        return any(p.matches(db) for p in self._ignore_dbs)

    def skip_txn(self, commit_ts: int) -> bool:
        """True if the whole transaction is skipped (`ignore-txn-commit-ts`)."""
        return commit_ts in self._ignore_ts

    # ------------------------------------------------------------------------------------------ events

    def skip_dml(self, db: str, table: str, dml_type: DMLType) -> bool:
        """True if an event-filter rule drops `dml_type` rows of `db`.`table` (table filters not included)."""
        if not self._rules:
            return False
        key = (db, table, dml_type)
        cached = self._dml_cache.get(key)
        if cached is None:
            event = _DML_EVENTS[dml_type]
            cached = self._dml_cache[key] = any(
                rule.where.matches(db, table) and not rule.events.isdisjoint((event, "all dml", "all"))
                for rule in self._rules
            )
        return cached

    def skip_ddl(self, db: str, table: str, query: str) -> bool:
        """True if an event-filter rule drops this DDL, by its type or an `ignore-sql` regex."""
        if not self._rules:
            return False
        event = ddl_event(query)
        wanted = {"all ddl", "all"} if event is None else {event, "all ddl", "all"}
        for rule in self._rules:
            if not rule.where.matches(db, table):
                continue
            if not rule.events.isdisjoint(wanted) or any(p.search(query) for p in rule.sql):
                return True
        return False
