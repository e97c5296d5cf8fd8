"""One import package: `popmq`, its SDK surface, and nothing that shadows or clashes with it."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

import popmq
import popmq.sdk

ROOT = Path(__file__).resolve().parents[2]
OLD_PACKAGES = "sdk proxy broker_core cli spark_connector apache".split()
"""Top-level names popmq used to install; hand-written code imports none of them."""
HAND_WRITTEN = (
    "bench broker broker_core cli cluster console coordination examples grpc_calls proxy runtime "
    "sdk security spark_connector"
).split()


def test_popmq_exports_the_sdk_surface() -> None:
    assert popmq.__all__ == popmq.sdk.__all__
    for name in popmq.__all__:
        assert getattr(popmq, name) is getattr(popmq.sdk, name), name
    assert set(popmq.__all__) <= set(dir(popmq))


def test_unknown_names_are_attribute_errors() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        popmq.Nope  # noqa: B018


def test_the_server_side_loads_neither_the_sdk_nor_grpc() -> None:
    """`popmq/__init__` imports the SDK lazily: broker_core stays free of gRPC, imported either
    way (`from popmq import broker_core` asks the package's `__getattr__` first)."""
    probe = (
        "import sys\n"
        "from popmq import broker_core\n"
        "import popmq.broker_core\n"
        "print(sorted({'grpc', 'popmq.sdk'} & set(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_no_folder_at_the_root_shadows_the_package() -> None:
    """Spark workers (and `python -m`) put the working directory first on sys.path."""
    assert not (ROOT / "popmq").exists()
    assert Path(popmq.__file__).resolve().parent == (ROOT / "src" / "popmq").resolve()
    links = {p.name: p.resolve() for p in (ROOT / "src" / "popmq").iterdir() if p.is_symlink()}
    folders = {"_gen": "gen", "spark": "spark_connector"}
    assert links == {
        name: ROOT / folders.get(name, name)
        for name in (
            "_gen broker broker_core cli cluster console coordination grpc_calls proxy runtime "
            "sdk security spark"
        ).split()
    }


def test_hand_written_code_imports_only_popmq() -> None:
    """Every import is under popmq (the old top-level names are gone); this keeps new code there."""
    names = "|".join(OLD_PACKAGES)
    statement = re.compile(rf"(?m)^\s*(?:from|import)\s+(?:{names})(?:\.[\w.]+)?\b(?!\.)")
    generated = re.compile(r"(?m)^\s*(?:from|import)\s+popmq\.(?:v1|store)\b")
    offenders = [
        f"{path.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in sorted(_hand_written_files())
        for text in [path.read_text()]
        for m in [*statement.finditer(text), *generated.finditer(text)]
    ]
    assert offenders == []


def test_official_client_and_popmq_protos_load_in_one_process() -> None:
    """Both define apache.rocketmq.v2; popmq's copy lives in a private descriptor pool."""
    # Only looked for: importing it here would put its protos in this process's default pool,
    # which later tests' servers (reflection) would then see.
    if importlib.util.find_spec("rocketmq") is None:
        pytest.skip("the official client (rocketmq-python-client) is not installed")
    probe = (
        "from rocketmq.grpc_protocol import service_pb2 as theirs\n"
        "from popmq._gen.apache.rocketmq.v2 import service_pb2 as ours\n"
        "from popmq.proxy.rocketmq import convert\n"
        "a = theirs.ReceiveMessageRequest(batch_size=3).SerializeToString()\n"
        "b = ours.ReceiveMessageRequest.FromString(a)\n"
        "r = ours.ReceiveMessageResponse(delivery_timestamp=convert.timestamp(1500))\n"
        "print(b.batch_size, r.delivery_timestamp.ToMilliseconds())\n"
    )
    for order in (probe, "import popmq.proxy.rocketmq\n" + probe):
        result = subprocess.run(
            [sys.executable, "-c", order], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == ["3", "1500"]


def _hand_written_files() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    for folder in (*HAND_WRITTEN, "tests", "tools"):
        files.extend((ROOT / folder).rglob("*.py"))
    return files
