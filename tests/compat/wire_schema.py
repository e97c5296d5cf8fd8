"""Print the wire schema of pb2 modules as JSON: what must match for clients to interoperate.

Run as `python wire_schema.py MODULE...` (a subprocess, so the official client's modules and
popmq's, which describe the same proto package, never share a descriptor pool). Per message:
field names, numbers, types, labels, type names, proto3 optional and oneof membership; per
enum: value names and numbers; per service: methods, types and streaming. File names and
options are left out: they do not reach the wire.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from google.protobuf import descriptor_pb2


def schema(module_names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def message(m: descriptor_pb2.DescriptorProto, prefix: str) -> None:
        name = prefix + m.name
        out["message " + name] = sorted(
            [
                f.name,
                f.number,
                f.type,
                f.label,
                f.type_name,
                f.proto3_optional,
                m.oneof_decl[f.oneof_index].name if f.HasField("oneof_index") else None,
            ]
            for f in m.field
        )
        for nested in m.nested_type:
            message(nested, name + ".")
        for enum in m.enum_type:
            out["enum " + name + "." + enum.name] = [[v.name, v.number] for v in enum.value]

    for module_name in module_names:
        proto = descriptor_pb2.FileDescriptorProto()
        importlib.import_module(module_name).DESCRIPTOR.CopyToProto(proto)
        package = proto.package + "."
        for m in proto.message_type:
            message(m, package)
        for enum in proto.enum_type:
            out["enum " + package + enum.name] = [[v.name, v.number] for v in enum.value]
        for service in proto.service:
            out["service " + package + service.name] = [
                [x.name, x.input_type, x.output_type, x.client_streaming, x.server_streaming]
                for x in service.method
            ]
    return out


if __name__ == "__main__":
    print(json.dumps(schema(sys.argv[1:]), sort_keys=True))
