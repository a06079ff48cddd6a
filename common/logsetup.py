"""Logging set-up for the daemons and commands: configured once in `main`, to stderr or a file.

Two formats (`log-format`):

    text   "2024-05-01 10:00:00,123 INFO pump.app: message" — the default, unchanged; a traceback
           follows on the next lines, as the logging module prints it
    json   one JSON object per line, whatever the message holds (newlines and tracebacks are
           escaped inside the strings), so journald and log shippers get exactly one entry per record:
           {"time": "2024-05-01T10:00:00.123+00:00", "level": "INFO", "logger": "pump.app",
            "message": "...", "exception": "Traceback ..."}          (exception / stack only when present)

`log-file` empty = stderr (under systemd: the journal).  A log file rotates by size: when a record would
take it past `log-file-max-size` MiB it is renamed `<file>.1` (older ones shift to `.2` ... and the one past
`log-file-max-backups` is deleted).  max-size 0 = never rotate.  The original pump / drainer had only
`log-file` (its `log-rotate` key is deprecated and ignored), so both rotation keys are ours.
"""

from __future__ import annotations

import contextlib
import json
import logging
import logging.handlers
import os
import sys
from datetime import UTC, datetime
from typing import Final, Literal

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LOG_FORMATS: Final = ("text", "json")
LogFormat = Literal["text", "json"]
DEFAULT_LOG_FORMAT: Final = "text"
DEFAULT_MAX_SIZE_MIB: Final = 300
"""Ours: `log-file-max-size`, in MiB (TiDB's own `[log.file] max-size` default)."""
DEFAULT_MAX_BACKUPS: Final = 7
"""Ours: `log-file-max-backups`, rotated files kept."""
MIB: Final = 1024 * 1024


class JSONFormatter(logging.Formatter):
    """One JSON object per record, on one line: time (UTC, ms), level, logger, message [, exception, stack]."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, ensure_ascii=False)


def make_formatter(log_format: str) -> logging.Formatter:
    """The formatter of `log_format` ("text" or "json"); ValueError naming the choices otherwise."""
    if log_format == "text":
        return logging.Formatter(TEXT_FORMAT)
    if log_format == "json":
        return JSONFormatter()
    raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(LOG_FORMATS)}")


def make_handler(log_file: str, max_size_mib: int, max_backups: int) -> logging.Handler:
    """stderr when `log_file` is empty, else the file, rotated by size unless `max_size_mib` is 0.  The file's
    directory is created when missing, as the original's logger did (deployments name `log/pump.log`)."""
    if not log_file:
        return logging.StreamHandler(sys.stderr)
    with contextlib.suppress(OSError):  # what cannot be created, the open below reports
        os.makedirs(os.path.dirname(log_file) or ".", exist_ok=True)
    if max_size_mib <= 0:
        return logging.FileHandler(log_file, encoding="utf-8")
    if max_backups < 1:
        raise ValueError(f"log-file-max-backups must be >= 1 when the log file rotates, got {max_backups}")
    return logging.handlers.RotatingFileHandler(
        log_file, maxBytes=max_size_mib * MIB, backupCount=max_backups, encoding="utf-8"
    )


def setup_logging(
    level: str = "info",
    log_file: str = "",
    *,
    log_format: str = DEFAULT_LOG_FORMAT,
    max_size_mib: int = DEFAULT_MAX_SIZE_MIB,
    max_backups: int = DEFAULT_MAX_BACKUPS,
) -> None:
    """Log at `level` (debug, info, warn(ing), error, fatal) in `log_format` to `log_file`, or to stderr.

    Replaces every handler the root logger had, so calling it again (tests, a re-exec) never
    duplicates lines.  Raises ValueError for an unknown format; OSError if the file cannot be opened.
    """
    formatter = make_formatter(log_format)
    handler = make_handler(log_file, max_size_mib, max_backups)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
