"""A cluster proxy's reads by receipt handle: each handle is asked of the broker that issued
it (the broker named in the handle), the handles of one broker in one call, and the answers
put back in the handles' order. A handle that names no broker, or whose broker does not
answer, gets its own error; the others are answered.

Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TypeVar

from popmq.broker_core import (
    InvalidArgumentError,
    PopMQError,
    PoppedMessage,
    UnavailableError,
    check_name,
)
from popmq.broker_core import validation as rules
from popmq.cluster.broker_pool import BrokerPool
from popmq.cluster.topology import Topology, issuer

_R = TypeVar("_R")

_PENDING = UnavailableError("no answer yet")
"""Placeholder of a result not answered yet (every one is replaced before returning)."""


def _by_issuer(
    group: str, handles: Sequence[str]
) -> tuple[list[_R | PopMQError], dict[str, list[int]]]:
    """The results to fill in (a handle naming no broker has its error already) and the
    indexes of the handles each broker issued."""
    check_name("group", group)
    if not handles or len(handles) > rules.MAX_HANDLES:
        raise InvalidArgumentError(
            f"{len(handles)} receipt handles: give 1 to {rules.MAX_HANDLES}",
            field="receipt_handles",
            allowed=f"1..{rules.MAX_HANDLES}",
        )
    results: list[_R | PopMQError] = []
    by_broker: dict[str, list[int]] = {}
    for index, handle in enumerate(handles):
        try:
            by_broker.setdefault(issuer(handle), []).append(index)
            results.append(_PENDING)  # replaced below
        except PopMQError as error:
            results.append(error)
    return results, by_broker


async def get_deliveries(
    pool: BrokerPool, topology: Topology, group: str, handles: Sequence[str]
) -> list[PoppedMessage | PopMQError]:
    """Each handle's delivery (BrokerAPI.get_deliveries), queue ids as the route numbers
    them."""
    results: list[PoppedMessage | PopMQError]
    results, by_broker = _by_issuer(group, handles)

    async def read_on(broker: str, indexes: list[int]) -> None:
        try:
            answers = await pool.get(broker).get_deliveries(group, [handles[i] for i in indexes])
        except PopMQError as error:
            for index in indexes:
                results[index] = error
            return
        for index, answer in zip(indexes, answers, strict=True):
            if isinstance(answer, PoppedMessage):
                answer.queue_id = topology.global_id(answer.topic, broker, answer.queue_id)
            results[index] = answer

    await asyncio.gather(*(read_on(b, idx) for b, idx in by_broker.items()))
    return results


async def follow_handles(
    pool: BrokerPool, group: str, handles: Sequence[str]
) -> list[tuple[str, int] | PopMQError]:
    """Each handle's newest handle (BrokerAPI.follow_handles): a delivery's handles all
    come from the broker that issued it."""
    results: list[tuple[str, int] | PopMQError]
    results, by_broker = _by_issuer(group, handles)

    async def follow_on(broker: str, indexes: list[int]) -> None:
        try:
            answers = await pool.get(broker).follow_handles(group, [handles[i] for i in indexes])
        except PopMQError as error:
            answers = [error] * len(indexes)
        for index, answer in zip(indexes, answers, strict=True):
            results[index] = answer

    await asyncio.gather(*(follow_on(b, idx) for b, idx in by_broker.items()))
    return results
