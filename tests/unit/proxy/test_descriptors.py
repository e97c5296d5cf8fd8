"""The comments reflection adds to the served proto files, from gen/popmq/descriptors.binpb."""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf import descriptor_pb2, descriptor_pool

# The generated modules load the served files: popmq.v1 into the default pool,
# apache.rocketmq.v2 into popmq's private one.
from popmq._gen import _pool
from popmq._gen.apache.rocketmq.v2 import service_pb2  # noqa: F401
from popmq._gen.popmq.v1 import admin_pb2  # noqa: F401
from popmq.proxy.descriptors import descriptor_set, source_code_info

SERVED_FILES = {
    "apache/rocketmq/v2/definition.proto",
    "apache/rocketmq/v2/service.proto",
    "popmq/v1/admin.proto",
    "popmq/v1/messaging.proto",
}


def test_messaging_proto_comes_with_its_comments() -> None:
    locations = source_code_info()["popmq/v1/messaging.proto"].location
    assert len(locations) > 100
    # Path [6, 0] is the file's first service, MessagingService.
    loaded = descriptor_pool.Default().FindFileByName("popmq/v1/messaging.proto")
    assert loaded.services_by_name["MessagingService"].index == 0
    service = next(loc for loc in locations if list(loc.path) == [6, 0])
    assert "MessagingService" in service.leading_comments


def test_exactly_the_served_protos_have_comments() -> None:
    """The store's on-disk protos are never served; well-known types keep the runtime's."""
    assert set(source_code_info()) == SERVED_FILES
    assert all(source_code_info()[name].location for name in SERVED_FILES)


def test_the_set_describes_what_the_generated_modules_loaded() -> None:
    """The comments' element paths fit the served descriptors only if both are the same
    schema; they differ only in source info and protoc's explicit json_name."""
    pool = descriptor_pool.Default()
    documented = {f.name: f for f in descriptor_set().file}
    for name in sorted(SERVED_FILES):
        from_set = documented[name]
        from_set.ClearField("source_code_info")
        _clear_json_names(from_set.message_type)
        loaded = descriptor_pb2.FileDescriptorProto()
        owner = _pool.POOL if name.startswith("apache/") else pool
        owner.FindFileByName(name).CopyToProto(loaded)
        assert from_set == loaded, name


def _clear_json_names(messages: Iterable[descriptor_pb2.DescriptorProto]) -> None:
    for message in messages:
        for field in message.field:
            field.ClearField("json_name")
        _clear_json_names(message.nested_type)
