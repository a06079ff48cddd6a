"""Config pieces every server node (pump, drainer) shares: address validators, `[security]`, the advertise address."""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import ConfigError
from common.etcd import parse_endpoints


def validate_host_port(value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError("must be host:port")


def validate_etcd_urls(value: str) -> None:
    parse_endpoints(value)


@dataclass(frozen=True)
class SecurityConfig:
    """`[security]`: parsed and kept; TLS itself is not supported yet (the node's `check_supported` refuses it)."""

    ssl_ca: str = field(default="", metadata={"help": "CA certificate file (TLS: not supported yet)"})
    ssl_cert: str = field(default="", metadata={"help": "certificate file (TLS: not supported yet)"})
    ssl_key: str = field(default="", metadata={"help": "private key file (TLS: not supported yet)"})
    cert_allowed_cn: tuple[str, ...] = field(default=(), metadata={"help": "allowed peer certificate CNs"})

    @property
    def enabled(self) -> bool:
        return bool(self.ssl_ca or self.ssl_cert or self.ssl_key or self.cert_allowed_cn)


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
