"""TLS to MySQL servers: a `security` table under each MySQL connection's own section.

    [syncer.to.security]              the drainer's downstream (sink workers, DDL, table info)
    [syncer.to.checkpoint.security]   the drainer's checkpoint database (see below)
    [dest-db.security]                reparo's downstream (ours: the original has no TLS there)
    [down.security]                   the arbiter's downstream and its checkpoint (ours, likewise)

Keys, as the original's `security.Config`: `ssl-ca`, `ssl-cert`, `ssl-key`, `cert-allowed-cn`.

Semantics, as the original (Go `tls.Config{RootCAs: ssl-ca}` registered with go-sql-driver/mysql):

* ssl-ca set: TLS is required; the server's certificate must be signed by ssl-ca, and it must be
  valid for the host we dial (IP SAN for a numeric host, DNS SAN otherwise). go-sql-driver fills
  the TLS server name with the dialled host, so the original checks the name too.
* ssl-cert and ssl-key set as well: the client presents that certificate (servers with REQUIRE X509).
* cert-allowed-cn set (needs ssl-ca): the server's certificate must also carry one of these common
  names, or its issuer must (the original's Go `VerifyPeerCertificate` accepts a CN anywhere in the
  verified chain; Python 3.11 shows the server certificate and its issuer's name, which is that chain
  for a CA that signs server certificates directly).  Otherwise the handshake fails in one line.
* no ssl-ca: plaintext, as the original.  pymysql >= 1.1 would otherwise negotiate TLS without
  verifying anything when the server offers it; we switch that off (`ssl_disabled`) so that "no
  security table" means one thing, and a server that requires TLS refuses it in one clear line.

Differs from the original, on purpose (as common/tls.py): ssl-cert without ssl-key (or the reverse),
ssl-cert without ssl-ca, a missing or unreadable file, a file that holds no PEM certificate, or a key that
does not belong to the certificate are config errors at start (exit status 2) naming the key and path; the
original ignored half a pair and a missing CA silently.

Failures are reported in one line (`connect`): a failed handshake names the verifier's reason and the
ssl-ca in use; a server that refuses a plaintext client (MariaDB: 1045 access denied, MySQL: 3159) gets
the hint to set ssl-ca.  Handshake failures are raised as pymysql error 2026 (CR_SSL_CONNECTION_ERROR),
which no caller retries: another attempt cannot succeed.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Final

import pymysql

from common.tls import MIN_TLS_VERSION, TLS, from_security

__all__ = ["SSL_CONNECTION_ERROR", "MySQLSecurity", "MySQLTLS", "explain"]

SSL_CONNECTION_ERROR: Final = 2026
"""CR_SSL_CONNECTION_ERROR: the code our handshake failures carry (not retriable anywhere)."""
PLAINTEXT_REFUSALS: Final = frozenset({1045, 3159})
"""What a TLS-only server answers a plaintext client: MariaDB "Access denied" (1045), MySQL
ER_SECURE_TRANSPORT_REQUIRED (3159)."""


@dataclass(frozen=True)
class MySQLSecurity:
    """A `security` table of a MySQL connection: TLS when ssl-ca is set (module docstring)."""

    ssl_ca: str = field(
        default="", metadata={"help": "CA certificate (PEM) the MySQL server's certificate must be signed by: TLS on"}
    )
    ssl_cert: str = field(default="", metadata={"help": "client certificate (PEM), with ssl-key"})
    ssl_key: str = field(default="", metadata={"help": "client private key (PEM, no passphrase), with ssl-cert"})
    cert_allowed_cn: tuple[str, ...] = field(
        default=(),
        metadata={"help": "common names the server's certificate (or its issuer) must have; empty = any"},
    )

    def load(self, section: str) -> MySQLTLS:
        """The files read and checked; ConfigError naming `section`'s key and the file when one is unusable.

        `section` spells the table in messages, e.g. "[syncer.to.security]"."""
        tls = from_security(self, require_cert=False, name=lambda key: f"{section} {key}")
        if tls is None:
            return MySQLTLS(section)
        context = tls.client_ssl_context()
        if self.cert_allowed_cn:
            context = _allowing(tls, frozenset(cn.strip() for cn in self.cert_allowed_cn))
        return MySQLTLS(section, self.ssl_ca, context)


def _common_name(name: Any) -> str | None:
    """The CN of a name as `SSLSocket.getpeercert()` gives it (a tuple of RDNs of (key, value) pairs)."""
    for rdn in name or ():
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class _AllowedCNContext(ssl.SSLContext):
    """A client context that, after the verified handshake, also requires the server certificate's CN or
    its issuer's CN to be in `allowed_cn` (pymysql hands the socket to `wrap_socket`)."""

    allowed_cn: frozenset[str] = frozenset()

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        sock = super().wrap_socket(*args, **kwargs)
        cert = sock.getpeercert() or {}
        names = [_common_name(cert.get("subject")), _common_name(cert.get("issuer"))]
        if not any(n in self.allowed_cn for n in names if n is not None):
            sock.close()
            why = (
                f"the server certificate's common name {names[0]!r} (issuer {names[1]!r}) is not in "
                f"cert-allowed-cn {sorted(self.allowed_cn)}"
            )
            err = ssl.SSLCertVerificationError(1, why)
            err.verify_message = why
            raise err
        return sock


