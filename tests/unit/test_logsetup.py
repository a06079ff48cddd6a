"""Log formats (text unchanged, json one object per line), size rotation, and bad log settings on the command line."""

from __future__ import annotations

import json
import logging
import logging.handlers
import re
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from common.logsetup import TEXT_FORMAT, JSONFormatter, make_formatter, make_handler, setup_logging
from drainer import main as drainer_main
from pd import main as pd_main
from pump import main as pump_main

log = logging.getLogger("tests.logsetup")


@pytest.fixture(autouse=True)
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in saved:
            handler.close()
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)


def _record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError("bad value\nsecond line")
        except ValueError:
            exc_info = sys.exc_info()
    return logging.LogRecord("pump.app", logging.WARNING, __file__, 1, message, args, exc_info)


# ------------------------------------------------------------------------------------- formats


def test_text_format_is_the_original_one() -> None:
    assert TEXT_FORMAT == "%(asctime)s %(levelname)s %(name)s: %(message)s"
    line = make_formatter("text").format(_record("node_id=%s online", "p1"))
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING pump.app: node_id=p1 online", line)


def test_json_is_one_object_on_one_line_with_the_documented_keys() -> None:
    line = JSONFormatter().format(_record('two\nlines and a quote " and é', exc=False))
    assert "\n" not in line
    entry = json.loads(line)
    assert set(entry) == {"time", "level", "logger", "message"}
    assert entry["level"] == "WARNING"
    assert entry["logger"] == "pump.app"
    assert entry["message"] == 'two\nlines and a quote " and é'
    when = datetime.fromisoformat(entry["time"])
    assert when.utcoffset() is not None
    assert when.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert re.search(r"\.\d{3}\+00:00$", entry["time"])  # milliseconds, UTC


def test_json_carries_the_exception_text_still_on_one_line() -> None:
    line = JSONFormatter().format(_record("write failed", exc=True))
    assert "\n" not in line
    entry = json.loads(line)
    assert entry["message"] == "write failed"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: bad value\nsecond line")


def test_json_stack_info_when_asked() -> None:
    record = _record("where am I")
    record.stack_info = "Stack (most recent call last):\n  File x"
    assert json.loads(JSONFormatter().format(record))["stack"].startswith("Stack")


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml': use one of text, json"):
        make_formatter("xml")


# ---------------------------------------------------------------------------- setup and rotation


def test_setup_logging_json_to_a_file_replaces_handlers(tmp_path: Path) -> None:
    file = tmp_path / "pump.log"
    setup_logging("info", str(file), log_format="json")
    setup_logging("info", str(file), log_format="json")  # again: still one handler, no duplicate lines
    assert len(logging.getLogger().handlers) == 1
    log.info("start_ts=%d", 42)
    log.debug("not at info")
    try:
        raise OSError("disk gone")
    except OSError:
        log.exception("flush failed")
    logging.getLogger().handlers[0].flush()
    entries = [json.loads(line) for line in file.read_text().splitlines()]
    assert [e["message"] for e in entries] == ["start_ts=42", "flush failed"]
    assert "OSError: disk gone" in entries[1]["exception"]
    assert entries[1]["level"] == "ERROR"


@pytest.mark.parametrize(("name", "level"), [("warn", logging.WARNING), ("fatal", logging.CRITICAL)])
def test_original_level_names(name: str, level: int) -> None:
    setup_logging(name)
    assert logging.getLogger().level == level


def test_size_rotation_keeps_max_backups_of_whole_lines(tmp_path: Path) -> None:
    file = tmp_path / "drainer.log"
    setup_logging("info", str(file), log_format="json", max_size_mib=1, max_backups=2)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.handlers.RotatingFileHandler)
    payload = "x" * 1000
    for i in range(4000):  # ~4 MiB of records: rotates three times
        log.info("record=%d %s", i, payload)
    handler.flush()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["drainer.log", "drainer.log.1", "drainer.log.2"]  # .3 was deleted: only 2 kept
    numbers: list[int] = []
    for name in ["drainer.log.2", "drainer.log.1", "drainer.log"]:
        path = tmp_path / name
        assert path.stat().st_size <= 1024 * 1024
        messages = [json.loads(line)["message"] for line in path.read_text().splitlines()]
        numbers += [int(m.split()[0].removeprefix("record=")) for m in messages]
    assert numbers == list(range(numbers[0], 4000))  # whole records, in order, none split across files


def test_size_zero_never_rotates(tmp_path: Path) -> None:
    handler = make_handler(str(tmp_path / "x.log"), 0, 0)
    try:
        assert type(handler) is logging.FileHandler
    finally:
        handler.close()


def test_rotation_without_backups_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="log-file-max-backups must be >= 1"):
        make_handler(str(tmp_path / "x.log"), 10, 0)
    assert not (tmp_path / "x.log").exists()


# ------------------------------------------------------------------ bad settings on the command line


@pytest.mark.parametrize(
    ("main", "prog", "argv", "message"),
    [
        (pump_main.main, "pump", ["--log-format", "xml"], "invalid value for 'log-format': expected one of"),
        (drainer_main.main, "drainer", ["--log-format", "yaml"], "invalid value for 'log-format': expected one of"),
        (pd_main.main, "pd-server", ["--log-format", "j"], "invalid value for 'log-format': expected one of"),
        (pump_main.main, "pump", ["--log-file-max-backups", "0"], "'log-file-max-backups': must be >= 1"),
        (drainer_main.main, "drainer", ["--log-file-max-size", "-1"], "'log-file-max-size': must be >= 0"),
    ],
)
def test_bad_log_settings_exit_2_with_one_line(
    main: object, prog: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(main)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"{prog}: config error: ")
    assert message in err


def test_a_log_file_that_cannot_be_opened_exits_2_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("x")
    with pytest.raises(SystemExit) as exc:  # pd-urls is never dialled: the log file fails first
        pump_main.main(["--log-file", str(not_a_dir / "pump.log"), "--data-dir", str(tmp_path / "data")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == (
        f"pump: config error: invalid value for 'log-file': cannot open '{not_a_dir / 'pump.log'}': Not a directory\n"
    )
    assert sorted(tmp_path.iterdir()) == [not_a_dir]  # nothing created: no data dir, no log dir


def test_a_missing_log_directory_is_created_as_the_original_did(tmp_path: Path) -> None:
    """Deployments of the original name `-log-file=log/pump.log` and rely on the logger creating log/."""
    file = tmp_path / "log" / "deeper" / "pump.log"
    handler = make_handler(str(file), max_size_mib=1, max_backups=1)
    try:
        handler.emit(logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None))
    finally:
        handler.close()
    assert "hello" in file.read_text()


def test_bad_backups_with_a_log_file_creates_no_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "drainer.log"
    with pytest.raises(SystemExit) as exc:
        drainer_main.main(["--log-file", str(file), "--log-file-max-backups", "0"])
    assert exc.value.code == 2
    assert "log-file-max-backups" in capsys.readouterr().err
    assert not file.exists()
