"""The public surface of pump_client: names, defaults, argument checks (no server needed)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import pump_client
from common.errors import BinlogError, ConfigError, ResourceExhaustedError
from common.tls import TLSFiles
from pump.config import DEFAULT_MAX_MESSAGE_SIZE as PUMP_MAX_MESSAGE_SIZE
from pump_client import NoPumpError, PumpClientError, PumpFullError, PumpsClient
from pump_client.transport import DEFAULT_MAX_MESSAGE_SIZE

UNUSED_URL = "http://127.0.0.1:1"  # never contacted: the checks run before any I/O


def test_public_names() -> None:
    for name in ("PumpsClient", "PumpClientError", "NoPumpError", "PumpFullError", "PumpInfo", "STRATEGIES"):
        assert hasattr(pump_client, name)
    assert pump_client.STRATEGIES == ("range", "hash", "score")


def test_error_hierarchy() -> None:
    assert issubclass(PumpClientError, BinlogError)
    assert issubclass(NoPumpError, PumpClientError)
    assert issubclass(PumpFullError, PumpClientError)
    assert issubclass(PumpFullError, ResourceExhaustedError)
    assert not PumpFullError.retriable
    assert PumpClientError.retriable


def test_defaults_are_the_originals() -> None:
    params = inspect.signature(PumpsClient).parameters
    defaults = {name: p.default for name, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults == {
        "strategy": "range",
        "write_timeout": 15.0,
        "attempt_timeout": 1.0,  # ours: the original gave every call write_timeout
        "commit_timeout": 600.0,
        "retry_interval": 0.1,
        "probe_interval": 30.0,
        "max_err_nums": 10,
        "tls": None,
        "max_message_size": DEFAULT_MAX_MESSAGE_SIZE,
        "max_tracked_txns": 1_000_000,
        "connect_timeout": 10.0,
    }
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in params.items() if name != "etcd_urls")


def test_max_message_size_default_lets_the_pumps_limit_decide() -> None:
    assert DEFAULT_MAX_MESSAGE_SIZE == PUMP_MAX_MESSAGE_SIZE
    assert DEFAULT_MAX_MESSAGE_SIZE > 1 << 30  # 1 GiB binlogs fit


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"strategy": "roundrobin"}, "unknown pump client strategy 'roundrobin'"),
        ({"write_timeout": 0}, "write_timeout must be > 0"),
        ({"attempt_timeout": 0}, "attempt_timeout must be > 0"),
        ({"commit_timeout": -1}, "commit_timeout must be > 0"),
        ({"retry_interval": -1}, "retry_interval must be >= 0"),
        ({"probe_interval": 0}, "probe_interval must be > 0"),
        ({"max_err_nums": -1}, "max_err_nums must be >= 0"),
        ({"max_tracked_txns": 0}, "max_tracked_txns must be >= 1"),
        ({"max_message_size": 0}, "max_message_size must be in"),
        ({"max_message_size": 1 << 31}, "max_message_size must be in"),
    ],
)
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PumpsClient(UNUSED_URL, **kwargs)  # type: ignore[arg-type]


def test_bad_etcd_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="bad etcd endpoint"):
        PumpsClient("ftp://nowhere")


def test_unreadable_tls_files_are_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"pump client TLS ssl-ca: cannot read '.*missing-ca\.pem'"):
        PumpsClient(UNUSED_URL, tls=TLSFiles(ca=str(tmp_path / "missing-ca.pem")))
