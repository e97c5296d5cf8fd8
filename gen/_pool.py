"""The private descriptor pool of popmq's copies of foreign protos (tools/gen_protos.py).

The official RocketMQ client registers its own copy of apache/rocketmq/v2/*.proto in
protobuf's default pool, and other etcd clients theirs of etcdserverpb and mvccpb; ours
differ from them, so both in one pool is a duplicate-symbol error. The generated apache and
etcd modules add their files here; the well-known types they import are copied from the
default pool first. Messages of this pool take well-known-type values
of this pool: build them with `well_known(...)`, or assign datetime / timedelta values.
"""

from google.protobuf import descriptor, descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

POOL = descriptor_pool.DescriptorPool()


def add_serialized_file(serialized: bytes) -> descriptor.FileDescriptor:
    """Add a generated file to POOL, after the default pool's copy of what it imports."""
    for name in descriptor_pb2.FileDescriptorProto.FromString(serialized).dependency:
        _ensure(name)
    return POOL.AddSerializedFile(serialized)


def well_known(full_name: str) -> type[Message]:
    """POOL's class of a well-known type, e.g. well_known("google.protobuf.Timestamp")."""
    return message_factory.GetMessageClass(POOL.FindMessageTypeByName(full_name))


def _ensure(name: str) -> None:
    try:
        POOL.FindFileByName(name)
    except KeyError:
        file = descriptor_pool.Default().FindFileByName(name)
        for dependency in file.dependencies:
            _ensure(dependency.name)
        POOL.AddSerializedFile(file.serialized_pb)
