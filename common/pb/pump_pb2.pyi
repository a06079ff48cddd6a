from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WriteBinlogReq(_message.Message):
    __slots__ = ("clusterID", "payload")
    CLUSTERID_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    clusterID: int
    payload: bytes
    def __init__(self, clusterID: _Optional[int] = ..., payload: _Optional[bytes] = ...) -> None: ...

class WriteBinlogResp(_message.Message):
    __slots__ = ("errmsg",)
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    errmsg: str
    def __init__(self, errmsg: _Optional[str] = ...) -> None: ...

class PullBinlogReq(_message.Message):
    __slots__ = ("clusterID", "startFrom")
    CLUSTERID_FIELD_NUMBER: _ClassVar[int]
    STARTFROM_FIELD_NUMBER: _ClassVar[int]
    clusterID: int
    startFrom: Pos
    def __init__(self, clusterID: _Optional[int] = ..., startFrom: _Optional[_Union[Pos, _Mapping]] = ...) -> None: ...

class PullBinlogResp(_message.Message):
    __slots__ = ("entity",)
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    entity: Entity
    def __init__(self, entity: _Optional[_Union[Entity, _Mapping]] = ...) -> None: ...

class Pos(_message.Message):
    __slots__ = ("suffix", "offset")
    SUFFIX_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    suffix: int
    offset: int
    def __init__(self, suffix: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class Entity(_message.Message):
    __slots__ = ("pos", "payload", "checksum", "meta")
    POS_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    META_FIELD_NUMBER: _ClassVar[int]
    pos: Pos
    payload: bytes
    checksum: bytes
    meta: Meta
    def __init__(self, pos: _Optional[_Union[Pos, _Mapping]] = ..., payload: _Optional[bytes] = ..., checksum: _Optional[bytes] = ..., meta: _Optional[_Union[Meta, _Mapping]] = ...) -> None: ...

class Meta(_message.Message):
    __slots__ = ("startTs", "commitTs")
    STARTTS_FIELD_NUMBER: _ClassVar[int]
    COMMITTS_FIELD_NUMBER: _ClassVar[int]
    startTs: int
    commitTs: int
    def __init__(self, startTs: _Optional[int] = ..., commitTs: _Optional[int] = ...) -> None: ...
