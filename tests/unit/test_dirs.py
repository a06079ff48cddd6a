"""common/dirs.py: a directory option that cannot be created is one line naming the option and the path."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from common.dirs import dir_error, ensure_dir
from common.errors import ConfigError, StorageError


def test_creates_missing_parents(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b"
    assert ensure_dir("data-dir", path) == path
    assert path.is_dir()
    assert ensure_dir("data-dir", path) == path  # already there: fine


def test_a_file_in_the_way_is_a_config_error_naming_the_option(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    with pytest.raises(ConfigError) as info:
        ensure_dir("data-dir", afile / "x")
    assert str(info.value) == f"data-dir: directory '{afile / 'x'}' cannot be created: Not a directory"
    with pytest.raises(ConfigError) as info:
        ensure_dir("data-dir", afile)
    assert str(info.value) == f"data-dir: directory '{afile}' cannot be created: it exists and is not a directory"
    assert afile.read_text() == "keep me"


def test_a_component_that_cannot_exist_names_it() -> None:
    with pytest.raises(ConfigError) as info:
        ensure_dir("data-dir", "/proc/nope/x")
    assert str(info.value) == (
        "data-dir: directory '/proc/nope/x' cannot be created: No such file or directory (at '/proc/nope')"
    )
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS, errno.ENOSPC, errno.EIO])
def test_permission_and_disk_problems_are_run_time_errors(code: int) -> None:
    exc = OSError(code, "boom", "/var/lib/pump")
    err = dir_error("data-dir", "/var/lib/pump", exc)
    assert type(err) is StorageError
    assert str(err) == "data-dir: directory '/var/lib/pump' cannot be created: boom"
