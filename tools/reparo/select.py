"""Which pb binlogs reparo replays: the commit_ts window, the files it needs, the do/ignore filters.

* **Window:** a binlog is kept when `start <= commit_ts <= stop` (stop 0 = no end). The file sink
  writes binlogs in commit_ts order, so reading stops at the first one past `stop`; one with a
  commit_ts not above the last one kept is a duplicate (a drainer restarted from an older
  checkpoint wrote it again) and is skipped.
* **Files:** the names of our files carry their index and creation time, not a commit_ts, so
  `first_file` reads the first record of each file (a few bytes, as the original reparo did) and
  starts at the last file whose first commit_ts is below `start`: every file before it holds
  only smaller commit_ts. Archived `.tar.gz` files are not read (`list_binlog_files` warns).
* **Filters** (`Selection`): `replicate-do-db` / `[[replicate-do-table]]` make an allow-list,
  then `replicate-ignore-db` / `[[replicate-ignore-table]]` drop what matches (the drainer's
  `common.filters.Filter`, names `~regex` or exact, any case). DML events are filtered one by
  one; a DDL by the schema and table parsed from its query (`tools.reparo.ddl`), a database
  statement by its schema.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from google.protobuf.message import DecodeError

from common.binlogfile import Record, iter_records, list_binlog_files
from common.binlogfile.reader import ReadStats, scan_file
from common.errors import StorageError
from common.filters import Filter, TableName
from common.pb import pb_binlog_pb2
from tools.reparo.ddl import ParsedDDL, parse_ddl

__all__ = ["Selected", "Selection", "Window", "first_commit_ts", "first_file", "newest_commit_ts"]

log = logging.getLogger(__name__)

_FIRST_RECORD_CHUNK: Final = 64 << 10


@dataclass(frozen=True, slots=True)
class Window:
    start: int = 0
    stop: int = 0
    """0: no end."""

    def before(self, commit_ts: int) -> bool:
        return commit_ts < self.start

    def after(self, commit_ts: int) -> bool:
        return self.stop > 0 and commit_ts > self.stop


def first_commit_ts(path: str) -> int | None:
    """The commit_ts of the first good record of a pb binlog file, None when it has none."""
    try:
        with open(path, "rb", buffering=0) as f:
            size = os.fstat(f.fileno()).st_size
            for events in scan_file(f, 0, size, chunk_size=_FIRST_RECORD_CHUNK):
                for ev in events:
                    if isinstance(ev, Record):
                        binlog = pb_binlog_pb2.Binlog()
                        try:
                            binlog.ParseFromString(ev[1])
                        except DecodeError:
                            return None
                        return int(binlog.commit_ts)
    except OSError as exc:
        raise StorageError(f"cannot read binlog file {path!r}: {exc.strerror or exc}") from exc
    return None


def first_file(directory: str, start: int) -> tuple[int, int, int]:
    """(index of the first file to read, files skipped, files in all) for a window starting at `start`.

    Raises StorageError when the directory cannot be listed or read.
    """
    files = list_binlog_files(directory)
    if not files:
        return 0, 0, 0
    chosen = 0
    if start > 0:
        for i, f in enumerate(files):
            if i == 0:
                continue
            ts = first_commit_ts(os.path.join(directory, f.name))
            if ts is None or ts >= start:
                break
            chosen = i
    return files[chosen].index, chosen, len(files)


def newest_commit_ts(directory: str, from_index: int) -> int:
    """The highest commit_ts in the files from `from_index` on (0: none); records that do not decode are
    passed over. Raises StorageError when the files cannot be read."""
    newest = 0
    for _, payload in iter_records(directory, (from_index, 0), stats=ReadStats()):
        binlog = pb_binlog_pb2.Binlog()
        try:
            binlog.ParseFromString(payload)
        except DecodeError:
            continue
        newest = max(newest, int(binlog.commit_ts))
    return newest


@dataclass(slots=True)
class Selected:
    """What is left of one binlog after the filters: a DDL, or the DML events that pass."""

    commit_ts: int
    ddl: ParsedDDL | None = None
    events: list[pb_binlog_pb2.Event] = field(default_factory=list)


class Selection:
    """The do/ignore filters over pb binlogs (built from the config's four keys)."""

    def __init__(
        self,
        *,
        do_dbs: Iterable[str] = (),
        do_tables: Iterable[TableName] = (),
        ignore_dbs: Iterable[str] = (),
        ignore_tables: Iterable[TableName] = (),
    ) -> None:
        self._filter = Filter(
            ignore_schemas=ignore_dbs,
            ignore_tables=ignore_tables,
            do_dbs=do_dbs,
            do_tables=do_tables,
            internal_schemas=(),
        )
        self.rows_filtered = 0
        """DML events dropped by the filters so far."""

    def ddl_passes(self, ddl: ParsedDDL) -> bool:
        if not ddl.table:
            return not self._filter.skip_schema(ddl.schema)
        return not self._filter.skip_table(ddl.schema, ddl.table)

    def select(self, binlog: pb_binlog_pb2.Binlog) -> Selected | None:
        """The part of `binlog` that passes, or None when nothing does."""
        if binlog.tp == pb_binlog_pb2.DDL:
            ddl = parse_ddl(binlog.ddl_query.decode("utf-8", "replace"))
            if not ddl.query or not self.ddl_passes(ddl):
                return None
            return Selected(binlog.commit_ts, ddl=ddl)
        skip = self._filter.skip_table
        events = binlog.dml_data.events
        kept = [e for e in events if not skip(e.schema_name, e.table_name)]
        self.rows_filtered += len(events) - len(kept)
        if not kept:
            return None
        return Selected(binlog.commit_ts, events=kept)
