"""Rewrite the table names of a DDL statement for table routing (pure, no I/O).

`rewrite_ddl(query, db, route)` finds the table references of one DDL statement and writes each as a
fully qualified `` `schema`.`table` `` of its routed name: unqualified names are read in `db` (the
schema the statement ran in upstream), so the result means the same whatever schema the downstream
session is in.  Everything else in the text (comments, column definitions, string literals) is kept
byte for byte.  The statements understood, with the names rewritten marked ^:

    CREATE [TEMPORARY] TABLE [IF NOT EXISTS] ^t [(] LIKE ^s ...      (the LIKE source too)
    CREATE TABLE [IF NOT EXISTS] ^t (...) ...
    DROP [TEMPORARY] TABLE[S] [IF EXISTS] ^t [, ^t2 ...]
    TRUNCATE [TABLE] ^t
    RENAME TABLE ^a TO ^b [, ^c TO ^d ...]
    ALTER [ONLINE] [IGNORE] TABLE ^t ... [, RENAME [TO | AS] ^n] ...  (a RENAME at the top level)
    CREATE [UNIQUE | FULLTEXT | SPATIAL] INDEX i ... ON ^t (...)
    DROP INDEX i ON ^t
    CREATE | DROP | ALTER {DATABASE | SCHEMA} [IF [NOT] EXISTS] ^s   (a schema: routed by `route_schema`)

Anything else (views, whose bodies name tables; sequences; text this does not follow) is returned
unchanged with ``changed = False``: the caller decides (the routing sink logs it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

__all__ = ["Rewritten", "TableRef", "quote", "rewrite_ddl"]

_TOKEN = re.compile(
    r"""
      (?P<space>\s+)
    | (?P<comment>/\*.*?\*/|(?:--\s|\#)[^\n]*)
    | (?P<quoted>`(?:[^`]|``)*`)
    | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
    | (?P<word>[A-Za-z0-9_$\u0080-\U0010ffff]+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)

Route = Callable[[str, str], tuple[str, str]]
"""(schema, table) -> routed (schema, table)."""
RouteSchema = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str
    text: str
    start: int
    end: int

    @property
    def upper(self) -> str:
        """A keyword or punctuation in upper case; "" for a quoted name or a string (never a keyword)."""
        return self.text.upper() if self.kind in ("word", "other") else ""

    @property
    def name(self) -> str | None:
        """The identifier this token spells, or None."""
        if self.kind == "quoted":
            return self.text[1:-1].replace("``", "`")
        if self.kind == "word":
            return self.text
        return None


@dataclass(frozen=True, slots=True)
class TableRef:
    """One table named by a statement: its upstream and routed names."""

    db: str
    table: str
    routed_db: str
    routed_table: str


@dataclass(frozen=True, slots=True)
class Rewritten:
    query: str
    changed: bool
    """False when the statement is not one of those understood, or names no routed table or schema."""
    tables: tuple[TableRef, ...]
    """The tables the statement names (for a schema statement: none)."""
    schema: tuple[str, str] | None = None
    """(upstream, routed) schema of a CREATE / DROP / ALTER DATABASE."""


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _tokens(query: str) -> list[_Tok]:
    return [
        _Tok(m.lastgroup or "other", m.group(), m.start(), m.end())
        for m in _TOKEN.finditer(query)
        if m.lastgroup not in ("space", "comment")
    ]


class _Parser:
    def __init__(self, query: str, db: str, route: Route) -> None:
        self.query = query
        self.toks = _tokens(query)
        self.pos = 0
        self.db = db
        self.route = route
        self.edits: list[tuple[int, int, str]] = []
        self.refs: list[TableRef] = []

    def peek(self, ahead: int = 0) -> _Tok | None:
        i = self.pos + ahead
        return self.toks[i] if i < len(self.toks) else None

    def word(self, *words: str) -> bool:
        """Consume the next token if it is one of `words` (upper case)."""
        t = self.peek()
        if t is not None and t.upper in words:
            self.pos += 1
            return True
        return False

    def words(self, *seq: str) -> bool:
        """Consume a sequence of words if all of them come next."""
        for i, w in enumerate(seq):
            t = self.peek(i)
            if t is None or t.upper != w:
                return False
        self.pos += len(seq)
        return True

    def table(self) -> bool:
        """Read a table name here and record its rewrite; False if there is no name."""
        first = self.peek()
        if first is None or first.name is None:
            return False
        db, table, end = self.db, first.name, first.end
        self.pos += 1
        dot, second = self.peek(), self.peek(1)
        if dot is not None and dot.text == "." and second is not None and second.name is not None:
            db, table, end = first.name, second.name, second.end
            self.pos += 2
        routed_db, routed_table = self.route(db, table)
        self.refs.append(TableRef(db, table, routed_db, routed_table))
        self.edits.append((first.start, end, f"{quote(routed_db)}.{quote(routed_table)}"))
        return True

    def skip_to_top_level(self, *words: str) -> bool:
        """Advance to the next of `words` outside parentheses; False at the end."""
        depth = 0
        while (t := self.peek()) is not None:
            if t.text == "(":
                depth += 1
            elif t.text == ")":
                depth -= 1
            elif depth == 0 and t.upper in words:
                return True
            self.pos += 1
        return False

    def result(self) -> str:
        out, last = [], 0
        for start, end, text in self.edits:
            out += [self.query[last:start], text]
            last = end
        out.append(self.query[last:])
        return "".join(out)


_NOT_RENAME_TARGET: Final = frozenset({"COLUMN", "INDEX", "KEY"})


def rewrite_ddl(query: str, db: str, route: Route, route_schema: RouteSchema) -> Rewritten:
    """`query` with every table it names written as its routed, fully qualified name (see the module doc)."""
    p = _Parser(query, db, route)
    schema_stmt = _statement(p)
    if schema_stmt is not None:
        name_tok = p.peek()
        if name_tok is None or name_tok.name is None:
            return Rewritten(query, False, ())  # ALTER DATABASE without a name: the session's schema
        upstream = name_tok.name
        routed = route_schema(upstream)
        if routed == upstream:
            return Rewritten(query, False, (), (upstream, routed))
        p.edits.append((name_tok.start, name_tok.end, quote(routed)))
        return Rewritten(p.result(), True, (), (upstream, routed))
    if not p.refs:
        return Rewritten(query, False, ())
    changed = any((r.db, r.table) != (r.routed_db, r.routed_table) for r in p.refs)
    return Rewritten(p.result() if changed else query, changed, tuple(p.refs))


def _statement(p: _Parser) -> str | None:
    """Parse the statement's table references into `p`; a schema statement returns its verb and stops
    at the schema name."""
    if p.word("CREATE"):
        return _create(p)
    if p.word("DROP"):
        return _drop(p)
    if p.word("ALTER"):
        while p.word("ONLINE", "OFFLINE", "IGNORE"):
            pass
        if p.word("DATABASE", "SCHEMA"):
            return "alter"
        if p.word("TABLE"):
            _alter_table(p)
        return None
    if p.word("TRUNCATE"):
        p.word("TABLE")
        p.table()
        return None
    if p.word("RENAME") and p.word("TABLE", "TABLES"):
        while p.table() and p.word("TO") and p.table() and p.word(","):
            pass
    return None


def _create(p: _Parser) -> str | None:
    if p.word("DATABASE", "SCHEMA"):
        p.words("IF", "NOT", "EXISTS")
        return "create"
    p.word("TEMPORARY")
    if p.word("TABLE"):
        p.words("IF", "NOT", "EXISTS")
        if not p.table():
            return None
        p.word("(")
        if p.word("LIKE"):
            p.table()
        return None
    p.word("UNIQUE", "FULLTEXT", "SPATIAL")
    if p.word("INDEX") and p.skip_to_top_level("ON"):
        p.pos += 1
        p.table()
    return None


def _drop(p: _Parser) -> str | None:
    if p.word("DATABASE", "SCHEMA"):
        p.words("IF", "EXISTS")
        return "drop"
    p.word("TEMPORARY")
    if p.word("TABLE", "TABLES"):
        p.words("IF", "EXISTS")
        while p.table() and p.word(","):
            pass
    elif p.word("INDEX") and p.skip_to_top_level("ON"):
        p.pos += 1
        p.table()
    return None


def _alter_table(p: _Parser) -> None:
    if not p.table():
        return
    while p.skip_to_top_level("RENAME"):
        p.pos += 1
        nxt = p.peek()
        if nxt is None or nxt.upper in _NOT_RENAME_TARGET:
            continue
        p.word("TO", "AS")
        p.table()
