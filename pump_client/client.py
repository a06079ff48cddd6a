"""`PumpsClient`: sends binlogs to the pump cluster (docs/architecture.md#pump-client; changes from the original below).

Construction: etcd (`etcd_urls`, like TiDB's pd-urls) -> cluster id (`/pd/cluster_id`) -> list
`/tidb-binlog/v1/pumps` (NoPumpError if none) -> watch that prefix (survives etcd restarts) -> start the
prober.  Prewrites go to a pump chosen by the strategy (pump_client/selector.py) and are retried and
failed over as pump_client/retry.py describes; commits and rollbacks go to the pump that took the
prewrite (the start_ts map, pump_client/tsmap.py) and never raise.  Pump availability is
pump_client/membership.py; the gRPC edge is pump_client/transport.py.  Requests go out as bytes built
by pump_client/payload.py; a big prewrite can be handed over already marshalled, in pieces
(`write_encoded_binlog`), so it is copied once, into the request.  A prewrite whose request would
exceed `max_message_size` is refused before sending (BinlogTooLargeError).

TLS: `tls` (a loaded `common.tls.TLS`, or `TLSFiles` paths read at construction, ConfigError naming an
unusable file) is used for etcd and for every pump, as TiDB's one `[security]` section is; pumps are
dialled at their registered host:port and their certificates must name it.

Changes from the original: unknown strategy names are an error (not silently `range`); `hash` is stable
(sorted node ids); `score` works (weights published by the pumps); the start_ts map is per client and
bounded; commits can be sent in the background (`write_binlog_async`); everything is closed by `close()`;
a call has a short deadline (`attempt_timeout`, growing on retries, within `write_timeout`), and a pump
whose call timed out or found no server gets no new prewrites until it answers again (probed every
SUSPECT_PROBE_INTERVAL): a frozen pump no longer stops every prewrite sent to it for `write_timeout`.

Threads: one etcd watcher, one prober, and (for async commits) a timer plus `ASYNC_WORKERS` workers.
`write_binlog` may be called from any number of threads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Final

from common.backoff import Backoff, WaitTimeoutError
from common.errors import ConfigError, EtcdUnavailableError, TSOError
from common.etcd import EtcdClient, PrefixWatcher
from common.pb import binlog_pb2, gogo, pump_pb2
from common.pd_client import CLUSTER_ID_KEY, wait_cluster_id
from common.registry import NodeChange, NodeKind, Registry
from common.tls import TLS, TLSFiles
from pump_client.commit import CommitJob
from pump_client.dispatch import DEFAULT_MAX_PENDING, DEFAULT_WORKERS, Dispatcher
from pump_client.errors import (
    BinlogTooLargeError,
    ClientClosedError,
    InvalidBinlogError,
    NoPumpError,
    PumpClientError,
    PumpFullError,
)
from pump_client.membership import DEFAULT_MAX_ERR_NUMS, Membership, PumpInfo
from pump_client.metrics import COMMIT, PREWRITE, ClientMetrics
from pump_client.payload import MAX_HEADER_SIZE, EncodedBinlog, encode_write_req, request_size
from pump_client.retry import (
    DEFAULT_ATTEMPT_TIMEOUT,
    DEFAULT_COMMIT_TIMEOUT,
    DEFAULT_RETRY_INTERVAL,
    DEFAULT_WRITE_TIMEOUT,
    Action,
    RetryPolicy,
    makes_suspect,
    on_error,
)
from pump_client.selector import RANGE, make_selector
from pump_client.transport import DEFAULT_MAX_MESSAGE_SIZE, AttemptError, PumpTransport, Request
from pump_client.tsmap import DEFAULT_MAX_TRACKED_TXNS, StartTsMap

log = logging.getLogger(__name__)

DEFAULT_PROBE_INTERVAL: Final = 30.0
"""Seconds between probes of unavailable online pumps (original CheckInterval: 30 s)."""
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Seconds construction keeps trying etcd (and waits for the cluster id) before it fails."""
DEFAULT_CLOSE_TIMEOUT: Final = 10.0
"""Seconds close() waits for background commits still being delivered."""
PROBE_TIMEOUT: Final = 3.0
"""Deadline of one probe call (at most write_timeout)."""
SUSPECT_PROBE_INTERVAL: Final = 1.0
"""Seconds between probes of suspect pumps (a call timed out or found no server), at most probe_interval."""
ASYNC_WORKERS: Final = DEFAULT_WORKERS
_GRPC_INT_MAX: Final = 2**31 - 1


