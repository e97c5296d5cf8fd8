"""The data dir is private, the receipt key cannot leak through RocksDB's files, and a
data dir the store cannot use is one clear error."""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.data_dir import KEY_BYTES, KEY_FILE
from popmq.broker_core.errors import DataDirError, InvalidReceiptHandleError
from popmq.broker_core.pop.receipt import ReceiptCodec
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage

_LEGACY_KEY = b"secret:receipt"  # where stores before the key file kept it (meta family)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _broker(data_dir: Path) -> Broker:
    return Broker(BrokerConfig(store=StoreConfig(data_dir=data_dir)))


def test_a_new_data_dir_is_0700_and_the_files_the_open_creates_are_private(
    tmp_path: Path,
) -> None:
    # Files RocksDB creates later follow the process umask: `popmq serve` sets 077
    # (tests/integration/test_serve_data_dir.py); the 0700 dir guards them either way.
    data_dir = tmp_path / "data"
    old_umask = os.umask(0o022)
    try:
        store = Store(data_dir)
    finally:
        os.umask(old_umask)
    try:
        assert _mode(data_dir) == 0o700
        files = [p for p in data_dir.iterdir() if p.is_file()]
        assert {"CURRENT", "LOCK"} <= {p.name for p in files}
        assert any(p.suffix == ".log" for p in files)
        assert {p.name: _mode(p) & 0o077 for p in files} == {p.name: 0 for p in files}
    finally:
        store.close()


def test_the_receipt_key_is_in_its_file_and_in_no_database_file(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        broker = _broker(data_dir)
        await broker.start()
        await broker.close()

    asyncio.run(scenario())
    key = (data_dir / KEY_FILE).read_bytes()
    assert len(key) == KEY_BYTES
    assert not [p.name for p in data_dir.iterdir() if p.name != KEY_FILE and key in p.read_bytes()]


def test_a_legacy_key_in_the_database_moves_to_the_key_file_and_old_handles_stay_valid(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"

    async def issue_handle() -> str:
        broker = _broker(data_dir)
        await broker.start()
        await broker.create_topic("t", 1)
        await broker.send([NewMessage(topic="t", body=b"x")])
        (popped,) = await broker.pop("g", "t", invisible_s=60, wait_s=0)
        await broker.close()
        return popped.receipt_handle

    handle = asyncio.run(issue_handle())
    # Make the store look like one written before the key file: the key in the meta family.
    key = (data_dir / KEY_FILE).read_bytes()
    (data_dir / KEY_FILE).unlink()
    store = Store(data_dir)
    batch = store.batch()
    batch.put("meta", _LEGACY_KEY, key)
    store.write(batch, sync=True)
    store.close()

    async def ack_after_upgrade() -> None:
        broker = _broker(data_dir)
        await broker.start()
        try:
            assert await broker.ack("g", [handle]) == [None]
            assert broker.store.get("meta", _LEGACY_KEY) is None
        finally:
            await broker.close()

    asyncio.run(ack_after_upgrade())
    assert (data_dir / KEY_FILE).read_bytes() == key
    assert _mode(data_dir / KEY_FILE) == 0o600
    assert not [p.name for p in data_dir.iterdir() if p.name != KEY_FILE and key in p.read_bytes()]


def test_a_handle_minted_with_another_key_is_refused(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        broker = _broker(data_dir)
        await broker.start()
        try:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage(topic="t", body=b"x")])
            (popped,) = await broker.pop("g", "t", invisible_s=60, wait_s=0)
            handle = ReceiptCodec(os.urandom(KEY_BYTES), broker_name="broker-a").encode(
                ReceiptCodec((data_dir / KEY_FILE).read_bytes(), broker_name="broker-a").decode(
                    popped.receipt_handle
                )
            )
            (result,) = await broker.ack("g", [handle])
            assert isinstance(result, InvalidReceiptHandleError)
        finally:
            await broker.close()

    asyncio.run(scenario())


def test_an_existing_data_dir_others_can_read_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    with caplog.at_level(logging.WARNING, logger="popmq.broker_core.data_dir"):
        Store(data_dir).close()
    assert f"data dir {data_dir} has mode 0755" in caplog.text
    assert f"chmod 700 {data_dir}" in caplog.text


def test_a_receipt_key_file_of_the_wrong_size_is_a_clear_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir(mode=0o700)
    (data_dir / KEY_FILE).write_bytes(b"short")

    async def scenario() -> None:
        broker = _broker(data_dir)
        with pytest.raises(DataDirError, match=r"receipt\.key holds 5 bytes, not 32"):
            await broker.start()

    asyncio.run(scenario())


def test_a_data_dir_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_text("not a directory")
    with pytest.raises(DataDirError, match="is a file, not a directory"):
        Store(path)
    with pytest.raises(DataDirError, match="a part of the path is a file"):
        Store(path / "below")


def test_a_data_dir_in_use_is_a_clear_error(tmp_path: Path) -> None:
    first = Store(tmp_path / "data")
    try:
        with pytest.raises(DataDirError, match="is in use by another popmq process"):
            Store(tmp_path / "data")
    finally:
        first.close()


def test_a_data_dir_on_a_read_only_file_system_is_a_clear_error(tmp_path: Path) -> None:
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
        with pytest.raises(DataDirError, match="is on a read-only file system"):
            Store(mount / "data")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
