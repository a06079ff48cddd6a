"""`binlog-spark` command (placeholder until the PySpark jobs issue lands)."""

from __future__ import annotations

import sys

from common.cli import not_implemented


def main() -> int:
    return not_implemented("binlog-spark", "the PySpark jobs issue")


if __name__ == "__main__":
    sys.exit(main())
