"""popmq's etcd stubs carry etcd's wire names and live in popmq's private descriptor pool."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from popmq._gen.etcd.etcdserverpb import rpc_pb2, rpc_pb2_grpc


def test_services_and_messages_have_etcds_wire_names() -> None:
    services = {s.full_name for s in rpc_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "etcdserverpb.KV",
        "etcdserverpb.Watch",
        "etcdserverpb.Lease",
        "etcdserverpb.Maintenance",
    }
    assert rpc_pb2.RangeResponse.DESCRIPTOR.fields_by_name["kvs"].message_type.full_name == (
        "mvccpb.KeyValue"
    )
    assert "/etcdserverpb.Lease/LeaseKeepAlive" in Path(rpc_pb2_grpc.__file__).read_text()


def test_another_etcd_client_in_the_default_pool_does_not_clash() -> None:
    """Another client registers its own etcdserverpb / mvccpb in protobuf's default pool."""
    probe = (
        "from google.protobuf import descriptor_pb2, descriptor_pool\n"
        "theirs = descriptor_pb2.FileDescriptorProto(name='rpc.proto', package='etcdserverpb')\n"
        "message = theirs.message_type.add(name='RangeRequest')\n"
        "message.field.add(name='key', number=1, type=12, label=1)\n"
        "descriptor_pool.Default().Add(theirs)\n"
        "from popmq._gen.etcd.etcdserverpb import rpc_pb2\n"
        "print(rpc_pb2.RangeRequest(key=b'k', limit=3).limit)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3"]
