"""Counters of one pump client, on its own prometheus CollectorRegistry (`ClientMetrics.registry`).

    binlog_pump_client_writes_total{node_id}     WriteBinlog calls that succeeded on the pump
    binlog_pump_client_failures_total{node_id}   WriteBinlog calls that failed on the pump
    binlog_pump_client_retries_total{node_id}    calls to the pump that were a retry of a binlog
                                                 (not its first attempt)
    binlog_pump_client_given_up_total{type}      binlogs the client gave up on: type=prewrite (raised),
                                                 commit (dropped after commit_timeout, or no pump known
                                                 for its start_ts)
    binlog_pump_client_withdrawn_total           rollbacks sent to a pump whose prewrite attempt failed
                                                 without a refusal (it may hold a copy) after the
                                                 prewrite went to another pump or failed

Probes (empty payloads) are not counted.  `writes(node_id)`, `failures(node_id)`, `retries(node_id)`
and `given_up(kind)` read the values back (for tests and logs).

The client runs inside the writer's commit path, so a pump's three children are bound on its first
call and kept (`_children`), never looked up per binlog.  The original's metrics list has no client
series (they live in TiDB); these names are ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, generate_latest

if TYPE_CHECKING:
    from prometheus_client.metrics import Counter as CounterChild

PREWRITE: Final = "prewrite"
COMMIT: Final = "commit"


class ClientMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._writes = Counter(
            "binlog_pump_client_writes", "binlogs written to a pump", ["node_id"], registry=self.registry
        )
        self._failures = Counter(
            "binlog_pump_client_failures", "failed WriteBinlog calls to a pump", ["node_id"], registry=self.registry
        )
        self._retries = Counter(
            "binlog_pump_client_retries",
            "WriteBinlog calls to a pump that retried a binlog",
            ["node_id"],
            registry=self.registry,
        )
        self._given_up = Counter(
            "binlog_pump_client_given_up", "binlogs the client gave up on", ["type"], registry=self.registry
        )
        self._withdrawn = Counter(
            "binlog_pump_client_withdrawn",
            "rollbacks sent for prewrite copies a pump may hold from a failed attempt",
            registry=self.registry,
        )
        self._children: dict[str, tuple[CounterChild, CounterChild, CounterChild]] = {}
        """node_id -> its (writes, failures, retries) children."""

    # ------------------------------------------------------------------------------ recording
    def attempt(self, node_id: str, retry: bool, ok: bool) -> None:
        children = self._children.get(node_id)
        if children is None:  # two threads may both bind them: labels() gives both the same children
            children = self._children[node_id] = (
                self._writes.labels(node_id=node_id),
                self._failures.labels(node_id=node_id),
                self._retries.labels(node_id=node_id),
            )
        writes, failures, retries = children
        if retry:
            retries.inc()
        (writes if ok else failures).inc()

    def give_up(self, kind: str) -> None:
        self._given_up.labels(type=kind).inc()

    def withdrawn(self) -> None:
        self._withdrawn.inc()

    # -------------------------------------------------------------------------------- reading
    def withdrawals(self) -> int:
        return self._sample("binlog_pump_client_withdrawn_total", {})

    def writes(self, node_id: str) -> int:
        return self._sample("binlog_pump_client_writes_total", {"node_id": node_id})

    def failures(self, node_id: str) -> int:
        return self._sample("binlog_pump_client_failures_total", {"node_id": node_id})

    def retries(self, node_id: str) -> int:
        return self._sample("binlog_pump_client_retries_total", {"node_id": node_id})

    def given_up(self, kind: str) -> int:
        return self._sample("binlog_pump_client_given_up_total", {"type": kind})

    def _sample(self, name: str, labels: dict[str, str]) -> int:
        value = self.registry.get_sample_value(name, labels)
        return 0 if value is None else int(value)

    def render(self) -> bytes:
        """The Prometheus text exposition of these counters."""
        return generate_latest(self.registry)
