"""The comments of the served proto files, for server reflection.

protoc strips SourceCodeInfo (the comments and their positions) from the descriptors it
embeds in the _pb2 modules, so reflection built on those gives grpcurl `describe` no
documentation. tools/gen_protos.py therefore also writes `popmq/descriptors.binpb`, a
FileDescriptorSet of the served protos (popmq.v1, apache.rocketmq.v2) with source info,
checked in next to the generated modules, as package data of `popmq._gen.popmq`.

Reflection takes only the SourceCodeInfo from the set and adds it to the descriptor the
server loaded. The rest of the set's copy is not served: protoc writes an explicit
`json_name` into every field there, and grpcurl prints JSON with those camelCase names
instead of the field names it uses without them. Both copies come from the same .proto
files (tests/unit/test_generated_code.py), so the comments' element paths match.

Read once per process, on first use: a ~120 KB file parsed in about a millisecond.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources
from types import MappingProxyType

from google.protobuf import descriptor_pb2

DESCRIPTOR_SET = "descriptors.binpb"
"""The set's file name inside `popmq._gen.popmq` (gen/popmq/)."""

_WELL_KNOWN = "google/protobuf/"
"""Imports in the set that keep the protobuf runtime's descriptors, as every other file."""


@cache
def source_code_info() -> Mapping[str, descriptor_pb2.SourceCodeInfo]:
    """The comments of the project's served proto files, by file name (`popmq/v1/admin.proto`).

    The well-known types the set includes as imports are left out: their descriptors come
    from the protobuf runtime, whose version may differ from the protoc that wrote the set.
    """
    files = descriptor_set().file
    return MappingProxyType(
        {f.name: f.source_code_info for f in files if not f.name.startswith(_WELL_KNOWN)}
    )


def descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """The whole set as protoc wrote it, parsed afresh on each call."""
    data = (resources.files("popmq._gen.popmq") / DESCRIPTOR_SET).read_bytes()
    return descriptor_pb2.FileDescriptorSet.FromString(data)
