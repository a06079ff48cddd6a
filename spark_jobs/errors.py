"""Errors of the `binlog-spark` jobs: each names what is wrong in one line (the CLI prints it and exits 1)."""

from __future__ import annotations

from common.errors import BinlogError


class SparkJobError(BinlogError):
    """A job cannot run with the input it was given (bad directory, unknown table, unreachable DSN)."""


class InputError(SparkJobError):
    """An input (pump data directory, file-sink directory, DDL export) is missing or not what it claims."""


class TargetError(SparkJobError):
    """The replay target cannot be reached or written (MySQL DSN, sqlite file, parquet directory)."""
