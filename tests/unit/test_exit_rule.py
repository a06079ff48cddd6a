"""The exit status rule at its lowest level: which errors are the config's (ConfigError, exit 2) and which
the environment's at run time (exit 1)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from common.cli import check_listen_addr
from common.errors import ConfigError, ListenError
from drainer.relay import RelayError, relay_dir_ok


def test_a_taken_port_is_a_run_time_error_not_a_config_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(ListenError, match=f"^addr: cannot listen on 127.0.0.1:{port}: Address already in use$"):
            check_listen_addr("addr", "127.0.0.1", port)
    assert not issubclass(ListenError, ConfigError)


def test_an_address_that_is_not_this_machines_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^addr: cannot listen on 192\.0\.2\.1:8250: "):
        check_listen_addr("addr", "192.0.2.1", 8250)  # TEST-NET-1: never a local address


def test_a_relay_dir_that_cannot_be_a_directory_names_the_option(tmp_path: Path) -> None:
    afile = tmp_path / "relay-file"
    afile.write_text("not a directory")
    with pytest.raises(ConfigError) as info:
        relay_dir_ok(afile / "x")
    assert str(info.value) == (
        f"syncer.relay.log-dir: relay log directory '{afile / 'x'}' cannot be created: Not a directory"
    )
    assert afile.read_text() == "not a directory"
    assert not issubclass(RelayError, ConfigError)  # the other failures (permissions, disk) stay exit 1
