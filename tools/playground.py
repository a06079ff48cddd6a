"""`binlog-playground` command (placeholder until the playground issue lands)."""

from __future__ import annotations

import sys

from common.cli import not_implemented


def main() -> int:
    return not_implemented("binlog-playground", "the playground issue")


if __name__ == "__main__":
    sys.exit(main())
