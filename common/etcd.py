"""A typed, failure-aware wrapper around the `etcd3` client.

Every call is retried with back-off for a bounded time and then raises
`EtcdUnavailableError` with the endpoints in the message.  Watches survive an
etcd restart: the watcher re-lists the prefix, reports what changed while it
was away, and watches again from the listed revision.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, TypeVar
from urllib.parse import urlsplit

import etcd3
import etcd3.exceptions
import grpc

from common.backoff import Backoff
from common.errors import ConfigError, EtcdUnavailableError
from common.tls import TLS, TLSFiles

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 5.0
"""Seconds for one etcd RPC."""
DEFAULT_RETRY_FOR = 10.0
"""Seconds a call keeps retrying before EtcdUnavailableError."""
_ENDPOINT_RETRY_AFTER = 0.5
"""Seconds the etcd3 client waits before trying a failed endpoint again (its default is 300)."""
RENEW_AFTER_TIMEOUTS: Final = 3
"""Calls in a row that time out before every connection to etcd is replaced by a new one."""
KEEPALIVE_OPTIONS: Final = (
    ("grpc.keepalive_time_ms", 5_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.max_pings_without_data", 0),
)
"""gRPC keepalive on etcd connections while a call or watch is open (a ping every 5 s, etcd's default
--grpc-keepalive-min-time).  It does not reliably end a connection whose peer vanished without a FIN or
RST (an etcd host gone, or this container given a new address by a network reconnect: the compose test
found a pump whose heartbeats timed out on such a connection for as long as it ran), so calls that
time out RENEW_AFTER_TIMEOUTS times in a row also replace the connections."""

T = TypeVar("T")
_ETCD_ERRORS: tuple[type[BaseException], ...] = (
    grpc.RpcError,
    etcd3.exceptions.Etcd3Exception,
)
_WATCH_ERRORS: tuple[type[BaseException], ...] = (EtcdUnavailableError, *_ETCD_ERRORS)


@dataclass(frozen=True)
class KeyValue:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


def _kv(raw: Any) -> KeyValue:
    # keys are text in every layout we use; undecodable bytes are escaped, never an error
    return KeyValue(
        raw.key.decode("utf-8", "backslashreplace"),
        bytes(raw.value),
        int(raw.mod_revision),
        int(raw.create_revision),
        int(raw.lease),
    )


class EventType(Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True)
class WatchEvent:
    type: EventType
    key: str
    value: bytes  # empty for DELETE
    revision: int


def parse_endpoints(urls: str | Sequence[str]) -> list[tuple[str, int]]:
    """Parse `http://host:port,host2:port2` (or a list) into (host, port) pairs.

    The scheme does not choose TLS: the client's TLS settings do, for every endpoint (with TLS set,
    an `http://` endpoint is dialled with TLS too, as the original rewrote it to `https://`)."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    endpoints: list[tuple[str, int]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        parts = urlsplit(item if "://" in item else f"http://{item}")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"bad etcd endpoint {raw!r}: expected http(s)://host:port")
        try:
            port = parts.port or 2379
        except ValueError as exc:
            raise ConfigError(f"bad etcd endpoint {raw!r}: {exc}") from exc
        endpoints.append((parts.hostname, port))
    if not endpoints:
        raise ConfigError(f"no etcd endpoint in {urls!r}")
    return endpoints


