"""A pb binlog's DDL query -> the database it runs in, the bare statement and what it is about (pure).

The file sink writes `ddl_query` as (docs/formats.md#pb-binlog-files, `common.pbfile.ddl_query_text`):

    use `db`; <query>;      a DDL run in schema db (backticks in db doubled)
    <query>;                CREATE DATABASE
    <query>                 a DDL without a schema

reparo needs the schema and table the statement is about, for the do/ignore filters (the original
parsed the query with TiDB's parser; DDL jobs are not in the pb files). `parse_ddl` reads the leading
words of the statement and the first table name after them, `db.table` or `table` (then the `use`
schema), backquoted or bare:

    CREATE [TEMPORARY] TABLE [IF NOT EXISTS] t         DROP [TEMPORARY] TABLE[S] [IF EXISTS] t[, ...]
    ALTER [ONLINE|IGNORE] TABLE t                      TRUNCATE [TABLE] t
    RENAME TABLE t TO ...                              CREATE [UNIQUE|FULLTEXT|SPATIAL] INDEX i ON t
    DROP INDEX i ON t                                  CREATE|DROP|ALTER DATABASE|SCHEMA [IF [NOT] EXISTS] db
    CREATE [OR REPLACE] ... VIEW v, DROP VIEW [IF EXISTS] v

For RENAME and a multi-table DROP the first table decides, as in the original. Anything else keeps the
`use` schema and an empty table (a schema-level statement).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from common.schema.model import JobType

__all__ = ["ParsedDDL", "parse_ddl", "split_use"]

_USE = re.compile(r"\s*use\s+(`(?:[^`]|``)+`|[^\s;`]+)\s*;\s*", re.IGNORECASE)
_SPACE_OR_COMMENT = re.compile(r"(?:\s+|/\*.*?\*/|(?:--|#)[^\n]*(?:\n|\Z))*", re.DOTALL)
_WORD = re.compile(r"[A-Za-z_]+")
_IDENT = re.compile(r"`((?:[^`]|``)+)`|([^\s`.,;()]+)")

_SCHEMA_WORDS: Final = frozenset({"database", "schema"})
_SKIP_WORDS: Final = frozenset(
    {"temporary", "online", "ignore", "if", "not", "exists", "unique", "fulltext", "spatial", "or", "replace"}
)
_VIEW_OPTIONS = re.compile(
    r"(?:algorithm\s*=\s*\w+|definer\s*=\s*\S+|sql\s+security\s+\w+)\s*",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class ParsedDDL:
    """One DDL of a pb binlog."""

    raw: str
    """The `ddl_query` as written."""
    db: str
    """The schema it runs in (`use db`); empty for CREATE DATABASE and schema-less statements."""
    query: str
    """The statement without the `use` prefix and the trailing ';'."""
    schema: str
    """The schema it is about (for filters): the qualified table's schema, the database of a
    database statement, else `db`."""
    table: str
    """The table it is about; empty for database statements."""
    job_type: JobType | None
    """The closest DDL job type when known: CREATE_SCHEMA / DROP_SCHEMA, CREATE_TABLE, ..., ALTER TABLE as
    ADD_COLUMN (the loader's MySQL executor only tells CREATE_SCHEMA, run without `USE`, from the rest)."""


def _unquote(m: re.Match[str]) -> str:
    quoted = m.group(1)
    return quoted.replace("``", "`") if quoted is not None else m.group(2)


def split_use(text: str) -> tuple[str, str]:
    """("db", "<query>") of "use `db`; <query>;", ("", "<query>") without a use prefix."""
    db = ""
    m = _USE.match(text)
    if m is not None:
        ident = _IDENT.fullmatch(m.group(1))
        db = _unquote(ident) if ident is not None else m.group(1)
        text = text[m.end() :]
    return db, text.strip().rstrip(";").rstrip()


class _Cursor:
    """Reads words and identifiers off the front of a statement."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _skip(self) -> None:
        m = _SPACE_OR_COMMENT.match(self.text, self.pos)
        if m is not None:
            self.pos = m.end()

    def peek_word(self) -> str:
        self._skip()
        m = _WORD.match(self.text, self.pos)
        return m.group(0).lower() if m is not None else ""

    def word(self) -> str:
        self._skip()
        m = _WORD.match(self.text, self.pos)
        if m is None:
            return ""
        self.pos = m.end()
        return m.group(0).lower()

    def skip_words(self, words: frozenset[str]) -> None:
        while self.peek_word() in words:
            self.word()

    def skip_view_options(self) -> None:
        while True:
            self._skip()
            m = _VIEW_OPTIONS.match(self.text, self.pos)
            if m is None:
                return
            self.pos = m.end()

    def name(self) -> tuple[str, str]:
        """("schema", "name") of `schema.name` or ("", "name"); ("", "") when there is none."""
        self._skip()
        first = _IDENT.match(self.text, self.pos)
        if first is None:
            return "", ""
        self.pos = first.end()
        if self.text.startswith(".", self.pos):
            second = _IDENT.match(self.text, self.pos + 1)
            if second is not None:
                self.pos = second.end()
                return _unquote(first), _unquote(second)
        return "", _unquote(first)


_TABLE_JOBS: Final = {
    "create": JobType.CREATE_TABLE,
    "drop": JobType.DROP_TABLE,
    "alter": JobType.ADD_COLUMN,
    "truncate": JobType.TRUNCATE_TABLE,
    "rename": JobType.RENAME_TABLE,
}


def parse_ddl(ddl_query: str) -> ParsedDDL:
    """The ParsedDDL of a pb binlog's `ddl_query` (see the module doc)."""
    db, query = split_use(ddl_query)
    cur = _Cursor(query)
    verb = cur.word()
    cur.skip_words(_SKIP_WORDS)
    cur.skip_view_options()
    obj = cur.word()
    schema, table, job = db, "", None
    if verb in ("create", "drop", "alter") and obj in _SCHEMA_WORDS:
        cur.skip_words(_SKIP_WORDS)
        _, name = cur.name()
        schema = name or db
        job = {"create": JobType.CREATE_SCHEMA, "drop": JobType.DROP_SCHEMA}.get(verb)
    elif obj in ("table", "tables", "view") or (verb == "truncate" and obj == ""):
        cur.skip_words(_SKIP_WORDS)
        qualifier, table = cur.name()
        schema = qualifier or db
        job = _TABLE_JOBS.get(verb) if obj != "view" else None
    elif verb == "truncate":  # TRUNCATE t (TABLE omitted): obj was the table name, if it was a bare word
        cur = _Cursor(query)
        cur.word()
        qualifier, table = cur.name()
        schema = qualifier or db
        job = JobType.TRUNCATE_TABLE
    elif obj == "index" and verb in ("create", "drop"):
        cur.name()  # the index
        if cur.word() == "on":
            qualifier, table = cur.name()
            schema = qualifier or db
        job = JobType.ADD_INDEX if verb == "create" else JobType.DROP_INDEX
    return ParsedDDL(raw=ddl_query, db=db, query=query, schema=schema, table=table, job_type=job)
