"""`reparo` command (placeholder until the relay log / reparo / binlogctl issue lands)."""

from __future__ import annotations

import sys

from common.cli import not_implemented


def main() -> int:
    return not_implemented("reparo", "the relay log / reparo / binlogctl issue")


if __name__ == "__main__":
    sys.exit(main())
