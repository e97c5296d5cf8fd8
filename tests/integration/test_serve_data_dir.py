"""`popmq serve` over a data dir it cannot use: one line saying why and exit 2, never a
traceback; over one it can: every file it writes is private to its user."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from popmq import Admin, Producer
from popmq.broker_core.data_dir import KEY_FILE


def _serve(data_dir: Path, *prefix: str, options: tuple[str, ...] = ()) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "popmq.cli", "serve", "--listen", "127.0.0.1:0"]
    return subprocess.Popen(
        [*prefix, *command, "--data-dir", str(data_dir), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _refused(data_dir: Path, *prefix: str, options: tuple[str, ...] = ()) -> str:
    """Run a server that must refuse to start; its one error line."""
    process = _serve(data_dir, *prefix, options=options)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2, (out, err)
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    return errors[0]


def _endpoint(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        if match:
            return match.group(1)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError("the server did not print its listening line")


def test_a_data_dir_that_is_a_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_text("a file")
    assert _refused(path) == (
        f"error: data dir {path} is a file, not a directory; give a directory path"
    )


def test_a_data_dir_in_use_by_another_server_is_one_line_and_exit_2(tmp_path: Path) -> None:
    first = _serve(tmp_path / "data")
    try:
        _endpoint(first)
        line = _refused(tmp_path / "data")
        assert line.startswith(f"error: data dir {tmp_path / 'data'} is in use by another popmq")
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=30)
    assert first.returncode == 0


def test_a_data_dir_the_user_may_not_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and setpriv to run the server as another user")
    tmp_path.chmod(0o755)
    private = tmp_path / "root-only"
    private.mkdir(mode=0o700)
    as_nobody = (setpriv, "--reuid=65534", "--regid=65534", "--clear-groups")
    probe = subprocess.run(
        [*as_nobody, sys.executable, "-c", "import popmq.cli"], capture_output=True, check=False
    )
    if probe.returncode != 0:  # e.g. a checkout under a 0700 directory (mktemp -d)
        pytest.skip("user nobody cannot read this checkout or its venv to run the server")
    line = _refused(private / "data", *as_nobody)
    assert "is not permitted to this user (permission denied)" in line


def test_a_data_dir_on_a_read_only_file_system_is_one_line_and_exit_2(tmp_path: Path) -> None:
    mount = tmp_path / "ro"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here ({result.stderr.strip()})")
    try:
        assert "is on a read-only file system" in _refused(mount / "data")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def test_every_file_the_server_writes_is_private_to_its_user(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    process = _serve(data_dir)
    try:
        endpoint = _endpoint(process)
        with Admin(endpoint) as admin:
            admin.create_topic("t", queues=1)
        with Producer(endpoint) as producer:
            for _ in range(40):  # ~5 MiB: memtables flush into table files meanwhile
                producer.send("t", os.urandom(128 * 1024))
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in data_dir.iterdir()}
    assert any(name.endswith(".sst") for name in files)
    assert files[KEY_FILE] == 0o600
    assert {name: mode & 0o077 for name, mode in files.items()} == dict.fromkeys(files, 0)


def _serve_and_stop(data_dir: Path, options: tuple[str, ...] = ()) -> str:
    """Start a server, stop it cleanly; the broker name it reported."""
    process = _serve(data_dir, options=options)
    try:
        with Admin(_endpoint(process)) as admin:
            name = admin.server_info().config["broker.broker_name"]
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    assert process.returncode == 0
    return name


def test_a_restart_under_another_broker_name_is_one_line_and_exit_2_unless_renaming(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    assert _serve_and_stop(data_dir) == '"broker-a"'
    line = _refused(data_dir, options=("--set", "broker.broker_name=shard-7"))
    assert line.startswith(
        f"error: data dir {data_dir} belongs to broker 'broker-a', not 'shard-7': "
    )
    assert 'broker.broker_name = "broker-a", or rename it with broker.allow_rename = true' in line
    renaming = ("--set", "broker.broker_name=shard-7", "--set", "broker.allow_rename=true")
    assert _serve_and_stop(data_dir, renaming) == '"shard-7"'
    assert _serve_and_stop(data_dir, ("--set", "broker.broker_name=shard-7")) == '"shard-7"'
