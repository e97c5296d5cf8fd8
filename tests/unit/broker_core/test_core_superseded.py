"""Superseded receipt handles and admin queue locks: the bookkeeping the broker shares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from popmq.broker_core.errors import FailedPreconditionError
from popmq.broker_core.pop.superseded import SupersededHandles
from popmq.broker_core.queue_lock import QueueLocks
from popmq.broker_core.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "db")
    yield store
    store.close()


def test_a_handle_is_refused_until_its_deadline_and_its_record_survives_a_restart(
    store: Store,
) -> None:
    handles = SupersededHandles()
    batch = store.batch()
    SupersededHandles.write(batch, 7, 1, 5_000)
    SupersededHandles.write(batch, 8, 0, 1_000)
    store.write(batch, sync=True)
    handles.remember(7, 1, 5_000)
    assert (7, 1) in handles and (7, 0) not in handles

    recovered = SupersededHandles()
    stale = store.batch()
    recovered.recover(store, 2_000, stale)
    assert (7, 1) in recovered
    assert (8, 0) not in recovered  # its deadline passed before the restart
    assert len(stale) == 1  # and its record goes

    expired = recovered.expire(5_000)
    assert len(expired) == 1 and (7, 1) not in recovered
    assert recovered.expire(6_000) == []


def test_acquire_all_takes_every_lock_or_none() -> None:
    locks = QueueLocks()
    assert locks.acquire_all(["t@g@0", "t@g@1"]) == ["t@g@0", "t@g@1"]
    assert locks.held("t@g@1")
    with pytest.raises(FailedPreconditionError, match="t@g@1"):
        locks.acquire_all(["t@g@2", "t@g@1"])
    assert not locks.held("t@g@2")  # released again: none taken
