"""Sends straight to one replica's BrokerService (no proxy), from wherever this runs.

A test calls `direct_sends` in its own process, or runs this module where it cannot go
itself, e.g. inside a network namespace (`ip netns exec NS python -m
tests.cluster.direct_send ADDRESS TOPIC --for-s 6`), which prints the result as one JSON
line. Each body is `<prefix><n>`; `stored` are the sends the replica acknowledged, `refused`
the others as (body, error code, message).

With `--wait-go` the module first reads the replica's info and catalog (so the connection
is up), prints `ready` and waits for a line on stdin: the first send then leaves the
moment the test says, e.g. right after it cut the replica off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field

from popmq.broker_core.errors import PopMQError
from popmq.broker_core.types import NewMessage
from popmq.cluster import RemoteBroker


@dataclass
class DirectSends:
    """What the replica answered to each send."""

    stored: list[str] = field(default_factory=list)
    refused: list[tuple[str, str, str]] = field(default_factory=list)

    @classmethod
    def from_json(cls, text: str) -> DirectSends:
        data = json.loads(text)
        return cls(data["stored"], [tuple(r) for r in data["refused"]])


async def direct_sends(
    address: str,
    topic: str,
    *,
    prefix: str = "direct-",
    count: int = 1,
    for_s: float = 0.0,
    pause_s: float = 0.5,
    call_timeout_s: float = 10.0,
    go: Callable[[], Awaitable[None]] | None = None,
) -> DirectSends:
    """Send one by one: at least `count` messages, and on until `for_s` seconds passed
    (counted from `go`, which is awaited once connected: the replica answered reads)."""
    remote = RemoteBroker(address, call_timeout_s=call_timeout_s, catalog=go is not None)
    await remote.start()
    if go is not None:
        try:
            await go()
        except BaseException:
            await remote.close()
            raise
    result = DirectSends()
    began = time.monotonic()
    n = 0
    try:
        while n < count or time.monotonic() - began < for_s:
            body = f"{prefix}{n}"
            n += 1
            try:
                await remote.send([NewMessage(topic, body.encode())])
            except PopMQError as exc:
                result.refused.append((body, exc.code, str(exc)))
            else:
                result.stored.append(body)
            await asyncio.sleep(pause_s)
    finally:
        await remote.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("address", help="the replica's BrokerService HOST:PORT")
    parser.add_argument("topic")
    parser.add_argument("--prefix", default="direct-")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--for-s", type=float, default=0.0)
    parser.add_argument("--pause-s", type=float, default=0.5)
    parser.add_argument("--call-timeout-s", type=float, default=10.0)
    parser.add_argument("--wait-go", action="store_true", help="print ready, read a line")
    args = parser.parse_args(argv)

    async def go() -> None:
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)

    result = asyncio.run(
        direct_sends(
            args.address,
            args.topic,
            prefix=args.prefix,
            count=args.count,
            for_s=args.for_s,
            pause_s=args.pause_s,
            call_timeout_s=args.call_timeout_s,
            go=go if args.wait_go else None,
        )
    )
    print(json.dumps(asdict(result)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
