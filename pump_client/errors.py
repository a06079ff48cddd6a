"""Errors of the pump client, in the project's hierarchy (common.errors.BinlogError).

    PumpClientError          a prewrite could not be written to any pump, or the client cannot start
                             (etcd unreachable, no cluster id).  `retriable`: the caller may retry the
                             transaction later.
      NoPumpError            no pump is registered in etcd (construction)
      PumpFullError          a pump answered RESOURCE_EXHAUSTED (disk below stop-write-at-available-space,
                             message too large, too many calls): never retried, raised at once
      InvalidBinlogError     a pump answered INVALID_ARGUMENT (the binlog breaks a rule every pump checks,
                             e.g. commit_ts <= start_ts): never retried, raised at once
      ClientClosedError      the client is closed
      BinlogTooLargeError    a prewrite larger than max_message_size: refused before sending

Commit and rollback binlogs never raise: the pump's resolver fills the gap (docs/architecture.md#transaction-status).
"""

from __future__ import annotations

from common.errors import BinlogError, ResourceExhaustedError


class PumpClientError(BinlogError):
    """A prewrite binlog could not be written, or the client could not be built."""

    retriable = True


class NoPumpError(PumpClientError):
    """No pump is registered in etcd (the original: "no pump found in pd")."""

    retriable = False


class PumpFullError(PumpClientError, ResourceExhaustedError):
    """A pump refused the binlog with RESOURCE_EXHAUSTED; the client does not retry it."""

    retriable = False


class InvalidBinlogError(PumpClientError):
    """A pump refused the binlog with INVALID_ARGUMENT: a bug in the writer, so not retried anywhere."""

    retriable = False


class ClientClosedError(PumpClientError):
    """The client was closed."""

    retriable = False


class BinlogTooLargeError(PumpClientError):
    """A prewrite binlog larger than the client's max_message_size (the pumps' max-message-size); never sent."""

    retriable = False
