"""RenewLease's broker and store steps (proxy/leases.py): moving a page's messages at the
broker, and writing the handles that gave back into its page entry, merged with another
proxy's renewal of the same page.

Everything runs on the proxy's event loop, under the lease table's per-lease lock.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from popmq.broker_core import BrokerAPI, FailedPreconditionError, PopMQError
from popmq.coordination.errors import ConflictError
from popmq.proxy.lease_store import LeaseMeta, LeaseStore, PageRecord

__all__ = ["change_all", "store_renewed"]

_MAX_RACES = 8
"""Compare-and-set conflicts one write retries before it gives up (as proxy/leases.py)."""


async def change_all(
    broker: BrokerAPI, group: str, handles: Sequence[str], invisible_s: float
) -> list[tuple[str, int] | PopMQError]:
    """ChangeInvisibleTime of each handle: its new (handle, until), or why not."""
    # A page's messages at once: a remote broker answers them in one round trip.
    return await asyncio.gather(*(_change(broker, group, h, invisible_s) for h in handles))


async def _change(
    broker: BrokerAPI, group: str, handle: str, invisible_s: float
) -> tuple[str, int] | PopMQError:
    try:
        return await broker.change_invisible_time(group, handle, invisible_s)
    except PopMQError as exc:
        return exc


async def store_renewed(
    store: LeaseStore,
    meta: LeaseMeta,
    record: PageRecord,
    moved: dict[int, tuple[str, int]],
    empty_deadline: int,
) -> PageRecord:
    """Write a page's renewed handles. If another proxy renewed it meanwhile, each
    message's live handle is the one whose ChangeInvisibleTime came last (the other's
    failed as superseded): take ours where ours worked, theirs elsewhere."""
    for _ in range(_MAX_RACES):
        handles = [moved[i][0] if i in moved else h for i, h in enumerate(record.handles)]
        until = [moved[i][1] if i in moved else u for i, u in enumerate(record.until_ms)]
        deadline = min(until, default=empty_deadline)
        try:
            return await store.update_page(meta, record, handles, until, deadline)
        except ConflictError:
            current = await store.page(meta, record.number)
            if current is None or len(current.handles) != len(record.handles):
                raise FailedPreconditionError(
                    f"page {record.number} of lease {meta.token!r} changed while it was "
                    "renewed by another proxy; renew the lease again"
                ) from None
            record = current
    raise FailedPreconditionError(
        f"lease {meta.token!r} kept changing under concurrent calls; renew it again"
    )
