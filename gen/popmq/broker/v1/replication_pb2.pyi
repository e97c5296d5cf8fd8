from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FollowRequest(_message.Message):
    __slots__ = ("hello", "ack", "heartbeat")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    hello: FollowHello
    ack: FollowAck
    heartbeat: Heartbeat
    def __init__(self, hello: _Optional[_Union[FollowHello, _Mapping]] = ..., ack: _Optional[_Union[FollowAck, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class FollowHello(_message.Message):
    __slots__ = ("shard", "replica", "last_epoch", "last_lsn", "known_epoch")
    SHARD_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_LSN_FIELD_NUMBER: _ClassVar[int]
    KNOWN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    shard: str
    replica: str
    last_epoch: int
    last_lsn: int
    known_epoch: int
    def __init__(self, shard: _Optional[str] = ..., replica: _Optional[str] = ..., last_epoch: _Optional[int] = ..., last_lsn: _Optional[int] = ..., known_epoch: _Optional[int] = ...) -> None: ...

class FollowAck(_message.Message):
    __slots__ = ("lsn",)
    LSN_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    def __init__(self, lsn: _Optional[int] = ...) -> None: ...

class FollowResponse(_message.Message):
    __slots__ = ("batches", "snapshot_file", "snapshot_end", "heartbeat", "epoch")
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FILE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_END_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    batches: ReplicatedBatches
    snapshot_file: SnapshotFile
    snapshot_end: SnapshotEnd
    heartbeat: Heartbeat
    epoch: int
    def __init__(self, batches: _Optional[_Union[ReplicatedBatches, _Mapping]] = ..., snapshot_file: _Optional[_Union[SnapshotFile, _Mapping]] = ..., snapshot_end: _Optional[_Union[SnapshotEnd, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., epoch: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("id", "release")
    ID_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    id: int
    release: bool
    def __init__(self, id: _Optional[int] = ..., release: _Optional[bool] = ...) -> None: ...

class ReplicatedBatches(_message.Message):
    __slots__ = ("batches",)
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    batches: _containers.RepeatedCompositeFieldContainer[ReplicatedBatch]
    def __init__(self, batches: _Optional[_Iterable[_Union[ReplicatedBatch, _Mapping]]] = ...) -> None: ...

class ReplicatedBatch(_message.Message):
    __slots__ = ("lsn", "epoch", "ops")
    LSN_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    lsn: int
    epoch: int
    ops: bytes
    def __init__(self, lsn: _Optional[int] = ..., epoch: _Optional[int] = ..., ops: _Optional[bytes] = ...) -> None: ...

class SnapshotFile(_message.Message):
    __slots__ = ("name", "data", "offset")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    name: str
    data: bytes
    offset: int
    def __init__(self, name: _Optional[str] = ..., data: _Optional[bytes] = ..., offset: _Optional[int] = ...) -> None: ...

class SnapshotEnd(_message.Message):
    __slots__ = ("last_epoch", "last_lsn")
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_LSN_FIELD_NUMBER: _ClassVar[int]
    last_epoch: int
    last_lsn: int
    def __init__(self, last_epoch: _Optional[int] = ..., last_lsn: _Optional[int] = ...) -> None: ...
