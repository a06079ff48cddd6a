"""The TiDB datum codec used inside binlog rows (docs/formats.md#datum-codec), pure functions only.

Modules, each starting with the byte layout it implements:

* :mod:`~common.codec.number` -- varint/uvarint/zigzag, comparable ints, floats, memcomparable bytes
* :mod:`~common.codec.decimal` -- MySQL binary decimal
* :mod:`~common.codec.mytime` -- packed DATE/DATETIME/TIMESTAMP, TIME as nanoseconds
* :mod:`~common.codec.json_binary` -- TiDB binary JSON and its MySQL-style text
* :mod:`~common.codec.datum` -- :class:`Datum`, flags 0-10, ``encode_value``/``decode_one``/``peek``
* :mod:`~common.codec.row` -- old row format and the inserted/updated/deleted row slots
* :mod:`~common.codec.flatten` -- :class:`ColumnType`, ``flatten``/``unflatten``
"""

from common.codec.datum import (
    NULL,
    Datum,
    DatumValue,
    Kind,
    SizedDecimal,
    bytes_datum,
    decimal_datum,
    decode_datums,
    decode_one,
    duration_datum,
    encode_datum,
    encode_key,
    encode_value,
    float_datum,
    int_datum,
    json_datum,
    peek,
    uint_datum,
)
from common.codec.flatten import ColumnType, MySQLType, flatten, to_float32, unflatten
from common.codec.json_binary import JsonOpaque, JsonTemporal, JsonValue, json_to_text, parse_json_text
from common.codec.mytime import ZERO_TIME, MysqlTime, format_duration, format_time
from common.codec.row import (
    EXTRA_HANDLE_ID,
    Row,
    decode_deleted_row,
    decode_inserted_row,
    decode_int_handle,
    decode_row,
    decode_updated_row,
    encode_deleted_row,
    encode_inserted_row,
    encode_row,
    encode_updated_row,
)

__all__ = [
    "EXTRA_HANDLE_ID",
    "NULL",
    "ZERO_TIME",
    "ColumnType",
    "Datum",
    "DatumValue",
    "JsonOpaque",
    "JsonTemporal",
    "JsonValue",
    "Kind",
    "MySQLType",
    "MysqlTime",
    "Row",
    "SizedDecimal",
    "bytes_datum",
    "decimal_datum",
    "decode_datums",
    "decode_deleted_row",
    "decode_inserted_row",
    "decode_int_handle",
    "decode_one",
    "decode_row",
    "decode_updated_row",
    "duration_datum",
    "encode_datum",
    "encode_deleted_row",
    "encode_inserted_row",
    "encode_key",
    "encode_row",
    "encode_updated_row",
    "encode_value",
    "flatten",
    "float_datum",
    "format_duration",
    "format_time",
    "int_datum",
    "json_datum",
    "json_to_text",
    "parse_json_text",
    "peek",
    "to_float32",
    "uint_datum",
    "unflatten",
]
