"""Compiles popmq's hot-path modules with mypyc; everything else is in pyproject.toml.

`pip install -e .` (`make setup`) builds the extensions in place, beside their sources;
`python -m build` puts them in the wheel with the sources. The list and the switch live in
src/popmq/_compiled.py: POPMQ_PURE_PYTHON=1 at build time compiles nothing.

mypyc type-checks what it compiles with the project's mypy settings (pyproject.toml). It runs
in the isolated build environment, where popmq's runtime dependencies are not installed: the
modules it only follows are checked silently, so a missing third-party package there is no
error (the compiled modules themselves use only protobuf, typed by types-protobuf, and grpc,
untyped anyway).
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
PACKAGE = HERE / "src" / "popmq"
compiled = runpy.run_path(str(PACKAGE / "_compiled.py"))

ext_modules = []
if os.environ.get(compiled["PURE_ENV"]) != "1":
    from mypyc.build import mypycify

    os.chdir(HERE)  # mypy reads its settings from ./pyproject.toml
    paths = [compiled["source_path"](m, Path("src/popmq")).as_posix() for m in compiled["MODULES"]]
    ext_modules = mypycify(
        ["--follow-imports=silent", *paths], opt_level="3", group_name=compiled["GROUP"]
    )

setup(ext_modules=ext_modules)
