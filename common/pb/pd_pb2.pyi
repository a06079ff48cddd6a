from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TsoRequest(_message.Message):
    __slots__ = ("cluster_id", "count")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    count: int
    def __init__(self, cluster_id: _Optional[int] = ..., count: _Optional[int] = ...) -> None: ...

class Timestamp(_message.Message):
    __slots__ = ("physical", "logical")
    PHYSICAL_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_FIELD_NUMBER: _ClassVar[int]
    physical: int
    logical: int
    def __init__(self, physical: _Optional[int] = ..., logical: _Optional[int] = ...) -> None: ...

class TsoResponse(_message.Message):
    __slots__ = ("cluster_id", "first", "count")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    first: Timestamp
    count: int
    def __init__(self, cluster_id: _Optional[int] = ..., first: _Optional[_Union[Timestamp, _Mapping]] = ..., count: _Optional[int] = ...) -> None: ...

class ClusterInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterInfoResponse(_message.Message):
    __slots__ = ("cluster_id",)
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    cluster_id: int
    def __init__(self, cluster_id: _Optional[int] = ...) -> None: ...
