"""Generate the Python code for protos/ into gen/ (or another directory).

The generated modules are checked in; tests/unit/test_generated_code.py regenerates them
into a temporary directory and fails when the checked-in copy is stale.

Usage: python tools/gen_protos.py [OUT_DIR]
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTOS = ROOT / "protos"


def generate(out_dir: Path) -> list[Path]:
    """Run protoc for every .proto under protos/ and add the package __init__ files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sources = sorted(p.relative_to(PROTOS).as_posix() for p in PROTOS.rglob("*.proto"))
    well_known = str(resources.files("grpc_tools") / "_proto")
    args = [
        "protoc",
        f"-I{PROTOS}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")
    for source in sources:
        package_dir = out_dir / Path(source).parent
        while package_dir != out_dir:
            (package_dir / "__init__.py").touch()
            package_dir = package_dir.parent
    return sorted(p for p in out_dir.rglob("*") if p.is_file())


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "gen"
    for path in generate(target):
        print(path.relative_to(target))
