"""Imports between popmq's packages run one way, as the table `ALLOWED` says, with no cycle;
and the proxy, with what it shares with the broker process (security, runtime, grpc_calls),
imports only broker_core's public names (its __all__), never a submodule, and no storage
proto (popmq._gen.popmq.store).

So each package can be read, tested and changed knowing only what it builds on; the proxy
depends on the BrokerAPI Protocol and its value types, not on how the core is split into
modules or how it stores messages, and cluster mode puts a remote broker behind the same
names. The broker process (popmq.broker) serves one core and may use its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import popmq.broker_core

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_NAMES_ONLY = ("proxy", "security", "runtime", "grpc_calls")
"""Folders that use broker_core through its public names only."""
SCANNED = ROOT
"""What the scan's file names are relative to (the scan's own tests point it elsewhere)."""
PUBLIC = set(popmq.broker_core.__all__)
STORE = "popmq._gen.popmq.store"


def _is_store(module: str) -> bool:
    return module == STORE or module.startswith(STORE + ".")


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        where = f"{path.relative_to(SCANNED)}:{node.lineno}" if hasattr(node, "lineno") else ""
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


def test_the_proxy_and_what_it_shares_import_no_broker_core_submodule_or_storage_proto() -> None:
    files = sorted(path for folder in PUBLIC_NAMES_ONLY for path in (ROOT / folder).rglob("*.py"))
    assert len(files) > 60
    violations = [v for path in files for v in _violations(path)]
    assert violations == []


def test_the_scan_catches_a_submodule_import(tmp_path: Path) -> None:
    global SCANNED
    saved, SCANNED = SCANNED, tmp_path
    try:
        bad = tmp_path / "bad.py"
        bad.write_text(
            "from popmq.broker_core.broker import Broker\n"
            "from popmq.broker_core import validation, BrokerAPI\n"
            "import popmq.broker_core.types\n"
        )
        assert len(_violations(bad)) == 3
    finally:
        SCANNED = saved


def test_the_scan_catches_a_storage_proto_import(tmp_path: Path) -> None:
    global SCANNED
    saved, SCANNED = SCANNED, tmp_path
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
        SCANNED = saved


FOLDERS = {
    "_gen": "gen",
    "broker_core": "broker_core",
    "coordination": "coordination",
    "grpc_calls": "grpc_calls",
    "security": "security",
    "console": "console",
    "runtime": "runtime",
    "sdk": "sdk",
    "proxy": "proxy",
    "broker": "broker",
    "cluster": "cluster",
    "cli": "cli",
    "spark": "spark_connector",
}
"""Each package (its name under popmq) and the folder that holds it."""

ALLOWED: dict[str, set[str]] = {
    "_gen": set(),
    "broker_core": {"_gen"},
    "coordination": {"_gen", "broker_core"},
    "grpc_calls": {"broker_core"},
    "security": {"broker_core", "coordination", "grpc_calls"},
    "console": {"_gen", "broker_core", "security"},
    "runtime": {"broker_core", "coordination", "security", "console"},
    "sdk": {"_gen"},
    "proxy": {
        "_gen", "broker_core", "coordination", "grpc_calls", "security", "runtime", "console",
    },
    "broker": {"_gen", "broker_core", "coordination", "grpc_calls", "security", "runtime"},
    "cluster": {"_gen", "broker_core", "coordination", "security", "runtime", "proxy", "broker"},
    "cli": {
        "_gen", "broker_core", "coordination", "grpc_calls", "security", "console", "runtime",
        "sdk", "proxy", "broker", "cluster",
    },
    "spark": {"sdk"},
}  # fmt: skip
"""What each package may import. Storage and POP semantics at the bottom; coordination on
it (the Coordinator interface, etcd, and what the processes agree on: routes, group
records); how a gRPC server handles a call (grpc_calls) on broker_core alone; security on
those; the web console (console) on security and the admin protos: runtime hangs its
`[console]` section on ServerConfig, and only the proxy, whose server starts it, imports the
rest (the admin servicer is handed to it, so it imports no proxy module); what every server
process runs on (runtime: settings, process, metrics, logs) on
security. Then the two processes side by side, neither importing the other: the proxy
(popmq serve's front ends) and the broker (popmq broker, its replication and fencing). The
proxies' cluster routing on both (it is a proxy, and talks BrokerService's wire format).
The SDK on the generated stubs alone, Spark on the SDK, the CLI on everything it starts or
calls."""


def test_every_package_has_a_row_in_the_table() -> None:
    """A package linked into popmq (src/popmq) is scanned and has its allowed arrows."""
    linked = {
        path.name: path.resolve().name
        for path in (ROOT / "src" / "popmq").iterdir()
        if path.is_symlink()
    }
    assert linked == {name: (ROOT / folder).resolve().name for name, folder in FOLDERS.items()}
    assert set(ALLOWED) == set(FOLDERS)


def _imported_packages(path: Path) -> set[str]:
    """The popmq packages `path` imports; `from popmq import X` names package X, or the
    SDK for the public names popmq re-exports from it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "popmq":
                modules = [
                    f"popmq.{alias.name}" if alias.name in FOLDERS else "popmq.sdk"
                    for alias in node.names
                ]
            else:
                modules = [node.module]
        found.update(m.split(".")[1] for m in modules if m.startswith("popmq."))
    return found


def _arrows() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> the files whose import draws that arrow."""
    arrows: dict[str, dict[str, list[str]]] = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            for imported in _imported_packages(path) - {package}:
                files = arrows.setdefault(package, {}).setdefault(imported, [])
                files.append(str(path.relative_to(ROOT)))
    return arrows


def test_imports_between_packages_run_only_where_the_table_allows() -> None:
    arrows = _arrows()
    assert arrows["cluster"].keys() >= {"proxy", "coordination"}  # the scan sees imports
    wrong = [
        f"{package} -> {imported} ({', '.join(files[:3])})"
        for package, targets in sorted(arrows.items())
        for imported, files in sorted(targets.items())
        if imported not in ALLOWED[package]
    ]
    assert wrong == [], "imports against ALLOWED:\n" + "\n".join(wrong)


def test_the_table_has_no_cycle() -> None:
    done: set[str] = set()
    while len(done) < len(ALLOWED):
        ready = {p for p, deps in ALLOWED.items() if p not in done and deps <= done}
        assert ready, f"a cycle among {sorted(set(ALLOWED) - done)}"
        done |= ready


def test_the_scan_reads_each_form_of_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import popmq.cluster.topology\n"
        "from popmq.proxy.server import ServerConfig\n"
        "from popmq import Producer, broker_core\n"
        "from . import sibling\n"
        "def later():\n"
        "    from popmq.coordination import Coordinator\n"
    )
    assert _imported_packages(module) == {"cluster", "proxy", "sdk", "broker_core", "coordination"}
