"""The sink interface: where translated transactions go (mysql, sqlite, file; relay and Kafka later).

Contract, for every implementation:

* ``start(on_success)`` once, before the first ``add``.
* ``add(txn)`` is called from one thread (the syncer) in strictly ascending ``commit_ts`` order.
  It may block while the sink's byte budget is full; it raises :class:`SinkError` once the sink
  has failed (and keeps raising it).
* ``on_success(commit_ts)`` is called, from any thread, in ascending order, for every added
  txn once it *and every txn added before it* is durable downstream.  Empty txns (fake
  binlogs, filtered transactions) are reported too, in order, so the checkpoint keeps moving.
* ``flush(timeout)`` returns once everything added so far has been reported (or raises
  ``SinkError``/``TimeoutError``).
* ``close()`` is idempotent: it stops the workers without reporting anything not yet done.
* ``error()`` is the failure that stopped the sink, or None.
* A sink whose ``takes_parts`` is true may get a large transaction as several txns with one
  ``commit_ts``, all but the last with ``partial`` set; it reports that ``commit_ts`` once, when
  every part is applied.  Other sinks get every transaction whole.
"""

from __future__ import annotations

import abc
from collections.abc import Callable

from common.errors import BinlogError
from drainer.events import Txn

OnSuccess = Callable[[int], None]


class SinkError(BinlogError):
    """The sink cannot go on; the message names the commit_ts and the cause."""


class Sink(abc.ABC):
    name = "sink"
    safe_mode_aware = False
    """True when the sink honours ``set_safe_mode`` (SQL sinks)."""

    @abc.abstractmethod
    def start(self, on_success: OnSuccess) -> None: ...

    @abc.abstractmethod
    def add(self, txn: Txn) -> None: ...

    @abc.abstractmethod
    def flush(self, timeout: float | None = None) -> None: ...

    @abc.abstractmethod
    def close(self) -> None: ...

    @abc.abstractmethod
    def error(self) -> BaseException | None: ...

    @property
    def takes_parts(self) -> bool:
        """True when the sink takes a large transaction in parts (``Txn.partial``)."""
        return False

    def set_safe_mode(self, on: bool) -> None:  # noqa: B027 - optional hook
        """Switch REPLACE / DELETE+REPLACE rendering on or off (SQL sinks only)."""
