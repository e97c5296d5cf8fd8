"""A lease page's messages from their brokers rather than from a proxy's memory: a replay
through a proxy that did not pop the page reads them back by handle, and a page another
proxy recorded first makes the messages this proxy popped for it redundant, which go back
(proxy/leases.py).

Everything runs on the proxy's event loop; each call is one broker round trip per handle
batch (BrokerAPI.get_deliveries, nack), plus at most one coordinator write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from functools import partial

from popmq.broker_core import BrokerAPI, FailedPreconditionError, PopMQError, PoppedMessage
from popmq.coordination.errors import ConflictError
from popmq.proxy.lease_pages import page_content
from popmq.proxy.lease_store import LeaseMeta, LeaseStore, PageRecord
from popmq.proxy.superseded_handles import deliveries, newest

__all__ = ["give_back", "read_back"]

log = logging.getLogger(__name__)


async def read_back(
    broker: BrokerAPI, store: LeaseStore, meta: LeaseMeta, record: PageRecord
) -> list[PoppedMessage]:
    """The messages of a page another proxy popped, from their brokers by handle."""
    for attempt in range(2):
        found = await newest(broker, meta.group, record.handles, partial(deliveries, broker))
        failed = [f for f in found if isinstance(f, PopMQError)]
        if not failed:
            messages = [f for f in found if isinstance(f, PoppedMessage)]
            if tuple(m.receipt_handle for m in messages) != record.handles:
                await _record_followed(store, meta, record, messages)
            return messages
        if attempt == 0:
            # A renewal elsewhere may have replaced the handles since the page was read.
            again = await store.page(meta, record.number)
            if again is not None and again.revision != record.revision:
                record = again
                continue
        break
    raise FailedPreconditionError(
        f"page {record.number} of lease {meta.token!r} cannot be replayed: {len(failed)} "
        f"of {len(record.handles)} messages are no longer in flight ({failed[0]})"
    )


async def _record_followed(
    store: LeaseStore, meta: LeaseMeta, record: PageRecord, messages: Sequence[PoppedMessage]
) -> None:
    """Write the handles a replay followed (a renewal that was never recorded moved them),
    so the next call need not follow them again."""
    handles, until = page_content(messages)
    # A conflict: a renewal wrote the page meanwhile, with handles as new as these.
    with contextlib.suppress(ConflictError):
        await store.update_page(meta, record, handles, until, min(until))


async def give_back(broker: BrokerAPI, group: str, messages: Sequence[PoppedMessage]) -> None:
    """Return messages another proxy's page made redundant: a nack without delay, as a
    PopStream gives back what it could not write (proxy/pop_stream.py)."""

    async def one(handle: str) -> None:
        try:
            await broker.nack(group, handle, delay_s=0)
        except PopMQError as exc:
            log.debug("giving back a message of group %s skipped: %s", group, exc)

    await asyncio.gather(*(one(m.receipt_handle) for m in messages))
