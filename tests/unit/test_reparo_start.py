"""reparo refuses a window that starts beyond the present and beyond every binlog in data-dir (hardening item 4)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from common import tso
from common.tso_guard import Present, clock_present, ts_text
from tests.unit.test_reparo_select import A, ddl_txn, dml_txn, ins, write_dir
from tools.reparo import ReparoError, check_start, main
from tools.reparo.config import load_config, parse_datetime
from tools.reparo.select import first_file, newest_commit_ts

BEYOND = 9223372036854775807
NOW_MS = tso.now_ms()
PAST = [tso.compose(NOW_MS - 60_000 + i * 1000, 0) for i in range(5)]  # a minute ago, one a second
LOCAL = Present(tso.compose(NOW_MS, tso.MAX_LOGICAL - 1), "the local clock")


pytestmark = pytest.mark.usefixtures("keep_root_logging")


def files(path: Path, stamps: list[int], max_file_size: int = 1 << 20) -> None:
    write_dir(
        path,
        [ddl_txn(stamps[0], "", "CREATE DATABASE `a`"), *(dml_txn(t, ins(A, i)) for i, t in enumerate(stamps[1:]))],
        max_file_size,
    )


def test_newest_commit_ts_reads_to_the_end_of_the_last_files(tmp_path: Path) -> None:
    files(tmp_path, PAST, max_file_size=200)  # several files
    assert newest_commit_ts(str(tmp_path), 0) == PAST[-1]
    first, skipped, total = first_file(str(tmp_path), BEYOND)
    assert total > 1
    assert skipped == total - 1
    assert newest_commit_ts(str(tmp_path), first) == PAST[-1]


def test_a_start_at_or_before_the_present_passes(tmp_path: Path) -> None:
    files(tmp_path, PAST)
    for start in (0, PAST[0], PAST[-1], PAST[-1] + 1, LOCAL.ts):  # a start after the newest binlog, not ahead
        check_start(load_config(flags={"data-dir": str(tmp_path), "start-tso": str(start)}), LOCAL)


def test_a_start_ahead_of_the_clock_but_at_a_binlog_passes(tmp_path: Path) -> None:
    """pd-server's clock may run ahead of this machine's: binlogs after the local clock are there to replay."""
    ahead = [tso.compose(NOW_MS + 3_600_000 + i, 0) for i in range(3)]
    files(tmp_path, [*PAST, *ahead])
    check_start(load_config(flags={"data-dir": str(tmp_path), "start-tso": str(ahead[-1])}), LOCAL)
    with pytest.raises(ReparoError):
        check_start(load_config(flags={"data-dir": str(tmp_path), "start-tso": str(ahead[-1] + 1)}), LOCAL)


def test_a_start_beyond_the_present_and_the_files_is_refused(tmp_path: Path) -> None:
    files(tmp_path, PAST)
    with pytest.raises(ReparoError) as info:
        check_start(load_config(flags={"data-dir": str(tmp_path), "start-tso": str(BEYOND)}), LOCAL)
    assert str(info.value) == (
        f"start-tso {ts_text(BEYOND)} is ahead of the local clock {ts_text(LOCAL.ts)}: nothing would be replayed "
        f"(the newest binlog in data-dir {str(tmp_path)!r}: commit_ts {ts_text(PAST[-1])}); set start-tso or "
        "start-datetime at or before the first binlog to replay, or leave both out to replay from the beginning"
    )


def test_a_start_datetime_next_year_is_named_as_given(tmp_path: Path) -> None:
    files(tmp_path, PAST)
    when = "2099-01-01 00:00:00"
    with pytest.raises(ReparoError) as info:
        check_start(load_config(flags={"data-dir": str(tmp_path), "start-datetime": when}), clock_present())
    assert str(info.value).startswith(f"start-datetime '{when}' = start-tso {ts_text(parse_datetime(when))} is ahead")


def test_main_refuses_in_one_line_and_prints_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: exit 0, nothing printed, and a summary line saying every binlog was outside the window."""
    files(tmp_path, PAST)
    out, err = io.StringIO(), io.StringIO()
    code = main(["--data-dir", str(tmp_path), "--start-tso", str(BEYOND), "--log-level", "error"], out=out, err=err)
    lines = err.getvalue().splitlines()
    assert code == 1, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"reparo: error: start-tso {ts_text(BEYOND)} is ahead of the local clock "), lines
    assert out.getvalue() == ""
