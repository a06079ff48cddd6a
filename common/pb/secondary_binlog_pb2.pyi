from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MutationType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    Insert: _ClassVar[MutationType]
    Update: _ClassVar[MutationType]
    Delete: _ClassVar[MutationType]

class BinlogType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DML: _ClassVar[BinlogType]
    DDL: _ClassVar[BinlogType]
Insert: MutationType
Update: MutationType
Delete: MutationType
DML: BinlogType
DDL: BinlogType

class Column(_message.Message):
    __slots__ = ("is_null", "int64_value", "uint64_value", "double_value", "bytes_value", "string_value")
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    INT64_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT64_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    is_null: bool
    int64_value: int
    uint64_value: int
    double_value: float
    bytes_value: bytes
    string_value: str
    def __init__(self, is_null: _Optional[bool] = ..., int64_value: _Optional[int] = ..., uint64_value: _Optional[int] = ..., double_value: _Optional[float] = ..., bytes_value: _Optional[bytes] = ..., string_value: _Optional[str] = ...) -> None: ...

class ColumnInfo(_message.Message):
    __slots__ = ("name", "mysql_type", "is_primary_key", "flen", "decimal")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MYSQL_TYPE_FIELD_NUMBER: _ClassVar[int]
    IS_PRIMARY_KEY_FIELD_NUMBER: _ClassVar[int]
    FLEN_FIELD_NUMBER: _ClassVar[int]
    DECIMAL_FIELD_NUMBER: _ClassVar[int]
    name: str
    mysql_type: str
    is_primary_key: bool
    flen: int
    decimal: int
    def __init__(self, name: _Optional[str] = ..., mysql_type: _Optional[str] = ..., is_primary_key: _Optional[bool] = ..., flen: _Optional[int] = ..., decimal: _Optional[int] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("columns",)
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    def __init__(self, columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ...) -> None: ...

class Table(_message.Message):
    __slots__ = ("schema_name", "table_name", "column_info", "mutations", "unique_keys")
    SCHEMA_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMN_INFO_FIELD_NUMBER: _ClassVar[int]
    MUTATIONS_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_KEYS_FIELD_NUMBER: _ClassVar[int]
    schema_name: str
    table_name: str
    column_info: _containers.RepeatedCompositeFieldContainer[ColumnInfo]
    mutations: _containers.RepeatedCompositeFieldContainer[TableMutation]
    unique_keys: _containers.RepeatedCompositeFieldContainer[Key]
    def __init__(self, schema_name: _Optional[str] = ..., table_name: _Optional[str] = ..., column_info: _Optional[_Iterable[_Union[ColumnInfo, _Mapping]]] = ..., mutations: _Optional[_Iterable[_Union[TableMutation, _Mapping]]] = ..., unique_keys: _Optional[_Iterable[_Union[Key, _Mapping]]] = ...) -> None: ...

class Key(_message.Message):
    __slots__ = ("name", "column_names")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COLUMN_NAMES_FIELD_NUMBER: _ClassVar[int]
    name: str
    column_names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., column_names: _Optional[_Iterable[str]] = ...) -> None: ...

class TableMutation(_message.Message):
    __slots__ = ("type", "row", "change_row")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    CHANGE_ROW_FIELD_NUMBER: _ClassVar[int]
    type: MutationType
    row: Row
    change_row: Row
    def __init__(self, type: _Optional[_Union[MutationType, str]] = ..., row: _Optional[_Union[Row, _Mapping]] = ..., change_row: _Optional[_Union[Row, _Mapping]] = ...) -> None: ...

class DMLData(_message.Message):
    __slots__ = ("tables",)
    TABLES_FIELD_NUMBER: _ClassVar[int]
    tables: _containers.RepeatedCompositeFieldContainer[Table]
    def __init__(self, tables: _Optional[_Iterable[_Union[Table, _Mapping]]] = ...) -> None: ...

class DDLData(_message.Message):
    __slots__ = ("schema_name", "table_name", "ddl_query")
    SCHEMA_NAME_FIELD_NUMBER: _ClassVar[int]
    TABLE_NAME_FIELD_NUMBER: _ClassVar[int]
    DDL_QUERY_FIELD_NUMBER: _ClassVar[int]
    schema_name: str
    table_name: str
    ddl_query: bytes
    def __init__(self, schema_name: _Optional[str] = ..., table_name: _Optional[str] = ..., ddl_query: _Optional[bytes] = ...) -> None: ...

class Binlog(_message.Message):
    __slots__ = ("type", "commit_ts", "dml_data", "ddl_data", "time_zone")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    COMMIT_TS_FIELD_NUMBER: _ClassVar[int]
    DML_DATA_FIELD_NUMBER: _ClassVar[int]
    DDL_DATA_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    type: BinlogType
    commit_ts: int
    dml_data: DMLData
    ddl_data: DDLData
    time_zone: str
    def __init__(self, type: _Optional[_Union[BinlogType, str]] = ..., commit_ts: _Optional[int] = ..., dml_data: _Optional[_Union[DMLData, _Mapping]] = ..., ddl_data: _Optional[_Union[DDLData, _Mapping]] = ..., time_zone: _Optional[str] = ...) -> None: ...
