"""pd-server configuration: defaults < pd.toml < PD_* environment < flags.

`[security]` as in pump.toml and drainer.toml: TLS for the gRPC TSO server (client certificate required,
cert-allowed-cn checked) and for the etcd client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from common.config import Duration
from common.config.node import SecurityConfig
from common.errors import ConfigError
from common.etcd import parse_endpoints
from common.logsetup import DEFAULT_LOG_FORMAT, LogFormat
from pd.server import DEFAULT_CAMPAIGN_TIMEOUT, DEFAULT_LEASE_TTL, split_host_port

DEFAULT_PD_URLS = "http://127.0.0.1:2379"
DEFAULT_ADDR = "127.0.0.1:2390"


@dataclass(frozen=True)
class PDConfig:
    pd_urls: str = field(default=DEFAULT_PD_URLS, metadata={"help": "etcd endpoints, comma separated"})
    addr: str = field(default=DEFAULT_ADDR, metadata={"help": "gRPC listen address host:port"})
    advertise_addr: str = field(default="", metadata={"help": "address published in /pd/leader (default: addr)"})
    lease_ttl: int = field(default=DEFAULT_LEASE_TTL, metadata={"help": "leader lease TTL in seconds"})
    campaign_timeout: Duration = field(
        default=DEFAULT_CAMPAIGN_TIMEOUT, metadata={"help": "seconds to wait for another leader to go away"}
    )
    etcd_retry: Duration = field(default=10.0, metadata={"help": "seconds to retry etcd before giving up"})
    log_level: Literal["debug", "info", "warning", "error"] = field(default="info", metadata={"help": "log level"})
    log_format: LogFormat = field(default=DEFAULT_LOG_FORMAT, metadata={"help": "text, or json: one object per line"})
    security: SecurityConfig = field(default_factory=SecurityConfig)

    def validate(self) -> None:
        parse_endpoints(self.pd_urls)
        split_host_port(self.addr)
        if self.advertise_addr:
            _, port = split_host_port(self.advertise_addr)
            if port == 0:
                raise ConfigError(f"advertise-addr: {self.advertise_addr!r} needs a real port")
        if self.campaign_timeout <= 0:
            raise ConfigError(f"campaign-timeout: must be > 0, got {self.campaign_timeout}")
        if self.etcd_retry < 0:
            raise ConfigError(f"etcd-retry: must be >= 0, got {self.etcd_retry}")
        if self.lease_ttl < 1:
            raise ConfigError(f"lease-ttl: must be >= 1, got {self.lease_ttl}")
