"""`reparo`: replays the drainer's file-sink output (pb binlog files) into MySQL, or prints it.

See docs/architecture.md#tools.

    reparo --config reparo.toml                   # or the original spelling: reparo -config reparo.toml
    reparo --data-dir data.drainer --start-datetime '2024-05-01 10:00:00' --dest-type print

Reads `data-dir` in file order from the first file the window needs (`tools.reparo.select`), keeps
the binlogs with `start <= commit_ts <= stop` that pass the filters, hands them to the destination
(`tools.reparo.dest`: the drainer's loader into `[dest-db]`, or stdout) and stops at the end of
the files or the first binlog past `stop`. It keeps no checkpoint and does not follow new writes.

Progress goes to stderr at most every PROGRESS_INTERVAL seconds, and a summary line at the end:
binlogs read, binlogs applied, rows by type, DDLs, skipped by the filters / outside the window /
duplicates, and corrupted spans skipped in the files. Exit status: 0 done, 2 bad config (one line
naming the key), 1 anything else (missing or unreadable data-dir, no binlog files in it, a start
beyond the present, a destination it cannot connect to, a binlog it cannot decode or apply); the
checks that need no destination run before it is connected, so a bad start applies nothing.

A start beyond the present (`check_start`): reparo reads files offline and asks no pd-server, so
the present is the local clock (common/tso_guard.py). A start-tso / start-datetime above it that is
also above the newest binlog in data-dir would replay nothing, and is refused in one line naming
the newest commit_ts there. One at or below that newest binlog is accepted (pd-server's clock may
run ahead of this machine's).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TextIO

from common import tso
from common.binlogfile import ReadStats, iter_records, list_binlog_files
from common.config import dump, run_command
from common.errors import BinlogError
from common.logsetup import setup_logging
from common.pb import pb_binlog_pb2
from common.tso_guard import Present, ahead_message, clock_present, ts_text
from tools.reparo.config import ReparoConfig, parse_args
from tools.reparo.dest import Dest, make_dest
from tools.reparo.select import Selection, Window, first_file, newest_commit_ts

__all__ = ["PROGRESS_INTERVAL", "Summary", "check_start", "main", "replay"]

PROGRESS_INTERVAL: Final = 2.0
"""Seconds between progress lines (the first one after this long)."""


class ReparoError(BinlogError):
    """reparo cannot start or go on; the message says why."""


@dataclass(slots=True)
class Summary:
    files: int = 0
    files_skipped: int = 0
    binlogs_read: int = 0
    applied: int = 0
    inserts: int = 0
    updates: int = 0
    deletes: int = 0
    ddls: int = 0
    skipped_filter: int = 0
    rows_filtered: int = 0
    skipped_window: int = 0
    duplicates: int = 0
    corrupted: int = 0
    last_commit_ts: int = 0
    seconds: float = 0.0
    stats: ReadStats = field(default_factory=ReadStats)

    def line(self) -> str:
        last = f", last commit_ts {self.last_commit_ts} ({_when(self.last_commit_ts)})" if self.last_commit_ts else ""
        return (
            f"done in {self.seconds:.1f}s: {self.binlogs_read} binlogs read from {self.files - self.files_skipped} "
            f"of {self.files} files, {self.applied} applied ({self.inserts} inserts, {self.updates} updates, "
            f"{self.deletes} deletes, {self.ddls} DDLs); skipped: {self.skipped_filter} by the filters "
            f"({self.rows_filtered} rows), {self.skipped_window} outside the window, {self.duplicates} duplicates; "
            f"{self.corrupted} corrupted records{last}"
        )


def _when(ts: int) -> str:
    return tso.to_datetime(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def check_data_dir(data_dir: str) -> None:
    """Raise ReparoError unless `data_dir` is a readable directory holding pb binlog files."""
    if not os.path.exists(data_dir):
        raise ReparoError(f"data-dir {data_dir!r} does not exist")
    if not os.path.isdir(data_dir):
        raise ReparoError(f"data-dir {data_dir!r} is not a directory")
    if not list_binlog_files(data_dir):  # StorageError when it cannot be listed
        raise ReparoError(f"data-dir {data_dir!r} holds no pb binlog files (binlog-<16-digit index>-<datetime>)")


def check_start(cfg: ReparoConfig, present: Present) -> None:
    """ReparoError when the window starts beyond `present` and beyond the newest binlog in data-dir."""
    start = cfg.start_ts
    if start <= present.ts:
        return
    first, _, _ = first_file(cfg.data_dir, start)
    newest = newest_commit_ts(cfg.data_dir, first)
    if start <= newest:
        return
    key = f"start-datetime {cfg.start_datetime!r} = start-tso" if cfg.start_datetime else "start-tso"
    where = f"commit_ts {ts_text(newest)}" if newest else "none"
    raise ReparoError(
        ahead_message(
            key,
            start,
            present,
            f"nothing would be replayed (the newest binlog in data-dir {cfg.data_dir!r}: {where}); set start-tso or "
            "start-datetime at or before the first binlog to replay, or leave both out to replay from the beginning",
        )
    )


def replay(
    cfg: ReparoConfig,
    dest: Dest,
    *,
    progress: Callable[[str], None] = lambda line: None,
    clock: Callable[[], float] = time.monotonic,
) -> Summary:
    """Read, select and hand on every binlog of the window; returns the summary (raises BinlogError)."""
    began = clock()
    window = Window(cfg.start_ts, cfg.stop_ts)
    selection = Selection(
        do_dbs=cfg.replicate_do_db,
        do_tables=cfg.replicate_do_table,
        ignore_dbs=cfg.replicate_ignore_db,
        ignore_tables=cfg.replicate_ignore_table,
    )
    s = Summary()
    first, s.files_skipped, s.files = first_file(cfg.data_dir, window.start)
    next_report = began + PROGRESS_INTERVAL
    newest = 0
    for _, payload in iter_records(cfg.data_dir, (first, 0), stats=s.stats):
        binlog = pb_binlog_pb2.Binlog()
        try:
            binlog.ParseFromString(payload)
        except Exception as exc:  # protobuf's DecodeError
            raise ReparoError(f"a record of {cfg.data_dir!r} is not a pb_binlog.Binlog: {exc}") from None
        s.binlogs_read += 1
        ts = binlog.commit_ts
        if window.after(ts):
            break
        if ts <= newest:
            s.duplicates += 1
            continue
        newest = ts
        if window.before(ts):
            s.skipped_window += 1
            continue
        sel = selection.select(binlog)
        if sel is None:
            s.skipped_filter += 1
        else:
            dest.apply(sel)
            s.last_commit_ts = ts
        now = clock()
        if now >= next_report:
            next_report = now + PROGRESS_INTERVAL
            progress(
                f"progress: {s.binlogs_read} binlogs read, {sum(dest.rows.values())} rows and DDLs handed on, "
                f"at commit_ts {ts} ({_when(ts)})"
            )
    s.applied = dest.finish()
    s.inserts, s.updates, s.deletes, s.ddls = (dest.rows[k] for k in ("insert", "update", "delete", "ddl"))
    s.rows_filtered = selection.rows_filtered
    s.corrupted = s.stats.skipped_records
    s.seconds = clock() - began
    return s


def _say(err: TextIO, line: str) -> None:
    err.write(f"reparo: {line}\n")
    err.flush()


@run_command(prog="reparo")
def main(argv: list[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    cfg, args = parse_args(argv)
    stdout = sys.stdout if out is None else out
    stderr = sys.stderr if err is None else err
    if args.print_config:
        stdout.write(dump(cfg))
        return 0
    try:
        setup_logging(cfg.log_level, cfg.log_file)
    except OSError as exc:
        _say(stderr, f"error: cannot open log-file {cfg.log_file!r}: {exc.strerror or exc}")
        return 1
    tls = cfg.dest_tls() if cfg.dest_type == "mysql" else None  # an unusable ssl-* file: config error, exit 2
    dest = None
    try:
        check_data_dir(cfg.data_dir)
        check_start(cfg, clock_present())
        dest = make_dest(cfg, stdout, tls)
        dest.start()
        summary = replay(cfg, dest, progress=lambda line: _say(stderr, line))
    except BinlogError as exc:
        _say(stderr, f"error: {exc}")
        return 1
    except BrokenPipeError:  # `reparo ... | head`: the reader has all it wants
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so the interpreter's final flush is quiet
        return 0
    finally:
        if dest is not None:
            dest.close()
    _say(stderr, summary.line())
    return 0
