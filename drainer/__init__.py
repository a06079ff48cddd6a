"""The drainer: merges every pump's binlogs by commit_ts and replicates them downstream.

This package's public entry point, for the tools and jobs that reuse its parts (reparo writes through
the MySQL sink; the Spark replay translates pump binlogs as the drainer does):

    from drainer import DrainerSchema, MemoryJobSource, MySQLSink, SinkError, translate, translate_iter

The arbiter applies the kafka sink's records through the MySQL sink too, decoding them as the relay log
does (`ShapeCache`, `decode_record`).

The daemon itself is `drainer.main`.
"""

from __future__ import annotations

from drainer.relay_codec import ShapeCache, decode_record
from drainer.schema import DrainerSchema, MemoryJobSource
from drainer.sinks.base import SinkError
from drainer.sinks.mysql import MySQLSink
from drainer.translator import translate, translate_iter

__all__ = [
    "DrainerSchema",
    "MemoryJobSource",
    "MySQLSink",
    "ShapeCache",
    "SinkError",
    "decode_record",
    "translate",
    "translate_iter",
]