def _allowing(tls: TLS, allowed: frozenset[str]) -> ssl.SSLContext:
    """`tls.client_ssl_context()`'s settings (the CA, host name check, TLS 1.2+, the client certificate) in
    an `_AllowedCNContext`."""
    ctx = _AllowedCNContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname
    ctx.allowed_cn = allowed
    ctx.minimum_version = MIN_TLS_VERSION
    ctx.load_verify_locations(cadata=tls.ca_pem.decode("ascii"))
    if tls.files.cert and tls.files.key:
        ctx.load_cert_chain(tls.files.cert, tls.files.key)
    return ctx


@dataclass(frozen=True, eq=False)
class MySQLTLS:
    """How one kind of MySQL connection is made: verified TLS (`context`) or plaintext (None).

    `section` names the security table in error hints; the default one is for code that has none."""

    section: str = "the security table"
    ca: str = ""
    context: ssl.SSLContext | None = None

    @property
    def enabled(self) -> bool:
        return self.context is not None

    def connect_args(self) -> dict[str, Any]:
        """pymysql.connect arguments: the context (TLS required), or plaintext."""
        return {"ssl": self.context} if self.context is not None else {"ssl_disabled": True}

    def connect(self, **params: Any) -> pymysql.connections.Connection[Any]:
        """`pymysql.connect(**params)` with this TLS; a TLS failure re-raised in one line (`explain`)."""
        try:
            return pymysql.connect(**params, **self.connect_args())
        except pymysql.err.OperationalError as exc:
            better = explain(exc, self, f"{params.get('host', '')}:{params.get('port', '')}")
            if better is exc:
                raise
            raise better from exc


def _tls_reason(exc: BaseException) -> str | None:
    """The TLS library's reason when `exc` (pymysql wraps socket errors) came from the handshake."""
    original = getattr(exc, "original_exception", None)
    if isinstance(original, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {original.verify_message}"
    if isinstance(original, ssl.SSLError):
        return str(original.reason or original).replace("_", " ").lower()
    return None


def explain(exc: pymysql.err.OperationalError, tls: MySQLTLS, addr: str) -> pymysql.err.OperationalError:
    """`exc` with a one-line TLS explanation, or `exc` itself when TLS is not the cause."""
    args: tuple[Any, ...] = exc.args
    code = args[0] if args and isinstance(args[0], int) else 0
    text = str(args[1]) if len(args) > 1 else str(exc)
    if tls.enabled:
        reason = _tls_reason(exc)
        if reason is not None:
            return pymysql.err.OperationalError(
                SSL_CONNECTION_ERROR, f"{addr}: TLS handshake failed: {reason} ({tls.section} ssl-ca = {tls.ca})"
            )
        if code == SSL_CONNECTION_ERROR:
            return pymysql.err.OperationalError(
                SSL_CONNECTION_ERROR,
                f"{addr}: the server does not offer TLS, and {tls.section} ssl-ca = {tls.ca} requires it",
            )
        return exc
    if code in PLAINTEXT_REFUSALS:
        return pymysql.err.OperationalError(
            code,
            f"{text} (no TLS: if the server requires secure transport, set {tls.section} ssl-ca to the CA "
            "certificate that signed its certificate)",
        )
    return exc
