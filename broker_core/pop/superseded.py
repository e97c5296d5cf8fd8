"""Receipt handles replaced by ChangeInvisibleTime or Nack (or dropped by a forced offset
reset), refused until their old deadline, across restarts.

One object owns them: the record written in the batch that replaces a handle, the memory
set after that batch committed, the check an ack makes, recovery at start and the expiry
the revive loop runs.

A handle ChangeInvisibleTime replaced also names its successor: the checkpoint (and its
deadline) the delivery moved to. Following those links from an old handle reaches the
newest handle of the same delivery (Acks.follow_handle): a proxy renewing a lease that died
between the broker's answer and its own record of the new handles leaves the old ones
behind, and the next proxy follows them. A Nack or a forced offset reset leaves no link:
the delivery was given back, so there is no newer handle of it to follow.

The record is the old deadline (8 bytes, big-endian), followed for a ChangeInvisibleTime by
the successor's checkpoint id and deadline (8 bytes each); records written before the links
existed are the deadline alone, and read as handles without a successor.
"""

from __future__ import annotations

import heapq

from popmq.broker_core import keys
from popmq.broker_core.store import Batch, Store


class SupersededHandles:
    """(checkpoint id, index) of refused handles -> the deadline they are refused until,
    and the successor of those ChangeInvisibleTime replaced."""

    def __init__(self) -> None:
        # (ck_id, index) -> old deadline; (ck_id, index) -> (successor ck_id, its deadline)
        # for the handles ChangeInvisibleTime replaced; and the expiry heap (deadline, ck_id,
        # index). Guarded by running on the loop thread only.
        self._until: dict[tuple[int, int], int] = {}
        self._next: dict[tuple[int, int], tuple[int, int]] = {}
        self._expiry: list[tuple[int, int, int]] = []

    def __contains__(self, entry: tuple[int, int]) -> bool:
        return entry in self._until

    def successor(self, entry: tuple[int, int]) -> tuple[int, int] | None:
        """(checkpoint id, deadline) the delivery moved to when ChangeInvisibleTime replaced
        the handle `entry`; None when it is not refused, or was refused for another reason."""
        return self._next.get(entry)

    @staticmethod
    def write(
        batch: Batch,
        ck_id: int,
        index: int,
        deadline_ms: int,
        successor: tuple[int, int] | None = None,
    ) -> None:
        """Put the record that keeps the handle refused across a restart (in the batch that
        replaces or drops the delivery); `successor` as in `remember`."""
        value = keys.encode_u64(deadline_ms)
        if successor is not None:
            value += keys.encode_u64(successor[0]) + keys.encode_u64(successor[1])
        batch.put("meta", keys.superseded_key(ck_id, index), value)

    def remember(
        self, ck_id: int, index: int, deadline_ms: int, successor: tuple[int, int] | None = None
    ) -> None:
        """Refuse the handle from now on (after the batch holding its record committed).

        `successor`: (checkpoint id, deadline) of the single-message checkpoint a
        ChangeInvisibleTime moved the delivery to; None for a Nack or a dropped delivery.
        """
        self._until[(ck_id, index)] = deadline_ms
        if successor is not None:
            self._next[(ck_id, index)] = successor
        heapq.heappush(self._expiry, (deadline_ms, ck_id, index))

    def recover(self, store: Store, now: int, stale: Batch) -> None:
        """Load the records still in force; delete the expired ones in `stale`."""
        prefix = keys.SUPERSEDED_PREFIX
        for key, value in store.scan("meta", prefix, prefix[:-1] + b";"):
            deadline = keys.decode_u64(value[:8])
            if deadline <= now:
                stale.delete("meta", key)
                continue
            ck_id, index = keys.parse_superseded_key(key)
            successor = None
            if len(value) == 24:
                successor = (keys.decode_u64(value[8:16]), keys.decode_u64(value[16:]))
            self.remember(ck_id, index, deadline, successor)

    def expire(self, now: int) -> list[bytes]:
        """Forget handles whose deadline passed; returns the meta keys of their records."""
        expired: list[bytes] = []
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, ck_id, index = heapq.heappop(expiry)
            self._until.pop((ck_id, index), None)
            self._next.pop((ck_id, index), None)
            expired.append(keys.superseded_key(ck_id, index))
        return expired