class PumpsClient:
    """Writes binlogs to the pumps registered in etcd; thread-safe.  See the module docstring."""

    def __init__(
        self,
        etcd_urls: str | Sequence[str],
        *,
        strategy: str = RANGE,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        attempt_timeout: float = DEFAULT_ATTEMPT_TIMEOUT,
        commit_timeout: float = DEFAULT_COMMIT_TIMEOUT,
        retry_interval: float = DEFAULT_RETRY_INTERVAL,
        probe_interval: float = DEFAULT_PROBE_INTERVAL,
        max_err_nums: int = DEFAULT_MAX_ERR_NUMS,
        tls: TLS | TLSFiles | None = None,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_tracked_txns: int = DEFAULT_MAX_TRACKED_TXNS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        try:
            self._policy = RetryPolicy(write_timeout, commit_timeout, retry_interval, attempt_timeout)
            self._membership = Membership(max_err_nums)
            self._tsmap = StartTsMap(max_tracked_txns)
        except ValueError as exc:
            raise ConfigError(f"pump client: {exc}") from exc
        if not probe_interval > 0:
            raise ConfigError(f"pump client: probe_interval must be > 0, got {probe_interval!r}")
        if not 0 < max_message_size <= _GRPC_INT_MAX:
            raise ConfigError(f"pump client: max_message_size must be in 1..{_GRPC_INT_MAX}, got {max_message_size}")
        self.strategy = strategy
        self._selector = make_selector(strategy)
        self._selector_version = -1
        self._probe_interval = probe_interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self.metrics = ClientMetrics()
        self._watcher: PrefixWatcher | None = None
        self._prober: threading.Thread | None = None
        self._dispatcher: Dispatcher | None = None
        self._max_message_size = max_message_size
        if isinstance(tls, TLSFiles):
            tls = TLS.load(tls, name=_tls_setting)
        self.tls = tls
        self._transport = PumpTransport(tls=tls, max_message_size=max_message_size, retire_after=write_timeout + 5.0)
        self._etcd = EtcdClient(etcd_urls, tls=tls, retry_for=connect_timeout)
        try:
            self._start(connect_timeout)
        except BaseException:
            self._abort_start()
            raise

    # ------------------------------------------------------------------------------------ start
    def _start(self, connect_timeout: float) -> None:
        etcd = self._etcd
        try:
            self.cluster_id = self._read_cluster_id(connect_timeout)
            registry = Registry(etcd)
            statuses = registry.list(NodeKind.PUMP)
        except EtcdUnavailableError as exc:
            raise PumpClientError(f"pump client cannot reach etcd at {etcd.describe}: {exc}") from exc
        if not statuses:
            raise NoPumpError(
                f"no pump found in etcd at {etcd.describe} (nothing under {registry.prefix(NodeKind.PUMP)})"
            )
        with self._lock:
            for status in statuses:
                self._membership.put(status)
            self._refresh_selector_locked()
            available = self._membership.available_count()
        log.info(
            "pump client: cluster_id=%d strategy=%s pumps=%d available=%d",
            self.cluster_id,
            self.strategy,
            len(statuses),
            available,
        )
        self._dispatcher = Dispatcher(workers=ASYNC_WORKERS, max_pending=DEFAULT_MAX_PENDING)
        self._watcher = registry.watch(NodeKind.PUMP, self._on_change)
        self._prober = threading.Thread(target=self._probe_loop, name="pump-client-probe", daemon=True)
        self._prober.start()

    def _read_cluster_id(self, timeout: float) -> int:
        try:
            return wait_cluster_id(self._etcd, timeout)
        except TSOError as exc:
            raise PumpClientError(f"pump client: {exc}") from exc
        except WaitTimeoutError:
            raise PumpClientError(
                f"no cluster id at {CLUSTER_ID_KEY} in etcd at {self._etcd.describe} after {timeout:.1f}s: "
                "is pd-server running?"
            ) from None

    def _abort_start(self) -> None:
        self._closed = True
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        if self._dispatcher is not None:
            self._dispatcher.close(0.0)
            self._dispatcher.join()
        self._transport.close()
        self._etcd.close()

    # ---------------------------------------------------------------------------------- writing
    def write_binlog(self, binlog: binlog_pb2.Binlog) -> None:
        """Write one binlog.  A prewrite raises PumpClientError when every pump failed; a commit or
        rollback never raises (it is retried on its prewrite's pump for up to commit_timeout)."""
        if binlog.tp == binlog_pb2.Prewrite:
            self._write_prewrite(binlog.start_ts, self._request(binlog.start_ts, [gogo.marshal_binlog(binlog)]))
            return
        job = self._commit_job(binlog.tp, binlog.start_ts, binlog.commit_ts, [gogo.marshal_binlog(binlog)])
        if job is not None:
            self._run_commit_job(job)

    def _run_commit_job(self, job: CommitJob) -> None:
        while True:
            delay = job.step()
            if delay is None:
                return
            if self._stop.wait(delay):
                job.abandon()
                return

    def write_encoded_binlog(self, binlog: EncodedBinlog) -> None:
        """`write_binlog` for a binlog already marshalled in pieces (a large prewrite): the pieces are
        joined into the request once and dropped, never copied into protobuf messages.  Raises
        BinlogTooLargeError, before sending anything, when the request would exceed max_message_size."""
        if binlog.tp == binlog_pb2.Prewrite:
            self._write_prewrite(binlog.start_ts, self._request(binlog.start_ts, binlog.take()))
            return
        job = self._commit_job(binlog.tp, binlog.start_ts, binlog.commit_ts, binlog.take())
        if job is not None:
            self._run_commit_job(job)

    @property
    def max_binlog_size(self) -> int:
        """The largest binlog (marshalled bytes) a request can carry: max_message_size less the header."""
        return self._max_message_size - MAX_HEADER_SIZE

    def write_binlog_async(self, binlog: binlog_pb2.Binlog) -> Future[None]:
        """Send a commit or rollback binlog in the background; the future resolves (always with None)
        once it is delivered or given up.  A prewrite is written synchronously (it may raise)."""
        if binlog.tp == binlog_pb2.Prewrite:
            self.write_binlog(binlog)
            done: Future[None] = Future()
            done.set_result(None)
            return done
        job = self._commit_job(binlog.tp, binlog.start_ts, binlog.commit_ts, [gogo.marshal_binlog(binlog)])
        if job is None or self._dispatcher is None:
            finished: Future[None] = Future()
            finished.set_result(None)
            return finished
        return self._dispatcher.submit(job)

    def _request(self, start_ts: int, payload: list[bytes]) -> bytes:
        """The request bytes of a prewrite (BinlogTooLargeError past max_message_size)."""
        size = request_size(self.cluster_id, sum(len(p) for p in payload))
        if size > self._max_message_size:
            self.metrics.give_up(PREWRITE)
            raise BinlogTooLargeError(
                f"prewrite binlog start_ts={start_ts} is {size} bytes, more than max_message_size "
                f"{self._max_message_size} (the pumps' max-message-size): not sent"
            )
        return encode_write_req(self.cluster_id, payload)

    def _write_prewrite(self, start_ts: int, request: bytes) -> None:
        if self._closed:
            raise ClientClosedError(f"pump client is closed: prewrite start_ts={start_ts} not written")
        # Pumps whose attempt failed without a refusal: a timed-out call may still have been stored.
        maybe_stored: set[str] = set()
        try:
            node_id = self._write_prewrite_somewhere(start_ts, request, maybe_stored)
        except BaseException:
            self._withdraw(start_ts, maybe_stored)
            raise
        self._tsmap.set(start_ts, node_id)
        self._withdraw(start_ts, maybe_stored - {node_id})

    def _write_prewrite_somewhere(self, start_ts: int, request: bytes, maybe_stored: set[str]) -> str:
        """The node id of the pump that took the prewrite (raises when none did)."""
        policy = self._policy
        begin = time.monotonic()
        retry = 0
        attempts = 0
        last = "no available pump"
        backoff = Backoff(policy.retry_interval, factor=1.0, stop=self._stop)  # a fixed interval
        while True:
            pump = self._select(start_ts, retry)
            if pump is not None:
                timeout = policy.attempt_deadline(attempts, len(request))
                attempts += 1
                err = self._attempt(pump.node_id, pump.addr, request, timeout, retry=retry > 0)
                if err is None:
                    return pump.node_id
                last = f"node_id={pump.node_id}: {err.describe()}"
                action = on_error(err.code)
                if action is Action.FAIL:
                    self.metrics.give_up(PREWRITE)
                    raise PumpFullError(f"write binlog start_ts={start_ts} refused by pump {last} (not retried)")
                if action is Action.INVALID:
                    self.metrics.give_up(PREWRITE)
                    raise InvalidBinlogError(f"prewrite binlog start_ts={start_ts} is invalid: pump {last}")
                maybe_stored.add(pump.node_id)
                log.warning(
                    "write prewrite start_ts=%d to node_id=%s failed (try %d): %s",
                    start_ts,
                    pump.node_id,
                    retry + 1,
                    err.describe(),
                )
            retry += 1
            with self._lock:
                available = self._membership.available_count()
            if policy.prewrite_gives_up(time.monotonic() - begin, retry, available):
                break
            if backoff.wait():
                raise ClientClosedError(f"pump client closed while writing prewrite start_ts={start_ts}")
        return self._write_to_any_online(start_ts, request, last, maybe_stored)

    def _write_to_any_online(self, start_ts: int, request: bytes, last: str, maybe_stored: set[str]) -> str:
        """The last resort: every online pump once, available or not, each on a fresh channel."""
        with self._lock:
            pumps = self._membership.online()
        log.warning("prewrite start_ts=%d: retries exhausted, trying all %d online pumps", start_ts, len(pumps))
        for pump in pumps:
            if self._stop.is_set():
                break
            self._transport.reset(pump.addr)
            err = self._attempt(pump.node_id, pump.addr, request, self._policy.write_timeout, retry=True)
            if err is None:
                return pump.node_id
            if on_error(err.code) in (Action.RETRY, Action.RECONNECT):
                maybe_stored.add(pump.node_id)
            last = f"node_id={pump.node_id}: {err.describe()}"
        self.metrics.give_up(PREWRITE)
        raise PumpClientError(f"write binlog start_ts={start_ts} failed, the last error {last}")

    def _withdraw(self, start_ts: int, node_ids: set[str]) -> None:
        """Send a rollback of `start_ts`, in the background, to each pump that may hold a copy of its
        prewrite from an attempt the client gave up on.  Without it that pump would wait for a commit
        that goes elsewhere, holding its watermark back until its resolver decides, and a resolver
        that found the transaction committed would deliver it a second time.  A pump that never got
        the prewrite just records the rollback; one that gets the prewrite later ignores it (decided)."""
        if not node_ids or self._dispatcher is None or self._closed:
            return
        request = encode_write_req(
            self.cluster_id, [gogo.marshal_binlog(binlog_pb2.Binlog(tp=binlog_pb2.Rollback, start_ts=start_ts))]
        )
        for node_id in sorted(node_ids):
            log.info("prewrite start_ts=%d: rolling back the copy node_id=%s may hold", start_ts, node_id)
            self.metrics.withdrawn()
            job = CommitJob(
                node_id,
                start_ts,
                0,
                request,
                self._policy,
                lookup=self._pump,
                attempt=self._attempt,
                finish=_withdraw_finished,
                kind="rollback of a withdrawn prewrite",
            )
            self._dispatcher.submit(job)

    def prewrite_pump(self, start_ts: int) -> str | None:
        """The node id of the pump that took the prewrite of `start_ts` (None once its commit or rollback
        was sent, or when none did).  The upstream records it with the committed status (common/txnstatus.py)."""
        return self._tsmap.get(start_ts)

    def _commit_job(self, tp: int, start_ts: int, commit_ts: int, payload: list[bytes]) -> CommitJob | None:
        node_id = self._tsmap.get(start_ts)
        if node_id is None:
            log.warning(
                "no prewrite known for start_ts=%d: commit binlog (tp=%d, commit_ts=%d) dropped; "
                "the pump's resolver decides the transaction",
                start_ts,
                tp,
                commit_ts,
            )
            self.metrics.give_up(COMMIT)
            return None
        if self._closed:
            log.warning("pump client is closed: commit binlog start_ts=%d not sent", start_ts)
            self._tsmap.pop(start_ts)
            self.metrics.give_up(COMMIT)
            return None
        return CommitJob(
            node_id,
            start_ts,
            commit_ts,
            encode_write_req(self.cluster_id, payload),
            self._policy,
            lookup=self._pump,
            attempt=self._attempt,
            finish=self._commit_finished,
        )

    def _commit_finished(self, start_ts: int, delivered: bool) -> None:
        self._tsmap.pop(start_ts)
        if not delivered:
            self.metrics.give_up(COMMIT)

    # --------------------------------------------------------------------------- pump selection
    def _select(self, start_ts: int, retry: int) -> PumpInfo | None:
        with self._lock:
            node_id = self._selector.select(start_ts, retry)
            return None if node_id is None else self._membership.get(node_id)

    def _pump(self, node_id: str) -> PumpInfo | None:
        with self._lock:
            return self._membership.get(node_id)

    def _refresh_selector_locked(self) -> None:
        if self._membership.version != self._selector_version:
            self._selector.set_pumps(self._membership.candidates())
            self._selector_version = self._membership.version

    def _attempt(
        self, node_id: str, addr: str, request: Request, timeout: float, *, retry: bool
    ) -> AttemptError | None:
        """One call; updates the pump's error count, its channel and the metrics.  The error, or None."""
        try:
            self._transport.write(addr, request, timeout)
        except AttemptError as err:
            self.metrics.attempt(node_id, retry, ok=False)
            if on_error(err.code) is Action.RECONNECT:
                self._transport.reset(addr, err.generation)
            with self._lock:
                self._membership.record_error(node_id, suspect=makes_suspect(err.code))
                self._refresh_selector_locked()
            return err
        self.metrics.attempt(node_id, retry, ok=True)
        with self._lock:
            self._membership.record_success(node_id)
            self._refresh_selector_locked()
        return None

    # ------------------------------------------------------------------------- watch and probe
    def _on_change(self, change: NodeChange) -> None:
        with self._lock:
            before = self._membership.get(change.node_id)
            applied = self._membership.apply(change)
            self._refresh_selector_locked()
        if applied.reconnect and before is not None:
            self._transport.reset(before.addr)

    def _probe_loop(self) -> None:
        """Suspect pumps every SUSPECT_PROBE_INTERVAL, every unavailable online pump every probe_interval."""
        tick = min(self._probe_interval, SUSPECT_PROBE_INTERVAL)
        next_full = time.monotonic() + self._probe_interval
        while not self._stop.wait(tick):
            full = time.monotonic() >= next_full
            if full:
                next_full = time.monotonic() + self._probe_interval
            try:
                self.probe_once(suspects_only=not full)
            except Exception:
                log.exception("pump probe failed unexpectedly")

    def probe_once(self, *, suspects_only: bool = False) -> list[str]:
        """Probe every unavailable online pump (only the suspect ones with `suspects_only`) once, with an
        empty payload; the node ids that came back.

        A full probe opens a fresh channel first (as the original).  A suspect probe reuses the channel
        and replaces it only after UNAVAILABLE: one connection to a frozen pump, not one per second."""
        with self._lock:
            targets = self._membership.suspects() if suspects_only else self._membership.to_probe()
        request = pump_pb2.WriteBinlogReq(clusterID=self.cluster_id, payload=b"")
        back: list[str] = []
        for pump in targets:
            if self._stop.is_set():
                break
            if not suspects_only:
                self._transport.reset(pump.addr)
            try:
                self._transport.write(pump.addr, request, min(self._policy.write_timeout, PROBE_TIMEOUT))
            except AttemptError as err:
                log.debug("probe of node_id=%s at %s failed: %s", pump.node_id, pump.addr, err.describe())
                if on_error(err.code) is Action.RECONNECT:
                    self._transport.reset(pump.addr, err.generation)
                continue
            with self._lock:
                if self._membership.record_success(pump.node_id):
                    back.append(pump.node_id)
                self._refresh_selector_locked()
        if back:
            log.info("probe: pumps available again: %s", ", ".join(back))
        return back

    # ---------------------------------------------------------------------------------- queries
    def pumps(self) -> list[PumpInfo]:
        """A snapshot of every known pump, sorted by node id."""
        with self._lock:
            return self._membership.snapshot()

    @property
    def tracked_txns(self) -> int:
        """Prewrites whose commit has not been sent yet."""
        return len(self._tsmap)

    # ------------------------------------------------------------------------------------ close
    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Idempotent: stop intake, wait up to `timeout` for background commits, stop the watcher and
        the prober, close the channels and etcd."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        dispatcher = self._dispatcher
        if dispatcher is not None:
            log.info("pump client closing: waiting up to %.1fs for %d background commits", timeout, dispatcher.pending)
            dispatcher.close(timeout)
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        if self._prober is not None:
            self._prober.join()
        self._transport.close()
        if dispatcher is not None:
            dispatcher.join()
        self._etcd.close()
        log.info("pump client closed")

    def __enter__(self) -> PumpsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _withdraw_finished(start_ts: int, delivered: bool) -> None:
    if not delivered:
        log.info("rollback of a withdrawn prewrite start_ts=%d not delivered; the pump's resolver decides", start_ts)


def _tls_setting(key: str) -> str:
    return f"pump client TLS {key}"
