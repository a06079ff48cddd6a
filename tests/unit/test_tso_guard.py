"""common/tso_guard.py: the comparison with the present and the one-line message."""

from __future__ import annotations

import pytest

from common import tso
from common.tso_guard import AheadError, Present, ahead_message, check_not_ahead, clock_present, ts_text, window_present

NOW = tso.compose(1_796_333_000_000, 5)  # 2026-12-03 ...
INT64_MAX = 9223372036854775807


def test_ts_text_gives_the_utc_time_and_survives_any_integer() -> None:
    assert ts_text(INT64_MAX) == f"{INT64_MAX} (3084-12-12 12:41:28 UTC)"
    assert ts_text(tso.compose(0, 7)) == f"{7} (1970-01-01 00:00:00 UTC)"
    assert ts_text(1 << 100) == f"{1 << 100} (beyond the year 9999)"
    assert ts_text(-1) == "-1 (not a time)"


def test_only_a_value_above_the_present_is_ahead() -> None:
    present = Present(NOW, "the current TSO")
    check_not_ahead("checkpoint commitTS", NOW, present, "fix")  # equal: the present itself
    check_not_ahead("checkpoint commitTS", NOW - 1, present, "fix")
    check_not_ahead("checkpoint commitTS", 0, present, "fix")
    with pytest.raises(AheadError) as info:
        check_not_ahead("checkpoint (file, /d/savepoint) commitTS", NOW + 1, present, "set it right")
    assert str(info.value) == (
        f"checkpoint (file, /d/savepoint) commitTS {ts_text(NOW + 1)} is ahead of the current TSO {ts_text(NOW)}: "
        "set it right"
    )
    assert "\n" not in str(info.value)
    assert info.value.retriable is False


def test_message_shape() -> None:
    assert ahead_message("initial-commit-ts", INT64_MAX, Present(NOW, "X"), "do Y") == (
        f"initial-commit-ts {INT64_MAX} (3084-12-12 12:41:28 UTC) is ahead of X {ts_text(NOW)}: do Y"
    )


def test_clock_present_covers_the_whole_millisecond_plus_the_allowance() -> None:
    p = clock_present(now_ms=1000)
    assert p == Present(tso.compose(1000, tso.MAX_LOGICAL - 1), "the local clock")
    check_not_ahead("x", tso.compose(1000, tso.MAX_LOGICAL - 1), p, "")  # any TSO of this millisecond
    with pytest.raises(AheadError):
        check_not_ahead("x", tso.compose(1001, 0), p, "")
    later = clock_present(600, now_ms=1000, why="etcd unreachable")
    assert later == Present(tso.compose(601_000, tso.MAX_LOGICAL - 1), "the local clock + 600 s (etcd unreachable)")


def test_window_present_is_the_first_ts_of_the_saved_upper_millisecond() -> None:
    p = window_present(5000, "pd-server unreachable")
    assert p == Present(tso.compose(5000, 0), "pd-server's saved TSO window (pd-server unreachable)")
    check_not_ahead("x", tso.compose(4999, tso.MAX_LOGICAL - 1), p, "")  # the last TSO pd-server may have given
