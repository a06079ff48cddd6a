"""`binlog-workload` command (placeholder until the pump client and upstream writer issue lands)."""

from __future__ import annotations

import sys

from common.cli import not_implemented


def main() -> int:
    return not_implemented("binlog-workload", "the pump client and upstream writer issue")


if __name__ == "__main__":
    sys.exit(main())
