"""The pump client: send binlogs to the pump cluster registered in etcd (docs/architecture.md#pump-client).

from pump_client import PumpsClient
client = PumpsClient("http://127.0.0.1:2379", strategy="range")
client.write_binlog(prewrite)          # raises PumpClientError when no pump took it
client.write_binlog_async(commit)      # never fails; delivered to the prewrite's pump
client.write_encoded_binlog(encoded)   # a big prewrite already marshalled in pieces (no copies)
client.close()
"""

from __future__ import annotations

from pump_client.client import PumpsClient
from pump_client.errors import (
    BinlogTooLargeError,
    ClientClosedError,
    InvalidBinlogError,
    NoPumpError,
    PumpClientError,
    PumpFullError,
)
from pump_client.membership import PumpInfo
from pump_client.metrics import ClientMetrics
from pump_client.payload import MAX_HEADER_SIZE, EncodedBinlog
from pump_client.retry import DEFAULT_ATTEMPT_TIMEOUT
from pump_client.selector import HASH, RANGE, SCORE, STRATEGIES

__all__ = [
    "DEFAULT_ATTEMPT_TIMEOUT",
    "HASH",
    "MAX_HEADER_SIZE",
    "RANGE",
    "SCORE",
    "STRATEGIES",
    "BinlogTooLargeError",
    "ClientClosedError",
    "ClientMetrics",
    "EncodedBinlog",
    "InvalidBinlogError",
    "NoPumpError",
    "PumpClientError",
    "PumpFullError",
    "PumpInfo",
    "PumpsClient",
]
