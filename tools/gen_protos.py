"""Generate the Python code for protos/ into gen/ (or another directory).

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

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"
SERVED = ("apache/rocketmq/v2", "popmq/v1")
"""Proto directories served over gRPC; popmq/store/v1 is the on-disk format, never served."""
DESCRIPTOR_SET = Path("popmq") / "descriptors.binpb"
"""Where the served protos' descriptor set goes, relative to the output directory."""


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
    return sorted(p for p in out_dir.rglob("*") if p.is_file())


def _protoc(*args: str) -> None:
    well_known = str(resources.files("grpc_tools") / "_proto")
    argv = ["protoc", f"-I{PROTOS}", f"-I{well_known}", *args]
    if protoc.main(argv) != 0:
        raise SystemExit(f"protoc failed: {' '.join(argv)}")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "gen"
    for path in generate(target):
        print(path.relative_to(target))
