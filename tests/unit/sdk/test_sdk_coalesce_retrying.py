"""A coalesced request being retried does not hold up the producer's other sends (no server:
a channel stand-in fails one request's first try, then holds its repeat, as a cluster proxy
holds a repeat for a quarantined broker)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from popmq import AsyncProducer, RetryBackoff, RetryPolicy
from popmq._gen.popmq.v1 import messaging_pb2
from popmq.sdk._coalesce import MAX_RETRYING_RPCS

STUCK = b"stuck"
"""A body whose request fails its first try with UNAVAILABLE and whose repeat is held."""


class HoldingChannel:
    """A grpc.aio channel stand-in: SendMessages answers after one loop turn, except that a
    request holding a STUCK body fails its first try and its repeat waits for `release`."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.on_wire = 0
        self.most_on_wire = 0
        self.held = 0  # repeats of stuck requests waiting for `release`
        self.changed = asyncio.Event()  # set when `held` grows
        self._failed: set[str] = set()

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, timeout: float | None = None, **_: Any) -> Any:  # noqa: ASYNC109
            self.on_wire += 1
            self.most_on_wire = max(self.most_on_wire, self.on_wire)
            try:
                stuck = [m.message_id for m in request.messages if m.body == STUCK]
                if stuck and stuck[0] not in self._failed:
                    self._failed.add(stuck[0])
                    raise grpc.aio.AioRpcError(
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.aio.Metadata(),
                        grpc.aio.Metadata(("popmq-outcome", "unknown")),
                        details="outcome unknown: the broker cannot be reached now",
                    )
                if stuck:
                    self.held += 1
                    self.changed.set()
                    await self.release.wait()
                await asyncio.sleep(0)
                return messaging_pb2.SendMessagesResponse(
                    results=[
                        messaging_pb2.SendResult(message_id=m.message_id, topic=m.topic)
                        for m in request.messages
                    ]
                )
            finally:
                self.on_wire -= 1

        return call

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # the other stubs are never called


def _producer(channel: HoldingChannel) -> AsyncProducer:
    retry = RetryPolicy(max_attempts=3, backoff=RetryBackoff(initial_s=0.01, max_s=0.01))
    return AsyncProducer("fake", channel=channel, multiplex=False, retry=retry)


async def _until_held(channel: HoldingChannel, held: int) -> None:
    async with asyncio.timeout(30):
        while channel.held < held:
            channel.changed.clear()
            await channel.changed.wait()


def test_sends_after_one_being_retried_do_not_wait_for_it() -> None:
    async def scenario() -> None:
        channel = HoldingChannel()
        async with _producer(channel) as producer:
            stuck = asyncio.create_task(producer.send("orders", STUCK))
            await _until_held(channel, 1)
            # Plain and FIFO sends alike: the held request has no message group to overtake.
            later = [producer.send("orders", f"m{i}".encode()) for i in range(20)]
            later += [producer.send("orders", b"g", message_group="g1") for _ in range(3)]
            async with asyncio.timeout(30):  # without the slot given back: until released
                receipts = await asyncio.gather(*later)
            assert len({r.message_id for r in receipts}) == 23
            assert not stuck.done()
            channel.release.set()
            assert (await stuck).message_id

    asyncio.run(scenario())


def test_a_fifo_request_being_retried_keeps_later_sends_behind_it() -> None:
    async def scenario() -> None:
        channel = HoldingChannel()
        async with _producer(channel) as producer:
            stuck = asyncio.create_task(producer.send("orders", STUCK, message_group="g1"))
            await _until_held(channel, 1)
            later = asyncio.create_task(producer.send("orders", b"next", message_group="g1"))
            for _ in range(20):  # many loop turns: it would have gone out by now
                await asyncio.sleep(0.001)
            assert not later.done()
            channel.release.set()
            await stuck
            await later

    asyncio.run(scenario())


def test_requests_being_retried_give_back_a_bounded_number_of_slots() -> None:
    async def scenario() -> None:
        channel = HoldingChannel()
        async with _producer(channel) as producer:
            stuck = []
            for held in range(1, MAX_RETRYING_RPCS + 2):
                stuck.append(asyncio.create_task(producer.send("orders", STUCK)))
                await _until_held(channel, held)
            # MAX_RETRYING_RPCS held requests gave their slot back; the last one keeps it.
            later = asyncio.create_task(producer.send("orders", b"next"))
            for _ in range(20):
                await asyncio.sleep(0.001)
            assert not later.done()
            assert channel.most_on_wire == MAX_RETRYING_RPCS + 1
            channel.release.set()
            await asyncio.gather(*stuck, later)

    asyncio.run(scenario())
