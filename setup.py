"""Compiles popmq's hot-path modules with mypyc, and builds its C extensions; everything else
is in pyproject.toml.

`pip install -e .` (`make setup`) builds the extensions in place, beside their sources;
`python -m build` puts them in the wheel with the sources. The list and the switch live in
src/popmq/_compiled.py (MODULES for mypyc, NATIVE for the C written by hand):
POPMQ_PURE_PYTHON=1 at build time compiles nothing.

mypyc type-checks what it compiles with the project's mypy settings (pyproject.toml), in the
isolated build environment, where popmq's runtime dependencies other than protobuf are not
installed: the modules it only follows are checked silently, so a package missing there is
no error (the compiled modules themselves use only protobuf, typed by types-protobuf over
the protobuf package, and grpc, untyped anyway). It runs when build_ext does, not when the
sdist or the metadata are made.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path

from setuptools import Distribution, Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
COMPILED = runpy.run_path(str(HERE / "src" / "popmq" / "_compiled.py"))
COMPILE = os.environ.get(COMPILED["PURE_ENV"]) != "1"


class CompiledDistribution(Distribution):
    """Has extensions (a platform wheel) although mypyc lists them only when build_ext runs;
    an sdist has none (it ships the sources, and setup.py compiles them where it is built)."""

    def has_ext_modules(self) -> bool:
        return COMPILE and "sdist" not in self.commands


class BuildCompiled(build_ext):
    """build_ext over the extensions mypyc generates for the modules in _compiled.MODULES,
    and those of _compiled.NATIVE."""

    def finalize_options(self) -> None:
        if COMPILE and not self.distribution.ext_modules:
            from mypyc.build import mypycify

            paths = [COMPILED["source_path"](m, "src/popmq") for m in COMPILED["MODULES"]]
            # Run from the project root, as pip and build do: mypy reads ./pyproject.toml and
            # mypyc writes its C sources under ./build.
            self.distribution.ext_modules = [
                *mypycify(
                    ["--follow-imports=silent", *paths],
                    opt_level="3",
                    group_name=COMPILED["GROUP"],
                ),
                *(
                    Extension(m, [COMPILED["c_source_path"](m, "src/popmq")])
                    for m in COMPILED["NATIVE"]
                ),
            ]
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if self.inplace:
            # mypyc rewrites only the C that changed, and setuptools copies an extension with
            # its build time: after an edit that changes no C (a comment), an extension would
            # keep a time older than its source, which popmq/_compiled.py reads as stale.
            for extension in self.extensions:
                os.utime(self.get_ext_fullpath(extension.name))


setup(distclass=CompiledDistribution, cmdclass={"build_ext": BuildCompiled}, ext_modules=[])
