"""The checked-in generated code equals a fresh generation from protos/."""

from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load_generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "tools" / "gen_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_code_is_up_to_date(tmp_path: Path) -> None:
    fresh = _load_generator().generate(tmp_path)
    expected = {p.relative_to(tmp_path).as_posix() for p in fresh}
    checked_in = {
        p.relative_to(ROOT / "gen").as_posix()
        for p in (ROOT / "gen").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert checked_in == expected, "gen/ is stale: run `make gen` and commit the result"
    stale = [
        name
        for name in sorted(expected)
        if not filecmp.cmp(tmp_path / name, ROOT / "gen" / name, shallow=False)
    ]
    assert stale == [], f"gen/ is stale ({', '.join(stale)}): run `make gen` and commit"
