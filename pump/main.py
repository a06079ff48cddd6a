"""`pump` command (placeholder until the pump issue lands)."""

from __future__ import annotations

import sys

from common.cli import not_implemented


def main() -> int:
    return not_implemented("pump", "the pump issue")


if __name__ == "__main__":
    sys.exit(main())
