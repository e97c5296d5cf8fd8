"""A broker's receipt and recall handles name it; it refuses another broker's, and still
takes the handles it issued before handles named their broker. Its data dir keeps its name:
a start under another name is refused unless the rename is asked for."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from popmq.broker_core import issuer_of
from popmq.broker_core.broker import Broker
from popmq.broker_core.config import BrokerConfig, StoreConfig
from popmq.broker_core.errors import (
    DataDirError,
    InvalidArgumentError,
    InvalidReceiptHandleError,
)
from popmq.broker_core.store import Store
from popmq.broker_core.types import NewMessage
from tests.old_handles import old_recall_handle, old_receipt_handle, renamed
from tests.unit.conftest import now_ms


@asynccontextmanager
async def _broker(
    data_dir: Path, name: str = "", *, allow_rename: bool = False
) -> AsyncIterator[Broker]:
    """A started broker; `name` unset: the default name."""
    store = StoreConfig(data_dir=data_dir)
    config = BrokerConfig(store=store, allow_rename=allow_rename)
    if name:
        config = BrokerConfig(store=store, broker_name=name, allow_rename=allow_rename)
    broker = Broker(config)
    await broker.start()
    try:
        yield broker
    finally:
        await broker.close()


def test_the_default_broker_name_is_broker_a(tmp_path: Path) -> None:
    assert BrokerConfig().broker_name == "broker-a"

    async def scenario() -> None:
        async with _broker(tmp_path / "data") as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"x")])
            (popped,) = await broker.pop("g", "t", invisible_s=60, wait_s=0)
            assert popped.receipt_handle.startswith("broker-a.")

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty"),
        ("b" * 65, "65 characters long: at most 64"),
        ("broker.a", "use only letters, digits, '_' and '-'"),
        ("broker a", "use only letters, digits, '_' and '-'"),
        ("%broker", "use only letters, digits, '_' and '-'"),
    ],
)
def test_a_broker_name_outside_the_alphabet_is_refused(name: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        BrokerConfig(broker_name=name)


def test_handles_name_the_broker_and_ack_change_and_nack_work(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with _broker(tmp_path / "data", "shard-7") as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"a"), NewMessage("t", b"b")])
            first, second = await broker.pop("g", "t", invisible_s=60, wait_s=0, max_messages=2)
            assert issuer_of(first.receipt_handle) == "shard-7"
            changed, _ = await broker.change_invisible_time("g", first.receipt_handle, 30)
            assert issuer_of(changed) == "shard-7"
            assert await broker.ack("g", [changed]) == [None]
            await broker.nack("g", second.receipt_handle, 0)

    asyncio.run(scenario())


def test_a_handle_naming_another_broker_is_refused_with_both_names(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with (
            _broker(tmp_path / "a", "broker-a") as a,
            _broker(tmp_path / "b", "broker-b") as b,
        ):
            for broker in (a, b):
                await broker.create_topic("t", 1)
                await broker.send([NewMessage("t", b"x")])
            (from_b,) = await b.pop("g", "t", invisible_s=60, wait_s=0)
            await a.pop("g", "t", invisible_s=60, wait_s=0)  # the group exists on a too
            expected = "receipt handle was issued by broker 'broker-b'; this is broker 'broker-a'"
            (result,) = await a.ack("g", [from_b.receipt_handle])
            assert isinstance(result, InvalidReceiptHandleError)
            assert str(result).startswith(expected)
            with pytest.raises(InvalidReceiptHandleError, match=expected):
                await a.change_invisible_time("g", from_b.receipt_handle, 30)
            assert await b.ack("g", [from_b.receipt_handle]) == [None]

    asyncio.run(scenario())


def test_a_handle_issued_before_names_is_still_acked_and_changed(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        async with _broker(data_dir) as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"a"), NewMessage("t", b"b")])
            first, second = await broker.pop("g", "t", invisible_s=60, wait_s=0, max_messages=2)
            old_first = old_receipt_handle(data_dir, first.receipt_handle)
            old_second = old_receipt_handle(data_dir, second.receipt_handle)
            assert issuer_of(old_first) is None
            assert await broker.ack("g", [old_first]) == [None]
            changed, _ = await broker.change_invisible_time("g", old_second, 30)
            assert changed.startswith("broker-a.")
            assert await broker.ack("g", [changed]) == [None]

    asyncio.run(scenario())


def test_recall_handles_name_the_broker_old_ones_still_recall(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        async with _broker(data_dir) as broker:
            await broker.create_topic("later", 1, message_type="delay")
            due = now_ms() + 60_000
            keep, drop = await broker.send(
                [
                    NewMessage("later", b"keep", deliver_at_ms=due),
                    NewMessage("later", b"drop", deliver_at_ms=due),
                ]
            )
            assert issuer_of(keep.recall_handle) == "broker-a"
            foreign = renamed(keep.recall_handle, "broker-b")
            with pytest.raises(InvalidArgumentError, match="issued by broker 'broker-b'"):
                await broker.recall("later", foreign)
            old = old_recall_handle(data_dir, drop.recall_handle)
            assert await broker.recall("later", old) == drop.message_id

    asyncio.run(scenario())


def test_a_renamed_broker_still_reads_its_delayed_messages_but_refuses_old_name_handles(
    tmp_path: Path,
) -> None:
    """The message index stores recall handles: query by id keeps working after a rename
    (allow_rename). A client's handle of the old name is refused, naming both."""
    data_dir = tmp_path / "data"

    async def scenario() -> None:
        async with _broker(data_dir, "broker-a") as broker:
            await broker.create_topic("later", 1, message_type="delay")
            (sent,) = await broker.send(
                [NewMessage("later", b"x", deliver_at_ms=now_ms() + 60_000)]
            )
        async with _broker(data_dir, "broker-b", allow_rename=True) as broker:
            peeked = await broker.query_message("later", sent.message_id)
            assert peeked.record.body == b"x"
            with pytest.raises(
                InvalidArgumentError,
                match="recall_handle was issued by broker 'broker-a'; this is broker 'broker-b'",
            ):
                await broker.recall("later", sent.recall_handle)

    asyncio.run(scenario())


