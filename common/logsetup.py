"""Logging set-up for the daemons: one line per record, configured once in `main`."""

from __future__ import annotations

import logging
import sys

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(level: str = "info") -> None:
    """Log to stderr at `level` (debug, info, warning, error)."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO), format=TEXT_FORMAT, stream=sys.stderr, force=True
    )
