"""Errors of the upstream writer (all :class:`~common.errors.BinlogError`; ``retriable`` says "run the
transaction again")."""

from __future__ import annotations

from common.errors import BinlogError
from common.schema.model import SchemaError
from common.sql.dialect import StoreError
from upstream.store.base import DuplicateKeyError


class WriterError(BinlogError):
    """The writer could not do what was asked; the transaction (if any) is rolled back."""


class TxnClosedError(WriterError):
    """The transaction already committed, rolled back or failed."""


class WriteConflictError(WriterError):
    """A row this transaction read was changed by another transaction before it committed."""

    retriable = True


class SchemaChangedError(WriterError):
    """A table this transaction changed was altered by a DDL since the transaction read it."""

    retriable = True

    @classmethod
    def of(cls, db: str, table: str, start_ts: int) -> SchemaChangedError:
        return cls(f"table {db}.{table} changed by a DDL during transaction start_ts={start_ts}")


class BinlogWriteError(WriterError):
    """The prewrite binlog could not be written to any pump; the transaction is rolled back."""


class TxnTooLargeError(WriterError):
    """The transaction's prewrite binlog would be larger than the pumps accept (their max-message-size).

    Raised by the statement that crosses the limit or at commit, before anything is sent."""


class CommitUnknownError(WriterError):
    """The store's commit failed in a way that leaves its outcome unknown (e.g. connection lost).

    The txn-status row tells the pump (and you) whether it committed."""


__all__ = [
    "BinlogWriteError",
    "CommitUnknownError",
    "DuplicateKeyError",
    "SchemaChangedError",
    "SchemaError",
    "StoreError",
    "TxnClosedError",
    "TxnTooLargeError",
    "WriteConflictError",
    "WriterError",
]