def _refused_start(data_dir: Path, name: str) -> str:
    """Start a broker that must refuse the data dir; the error's text."""

    async def scenario() -> None:
        async with _broker(data_dir, name):
            pass

    with pytest.raises(DataDirError) as refused:
        asyncio.run(scenario())
    return str(refused.value)


def test_a_restart_under_another_name_is_refused_naming_both_and_the_rename_option(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"

    async def issue() -> str:
        async with _broker(data_dir, "shard-7") as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"x")])
            (popped,) = await broker.pop("g", "t", invisible_s=600, wait_s=0)
            return popped.receipt_handle

    handle = asyncio.run(issue())
    assert _refused_start(data_dir, "shard-8") == (
        f"data dir {data_dir} belongs to broker 'shard-7', not 'shard-8': its receipt and "
        "recall handles name shard-7 and would be refused. Start it with "
        'broker.broker_name = "shard-7", or rename it with broker.allow_rename = true '
        "(handles issued under the old name then fail as issued by another broker)"
    )

    async def back() -> None:  # the refused start let go of the store: it opens again here
        async with _broker(data_dir, "shard-7") as broker:
            assert await broker.ack("g", [handle]) == [None]

    asyncio.run(back())


def test_allow_rename_starts_and_the_old_names_handles_get_the_other_broker_error(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"

    async def issue() -> str:
        async with _broker(data_dir, "shard-7") as broker:
            await broker.create_topic("t", 1)
            await broker.send([NewMessage("t", b"x")])
            (popped,) = await broker.pop("g", "t", invisible_s=600, wait_s=0)
            return popped.receipt_handle

    handle = asyncio.run(issue())

    async def renamed_broker() -> None:
        async with _broker(data_dir, "shard-8", allow_rename=True) as broker:
            (result,) = await broker.ack("g", [handle])
            assert isinstance(result, InvalidReceiptHandleError)
            assert str(result).startswith(
                "receipt handle was issued by broker 'shard-7'; this is broker 'shard-8'"
            )
        async with _broker(data_dir, "shard-8") as broker:  # the new name is the store's now
            assert broker.server_info().broker_name == "shard-8"

    asyncio.run(renamed_broker())
    assert "belongs to broker 'shard-8', not 'shard-7'" in _refused_start(data_dir, "shard-7")


def test_a_data_dir_without_a_stored_name_adopts_the_configured_one(tmp_path: Path) -> None:
    """Data dirs from before the name was kept start under whatever name is configured."""
    data_dir = tmp_path / "data"

    async def first_start() -> None:
        async with _broker(data_dir) as broker:
            await broker.create_topic("t", 1)

    asyncio.run(first_start())
    store = Store(data_dir)
    batch = store.batch()
    batch.delete("meta", b"broker:name")  # as an older popmq left it
    store.write(batch, sync=True)
    store.close()

    async def adopt() -> None:
        async with _broker(data_dir, "shard-9") as broker:
            assert [t.name for t in await broker.list_topics()] == ["t"]

    asyncio.run(adopt())
    assert "belongs to broker 'shard-9', not 'broker-a'" in _refused_start(data_dir, "")