class EtcdClient:
    """Typed access to etcd with bounded retries; thread-safe."""

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry_for: float = DEFAULT_RETRY_FOR,
        tls: TLS | TLSFiles | None = None,
    ) -> None:
        """`tls`: talk TLS to every endpoint (an `https://` endpoint without it is a ConfigError);
        paths are read here (ConfigError naming an unusable file)."""
        self.endpoints = parse_endpoints(urls)
        self.timeout = timeout
        self.retry_for = retry_for
        self._closed = False
        if isinstance(tls, TLSFiles):
            tls = TLS.load(tls)
        if tls is None:
            check_plain_endpoints(urls)
        self.tls = tls
        self._creds = None if tls is None else tls.channel_credentials()
        self._client_lock = threading.Lock()
        self._timeouts = 0
        self.renewals = 0
        """How many times the connections were replaced after timeouts (for tests and logs)."""
        self._client: Any = self._new_client()

    def _new_client(self) -> Any:
        creds = self._creds
        eps = [
            etcd3.Endpoint(
                host,
                port,
                secure=creds is not None,
                creds=creds,
                time_retry=_ENDPOINT_RETRY_AFTER,
                opts=KEEPALIVE_OPTIONS,
            )
            for host, port in self.endpoints
        ]
        return etcd3.MultiEndpointEtcd3Client(endpoints=eps, timeout=self.timeout, failover=True)

    def _note_outcome(self, exc: BaseException | None) -> None:
        """Count calls that timed out in a row; after RENEW_AFTER_TIMEOUTS, replace every connection."""
        if exc is None:
            if self._timeouts:
                self._timeouts = 0
            return
        if not _is_timeout(exc):
            return
        with self._client_lock:
            self._timeouts += 1
            if self._timeouts < RENEW_AFTER_TIMEOUTS or self._closed:
                return
            self._timeouts = 0
            old, self._client = self._client, self._new_client()
            self.renewals += 1
        log.warning(
            "etcd at %s: %d calls in a row timed out; replacing the connections (a peer that vanished without "
            "closing them leaves them open)",
            self.describe,
            RENEW_AFTER_TIMEOUTS,
        )
        with contextlib.suppress(Exception):
            old.close()

    @property
    def describe(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.endpoints)

    # -- retry core -------------------------------------------------------
    def call(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        retry_for: float | None = None,
        stop: threading.Event | None = None,
    ) -> T:
        """Run `fn` against etcd, retrying on connection errors for a bounded time.

        A set `stop` event ends the retries early (EtcdUnavailableError).
        """
        backoff = Backoff(0.05, 2.0, 1.0, timeout=self.retry_for if retry_for is None else retry_for, stop=stop)
        while True:
            try:
                result = fn()
            except _ETCD_ERRORS as exc:
                self._note_outcome(exc)
                if self._closed or backoff.stopped():
                    raise EtcdUnavailableError(f"etcd call {what} abandoned: client closed or stopping") from exc
                if backoff.outlasts():
                    raise EtcdUnavailableError(
                        f"etcd at {self.describe} unreachable: {what} failed: {_describe_error(exc)}"
                    ) from exc
                log.debug("etcd %s failed (%s), retrying in %.2fs", what, _describe_error(exc), backoff.delay)
                backoff.wait()  # a set `stop` ends the wait; the next failure then gives up
                continue
            self._note_outcome(None)
            return result

    # -- key/value --------------------------------------------------------
    def get(self, key: str, *, retry_for: float | None = None) -> KeyValue | None:
        def op() -> Any:
            return self._client.get_response(key)

        resp = self.call(f"get {key}", op, retry_for=retry_for)
        return _kv(resp.kvs[0]) if resp.count >= 1 else None

    def get_prefix(self, prefix: str, *, stop: threading.Event | None = None) -> tuple[list[KeyValue], int]:
        """All keys under `prefix` sorted by key, and the store revision of the read."""

        def op() -> Any:
            return self._client.get_prefix_response(prefix, sort_order="ascend", sort_target="key")

        resp = self.call(f"get prefix {prefix}", op, stop=stop)
        return [_kv(kv) for kv in resp.kvs], int(resp.header.revision)

    def put(self, key: str, value: bytes | str, *, lease: int | None = None) -> None:
        self.call(f"put {key}", lambda: self._client.put(key, value, lease=lease))

    def delete(self, key: str) -> bool:
        return bool(self.call(f"delete {key}", lambda: self._client.delete(key)))

    def create(self, key: str, value: bytes | str, *, lease: int | None = None) -> bool:
        """Put `key` only if it does not exist (ModRevision == 0). True if created."""
        tx = self._client.transactions
        return self._txn(f"create {key}", [tx.mod(key) == 0], [tx.put(key, value, lease=lease)])

    def update(self, key: str, value: bytes | str) -> bool:
        """Put `key` only if it exists (ModRevision > 0). True if updated."""
        tx = self._client.transactions
        return self._txn(f"update {key}", [tx.mod(key) > 0], [tx.put(key, value)])

    def put_if_value(self, key: str, value: bytes | str, *, guard_key: str, guard_value: bytes | str) -> bool:
        """Put `key` only while `guard_key` holds `guard_value` (leader-guarded write)."""
        tx = self._client.transactions
        return self._txn(f"guarded put {key}", [tx.value(guard_key) == guard_value], [tx.put(key, value)])

    def compare_and_put(
        self,
        key: str,
        expected: bytes | None,
        value: bytes | str,
        *,
        also_put: Sequence[tuple[str, bytes | str]] = (),
    ) -> bool:
        """Put `key` (and every `also_put` pair) only if `key` holds `expected` (None: absent).

        One etcd transaction.  False when the comparison failed; a retry after a lost
        response can also return False, so callers re-read to tell the two apart.
        """
        tx = self._client.transactions
        compare = [tx.mod(key) == 0] if expected is None else [tx.value(key) == expected]
        puts = [tx.put(key, value)] + [tx.put(k, v) for k, v in also_put]
        return self._txn(f"compare-and-put {key}", compare, puts)

    def _txn(self, what: str, compare: list[Any], success: list[Any]) -> bool:
        def op() -> bool:
            succeeded, _ = self._client.transaction(compare=compare, success=success, failure=[])
            return bool(succeeded)

        return self.call(what, op)

    # -- leases -----------------------------------------------------------
    def grant_lease(self, ttl: int) -> int:
        lease = self.call(f"grant lease ttl={ttl}", lambda: self._client.lease(ttl))
        return int(lease.id)

    def refresh_lease(self, lease_id: int) -> int:
        """Keep a lease alive once; returns the remaining TTL (0 if the lease is gone)."""

        def op() -> int:
            responses = list(self._client.refresh_lease(lease_id))
            return int(responses[0].TTL) if responses else 0

        return self.call(f"refresh lease {lease_id}", op, retry_for=min(self.retry_for, 1.0))

    def revoke_lease(self, lease_id: int) -> None:
        """Revoke a lease (deleting its keys); best effort for 1 s, and done at once if it already expired."""

        def op() -> None:
            try:
                self._client.revoke_lease(lease_id)
            except grpc.RpcError as exc:
                if not (hasattr(exc, "code") and exc.code() is grpc.StatusCode.NOT_FOUND):
                    raise  # NOT_FOUND: the lease expired already, which is what revoking wants

        with contextlib.suppress(EtcdUnavailableError):
            self.call(f"revoke lease {lease_id}", op, retry_for=1.0)

    # -- watch ------------------------------------------------------------
    def watch_prefix(self, prefix: str, on_event: Callable[[WatchEvent], None]) -> PrefixWatcher:
        """Start a watcher that calls `on_event` for every change under `prefix`."""
        watcher = PrefixWatcher(self, prefix, on_event)
        watcher.start()
        return watcher

    def _raw_watch(self, prefix: str, start_revision: int) -> tuple[Iterator[Any], Callable[[], None]]:
        it, cancel = self._client.watch_prefix_response(prefix, start_revision=start_revision)
        return it, cancel

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self._client.close()


