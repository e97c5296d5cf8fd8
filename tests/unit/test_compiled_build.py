"""The mypyc build's switch (popmq/_compiled.py): when the compiled modules load, and when
their Python sources do."""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from popmq import _compiled

ROOT = Path(__file__).resolve().parents[2]
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _checkout(tmp_path: Path, *, compiled: bool = True) -> Path:
    """A package directory laid out like a checkout's src/popmq: its folders are links, each
    module of MODULES (and of NATIVE) has its source (its .c file) and, when `compiled`, an
    extension built after it."""
    package = tmp_path / "src" / "popmq"
    package.mkdir(parents=True)
    for folder in ("broker_core", "proxy"):
        (tmp_path / folder).mkdir()
        (package / folder).symlink_to(Path("..", "..", folder))
    sources = [_compiled.source_path(m, str(package)) for m in _compiled.MODULES]
    sources += [_compiled.c_source_path(m, str(package)) for m in _compiled.NATIVE]
    for source in map(Path, sources):
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text("")
        os.utime(source, (1_000, 1_000))
        if compiled:
            source.with_suffix(SUFFIX).write_bytes(b"")
            os.utime(source.with_suffix(SUFFIX), (2_000, 2_000))
    return package


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    package = _checkout(tmp_path)
    monkeypatch.setattr(_compiled, "_PACKAGE", str(package))
    return package


def test_a_build_whose_extensions_are_newer_than_their_sources_loads_compiled(
    checkout: Path,
) -> None:
    assert _compiled.state() == (True, "compiled")


def test_the_environment_switch_loads_the_python_sources(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_compiled.PURE_ENV, "1")
    assert _compiled.state() == (False, "POPMQ_PURE_PYTHON=1")


def test_a_source_edited_after_the_build_loads_every_module_as_python(checkout: Path) -> None:
    """Compiled modules call each other's C code directly: one stale extension would run
    old code, so all of them give way to the sources."""
    module = _compiled.MODULES[-1]
    os.utime(_compiled.source_path(module, str(checkout)), (3_000, 3_000))
    assert _compiled.state() == (False, f"{module} changed since the build")


def test_a_module_the_build_did_not_compile_loads_every_module_as_python(checkout: Path) -> None:
    module = _compiled.MODULES[0]
    Path(_compiled.source_path(module, str(checkout))).with_suffix(SUFFIX).unlink()
    assert _compiled.state() == (False, f"{module} was not compiled")


def test_a_checkout_never_compiled_loads_python_without_a_finder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    monkeypatch.setattr(_compiled, "_PACKAGE", str(_checkout(tmp_path, compiled=False)))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    before = list(sys.meta_path)
    assert _compiled.state() == (False, "not compiled")
    _compiled.choose()
    assert sys.meta_path == before


def test_an_installed_package_is_not_judged_by_file_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wheel's files are written in any order at install time: their times mean nothing."""
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    package = _checkout(tmp_path)
    for folder in ("broker_core", "proxy"):
        (package / folder).unlink()
        (tmp_path / folder).rename(package / folder)
    for module in _compiled.MODULES:
        os.utime(_compiled.source_path(module, str(package)), (3_000, 3_000))
    monkeypatch.setattr(_compiled, "_PACKAGE", str(package))
    assert _compiled.state() == (True, "compiled")


def test_the_python_sources_load_when_asked_even_where_extensions_exist() -> None:
    """Run in a fresh interpreter: which file each compiled module came from."""
    probe = (
        "import importlib, popmq._compiled as c\n"
        "print(all(importlib.import_module(m).__file__.endswith('.py') for m in c.MODULES))"
    )
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env
    )
    assert result.stdout.strip() == "True"


def test_a_c_extension_built_after_its_source_is_not_hidden(checkout: Path) -> None:
    assert not any(_compiled._native_hidden(m) for m in _compiled.NATIVE)


