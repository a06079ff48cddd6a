"""Pump discovery: keep one `Puller` and one merge source per pump in the registry.

See docs/architecture.md#collector-and-pullers.

`refresh()` lists `/tidb-binlog/v1/pumps` and applies each pump's state:

    unknown pump, not offline   new Puller from merger.latest_ts(), merge source added (then as below)
    paused                      puller paused; the source stays, so the merge waits for this pump
    online                      puller resumed (a restarted pump is pulled again from its last_ts)
    pausing, closing            nothing (a closing pump still serves its binlogs until it is offline)
    offline                     puller closed, source removed, pump forgotten

A refresh runs when `start()` is called, every `detect_interval` seconds, on every etcd change under
the pumps prefix, and synchronously for `notify()` (the `Notify` RPC of a new pump, which must not
return before that pump is part of the merge).  Refreshes are serialized.  A known pump whose key
disappeared is kept (keys are never deleted in the original); a known pump whose host changed is
pulled from the new host.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final, Protocol

from common.errors import BinlogError
from common.etcd import PrefixWatcher
from common.registry import NodeChange, NodeKind, NodeState, NodeStatus, Registry
from drainer.merger import Merger
from drainer.puller import Puller

log = logging.getLogger(__name__)

DEFAULT_DETECT_INTERVAL: Final = 5.0
"""Seconds between two pump list refreshes (original code: 5 s; its sample TOML says 10)."""
CLOSE_JOIN_TIMEOUT: Final = 10.0


class PumpPuller(Protocol):
    """What the collector needs of a puller (`drainer.puller.Puller`; fakes in tests)."""

    addr: str
    last_ts: int

    def start(self) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def set_addr(self, addr: str) -> None: ...
    def close(self) -> None: ...


PullerFactory = Callable[..., PumpPuller]
"""Called as `factory(node_id, addr, cluster_id, start_ts, merger, compressor=..., on_error=...)`."""


class CollectorClosedError(BinlogError):
    """The collector is closed: it takes no more pumps."""

    retriable = True


class Collector:
    """Discovers pumps in the registry and feeds the merger through one puller each."""

    def __init__(
        self,
        registry: Registry,
        merger: Merger,
        cluster_id: int,
        *,
        detect_interval: float = DEFAULT_DETECT_INTERVAL,
        compressor: str = "",
        on_error: Callable[[BaseException], None] | None = None,
        puller_factory: PullerFactory | None = None,
    ) -> None:
        self._registry = registry
        self._merger = merger
        self._cluster_id = cluster_id
        self._detect_interval = detect_interval
        self._compressor = compressor
        self._on_error = on_error
        self._puller_factory: PullerFactory = puller_factory or Puller
        self._refresh_lock = threading.Lock()  # serializes refreshes
        self._lock = threading.Lock()  # guards the fields below
        self._pullers: dict[str, PumpPuller] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: PrefixWatcher | None = None
        self._closed = False
        self.refreshes = 0
        """Completed refreshes (for tests and status)."""

    # ---------------------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Refresh once (errors propagate), then keep refreshing on a thread and on etcd changes."""
        self.refresh()
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(target=self._loop, name="drainer-collector", daemon=True)
            self._thread.start()
        self._watcher = self._registry.watch(NodeKind.PUMP, self._on_change)
        log.info("collector started (detect interval %.1fs)", self._detect_interval)

    def close(self) -> None:
        """Stop discovering and close every puller; the merge sources stay.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread, watcher = self._thread, self._watcher
        self._stop.set()
        self._wake.set()
        if watcher is not None:
            watcher.stop()
        if thread is not None:
            thread.join(CLOSE_JOIN_TIMEOUT)
        with self._refresh_lock, self._lock:
            pullers, self._pullers = list(self._pullers.values()), {}
        for puller in pullers:
            puller.close()
        log.info("collector closed (%d pullers)", len(pullers))

    def _on_change(self, change: NodeChange) -> None:
        log.debug("pump registry change node_id=%s revision=%d", change.node_id, change.revision)
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._detect_interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh()
            except CollectorClosedError:
                return
            except BinlogError as exc:
                log.warning("collector: pump refresh failed: %s", exc)
            except Exception:
                log.exception("collector: pump refresh failed")

    # ------------------------------------------------------------------------------ refresh
    def notify(self) -> None:
        """A new pump announced itself: refresh now; returns once it is part of the merge."""
        log.info("notified of a new pump; refreshing")
        self.refresh()

    def refresh(self) -> None:
        """Apply the registry's pump states to the pullers and merge sources (see the module doc)."""
        with self._refresh_lock:
            if self._closed:
                raise CollectorClosedError("the drainer's collector is closed")
            statuses = self._registry.list(NodeKind.PUMP)
            new = [s for s in statuses if s.node_id not in self._pullers and s.state is not NodeState.OFFLINE]
            # Every new pump joins the merge BEFORE any of them is read from: the merge then waits for
            # all of them, so the ts they start after cannot move between two of them (at start-up,
            # with no source yet, the first pump alone would otherwise be merged ahead of the others).
            for status in new:
                self._merger.add_source(status.node_id)
            for status in new:
                self._add(status)
            for status in statuses:
                if status.node_id in self._pullers and status not in new:
                    self._apply(status)
            self.refreshes += 1

    def _apply(self, status: NodeStatus) -> None:
        node_id, state = status.node_id, status.state
        puller = self._pullers[node_id]
        if state is NodeState.OFFLINE:
            self._remove(node_id, puller)
            return
        if status.host and status.host != puller.addr:
            puller.set_addr(status.host)
        if state is NodeState.PAUSED:
            puller.pause()
        elif state is NodeState.ONLINE:
            puller.resume()

    def _add(self, status: NodeStatus) -> None:
        start_ts = self._merger.latest_ts()
        puller = self._puller_factory(
            status.node_id,
            status.host,
            self._cluster_id,
            start_ts,
            self._merger,
            compressor=self._compressor,
            on_error=self._on_error,
        )
        with self._lock:
            self._pullers[status.node_id] = puller
        if status.state is NodeState.PAUSED:
            puller.pause()
        puller.start()
        log.info(
            "new pump node_id=%s host=%s state=%s: pulling after commit_ts=%d",
            status.node_id,
            status.host,
            status.state.value,
            start_ts,
        )

    def _remove(self, node_id: str, puller: PumpPuller) -> None:
        puller.close()
        self._merger.remove_source(node_id)
        with self._lock:
            del self._pullers[node_id]
        log.info("pump node_id=%s is offline: removed from the merge at offset=%d", node_id, puller.last_ts)

    # ------------------------------------------------------------------------------- status
    def pump_positions(self) -> dict[str, int]:
        """node_id -> the last commit_ts received from that pump (the drainer's /status PumpPos)."""
        with self._lock:
            return {node_id: p.last_ts for node_id, p in sorted(self._pullers.items())}

    def pullers(self) -> dict[str, PumpPuller]:
        with self._lock:
            return dict(self._pullers)