class PrefixWatcher:
    """Delivers changes under a prefix; survives etcd restarts by re-listing.

    After the stream breaks, the watcher lists the prefix again, reports keys
    that appeared, changed or disappeared while it was away (compared with the
    state it last reported), and watches again from the listed revision.  The
    first list is reported as PUT events, so a caller sees the full state.
    """

    def __init__(self, client: EtcdClient, prefix: str, on_event: Callable[[WatchEvent], None]) -> None:
        self._client = client
        self._prefix = prefix
        self._on_event = on_event
        self._known: dict[str, tuple[int, bytes]] = {}
        self._stop = threading.Event()
        self._cancel: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"etcd-watch {prefix}", daemon=True)
        self.restarts = 0
        self.synced = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def _emit(self, event: WatchEvent) -> None:
        if self._stop.is_set():
            return
        try:
            self._on_event(event)
        except Exception:
            log.exception("watch callback failed for %s", event.key)

    def _resync(self) -> int:
        kvs, revision = self._client.get_prefix(self._prefix, stop=self._stop)
        seen = {kv.key: kv for kv in kvs}
        for key in sorted(set(self._known) - set(seen)):
            del self._known[key]
            self._emit(WatchEvent(EventType.DELETE, key, b"", revision))
        for key, kv in seen.items():
            if self._known.get(key, (None, None))[0] != kv.mod_revision:
                self._known[key] = (kv.mod_revision, kv.value)
                self._emit(WatchEvent(EventType.PUT, key, kv.value, kv.mod_revision))
        return revision

    def _run(self) -> None:
        backoff = Backoff(0.1, 2.0, 2.0, stop=self._stop)
        while not self._stop.is_set():
            try:
                revision = self._resync()
                it, cancel = self._client.call(
                    f"watch {self._prefix}", functools.partial(self._watch_from, revision + 1), stop=self._stop
                )
                with self._lock:
                    self._cancel = cancel
                self.synced.set()  # listed and watching: from here on a broken stream counts as a restart at once
                if self._stop.is_set():
                    cancel()
                    return
                backoff.reset()
                for response in it:
                    for ev in response.events:
                        self._apply(ev)
                if self._stop.is_set():
                    return
                log.info("etcd watch on %s ended; re-listing", self._prefix)
            except _WATCH_ERRORS as exc:
                if self._stop.is_set():
                    return
                log.warning("etcd watch on %s broke (%s); re-listing in %.1fs", self._prefix, exc, backoff.delay)
            self.restarts += 1
            backoff.wait()

    def _watch_from(self, revision: int) -> tuple[Iterator[Any], Callable[[], None]]:
        return self._client._raw_watch(self._prefix, revision)

    def _apply(self, ev: Any) -> None:
        key = ev.key.decode("utf-8", "backslashreplace")
        revision = int(ev.mod_revision)
        if isinstance(ev, etcd3.events.DeleteEvent):
            self._known.pop(key, None)
            self._emit(WatchEvent(EventType.DELETE, key, b"", revision))
        else:
            value = bytes(ev.value)
            self._known[key] = (revision, value)
            self._emit(WatchEvent(EventType.PUT, key, value, revision))

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            cancel = self._cancel
        if cancel is not None:
            with contextlib.suppress(Exception):
                cancel()
        self._thread.join(timeout=5)


def check_plain_endpoints(urls: str | Sequence[str]) -> None:
    """An https endpoint needs TLS settings; saying so beats a handshake that fails without a reason."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    for item in items:
        if item.strip().lower().startswith("https://"):
            raise ConfigError(
                f"etcd endpoint {item.strip()!r} is https, but no TLS is configured: "
                "set [security] ssl-ca, ssl-cert and ssl-key (binlogctl: --ssl-ca, --ssl-cert, --ssl-key)"
            )


def _is_timeout(exc: BaseException) -> bool:
    if isinstance(exc, etcd3.exceptions.ConnectionTimeoutError):
        return True
    code = getattr(exc, "code", None)
    return callable(code) and code() is grpc.StatusCode.DEADLINE_EXCEEDED


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError) and hasattr(exc, "code"):
        return f"{exc.code().name}: {exc.details()}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
