"""Acting on a lease's receipt handles when some were superseded without being recorded.

A proxy may die between a renewal's ChangeInvisibleTime on the broker (which answers new
receipt handles and refuses the old ones as superseded) and its write of the new handles to
the coordinator; a renewal from memory while etcd is down (lease_outage.py) writes none. The
lease then holds handles the broker refuses. So every proxy acting on a lease's handles
(renewing, acking, replaying) follows a handle the broker calls superseded to the newest
handle of the same delivery (BrokerAPI.follow_handles: only along ChangeInvisibleTime moves
of that delivery, never to one a Nack gave back or to a later delivery attempt) and acts on
that one. A client's own ChangeInvisibleTime or ack of an old handle is still refused.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from popmq.broker_core import (
    MAX_HANDLES,
    BrokerAPI,
    PopMQError,
    PoppedMessage,
    ReceiptHandleSupersededError,
)

__all__ = ["deliveries", "newest"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")


async def deliveries(
    broker: BrokerAPI, group: str, handles: Sequence[str]
) -> list[PoppedMessage | PopMQError]:
    """The deliveries `handles` name, read back from their brokers, in chunks."""
    found: list[PoppedMessage | PopMQError] = []
    for start in range(0, len(handles), MAX_HANDLES):
        found += await broker.get_deliveries(group, handles[start : start + MAX_HANDLES])
    return found


async def _follow(
    broker: BrokerAPI, group: str, handles: Sequence[str]
) -> list[tuple[str, int] | PopMQError]:
    followed: list[tuple[str, int] | PopMQError] = []
    for start in range(0, len(handles), MAX_HANDLES):
        followed += await broker.follow_handles(group, handles[start : start + MAX_HANDLES])
    return followed


async def newest(
    broker: BrokerAPI,
    group: str,
    handles: Sequence[str],
    act: Callable[[str, Sequence[str]], Awaitable[Sequence[_R]]],
) -> list[_R | PopMQError]:
    """`act(group, handles)`, one result per handle; a handle it finds superseded (a
    renewal whose new handles were never recorded: module docstring) is followed to the
    newest handle of its delivery, and acted on again with that one."""
    results: list[_R | PopMQError] = list(await act(group, handles))
    stale = [i for i, r in enumerate(results) if isinstance(r, ReceiptHandleSupersededError)]
    if not stale:
        return results
    log.info(
        "group %s: %d handles of a lease were superseded by a ChangeInvisibleTime the "
        "lease did not record (a proxy died mid-renewal, or renewals raced); following "
        "them to their newest handles",
        group,
        len(stale),
    )
    followed = await _follow(broker, group, [handles[i] for i in stale])
    live: list[tuple[int, str]] = []
    for index, found in zip(stale, followed, strict=True):
        if isinstance(found, PopMQError):
            results[index] = found  # why it cannot be followed says more than superseded
        else:
            live.append((index, found[0]))
    if live:
        again = await act(group, [handle for _, handle in live])
        for (index, _), result in zip(live, again, strict=True):
            results[index] = result
    return results
