"""TLS for every connection of a node: `[security] ssl-ca / ssl-cert / ssl-key / cert-allowed-cn`.

As the original (docs/architecture.md#configuration), one `[security]` section serves every role of a process: the
gRPC server (pump, drainer's Cistern, pd-server), its gRPC clients (drainer -> pump PullBinlogs,
pump -> drainer Notify, pump client -> pump, TSO client -> pd-server), the etcd client and the HTTP
status server.  `TLS.load` reads and checks the three PEM files once; everything else is built from
the bytes it holds:

    grpc                 `server_credentials()` (client certificate REQUIRED), `channel_credentials()`
    HTTP status server   `server_ssl_context()` (CERT_REQUIRED), client side `client_ssl_context()`
    cert-allowed-cn      gRPC: `server_interceptors()` / `aio_server_interceptors()` abort a call with
                         PERMISSION_DENIED "certificate CN 'x' is not in cert-allowed-cn"; HTTP: the
                         status server answers 403 (common/httpserver.py), both through `refusal()`

Differences from the original, on purpose:

* TLS servers always require a client certificate signed by ssl-ca (mutual authentication).  The
  original asks for one only when cert-allowed-cn is set, so without it any client could connect.
* cert-allowed-cn is matched against the CN of the client's own (leaf) certificate.  The original
  accepts a match anywhere in the verified chain, so listing the CA's CN admitted every client.
* Half a configuration is an error naming the missing key (the original silently ran without TLS
  when only ssl-cert was set), and so is a file that cannot be read, is not PEM, or a key that does
  not belong to the certificate.

Peer names: clients verify the server's certificate against the address they dial (gRPC and etcd:
the registered `host`, HTTPS: the status address), so certificates need SANs for those addresses
(IP SANs for numeric hosts).  No target-name override is used.
"""

from __future__ import annotations

import inspect
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

import grpc
import grpc.aio
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from common.errors import ConfigError

CN_AUTH_KEY: Final = "x509_common_name"
"""The gRPC auth-context property holding the peer certificate's common name."""
MIN_TLS_VERSION: Final = ssl.TLSVersion.TLSv1_2


@dataclass(frozen=True)
class TLSFiles:
    """Paths of the CA, certificate and key (the certificate and key may be absent for a client)."""

    ca: str
    cert: str | None = None
    key: str | None = None


class SecuritySettings(Protocol):
    """What `from_security` reads (common.config.node.SecurityConfig)."""

    @property
    def ssl_ca(self) -> str: ...
    @property
    def ssl_cert(self) -> str: ...
    @property
    def ssl_key(self) -> str: ...
    @property
    def cert_allowed_cn(self) -> tuple[str, ...]: ...


def _config_names(key: str) -> str:
    return f"[security] {key}"


def _flag_names(key: str) -> str:
    return f"--{key}"


