"""Binlog files: framed records in `binlog-<index>-<datetime>` files (docs/formats.md#binlogfile-names).

`record` is the pure framing (encode, incremental decode with resynchronisation), `names` the file
names and directory listing, `writer` the appending writer, `reader` the streaming reader.
"""

from common.binlogfile.names import BinlogFileName, Position, format_name, list_binlog_files, parse_name
from common.binlogfile.reader import ReadStats, iter_records
from common.binlogfile.record import Corruption, Record, RecordDecoder, TornTail, encode_record
from common.binlogfile.writer import BinlogFileWriter

__all__ = [
    "BinlogFileName",
    "BinlogFileWriter",
    "Corruption",
    "Position",
    "ReadStats",
    "Record",
    "RecordDecoder",
    "TornTail",
    "encode_record",
    "format_name",
    "iter_records",
    "list_binlog_files",
    "parse_name",
]
