"""Does one send being retried hold up a producer's other sends? The time 49 later sends of
one coalescing AsyncProducer take while the request of an earlier one is being retried.

``python -m bench.retrying_send_hol [--hold-s 1.7]``

A channel stand-in (no server: what is measured is the SDK's coalescer) fails the first try
of the request holding the body ``b"stuck"`` with UNAVAILABLE of unknown outcome, and holds
its repeat for ``--hold-s`` seconds: a cluster proxy holds the repeat of a send whose broker
is quarantined up to in_doubt_retry_s (5 s) per attempt, about 17 s in all with the SDK's
retries. Every other request is answered after one loop turn. Prints when the stuck send and
the later ones finished, and the messages per request sent.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from popmq import AsyncProducer, RetryBackoff, RetryPolicy
from popmq._gen.popmq.v1 import messaging_pb2

LATER_SENDS = 49


class _HoldingChannel:
    """A grpc.aio channel stand-in for SendMessages (module docstring)."""

    def __init__(self, hold_s: float) -> None:
        self._hold_s = hold_s
        self._failed = False
        self.requests: list[int] = []
        """Messages per request, in the order sent (retries included)."""

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Callable[..., Awaitable[Any]]:
        async def call(request: Any, timeout: float | None = None, **_: Any) -> Any:  # noqa: ASYNC109
            self.requests.append(len(request.messages))
            if request.messages[0].body == b"stuck":
                if not self._failed:
                    self._failed = True
                    raise grpc.aio.AioRpcError(
                        grpc.StatusCode.UNAVAILABLE,
                        grpc.aio.Metadata(),
                        grpc.aio.Metadata(("popmq-outcome", "unknown")),
                        details="outcome unknown",
                    )
                await asyncio.sleep(self._hold_s)
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


async def measure(hold_s: float) -> str:
    """One run: the line the module docstring describes."""
    channel = _HoldingChannel(hold_s)
    retry = RetryPolicy(max_attempts=3, backoff=RetryBackoff(initial_s=0.01, max_s=0.01))
    async with AsyncProducer("fake", channel=channel, multiplex=False, retry=retry) as producer:
        began = time.monotonic()
        stuck = asyncio.create_task(producer.send("t", b"stuck"))
        await asyncio.sleep(0.05)  # its first try failed; its repeat is held

        async def timed(i: int) -> float:
            await producer.send("t", f"m{i}".encode())
            return time.monotonic() - began

        later = await asyncio.gather(*(timed(i) for i in range(LATER_SENDS)))
        await stuck
        stuck_s = time.monotonic() - began
    return (
        f"stuck send done after {stuck_s:.2f} s; {LATER_SENDS} later sends done after"
        f" {min(later):.2f} to {max(later):.2f} s; messages per request {channel.requests}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold-s", type=float, default=1.7, help="how long the repeat is held")
    args = parser.parse_args()
    print(asyncio.run(measure(args.hold_s)))


if __name__ == "__main__":
    main()
