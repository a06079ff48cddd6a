"""The sink interface: where translated transactions go (mysql, sqlite, file, kafka; the relay log wraps one).

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
* ``set_observer(observer)`` before ``start``: the SQL sinks report the time of every downstream
  transaction and query to it (:class:`SinkObserver`, the drainer's metrics); ``inflight_bytes``
  is what the sink's byte budget holds right now (read at scrape time).
* ``status()`` is a JSON object of the sink's own numbers for the drainer's ``GET /status`` (``sink``),
  or None for a sink that has none (the Kafka sink has them).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Protocol

from common.errors import BinlogError
from common.events import Txn

OnSuccess = Callable[[int], None]


class SinkError(BinlogError):
    """The sink cannot go on; the message names the commit_ts and the cause."""


class SinkObserver(Protocol):
    """Where a sink reports its downstream timings (`drainer.metrics.SinkMetrics`).  Every method must be
    cheap (it runs once per downstream query) and must not raise."""

    def executed(self, seconds: float) -> None:
        """One downstream transaction (a chunk of DMLs, or a DDL) done, retries not included."""

    def query_exec(self, seconds: float) -> None:
        """One query round trip (statements; for MySQL the last one of a chunk carries its COMMIT)."""

    def query_commit(self, seconds: float) -> None:
        """One separate COMMIT."""


class NullSinkObserver:
    """A SinkObserver that records nothing (a sink's default)."""

    def executed(self, seconds: float) -> None:
        pass

    def query_exec(self, seconds: float) -> None:
        pass

    def query_commit(self, seconds: float) -> None:
        pass


class Sink(abc.ABC):
    name = "sink"
    safe_mode_aware = False
    """True when the sink honours ``set_safe_mode`` (SQL sinks)."""
    observer: SinkObserver = NullSinkObserver()

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

    def set_observer(self, observer: SinkObserver) -> None:
        """Report downstream timings to `observer` from now on (call it before `start`)."""
        self.observer = observer

    @property
    def inflight_bytes(self) -> int:
        """Bytes the sink's budget holds right now: added and not yet reported (0 if it does not count)."""
        return 0

    def status(self) -> dict[str, object] | None:
        """The sink's own numbers for GET /status, or None."""
        return None


class WrappingSink(Sink):
    """A sink in front of another (`inner`): it takes the inner sink's name flags, and passes on what it does
    not change itself (parts, safe mode, the observer, the byte count, status)."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner
        self.name = inner.name
        self.safe_mode_aware = inner.safe_mode_aware

    @property
    def takes_parts(self) -> bool:
        return self.inner.takes_parts

    def set_safe_mode(self, on: bool) -> None:
        self.inner.set_safe_mode(on)

    def set_observer(self, observer: SinkObserver) -> None:
        self.inner.set_observer(observer)

    @property
    def inflight_bytes(self) -> int:
        return self.inner.inflight_bytes

    def status(self) -> dict[str, object] | None:
        return self.inner.status()
