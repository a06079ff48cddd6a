"""A throw-away CA and certificates for TLS tests, made with the `cryptography` package.

    pki = make_pki(tmp_path)                  # CA, server cert (CN binlog-server), client certs
    pki.server.cert, pki.server.key, pki.ca   # PEM file paths

Every leaf certificate carries the SANs 127.0.0.1 and localhost, so gRPC, etcd and HTTPS clients
verify loopback addresses without a target-name override, and both key usages (serverAuth and
clientAuth): a pump serves its own gRPC and is a client of etcd, pd-server and drainers with the
same certificate, as the original's single `[security]` section implies.  EC P-256 keys keep
generation fast.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVER_CN = "binlog-server"
CLIENT_CN = "binlog-client"
INTRUDER_CN = "intruder"
_VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class CertFiles:
    cert: Path
    key: Path
    cn: str


@dataclass(frozen=True)
class PKI:
    ca: Path
    server: CertFiles
    client: CertFiles
    intruder: CertFiles
    """Signed by the same CA, but its CN is on no allow-list."""
    stranger: CertFiles
    """CN binlog-client, signed by another CA."""


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)


def make_ca(directory: Path, name: str = "ca") -> tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"tidb-binlog test {name}"))
        .issuer_name(_name(f"tidb-binlog test {name}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def make_leaf(
    directory: Path, name: str, cn: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> CertFiles:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = CertFiles(directory / f"{name}.pem", directory / f"{name}-key.pem", cn)
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def make_pki(directory: Path) -> PKI:
    """A CA and four leaf certificates under `directory` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_path, ca_cert, ca_key = make_ca(directory)
    _, other_cert, other_key = make_ca(directory, "other-ca")
    return PKI(
        ca=ca_path,
        server=make_leaf(directory, "server", SERVER_CN, ca_cert, ca_key),
        client=make_leaf(directory, "client", CLIENT_CN, ca_cert, ca_key),
        intruder=make_leaf(directory, "intruder", INTRUDER_CN, ca_cert, ca_key),
        stranger=make_leaf(directory, "stranger", CLIENT_CN, other_cert, other_key),
    )
