"""The README's examples run against a real server, so the README never lies."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ENDPOINT = "127.0.0.1:8081"


def _blocks(language: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def _expected(line: str) -> re.Pattern[str]:
    """A README output line as a pattern: `<anything>` placeholders match any text."""
    parts = re.split(r"<[^>]+>", line)
    return re.compile("^" + ".+".join(re.escape(p) for p in parts) + "$")


def test_readme_cli_session_runs_and_prints_what_the_readme_shows(endpoint: str) -> None:
    (session,) = _blocks("console")
    steps: list[tuple[str, list[str]]] = []
    for line in session.strip().splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    assert steps, "README has no CLI example"
    for command, expected in steps:
        argv = shlex.split(command)
        assert argv[0] == "popmq"
        result = subprocess.run(
            [sys.executable, "-m", "popmq.cli", *argv[1:], "--endpoint", endpoint],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, f"{command}: {result.stderr}"
        output = result.stdout.strip().splitlines()
        assert len(output) == len(expected), f"{command} printed {output}"
        for got, want in zip(output, expected, strict=True):
            assert _expected(want).match(got), f"{command}: {got!r} does not match {want!r}"


def test_readme_sdk_example_runs(endpoint: str) -> None:
    (example,) = _blocks("python")
    code = example.replace(DEFAULT_ENDPOINT, endpoint)
    exec(compile(code, "README.md", "exec"), {})  # the example asserts its own outcome
