"""One error hierarchy for the whole project.

Every error says whether the caller may retry the operation (`retriable`).
gRPC status codes are mapped to and from these classes at exactly one boundary
per side (the servicers and the clients), never in between.
"""

from __future__ import annotations


class BinlogError(Exception):
    """Base class of every error raised by this project."""

    retriable: bool = False


class ConfigError(BinlogError):
    """A bad configuration value, unknown key or unreadable config file."""


class CodecError(BinlogError, ValueError):
    """Bytes that do not decode as the expected format (row, datum, record)."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"{message} (at offset {offset})")


class CorruptRecordError(CodecError):
    """A framed record whose magic or checksum does not match."""


class ListenError(BinlogError):
    """An address to listen on is taken (or its port needs privileges): the environment's fault at run
    time, exit status 1, where an address that cannot be this machine's is a ConfigError."""


class StorageError(BinlogError):
    """A failure of local storage (disk full, I/O error, locked directory)."""


class UnavailableError(BinlogError):
    """A remote service (etcd, pd-server, pump, MySQL) cannot be reached right now."""

    retriable = True


class EtcdUnavailableError(UnavailableError):
    """etcd did not answer within the bounded retry."""


class TSOError(BinlogError):
    """The timestamp oracle refused or failed a request."""


class ClusterIDMismatchError(BinlogError):
    """A request carried a cluster id other than the server's."""


class RegistryError(BinlogError):
    """A node registry operation failed."""


class NodeExistsError(RegistryError):
    """Creating a node status that is already registered."""


class NodeNotFoundError(RegistryError):
    """Updating or reading a node status that is not registered."""


class ResourceExhaustedError(BinlogError):
    """The server refuses the request for lack of resources (never retried)."""


class NoSpaceError(ResourceExhaustedError):
    """Free disk space is below `stop-write-at-available-space`: writes are refused."""


class NotOnlineError(UnavailableError):
    """The pump is not `online`, so it refuses prewrite binlogs."""

    retriable = True


class StorageClosedError(StorageError):
    """The storage is closed (shutting down)."""


class PumpReadError(BinlogError):
    """A pump's commit_ts window cannot be read completely over gRPC: unreachable, garbage-collected,
    silent or sending garbage (`common.pull`)."""
