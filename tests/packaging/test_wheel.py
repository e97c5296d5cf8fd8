"""The wheel as users get it: built with `python -m build`, installed into a fresh venv next to
the official RocketMQ client, then `popmq serve` and a round trip through `import popmq`.

Slow (builds, creates a venv, installs from the package index), so marked `slow`; CI runs it.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest

from popmq._compiled import MODULES, NATIVE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = Path(__file__).resolve().parents[2]
ROUND_TRIP = """
import rocketmq  # the official client's apache.rocketmq.v2, in the default descriptor pool
from popmq import Admin, Message, Producer, SimpleConsumer
from popmq._gen.apache.rocketmq.v2 import service_pb2  # popmq's copy, in its private pool

endpoint = {endpoint!r}
with Admin(endpoint) as admin:
    admin.create_topic("orders", queues=2)
    admin.create_group("billing")
with Producer(endpoint) as producer:
    producer.send("orders", b"hello")
    producer.send_batch("orders", [Message(b"again", tag="TagB")])
with SimpleConsumer(endpoint, group="billing", topic="orders") as consumer:
    bodies = []
    while len(bodies) < 2:
        received = consumer.receive(max_messages=2, wait_s=5)
        consumer.ack(received)
        bodies += [m.body for m in received]
print(sorted(bodies), rocketmq.Producer.__module__, service_pb2.__name__)
from popmq import _compiled
print(_compiled.state()[1])
"""


def _pin(name: str) -> str:
    """The requirement of `name` in the test extra, e.g. rocketmq-python-client==5.1.2."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return next(r for r in extras["optional-dependencies"]["test"] if r.startswith(f"{name}=="))


def _run(*args: str | Path, cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"{args}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _files(site: Path) -> dict[str, str]:
    return {
        p.relative_to(site).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in site.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def _record(info: Path) -> set[str]:
    """The files an installed distribution owns, relative to site-packages."""
    lines = (info / "RECORD").read_text().splitlines()
    files = (line.rsplit(",", 2)[0] for line in lines if line)
    return {f for f in files if not f.startswith("..") and "__pycache__" not in f}


def test_wheel_installs_only_popmq_next_to_the_official_client_and_serves(
    tmp_path: Path,
) -> None:
    pytest.importorskip("build")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["HOME"] = str(tmp_path)  # the official client logs to ~/logs
    dist = tmp_path / "dist"
    # The build itself runs with this environment (where `build` is installed).
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=tmp_path, env=dict(os.environ))
    (wheel,) = dist.glob("popmq-*.whl")
    assert len(list(dist.glob("popmq-*.tar.gz"))) == 1  # the wheel was built from the sdist
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/")[0] for name in archive.namelist()}
        assert "popmq/_gen/popmq/descriptors.binpb" in archive.namelist()
        assert "popmq/broker_core/pop/__init__.py" in archive.namelist()
        # The compiled build (setup.py): each compiled module beside its source, and mypyc's
        # shared library inside the package.
        names = archive.namelist()
        for module in MODULES:
            stem = module.replace(".", "/")
            assert f"{stem}.py" in names
            assert any(n.startswith(f"{stem}.") and n.endswith(".so") for n in names), module
        assert any(n.startswith("popmq/_native__mypyc.") and n.endswith(".so") for n in names)
        for module in NATIVE:  # the C written by hand, built from the sdist's .c files
            stem = module.replace(".", "/")
            assert any(n.startswith(f"{stem}.") and n.endswith(".so") for n in names), module
    assert {t for t in tops if not t.endswith(".dist-info")} == {"popmq"}

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path, env=env)
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check")
    _run(*pip, _pin("rocketmq-python-client"), cwd=tmp_path, env=env)
    (site,) = venv.glob("lib/python*/site-packages")
    before = _files(site)
    (their_info,) = site.glob("rocketmq_python_client-*.dist-info")
    theirs = _record(their_info)
    _run(*pip, wheel, cwd=tmp_path, env=env)
    after = _files(site)

    (our_info,) = site.glob("popmq-*.dist-info")
    ours = _record(our_info)
    assert {f.split("/")[0] for f in ours} == {"popmq", our_info.name}
    assert {f for f in theirs if before[f] != after.get(f)} == set()  # nothing overwritten
    others = set().union(*(_record(i) for i in site.glob("*.dist-info") if i != our_info))
    assert ours & others == set()

    process = subprocess.Popen(
        [bin_dir / "popmq", "serve", "--listen", "127.0.0.1:0", "--data-dir", tmp_path / "data"],
        cwd=tmp_path,
        env={**env, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        endpoint = _listening(process)
        out = _run(python, "-c", ROUND_TRIP.format(endpoint=endpoint), cwd=tmp_path, env=env)
        assert out.split() == [
            "[b'again',", "b'hello']", "rocketmq.v5.producer.producer",
            "popmq._gen.apache.rocketmq.v2.service_pb2", "compiled",
        ]  # fmt: skip
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0


def _listening(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    printed = ""
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        printed += line
        match = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
        if match:
            return match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"popmq serve did not print its listening line:\n{printed}")
