"""Logging set-up for the daemons: one line per record, configured once in `main`."""

from __future__ import annotations

import logging
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str = "info", log_file: str = "") -> None:
    """Log at `level` (debug, info, warning, error) to `log_file`, or to stderr when it is empty."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), format=TEXT_FORMAT, stream=sys.stderr, force=True
    )
    if log_file:
        root = logging.getLogger()
        handler = logging.FileHandler(log_file, encoding="utf-8")
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
        for old in list(root.handlers):
            root.removeHandler(old)
            old.close()
        root.addHandler(handler)
