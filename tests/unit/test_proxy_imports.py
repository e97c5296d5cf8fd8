"""The proxy imports only broker_core's public names (its __all__), never a submodule, and
no storage proto (popmq._gen.popmq.store).

So the proxy depends on the BrokerAPI Protocol and its value types, not on how the core is
split into modules or how it stores messages, and the cluster mode can put a remote broker
behind the same names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import popmq.broker_core

PROXY = Path(__file__).resolve().parents[2] / "proxy"
PUBLIC = set(popmq.broker_core.__all__)
STORE = "popmq._gen.popmq.store"


def _is_store(module: str) -> bool:
    return module == STORE or module.startswith(STORE + ".")


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(PROXY.parent)}:{node.lineno}" if hasattr(node, "lineno") else ""
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("popmq.broker_core.") or _is_store(alias.name):
                    found.append(f"{where} imports {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            if _is_store(node.module):
                found.append(f"{where} imports from {node.module} (a storage proto)")
            elif node.module == "popmq._gen.popmq":
                found.extend(
                    f"{where} imports {alias.name} from popmq._gen.popmq (a storage proto)"
                    for alias in node.names
                    if _is_store(f"{node.module}.{alias.name}")
                )
            elif node.module.startswith("popmq.broker_core."):
                found.append(f"{where} imports from {node.module}")
            elif node.module == "popmq.broker_core":
                found.extend(
                    f"{where} imports {alias.name}, not exported by popmq.broker_core"
                    for alias in node.names
                    if alias.name not in PUBLIC
                )
    return found


def test_the_proxy_imports_no_broker_core_submodule_and_no_storage_proto() -> None:
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


def test_the_scan_catches_a_storage_proto_import(tmp_path: Path) -> None:
    global PROXY
    saved, PROXY = PROXY, tmp_path
    try:
        bad = tmp_path / "bad.py"
        bad.write_text(
            "from popmq._gen.popmq.store.v1 import records_pb2\n"
            "import popmq._gen.popmq.store.v1.records_pb2\n"
            "from popmq._gen.popmq import store, v1\n"
            "from popmq._gen.popmq.store import v1 as store_v1\n"
            "from popmq._gen.popmq.v1 import messaging_pb2\n"  # the API protos are fine
            "from popmq._gen.popmq.storefront import x\n"  # only starts like the store
        )
        found = _violations(bad)
        lines = [v.split(" ", 1)[0].rsplit(":", 1)[1] for v in found]
        assert lines == ["1", "2", "3", "4"]
        assert all("popmq._gen.popmq.store" in v or "store from" in v for v in found), found
    finally:
        PROXY = saved
