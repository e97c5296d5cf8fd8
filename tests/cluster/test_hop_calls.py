"""A remote broker's sends and acks as a cluster proxy makes them (cluster/hop_calls.py):
`send_on` and `HopCalls.ack` on a pooled RemoteBroker (no catalog cache), on the hop streams,
the same results as RemoteBroker's own members; not started, or closed, they fail
UnavailableError before anything is written."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from popmq.broker_core import InvalidReceiptHandleError, NewMessage, UnavailableError
from popmq.cluster import RemoteBroker
from popmq.cluster.hop_calls import send_on
from tests.support.brokers import served_broker


def test_a_pooled_remotes_sends_and_acks_go_on_its_hop_streams(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            await served.broker.create_topic("orders", 2)
            await served.broker.create_group("g")
            api = RemoteBroker(served.address, catalog=False, name="b1")
            await api.start()
            try:
                results = await send_on(
                    api, [NewMessage("orders", b"a"), NewMessage("orders", b"b")]
                )
                assert [r.topic for r in results] == ["orders", "orders"]
                assert all(r.message_id for r in results)
                assert api._hop_send is not None and not api._hop_send.unsupported
                popped = await api.pop("g", "orders", max_messages=8, wait_s=0)
                assert sorted(p.record.body for p in popped) == [b"a", b"b"]
                handles = [p.receipt_handle for p in popped]
                answers = await api.hop_calls.ack("g", [*handles, "not-a-handle"])
                assert answers[:2] == [None, None]
                assert isinstance(answers[2], InvalidReceiptHandleError)
                assert api._hop is not None and not api._hop.unsupported
                # Acked: nothing is left to pop.
                assert await api.pop("g", "orders", max_messages=8, wait_s=0) == []
            finally:
                await api.close()

    asyncio.run(scenario())


def test_a_remote_not_started_or_closed_refuses_sends_and_acks(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with served_broker(tmp_path / "b") as served:
            await served.broker.create_topic("orders", 1)
            api = RemoteBroker(served.address, catalog=False, name="b1")
            with pytest.raises(UnavailableError, match=r"'b1' at .* is not started"):
                await send_on(api, [NewMessage("orders", b"early")])
            with pytest.raises(UnavailableError, match="is not started"):
                await api.hop_calls.ack("g", ["h"])
            await api.start()
            assert len(await send_on(api, [NewMessage("orders", b"sent")])) == 1
            await api.close()
            with pytest.raises(UnavailableError, match="is not started"):
                await send_on(api, [NewMessage("orders", b"late")])
            with pytest.raises(UnavailableError, match="is not started"):
                await api.send([NewMessage("orders", b"late")])
            pulled = await served.broker.pull("orders", 0, 0, 8)
            assert [r.body for _, r in pulled.messages] == [b"sent"]  # only while started

    asyncio.run(scenario())