class TLS:
    """The CA, certificate and key of one process, read once; credentials and contexts built from them."""

    def __init__(
        self,
        files: TLSFiles,
        ca_pem: bytes,
        cert_pem: bytes | None,
        key_pem: bytes | None,
        allowed_cn: Iterable[str] = (),
    ) -> None:
        self.files = files
        self.ca_pem = ca_pem
        self.cert_pem = cert_pem
        self.key_pem = key_pem
        self.allowed_cn: frozenset[str] = frozenset(cn.strip() for cn in allowed_cn if cn.strip())

    # ------------------------------------------------------------------------------------ loading
    @classmethod
    def load(
        cls,
        files: TLSFiles,
        *,
        allowed_cn: Iterable[str] = (),
        require_cert: bool = False,
        name: Callable[[str], str] = _config_names,
    ) -> TLS:
        """Read and check the files; ConfigError naming the setting and the file when one is unusable.

        `require_cert`: a server needs its certificate and key.  `name` spells a setting in messages
        (`[security] ssl-ca` for a config file, `--ssl-ca` for binlogctl's flags)."""
        if not files.ca:
            raise ConfigError(f"{name('ssl-ca')} is empty: TLS needs the CA certificate that signed the peers")
        if bool(files.cert) != bool(files.key):
            given, missing = ("ssl-cert", "ssl-key") if files.cert else ("ssl-key", "ssl-cert")
            raise ConfigError(f"{name(given)} is set but {name(missing)} is not: give both, or neither")
        if require_cert and not files.cert:
            raise ConfigError(
                f"{name('ssl-ca')} is set but {name('ssl-cert')} and {name('ssl-key')} are not: "
                "a TLS server needs its own certificate and key"
            )
        ca_pem = _read(name("ssl-ca"), files.ca)
        _certificates(name("ssl-ca"), files.ca, ca_pem)
        cert_pem = key_pem = None
        if files.cert and files.key:
            cert_pem = _read(name("ssl-cert"), files.cert)
            key_pem = _read(name("ssl-key"), files.key)
            leaf = _certificates(name("ssl-cert"), files.cert, cert_pem)[0]
            _check_key(name("ssl-key"), files.key, key_pem, leaf, files.cert)
        return cls(files, ca_pem, cert_pem, key_pem, allowed_cn)

    # --------------------------------------------------------------------------------------- gRPC
    def server_credentials(self) -> grpc.ServerCredentials:
        """Server side: this certificate, and a client certificate signed by the CA is required."""
        if self.cert_pem is None or self.key_pem is None:
            raise ConfigError("a TLS server needs ssl-cert and ssl-key")
        return grpc.ssl_server_credentials(
            [(self.key_pem, self.cert_pem)], root_certificates=self.ca_pem, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials:
        """Client side: trust only the CA; present this certificate when there is one."""
        return grpc.ssl_channel_credentials(self.ca_pem, self.key_pem, self.cert_pem)

    def server_interceptors(self) -> list[grpc.ServerInterceptor[Any, Any]]:
        """For a `grpc.server`: the cert-allowed-cn check, or nothing when the list is empty."""
        return [_CNInterceptor(self)] if self.allowed_cn else []

    def aio_server_interceptors(self) -> list[grpc.aio.ServerInterceptor[Any, Any]]:
        """For a `grpc.aio.server`: the cert-allowed-cn check, or nothing when the list is empty."""
        return [_AioCNInterceptor(self)] if self.allowed_cn else []

    # --------------------------------------------------------------------------------------- HTTP
    def server_ssl_context(self) -> ssl.SSLContext:
        """HTTPS server: this certificate; a client certificate signed by the CA is required."""
        if not self.files.cert or not self.files.key:
            raise ConfigError("a TLS server needs ssl-cert and ssl-key")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = MIN_TLS_VERSION
        # ssl loads a certificate chain from files only; they were read and checked a moment ago
        ctx.load_cert_chain(self.files.cert, self.files.key)
        ctx.load_verify_locations(cadata=self.ca_pem.decode("ascii"))
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_ssl_context(self) -> ssl.SSLContext:
        """HTTPS client: trust only the CA, check the host name, present this certificate if any."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cadata=self.ca_pem.decode("ascii"))
        ctx.minimum_version = MIN_TLS_VERSION
        if self.files.cert and self.files.key:
            ctx.load_cert_chain(self.files.cert, self.files.key)
        return ctx

    # ------------------------------------------------------------------------------ allowed CNs
    def refusal(self, cn: str | None) -> str | None:
        """Why a peer with common name `cn` is refused, or None when it may pass."""
        return cn_refusal(self.allowed_cn, cn)


def from_security(
    sec: SecuritySettings, *, require_cert: bool, name: Callable[[str], str] = _config_names
) -> TLS | None:
    """The TLS of a `[security]` section, or None when the section is empty (plaintext everywhere)."""
    if not (sec.ssl_ca or sec.ssl_cert or sec.ssl_key or sec.cert_allowed_cn):
        return None
    if not sec.ssl_ca:
        given = "ssl-cert" if sec.ssl_cert else "ssl-key" if sec.ssl_key else "cert-allowed-cn"
        raise ConfigError(f"{name(given)} is set but {name('ssl-ca')} is not: TLS needs the CA certificate")
    files = TLSFiles(sec.ssl_ca, sec.ssl_cert or None, sec.ssl_key or None)
    return TLS.load(files, allowed_cn=sec.cert_allowed_cn, require_cert=require_cert, name=name)


def flag_names(key: str) -> str:
    """`name` for `TLS.load` / `from_security` when the settings came from `--ssl-*` flags."""
    return _flag_names(key)


@dataclass(frozen=True)
class TLSFlags:
    """A client tool's --ssl-ca / --ssl-cert / --ssl-key, as `from_security` reads them (no cert-allowed-cn)."""

    ssl_ca: str = ""
    ssl_cert: str = ""
    ssl_key: str = ""
    cert_allowed_cn: tuple[str, ...] = ()


def client_tls_from_flags(ssl_ca: str, ssl_cert: str, ssl_key: str) -> TLS | None:
    """The TLS of a client tool's --ssl-* flags, or None when none is given; ConfigError naming the flag."""
    return from_security(TLSFlags(ssl_ca, ssl_cert, ssl_key), require_cert=False, name=flag_names)


def cn_refusal(allowed: frozenset[str], cn: str | None) -> str | None:
    """The cert-allowed-cn rule: an empty list admits every certificate the CA signed; otherwise the
    peer's CN must be on it.  The refusal message names the CN."""
    if not allowed or (cn is not None and cn in allowed):
        return None
    if cn is None:
        return "the client certificate has no common name, and cert-allowed-cn is set"
    return f"certificate CN {cn!r} is not in cert-allowed-cn"


def connect_hint(tls_enabled: bool) -> str:
    """Appended to an UNAVAILABLE error: grpcio reports a TLS mismatch only as "Socket closed"."""
    if tls_enabled:
        return (
            " (if the server is up: it may not serve TLS, or it refused this client's certificate: "
            "not signed by its ssl-ca, or none given)"
        )
    return " (if the server is up, it may require TLS: configure ssl-ca, ssl-cert and ssl-key)"


# ------------------------------------------------------------------------------------------ file checks


def _read(setting: str, path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path!r}: {exc.strerror or exc}") from None


def _certificates(setting: str, path: str, pem: bytes) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        certs = []
    if not certs:
        raise ConfigError(f"{setting}: {path!r} holds no PEM certificate")
    return certs


def _check_key(setting: str, path: str, pem: bytes, leaf: x509.Certificate, cert_path: str) -> None:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except TypeError:  # a passphrase is needed
        raise ConfigError(f"{setting}: {path!r} is encrypted; a key with a passphrase is not supported") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{setting}: {path!r} is not a PEM private key ({exc})") from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise ConfigError(f"{setting}: the key in {path!r} does not belong to the certificate in {cert_path!r}")


# ------------------------------------------------------------------------------------- gRPC CN check


def peer_common_name(context: grpc.ServicerContext | grpc.aio.ServicerContext[Any, Any]) -> str | None:
    """The CN of the peer's certificate from the call's auth context (None: plaintext or no CN)."""
    auth: Any = context.auth_context()
    values = auth.get(CN_AUTH_KEY) or []
    if isinstance(values, bytes):
        values = [values]
    return values[0].decode("utf-8", "replace") if values else None


def _guard_sync(tls: TLS, behavior: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(request: Any, context: grpc.ServicerContext) -> Any:
        why = tls.refusal(peer_common_name(context))
        if why is not None:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        return behavior(request, context)

    return guarded


def _guard_async(tls: TLS, behavior: Callable[..., Any]) -> Callable[..., Any]:
    """Wraps an aio behavior: a coroutine function, or an async generator function (streams)."""
    if inspect.isasyncgenfunction(behavior):

        async def guarded_stream(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
            why = tls.refusal(peer_common_name(context))
            if why is not None:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
            async for item in behavior(request, context):
                yield item

        return guarded_stream

    async def guarded(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        why = tls.refusal(peer_common_name(context))
        if why is not None:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        result = behavior(request, context)
        return await result if inspect.isawaitable(result) else result

    return guarded


_FACTORIES: Final = {
    (False, False): ("unary_unary", grpc.unary_unary_rpc_method_handler),
    (False, True): ("unary_stream", grpc.unary_stream_rpc_method_handler),
    (True, False): ("stream_unary", grpc.stream_unary_rpc_method_handler),
    (True, True): ("stream_stream", grpc.stream_stream_rpc_method_handler),
}


def guard_handler(
    handler: grpc.RpcMethodHandler[Any, Any] | None, guard: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> grpc.RpcMethodHandler[Any, Any] | None:
    """The same handler with its behavior wrapped by `guard` (None passes through: unknown method)."""
    if handler is None:
        return None
    attr, factory = _FACTORIES[(handler.request_streaming, handler.response_streaming)]
    behavior = getattr(handler, attr)
    return factory(
        guard(behavior),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


class _CNInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """cert-allowed-cn for a thread-pool `grpc.server`: the check runs before the handler."""

    def __init__(self, tls: TLS) -> None:
        self._tls = tls

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        return guard_handler(continuation(handler_call_details), lambda b: _guard_sync(self._tls, b))


class _AioCNInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """cert-allowed-cn for a `grpc.aio.server` (the pump's)."""

    def __init__(self, tls: TLS) -> None:
        self._tls = tls

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        guarded = guard_handler(handler, lambda b: _guard_async(self._tls, b))
        return handler if guarded is None else guarded
