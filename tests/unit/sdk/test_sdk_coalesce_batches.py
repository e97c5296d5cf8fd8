"""How single-message sends are grouped into requests by a busy producer (no server)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from popmq import AsyncProducer
from popmq._gen.popmq.v1 import messaging_pb2


class EchoChannel:
    """A grpc.aio channel stand-in: SendMessages answers after one loop turn, echoing ids."""

    def __init__(self) -> None:
        self.sizes: list[int] = []

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, timeout: float | None = None, **_: Any) -> Any:  # noqa: ASYNC109
            self.sizes.append(len(request.messages))
            await asyncio.sleep(0)
            return messaging_pb2.SendMessagesResponse(
                results=[
                    messaging_pb2.SendResult(message_id=m.message_id, topic=m.topic)
                    for m in request.messages
                ]
            )

        return call

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None  # the other stubs are never called


def _send_in_loops(senders: int, each: int) -> list[int]:
    channel = EchoChannel()

    async def scenario() -> None:
        async with AsyncProducer("fake", channel=channel, multiplex=False) as producer:

            async def sender(n: int) -> None:
                for i in range(each):
                    receipt = await producer.send("orders", f"{n}-{i}".encode())
                    assert receipt.message_id

            await asyncio.gather(*(sender(n) for n in range(senders)))

    asyncio.run(scenario())
    return channel.sizes


def test_coroutines_sending_in_loops_share_one_request_per_round() -> None:
    sizes = _send_in_loops(senders=4, each=5)

    assert sum(sizes) == 20
    # The first send goes alone; after that each round carries one send of every sender,
    # instead of alternating rounds of 1 and 3.
    assert sizes[0] == 1
    assert max(sizes) == 4
    assert len(sizes) <= 6, sizes


def test_a_lone_sender_sends_each_message_at_once() -> None:
    assert _send_in_loops(senders=1, each=5) == [1, 1, 1, 1, 1]