def test_the_environment_switch_hides_the_c_extensions(
    checkout: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_compiled.PURE_ENV, "1")
    assert all(_compiled._native_hidden(m) for m in _compiled.NATIVE)


def test_a_c_source_edited_after_the_build_hides_its_extension(checkout: Path) -> None:
    edited, *others = _compiled.NATIVE
    os.utime(_compiled.c_source_path(edited, str(checkout)), (3_000, 3_000))
    assert _compiled._native_hidden(edited)
    assert not any(_compiled._native_hidden(m) for m in others)  # each judged on its own
    assert _compiled.state() == (True, "compiled")  # the mypyc modules are not affected


def test_a_c_extension_never_built_is_not_hidden_its_import_fails_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(_compiled.PURE_ENV, raising=False)
    monkeypatch.setattr(_compiled, "_PACKAGE", str(_checkout(tmp_path, compiled=False)))
    assert not any(_compiled._native_hidden(m) for m in _compiled.NATIVE)


_PROBE_NATIVE = (
    "import importlib, popmq._compiled as c\n"
    "from popmq.broker_core import record_wire\n"
    "from popmq.broker_core.pop import receipt\n"
    "for module in c.NATIVE:\n"
    "    try:\n"
    "        importlib.import_module(module)\n"
    "    except ModuleNotFoundError:\n"
    "        print('hidden')\n"
    "print(receipt._RUN_LOOPS is None, record_wire._DELIVERY_LOOPS is None)\n"
)


def test_the_switch_hides_the_c_extensions_from_their_importers() -> None:
    """Run in a fresh interpreter: their importers run their own Python under the switch."""
    env = {**os.environ, _compiled.PURE_ENV: "1"}
    result = subprocess.run(
        [sys.executable, "-c", _PROBE_NATIVE], capture_output=True, text=True, check=True, env=env
    )
    assert result.stdout.split() == ["hidden", "hidden", "True", "True"]


def test_every_c_extension_has_its_source() -> None:
    for module in _compiled.NATIVE:
        assert Path(_compiled.c_source_path(module)).is_file(), module


def test_every_compiled_module_exists_and_is_named_once() -> None:
    assert len(set(_compiled.MODULES)) == len(_compiled.MODULES)
    for module in _compiled.MODULES:
        assert Path(_compiled.source_path(module)).is_file(), module
        assert importlib.util.find_spec(module) is not None, module


def test_no_compiled_coroutine_awaits_in_a_finally() -> None:
    """Compiled by the pinned mypyc, a coroutine cancelled while it awaited in a `finally`
    left its CancelledError to be raised again by the next call of that coroutine that ran
    the `finally` to its end (broker/hop_serve.py's reader failed so). Clean up in an
    `except BaseException` and after the `try` instead."""
    found = []
    for module in _compiled.MODULES:
        source = Path(_compiled.source_path(module))
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Try):
                continue
            for statement in node.finalbody:
                for inner in ast.walk(statement):
                    if isinstance(inner, ast.Await | ast.AsyncWith | ast.AsyncFor):
                        found.append(f"{source.relative_to(ROOT)}:{inner.lineno}")
    assert not found, f"await in a finally of a compiled module: {found}"


def test_the_build_uses_the_pinned_mypy_and_protobuf() -> None:
    """setup.py's mypyc is the mypy the dev extra pins; its protobuf is the runtime's."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    requires = project["build-system"]["requires"]
    dev = project["project"]["optional-dependencies"]["dev"]
    runtime = project["project"]["dependencies"]
    for name, pins in (("mypy", dev), ("types-protobuf", dev), ("protobuf", runtime)):
        (pinned,) = (r for r in pins if r.startswith(f"{name}=="))
        assert pinned in requires


def test_the_switch_is_not_taken_for_a_server_setting() -> None:
    """POPMQ_* variables are read as settings; the switch must not make a server refuse to
    start (a compiled build's Python sources are run exactly as the server would be)."""
    from popmq.runtime import settings

    assert settings.read_env({_compiled.PURE_ENV: "1"}) == {}
