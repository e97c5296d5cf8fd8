from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server_thread import ServerThread


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """A started server over a fresh data dir; stopped after the test."""
    thread = ServerThread(tmp_path / "data")
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture
def endpoint(server: ServerThread) -> str:
    return server.endpoint
