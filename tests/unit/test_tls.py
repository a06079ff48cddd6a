"""common/tls.py: loading errors, the cert-allowed-cn rule, and the pieces built from it (gRPC
credentials and interceptors, the HTTPS status server) on in-process loopback servers."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from common.config.node import SecurityConfig
from common.errors import ConfigError
from common.etcd import EtcdClient
from common.httpserver import JsonHandler, StatusServer
from common.tls import TLS, TLSFiles, cn_refusal, flag_names, from_security
from tests.harness.certs import CLIENT_CN, INTRUDER_CN, PKI, SERVER_CN, CertFiles, make_pki
from tools.procs import wait_for

ALLOWED = (SERVER_CN, CLIENT_CN)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def files(pki: PKI, leaf: CertFiles | None) -> TLSFiles:
    return TLSFiles(str(pki.ca), None if leaf is None else str(leaf.cert), None if leaf is None else str(leaf.key))


def server_tls(pki: PKI, allowed: tuple[str, ...] = ALLOWED) -> TLS:
    return TLS.load(files(pki, pki.server), allowed_cn=allowed, require_cert=True)


# ---------------------------------------------------------------------------------------------- loading


def test_load_reads_all_three_files(pki: PKI) -> None:
    tls = TLS.load(files(pki, pki.client), allowed_cn=[" binlog-client ", "", "x"])
    assert tls.ca_pem == pki.ca.read_bytes()
    assert tls.cert_pem == pki.client.cert.read_bytes()
    assert tls.key_pem == pki.client.key.read_bytes()
    assert tls.allowed_cn == frozenset({"binlog-client", "x"})  # trimmed as the original, empties dropped


def test_missing_file_names_the_key_and_the_path(pki: PKI, tmp_path: Path) -> None:
    gone = tmp_path / "gone.pem"
    with pytest.raises(ConfigError, match=rf"^\[security\] ssl-ca: cannot read '{gone}': No such file"):
        TLS.load(TLSFiles(str(gone)))
    with pytest.raises(ConfigError, match=rf"^\[security\] ssl-key: cannot read '{gone}'"):
        TLS.load(TLSFiles(str(pki.ca), str(pki.client.cert), str(gone)))


def test_a_file_that_is_not_pem(pki: PKI, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=rf"^\[security\] ssl-ca: '{junk}' holds no PEM certificate$"):
        TLS.load(TLSFiles(str(junk)))
    with pytest.raises(ConfigError, match=rf"^\[security\] ssl-cert: '{junk}' holds no PEM certificate$"):
        TLS.load(TLSFiles(str(pki.ca), str(junk), str(pki.client.key)))
    with pytest.raises(ConfigError, match=rf"^\[security\] ssl-key: '{junk}' is not a PEM private key"):
        TLS.load(TLSFiles(str(pki.ca), str(pki.client.cert), str(junk)))
    # a certificate where the key belongs is not a key either
    with pytest.raises(ConfigError, match=r"ssl-key: .* is not a PEM private key"):
        TLS.load(TLSFiles(str(pki.ca), str(pki.client.cert), str(pki.client.cert)))


def test_a_key_of_another_certificate(pki: PKI) -> None:
    with pytest.raises(ConfigError, match=r"ssl-key: the key in '.*server-key.pem' does not belong to .*client.pem"):
        TLS.load(TLSFiles(str(pki.ca), str(pki.client.cert), str(pki.server.key)))


def test_an_encrypted_key_is_refused(pki: PKI, tmp_path: Path) -> None:
    locked = tmp_path / "locked-key.pem"
    locked.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    with pytest.raises(ConfigError, match="is encrypted; a key with a passphrase is not supported"):
        TLS.load(TLSFiles(str(pki.ca), str(pki.client.cert), str(locked)))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"ssl_cert": "c.pem", "ssl_key": "k.pem"}, r"\[security\] ssl-cert is set but \[security\] ssl-ca is not"),
        ({"ssl_key": "k.pem"}, r"\[security\] ssl-key is set but \[security\] ssl-ca is not"),
        ({"cert_allowed_cn": ("a",)}, r"\[security\] cert-allowed-cn is set but \[security\] ssl-ca is not"),
        ({"ssl_ca": "{ca}", "ssl_cert": "{cert}"}, r"ssl-cert is set but \[security\] ssl-key is not"),
        ({"ssl_ca": "{ca}", "ssl_key": "{key}"}, r"ssl-key is set but \[security\] ssl-cert is not"),
        ({"ssl_ca": "{ca}"}, r"a TLS server needs its own certificate and key"),
    ],
)
def test_half_a_configuration_is_an_error(pki: PKI, settings: dict[str, Any], message: str) -> None:
    paths = {"ca": str(pki.ca), "cert": str(pki.server.cert), "key": str(pki.server.key)}
    kwargs: dict[str, Any] = {k: v.format(**paths) if isinstance(v, str) else v for k, v in settings.items()}
    sec = SecurityConfig(**kwargs)
    with pytest.raises(ConfigError, match=message):
        sec.load_tls(require_cert=True)


def test_empty_security_is_plaintext_and_ca_alone_is_a_client(pki: PKI) -> None:
    assert SecurityConfig().load_tls() is None
    client = SecurityConfig(ssl_ca=str(pki.ca)).load_tls(require_cert=False)
    assert client is not None
    assert client.cert_pem is None


def test_flag_spelling_for_binlogctl(pki: PKI) -> None:
    sec = SecurityConfig(ssl_ca="", ssl_cert=str(pki.client.cert), ssl_key=str(pki.client.key))
    with pytest.raises(ConfigError, match=r"^--ssl-cert is set but --ssl-ca is not"):
        from_security(sec, require_cert=False, name=flag_names)


def test_https_etcd_endpoint_without_tls_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"etcd endpoint 'https://127.0.0.1:1' is https, but no TLS is configured"):
        EtcdClient("http://127.0.0.1:2, https://127.0.0.1:1")


# ---------------------------------------------------------------------------------------- allow-list


@pytest.mark.parametrize(
    ("allowed", "cn", "refusal"),
    [
        ((), "anyone", None),  # an empty list admits every certificate the CA signed
        ((), None, None),
        (("a", "b"), "b", None),
        (("a", "b"), "c", "certificate CN 'c' is not in cert-allowed-cn"),
        (("a",), "A", "certificate CN 'A' is not in cert-allowed-cn"),  # exact match, as the original
        (("a",), None, "the client certificate has no common name, and cert-allowed-cn is set"),
    ],
)
def test_cn_rule(allowed: tuple[str, ...], cn: str | None, refusal: str | None) -> None:
    assert cn_refusal(frozenset(allowed), cn) == refusal


# ----------------------------------------------------------------------------------------------- gRPC


def _echo(request: bytes, context: Any) -> bytes:
    return b"echo:" + request


def _stream(request: bytes, context: Any) -> Iterator[bytes]:
    yield from (b"1", b"2")


async def _aecho(request: bytes, context: Any) -> bytes:
    return b"echo:" + request


async def _astream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for item in (b"1", b"2"):
        yield item


def _handlers(aio: bool) -> grpc.GenericRpcHandler[Any, Any]:
    return grpc.method_handlers_generic_handler(
        "t.Echo",
        {
            "Echo": grpc.unary_unary_rpc_method_handler(_aecho if aio else _echo),
            "Stream": grpc.unary_stream_rpc_method_handler(_astream if aio else _stream),
        },
    )


def _call_both(port: int, creds: grpc.ChannelCredentials | None) -> tuple[bytes, list[bytes]]:
    target = f"127.0.0.1:{port}"
    with grpc.insecure_channel(target) if creds is None else grpc.secure_channel(target, creds) as channel:
        unary = channel.unary_unary("/t.Echo/Echo", None, None)(b"x", timeout=5)
        stream = list(channel.unary_stream("/t.Echo/Stream", None, None)(b"x", timeout=5))
    return unary, stream


@pytest.fixture(params=["sync", "aio"])
def grpc_port(request: pytest.FixtureRequest, pki: PKI) -> Iterator[int]:
    """A TLS gRPC server (thread pool or asyncio) with cert-allowed-cn = binlog-server, binlog-client."""
    tls = server_tls(pki)
    if request.param == "sync":
        server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=tls.server_interceptors())
        server.add_generic_rpc_handlers((_handlers(aio=False),))
        port = server.add_secure_port("127.0.0.1:0", tls.server_credentials())
        server.start()
        yield port
        server.stop(None).wait()
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def build() -> tuple[grpc.aio.Server, int]:
        aserver = grpc.aio.server(interceptors=tls.aio_server_interceptors())
        aserver.add_generic_rpc_handlers((_handlers(aio=True),))
        aport = aserver.add_secure_port("127.0.0.1:0", tls.server_credentials())
        await aserver.start()
        return aserver, aport

    aserver, aport = asyncio.run_coroutine_threadsafe(build(), loop).result(10)
    yield aport
    asyncio.run_coroutine_threadsafe(aserver.stop(None), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_grpc_client_with_an_allowed_cn_is_served(pki: PKI, grpc_port: int) -> None:
    creds = TLS.load(files(pki, pki.client)).channel_credentials()
    assert _call_both(grpc_port, creds) == (b"echo:x", [b"1", b"2"])


def test_grpc_client_with_another_cn_gets_permission_denied(pki: PKI, grpc_port: int) -> None:
    creds = TLS.load(files(pki, pki.intruder)).channel_credentials()
    with pytest.raises(grpc.RpcError) as excinfo:
        _call_both(grpc_port, creds)
    assert excinfo.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert excinfo.value.details() == f"certificate CN {INTRUDER_CN!r} is not in cert-allowed-cn"
    with grpc.secure_channel(f"127.0.0.1:{grpc_port}", creds) as channel, pytest.raises(grpc.RpcError) as streamed:
        list(channel.unary_stream("/t.Echo/Stream", None, None)(b"x", timeout=5))  # streams are checked too
    assert streamed.value.code() is grpc.StatusCode.PERMISSION_DENIED


@pytest.mark.parametrize("who", ["no certificate", "another CA", "plaintext"])
def test_grpc_clients_the_handshake_refuses(pki: PKI, grpc_port: int, who: str) -> None:
    creds = {
        "no certificate": TLS.load(files(pki, None)).channel_credentials(),
        "another CA": TLS.load(
            TLSFiles(str(pki.ca), str(pki.stranger.cert), str(pki.stranger.key))
        ).channel_credentials(),
        "plaintext": None,
    }[who]
    with pytest.raises(grpc.RpcError) as excinfo:
        _call_both(grpc_port, creds)
    # grpcio says no more than this about a refused handshake
    assert excinfo.value.code() is grpc.StatusCode.UNAVAILABLE
    assert "Socket closed" in str(excinfo.value.details())


def test_without_allow_list_any_certificate_of_the_ca_is_served(pki: PKI) -> None:
    tls = server_tls(pki, allowed=())
    assert tls.server_interceptors() == []
    server = grpc.server(futures.ThreadPoolExecutor(2), interceptors=tls.server_interceptors())
    server.add_generic_rpc_handlers((_handlers(aio=False),))
    port = server.add_secure_port("127.0.0.1:0", tls.server_credentials())
    server.start()
    try:
        creds = TLS.load(files(pki, pki.intruder)).channel_credentials()
        assert _call_both(port, creds) == (b"echo:x", [b"1", b"2"])
    finally:
        server.stop(None).wait()


# ----------------------------------------------------------------------------------------------- HTTPS


class _Hello(JsonHandler):
    def route(self, method: str, parts: list[str]) -> None:
        self.json(200, {"hello": parts})


@pytest.fixture
def https(pki: PKI) -> Iterator[StatusServer]:
    server = StatusServer(None, "127.0.0.1:0", _Hello, tls=server_tls(pki))
    server.start()
    yield server
    server.stop()


def _get(server: StatusServer, context: ssl.SSLContext) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"https://{server.addr}/x", timeout=5, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_https_with_an_allowed_client_certificate(pki: PKI, https: StatusServer) -> None:
    assert https.scheme == "https"
    assert _get(https, TLS.load(files(pki, pki.client)).client_ssl_context()) == (200, {"hello": ["x"]})


def test_https_with_another_cn_is_forbidden(pki: PKI, https: StatusServer) -> None:
    status, body = _get(https, TLS.load(files(pki, pki.intruder)).client_ssl_context())
    assert status == 403
    assert body["message"] == "certificate CN 'intruder' is not in cert-allowed-cn"


@pytest.mark.parametrize(
    ("who", "server_says"),
    [("no certificate", "PEER_DID_NOT_RETURN_A_CERTIFICATE"), ("another CA", "CERTIFICATE_VERIFY_FAILED")],
)
def test_https_handshake_refuses(
    pki: PKI, https: StatusServer, caplog: pytest.LogCaptureFixture, who: str, server_says: str
) -> None:
    leaf = None if who == "no certificate" else pki.stranger
    context = TLS.load(files(pki, leaf)).client_ssl_context()
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)) as excinfo:
        _get(https, context)
    exc = excinfo.value
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    assert isinstance(cause, ssl.SSLError | ConnectionError)  # the TLS layer ended it: no HTTP answer

    def logged() -> bool:
        return any(server_says in r.getMessage() for r in caplog.records if r.name == "common.httpserver")

    wait_for(logged, 5, f"the status server to log {server_says}")


def test_plain_http_to_the_https_server_gets_no_answer(https: StatusServer) -> None:
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        urllib.request.urlopen(f"http://{https.addr}/x", timeout=5)
