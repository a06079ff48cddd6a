"""Store DSNs: where an upstream store (and its transaction-status table) lives.

    sqlite:///abs/path.db      sqlite:relative.db      /a/file/path.db (= sqlite)
    mysql://user:pass@host:port/db

Parsing never connects; a bad DSN is a ConfigError naming the problem, with the
password redacted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias
from urllib.parse import unquote, urlsplit

from common.errors import ConfigError


@dataclass(frozen=True)
class SqliteDSN:
    path: Path

    def describe(self) -> str:
        return f"sqlite:{self.path}"


@dataclass(frozen=True)
class MySQLDSN:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    def describe(self) -> str:
        return f"mysql://{self.user}@{self.host}:{self.port}/{self.database}"


TxnStatusDSN: TypeAlias = SqliteDSN | MySQLDSN

_DSN_FORMS = "use sqlite:///abs/path.db, sqlite:relative.db, a file path, or mysql://user:pass@host:port/db"


def parse_dsn(dsn: str) -> TxnStatusDSN:
    """Parse an `[upstream] txn-status-dsn` value; ConfigError naming the problem."""
    text = dsn.strip()
    if not text:
        raise ConfigError(f"txn-status DSN is empty; {_DSN_FORMS}")
    scheme, sep, rest = text.partition(":")
    if sep and scheme.lower() == "sqlite":
        return _parse_sqlite(text, rest)
    if sep and scheme.lower() == "mysql":
        return _parse_mysql(text)
    if "://" in text:
        raise ConfigError(f"txn-status DSN {text!r}: unsupported scheme {scheme!r}; {_DSN_FORMS}")
    return SqliteDSN(Path(text))


def _parse_sqlite(text: str, rest: str) -> SqliteDSN:
    path = rest
    if rest.startswith("//"):
        netloc, slash, tail = rest[2:].partition("/")
        if netloc:
            raise ConfigError(f"txn-status DSN {text!r}: sqlite takes no host ({netloc!r}); {_DSN_FORMS}")
        path = slash + tail
    if not path or path == ":memory:":
        raise ConfigError(f"txn-status DSN {text!r}: sqlite needs a database file path; {_DSN_FORMS}")
    return SqliteDSN(Path(path))


def _parse_mysql(text: str) -> MySQLDSN:
    parts = urlsplit(text)
    try:
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError(f"txn-status DSN {_redact(text)!r}: bad port: {exc}") from None
    if parts.query or parts.fragment:
        raise ConfigError(f"txn-status DSN {_redact(text)!r}: query parameters are not supported")
    database = unquote(parts.path.lstrip("/"))
    if not database or "/" in database:
        raise ConfigError(f"txn-status DSN {_redact(text)!r}: needs exactly one database name; {_DSN_FORMS}")
    return MySQLDSN(
        host=parts.hostname or "127.0.0.1",
        port=port,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=database,
    )


def _redact(text: str) -> str:
    parts = urlsplit(text)
    if parts.password is None:
        return text
    return text.replace(f":{parts.password}@", ":***@", 1)
