"""The proxy imports only broker_core's public names (its __all__), never a submodule.

So the proxy depends on the BrokerAPI Protocol and its value types, not on how the core is
split into modules, and the cluster mode can put a remote broker behind the same names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import popmq.broker_core

PROXY = Path(__file__).resolve().parents[2] / "proxy"
PUBLIC = set(popmq.broker_core.__all__)


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(PROXY.parent)}:{node.lineno}" if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("popmq.broker_core."):
                    found.append(f"{where} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("popmq.broker_core."):
                found.append(f"{where} imports from {node.module}")
            elif node.module == "popmq.broker_core":
                found.extend(
                    f"{where} imports {alias.name}, not exported by popmq.broker_core"
                    for alias in node.names
                    if alias.name not in PUBLIC
                )
    return found


def test_the_proxy_imports_no_broker_core_submodule() -> None:
    files = sorted(PROXY.rglob("*.py"))
    assert len(files) > 20
    violations = [v for path in files for v in _violations(path)]
    assert violations == []


def test_the_scan_catches_a_submodule_import(tmp_path: Path) -> None:
    global PROXY
    saved, PROXY = PROXY, tmp_path
    try:
        bad = tmp_path / "bad.py"
        bad.write_text(
            "from popmq.broker_core.broker import Broker\n"
            "from popmq.broker_core import validation, BrokerAPI\n"
            "import popmq.broker_core.types\n"
        )
        assert len(_violations(bad)) == 3
    finally:
        PROXY = saved
