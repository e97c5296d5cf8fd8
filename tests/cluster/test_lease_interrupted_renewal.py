"""A proxy that dies in the middle of renewing a lease: after the broker answered its
ChangeInvisibleTime (new handles, the old ones superseded) and before it wrote the new
handles to the coordinator. Another proxy then replays, renews and acks the lease from the
old handles it finds there, and each message is acknowledged once, never delivered again.

The interleaving is made exactly, not by killing at random: proxy A's broker passes every
call through, but once the broker has answered the ChangeInvisibleTime calls of a page,
A hangs there, and the test cancels its renewal, as A's death would end it. Against the
embedded broker and, through BrokerService, a remote one; with the lease in a
LocalCoordinator and in a real etcd.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from popmq.broker_core import (
    BrokerAPI,
    NewMessage,
    PoppedMessage,
    ReceiptHandleSupersededError,
)
from popmq.proxy.leases import LeaseTable
from tests.cluster.conftest import MakeCoordinator
from tests.support.brokers import Served, remote, served_broker
from tests.support.waiting import until

pytestmark = pytest.mark.timeout(90)


class _DiesAfterChange:
    """Proxy A's broker: the real one, except that after the broker answered a
    ChangeInvisibleTime the caller never hears of it (it hangs until cancelled)."""

    def __init__(self, broker: BrokerAPI) -> None:
        self._broker = broker
        self.changed = 0
        """ChangeInvisibleTime calls the broker answered."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    async def change_invisible_time(
        self, group: str, handle: str, invisible_s: float
    ) -> tuple[str, int]:
        await self._broker.change_invisible_time(group, handle, invisible_s)
        self.changed += 1
        await asyncio.Event().wait()  # the proxy is dead from here on
        raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def _brokers(tmp_path: Path, via: str) -> AsyncIterator[tuple[Served, BrokerAPI, BrokerAPI]]:
    """The served broker, and the broker each of the two proxies talks to."""
    async with served_broker(tmp_path / "b1") as served:
        if via == "embedded":
            yield served, served.broker, served.broker
            return
        async with remote(served.address) as a, remote(served.address) as b:
            yield served, a, b


def _popper(broker: BrokerAPI) -> Callable[[], Awaitable[list[PoppedMessage]]]:
    return lambda: broker.pop("g", "events", max_messages=4, invisible_s=30, wait_s=0)


@pytest.mark.parametrize("via", ["embedded", "remote"])
@pytest.mark.parametrize(
    "then", [("ack",), ("renew", "ack"), ("replay", "renew", "ack")], ids="-".join
)
def test_a_renewal_cut_between_broker_and_coordinator_loses_no_lease_semantics(
    make_coordinator: MakeCoordinator, tmp_path: Path, via: str, then: tuple[str, ...]
) -> None:
    async def scenario() -> None:
        async with (
            _brokers(tmp_path, via) as (served, broker_a, broker_b),
            make_coordinator() as ca,
            make_coordinator() as cb,
        ):
            core = served.broker
            await core.create_topic("events", 2)
            await core.send([NewMessage("events", f"m{i}".encode()) for i in range(8)])
            dying = _DiesAfterChange(broker_a)
            a = LeaseTable(cast(BrokerAPI, dying), ca)
            b = LeaseTable(broker_b, cb)
            token = "spark/run/0/1"
            p0 = await a.pop("g", "events", token, 0, 30, _popper(broker_a))
            p1 = await a.pop("g", "events", token, 1, 30, _popper(broker_a))
            assert len(p0.messages) == len(p1.messages) == 4

            renewal = asyncio.create_task(a.renew("g", [token], 60))
            await until(lambda: dying.changed == 4, "page 0 renewed on the broker", 30)
            renewal.cancel()  # A dies before writing page 0's new handles
            with contextlib.suppress(asyncio.CancelledError):
                await renewal
            # The coordinator still holds page 0's old handles, which the broker refuses to
            # an ordinary client as before.
            old = [m.receipt_handle for m in p0.messages]
            refused = await core.ack("g", old)
            assert all(isinstance(r, ReceiptHandleSupersededError) for r in refused)

            for step in then:
                if step == "replay":
                    again = await b.pop("g", "events", token, 0, 30, _popper(broker_b))
                    assert again.replayed
                    assert [m.record.message_id for m in again.messages] == [
                        m.record.message_id for m in p0.messages
                    ]
                    assert {m.delivery_attempt for m in again.messages} == {1}
                    assert not {m.receipt_handle for m in again.messages} & set(old)
                    # The followed handles are the live ones.
                    found = await core.get_deliveries(
                        "g", [m.receipt_handle for m in again.messages]
                    )
                    assert all(isinstance(f, PoppedMessage) for f in found)
                elif step == "renew":
                    (renewed,) = await b.renew("g", [token], 60)
                    assert (renewed.error, renewed.messages) == (None, 8)
                    assert renewed.lease_until_ms > p0.lease_until_ms + 20_000
                else:
                    (acked,) = await b.ack("g", [token])
                    assert (acked.error, acked.messages) == (None, 8)

            # Every message acknowledged once; none in flight, none left to deliver.
            assert await core.inflight_count(group="g") == 0
            lag = await core.group_lag("g")  # the retry queue's rows included
            assert sum(q.lag + q.inflight for q in lag) == 0
            metrics = await core.metrics_snapshot()
            assert sum(metrics.acked.values()) == 8
            assert sum(metrics.revived.values()) == 0
            assert await core.pop("g", "events", max_messages=32, wait_s=0) == []

    asyncio.run(scenario())
