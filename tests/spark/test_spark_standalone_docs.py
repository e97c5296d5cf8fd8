"""docs/spark.md's standalone-cluster recipe, run as written: `spark-class` starts a master
and two one-core workers from the venv, `spark-submit` runs the recipe's pop-mode job on
them, and the recipe's `kill` stops them. Only the ports (free ones instead of 7077 and
8080) and the popmq endpoint (this test's server) are this test's; `.venv` is a link to
the interpreter's venv, so `.venv/bin/...` and `$PWD/.venv/bin/python` mean what they say."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popmq import Admin
from tests.support.ports import free_port
from tests.support.server_thread import ServerThread

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
SECTION = "## A standalone cluster: a master and two workers"


def _recipe() -> list[str]:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return re.findall(r"```sh\n(.*?)```", text[start : end if end != -1 else None], re.S)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for whoever adopted it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _stop(script: str, cwd: Path, env: dict[str, str], pids: list[int]) -> list[int]:
    """Run the recipe's stop block; returns the daemons still running 60 s later (then
    SIGKILLed by id, so a failure leaves nothing behind)."""
    subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, timeout=60)
    give_up = time.monotonic() + 60
    while any(_alive(p) for p in pids) and time.monotonic() < give_up:
        time.sleep(0.2)
    left = [p for p in pids if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


@pytest.mark.slow  # six JVMs and three Pythons: 95 to 110 s on 2 cores at load 2 to 5
def test_the_standalone_cluster_recipe_runs_a_pop_job_on_both_workers(
    server: ServerThread, tmp_path: Path
) -> None:
    blocks = _recipe()
    assert len(blocks) == 3, "the recipe has three sh blocks: start, submit, stop"
    master_port, ui_port = free_port(), free_port()
    start, submit, stop = (
        b.replace("7077", str(master_port))
        .replace("8080", str(ui_port))
        .replace("127.0.0.1:8081", server.endpoint)
        for b in blocks
    )
    assert server.endpoint in submit, "the job's endpoint is the recipe's POPMQ_ENDPOINT"
    (tmp_path / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("POPMQ_", "SPARK_", "PYSPARK_"))
    }
    cluster = tmp_path / "spark-cluster"
    try:
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", f"{start}\n{submit}"],
            cwd=tmp_path,
            env=environ,
            capture_output=True,
            text=True,
            timeout=240,
        )
    finally:
        pids = [int(p.read_text()) for p in sorted(cluster.glob("*.pid"))]
        left = _stop(stop, tmp_path, environ, pids)
    assert ran.returncode == 0, ran.stdout + ran.stderr[-4000:]
    assert len(pids) == 3, "a master and two workers were started"
    assert "read 1000 messages" in ran.stdout, ran.stdout
    with Admin(server.endpoint) as admin:
        report = admin.lag_report("workers", "jobs")
    assert sum(q.lag + q.inflight for q in report.queues) == 0, "every batch was acked"
    for worker in ("worker-1", "worker-2"):
        executors = list((cluster / worker).glob("app-*/*/stderr"))
        assert executors, f"{worker} ran an executor of the job"
    assert not left, f"the recipe's kill left daemons running: {left}"
