"""The character set and collation a table created downstream gets (pure).

Upstream strings compare exactly: TiDB's default collation is ``utf8mb4_bin`` and the sqlite
store compares with BINARY, so keys ``'a'``, ``'A'`` and ``'a '`` are three rows.  A CREATE TABLE
run downstream as written gets the server's default collation instead (MariaDB:
``utf8mb4_general_ci``), where those keys are one row.  So a CREATE TABLE whose text names no
character set or collation of its own gets the table's recorded ones appended
(:func:`with_table_options`), mapped to what the downstream has (:func:`downstream_collation`):

  * no recorded collation (history from before it was recorded, or a DDL known only by its
    text): ``utf8mb4`` / ``utf8mb4_bin``, what the writer always meant;
  * ``<charset>_bin``: the server's NO PAD binary collation of that charset when it has one
    (MariaDB ``utf8mb4_nopad_bin``, MySQL 8 ``utf8mb4_0900_bin``), so keys that differ only in
    trailing spaces stay apart too; else ``<charset>_bin`` itself, with a warning that such keys
    collide;
  * any other collation the server has: itself; one it lacks: the NO PAD binary one (else
    ``utf8mb4_bin``) with a warning naming both, never a case-insensitive one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_CHARSET = "utf8mb4"
DEFAULT_COLLATE = "utf8mb4_bin"

_OPTIONS = re.compile(r"\b(CHARSET|CHARACTER\s+SET|COLLATE)\b", re.IGNORECASE)
_NOT_PLAIN = re.compile(r"\b(PARTITION|SELECT|LIKE)\b", re.IGNORECASE)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+(TEMPORARY\s+)?TABLE\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Choice:
    charset: str
    collate: str
    warning: str = ""
    """Why the downstream cannot compare as upstream does; "" when it can."""


def nopad_binary(charset: str) -> tuple[str, ...]:
    """Names of the NO PAD binary collations of `charset`, in order of preference."""
    names = [f"{charset}_nopad_bin"]  # MariaDB
    if charset == "utf8mb4":
        names.append("utf8mb4_0900_bin")  # MySQL 8
    return tuple(names)


def downstream_collation(charset: str, collate: str, available: Mapping[str, str]) -> Choice:
    """The charset and collation to create a table with upstream `charset`/`collate` ("" = not
    recorded) on a server whose collations are `available` (name -> its charset)."""
    cs = charset or DEFAULT_CHARSET
    want = collate or DEFAULT_COLLATE
    if not charset and collate and "_" in collate:
        cs = collate.split("_", 1)[0]
    if want == f"{cs}_bin":
        for name in nopad_binary(cs):
            if name in available:
                return Choice(available[name], name)
        if want in available:
            return Choice(available[want], want, _pad_warning(want))
    elif want in available:
        return Choice(available[want], want)
    for name in nopad_binary("utf8mb4"):
        if name in available:
            return Choice(available[name], name, f"collation {want} is not available downstream: using {name}")
    return Choice(
        DEFAULT_CHARSET,
        DEFAULT_COLLATE,
        f"collation {want} is not available downstream: using {DEFAULT_COLLATE}; " + _pad_warning(DEFAULT_COLLATE),
    )


def _pad_warning(collate: str) -> str:
    return (
        f"the downstream has no NO PAD binary collation: tables get {collate}, so string keys that differ "
        "only in trailing spaces collide downstream"
    )


def _skip_quoted(text: str, i: int) -> int:
    """The index after the quoted string/identifier starting at text[i]."""
    q = text[i]
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\" and q != "`":
            i += 2
            continue
        if c == q:
            if i + 1 < len(text) and text[i + 1] == q:
                i += 2
                continue
            return i + 1
        i += 1
    return i


def _column_list_end(query: str) -> int:
    """The index after the ``)`` closing a CREATE TABLE's column list; -1 without one."""
    i, depth = 0, 0
    while i < len(query):
        c = query[i]
        if c in "'\"`":
            i = _skip_quoted(query, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
            if depth < 0:
                return -1
        i += 1
    return -1


def _unquoted(text: str) -> str:
    """`text` with its quoted strings and identifiers blanked out."""
    out, i = [], 0
    while i < len(text):
        if text[i] in "'\"`":
            j = _skip_quoted(text, i)
            out.append(" ")
            i = j
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def with_table_options(query: str, charset: str, collate: str) -> str:
    """A plain CREATE TABLE ``query`` (a column list, then at most table options) that names no
    character set or collation, with ``DEFAULT CHARSET=charset COLLATE=collate`` appended;
    any other statement as it is."""
    if not _CREATE_TABLE.match(query):
        return query
    end = _column_list_end(query)
    if end < 0:
        return query  # CREATE TABLE ... LIKE, or text we do not understand: leave it to the server
    head = _unquoted(query[: query.index("(")]) if "(" in query[:end] else ""
    tail = _unquoted(query[end:])
    if _OPTIONS.search(tail) or _NOT_PLAIN.search(tail) or _NOT_PLAIN.search(head):
        return query
    body = query.rstrip().rstrip(";").rstrip()
    return f"{body} DEFAULT CHARSET={charset} COLLATE={collate}"
