"""Errors of the drainer that more than one of its modules names.

`PullerError` lives here rather than in :mod:`drainer.puller` so that :mod:`drainer.metrics` can classify it
(`error_type`) without importing the puller, which itself reports to the metrics: no import cycle.
"""

from __future__ import annotations

from common.errors import BinlogError


class PullerError(BinlogError):
    """A pump's stream cannot be used any more (a binlog that does not parse)."""
