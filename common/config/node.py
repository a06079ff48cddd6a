"""Config pieces every server node (pump, drainer) shares: address validators, `[security]`, the advertise address."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import ConfigError
from common.etcd import check_plain_endpoints, parse_endpoints
from common.tls import TLS, from_security


def validate_host_port(value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("must be host:port")


def validate_etcd_urls(value: str) -> None:
    parse_endpoints(value)


@dataclass(frozen=True)
class SecurityConfig:
    """`[security]`: TLS for every connection of the node (common/tls.py); all empty = plaintext.

    With ssl-ca set, the node's gRPC server, its HTTP status server, its gRPC clients and its etcd
    client all use TLS with these files, and its servers require a client certificate signed by
    ssl-ca; a non-empty cert-allowed-cn also requires that certificate's CN to be on the list."""

    ssl_ca: str = field(default="", metadata={"help": "CA certificate file (PEM): enables TLS everywhere"})
    ssl_cert: str = field(default="", metadata={"help": "this node's certificate file (PEM)"})
    ssl_key: str = field(default="", metadata={"help": "this node's private key file (PEM, no passphrase)"})
    cert_allowed_cn: tuple[str, ...] = field(
        default=(), metadata={"help": "client certificate CNs the servers accept (empty: any the CA signed)"}
    )

    @property
    def enabled(self) -> bool:
        return bool(self.ssl_ca or self.ssl_cert or self.ssl_key or self.cert_allowed_cn)

    def load_tls(self, *, require_cert: bool = True, etcd_urls: str = "") -> TLS | None:
        """The files read and checked (ConfigError naming the key and the file), or None without TLS.

        A server node needs its own certificate and key (`require_cert`).  Without TLS, an https
        endpoint in `etcd_urls` is a ConfigError too (it cannot be reached in plaintext)."""
        tls = from_security(self, require_cert=require_cert)
        if tls is None and etcd_urls:
            check_plain_endpoints(etcd_urls)
        return tls


class NodeAddress:
    """`advertise` and `listen_port` for a config dataclass with `addr` and `advertise_addr` fields."""

    addr: str
    advertise_addr: str

    def check_advertise(self) -> None:
        host, _, port = self.advertise.rpartition(":")
        if host in ("", "0.0.0.0", "::", "[::]") or not port.isdigit():
            raise ConfigError(
                f"invalid value for 'advertise-addr': {self.advertise!r} is not a host:port others can reach "
                "(set advertise-addr when addr listens on all interfaces)"
            )

    @property
    def advertise(self) -> str:
        """The address registered in etcd: advertise-addr, else addr."""
        return self.advertise_addr or self.addr

    @property
    def listen_port(self) -> int:
        return int(self.addr.rpartition(":")[2])
