"""Generate the Python code for protos/ into gen/ (or another directory).

gen/ is installed as the private package `popmq._gen` (src/popmq/_gen is a link to it):
`gen/popmq/v1/admin_pb2.py` is `popmq._gen.popmq.v1.admin_pb2`. protoc writes the imports
between generated modules as imports of top-level packages (popmq, apache); they are
rewritten to point at that private place, so installing popmq adds no `apache` package and no module
outside `popmq`.

The apache.rocketmq.v2 and etcd files are loaded into a private descriptor pool
(`popmq._gen._pool`), not protobuf's default one: the official RocketMQ client registers its
own, different copy of apache.rocketmq.v2 there, any other etcd client its copy of
etcdserverpb / mvccpb, and two different files defining the same symbols cannot share one
pool (`TypeError: duplicate symbol`). The popmq.v1 and store files keep the default pool.

Besides the modules it writes popmq/descriptors.binpb: a FileDescriptorSet of the protos the
server serves, their imports included, WITH source info. The _pb2 modules carry no comments,
so server reflection (proxy/descriptors.py) reads them from this set and grpcurl `describe`
shows the documentation written in the .proto files. protoc output is deterministic, so the
set is byte-for-byte the same on every run.

Everything is checked in; tests/unit/test_generated_code.py regenerates it into a temporary
directory and fails when the checked-in copy is stale.

Usage: python tools/gen_protos.py [OUT_DIR]
"""

from __future__ import annotations

import re
import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
PACKAGE = "popmq._gen"
"""The import name of the output directory."""
SERVED = ("apache/rocketmq/v2", "popmq/v1")
"""Proto directories served publicly (in the reflection set); popmq/store/v1 is the on-disk
format, never served, and popmq/broker/v1 the internal BrokerService (`popmq broker`)."""
PRIVATE_POOL = ("apache/rocketmq/v2", "etcd/etcdserverpb", "etcd/mvccpb")
"""Proto directories loaded into popmq._gen._pool.POOL instead of the default pool."""
DESCRIPTOR_SET = Path("popmq") / "descriptors.binpb"
"""Where the served protos' descriptor set goes, relative to the output directory."""

_POOL_MODULE = '''\
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
'''

_GENERATED_IMPORT = re.compile(
    r"(?<![\w.])(popmq\.v1|popmq\.store\.v1|popmq\.broker\.v1|popmq\.broker\.v1|apache\.rocketmq\.v2|etcd\.(?:etcdserverpb|mvccpb))"
    r"(?=\.\w+_pb2(?:_grpc)?\b| import )"
)


def generate(out_dir: Path) -> list[Path]:
    """Run protoc for every .proto under protos/, write the descriptor set, add __init__s."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(p.relative_to(PROTOS).as_posix() for p in PROTOS.rglob("*.proto"))
    served = [s for s in sources if s.startswith(tuple(f"{d}/" for d in SERVED))]
    _protoc(
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    )
    _protoc(
        f"--descriptor_set_out={out_dir / DESCRIPTOR_SET}",
        "--include_source_info",
        "--include_imports",
        *served,
    )
    for source in sources:
        package_dir = out_dir / Path(source).parent
        while package_dir != out_dir:
            (package_dir / "__init__.py").touch()
            package_dir = package_dir.parent
    (out_dir / "__init__.py").write_text('"""Generated protobuf code (tools/gen_protos.py)."""\n')
    (out_dir / "_pool.py").write_text(_POOL_MODULE)
    for path in sorted(out_dir.rglob("*_pb2*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue  # compiled caches (__pycache__/*.pyc) of an earlier import
        private = path.parent.relative_to(out_dir).as_posix().startswith(PRIVATE_POOL)
        path.write_text(_privatize(path.read_text(), private_pool=private))
    return sorted(p for p in out_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _privatize(code: str, *, private_pool: bool) -> str:
    """Point imports and module names at PACKAGE; load the file into the private pool."""
    lines = []
    for line in code.splitlines(keepends=True):
        if "AddSerializedFile(" in line:  # the serialized descriptor: proto names, not modules
            if private_pool:
                line = line.replace(
                    "_descriptor_pool.Default().AddSerializedFile(", "_pool.add_serialized_file("
                )
        else:
            line = _GENERATED_IMPORT.sub(rf"{PACKAGE}.\1", line)
            if private_pool and line.startswith("_sym_db = "):
                line = f"from {PACKAGE} import _pool\n" + line
        lines.append(line)
    return "".join(lines)


def _protoc(*args: str) -> None:
    well_known = str(resources.files("grpc_tools") / "_proto")
    argv = ["protoc", f"-I{PROTOS}", f"-I{well_known}", *args]
    if protoc.main(argv) != 0:
        raise SystemExit(f"protoc failed: {' '.join(argv)}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "gen"
    for path in generate(target):
        print(path.relative_to(target))
