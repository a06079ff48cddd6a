"""Ready-made field validators for `field(metadata={"validate": ...})`.

A validator takes the final value and raises ValueError with a short reason to reject it; the loader adds
the key, the value and where it came from: `environment variable PUMP_GC: invalid value for 'gc': must be
>= 1 (got 0)`.
"""

from __future__ import annotations

from collections.abc import Callable


def at_least(minimum: float) -> Callable[[float], None]:
    """Reject values below `minimum`."""

    def check(value: float) -> None:
        if value < minimum:
            raise ValueError(f"must be >= {minimum}")

    check.__name__ = f"at_least({minimum})"
    return check


def between(low: float, high: float) -> Callable[[float], None]:
    """Reject values outside `low .. high` (inclusive)."""

    def check(value: float) -> None:
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")

    check.__name__ = f"between({low}, {high})"
    return check


def non_empty(value: str | tuple[object, ...]) -> None:
    """Reject an empty string or list."""
    if not value:
        raise ValueError("must not be empty")
