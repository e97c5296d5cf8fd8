"""Delivery history: the recent pops, nacks, invisible-time changes, retry copies and
dead-lettering of this broker, kept in memory, so an operator can ask what happened to one
message.

A bounded ring (HISTORY_EVENTS events, oldest dropped first), nothing written to the store:
it covers what this broker did since it started, as far back as the ring reaches. An event
names a place (topic id, queue id, offsets), not a message id, so a pop records one event
per checkpoint (one per queue a pop read, whatever the number of messages), its offsets as
a range when contiguous: the cost on the pop path is one tuple, one range and one deque
append per queue read (~0.3 µs on this machine), none per message; acks and sends record
nothing. A
FIFO delivery is its own checkpoint, so its event is per message, as its checkpoint is.

`find` follows one message from where it was stored: each retry (or dead-letter) copy event
says where the copy went, so the copy's later pops are found too. It walks a snapshot of the
ring in chunks of SCAN_CHUNK events, yielding to the loop between them: a lookup holds the
loop about a millisecond at a time, and a full ring whose every event is on the message's
queue (the worst case) takes ~20 ms in all on this machine; events of other queues cost a
dict lookup each (~3 ms for a full ring).

Each event carries the client of its checkpoint (the id the pop named, "" when it named
none): for a pop the client that popped, for a nack or invisible-time change the client
still holding the delivery, for a retry, dead-letter or FIFO redelivery the client whose
delivery expired. It is the checkpoint's own string, so the ring holds a reference, not a
copy.

Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence

from popmq.broker_core.pop.checkpoint import Checkpoint

HISTORY_EVENTS = 32_768
"""Events kept per broker (~200 bytes each: about 7 MB when full)."""
SCAN_CHUNK = 2048
"""Events a lookup looks at before it lets the loop run."""

POP = "pop"
NACK = "nack"
CHANGE_INVISIBLE_TIME = "change_invisible_time"
RETRY = "retry"
"""Its invisible time passed unacked: copied to the group's retry queue as the next attempt."""
DEAD_LETTER = "dead_letter"
REDELIVER = "redeliver"
"""A FIFO message's invisible time passed unacked: delivered again in place."""

# (time_ms, kind, group_id, topic_id, queue_id, offsets, attempt, until_ms, to_topic_id,
#  to_offset, client_id); attempt 0: the attempt of the place (1, or a retry copy's).
Event = tuple[int, str, int, int, int, Sequence[int], int, int, int, int, str]


class DeliveryHistory:
    """The ring of recent delivery events (module docstring)."""

    def __init__(self, capacity: int = HISTORY_EVENTS) -> None:
        # Oldest first; appended on the loop, snapshotted by `find`.
        self._events: deque[Event] = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self._events)

    def popped(self, ck: Checkpoint) -> None:
        """A pop delivered the checkpoint's messages (ascending offsets, at least one)."""
        cq = ck.queue
        offsets = ck.offsets
        # A contiguous run (the usual pop) is kept as a range: 48 bytes, not the list and
        # its ints; otherwise the list itself (a checkpoint's offsets never change).
        places: Sequence[int] = offsets
        if offsets[-1] - offsets[0] + 1 == len(offsets):
            places = range(offsets[0], offsets[-1] + 1)
        self._events.append(
            (ck.pop_time_ms, POP, cq.group_id, cq.topic_id, cq.queue_id, places,
             ck.attempt, ck.deadline_ms, 0, 0, ck.client_id)
        )  # fmt: skip

    def moved(self, kind: str, ck: Checkpoint) -> None:
        """A nack or ChangeInvisibleTime gave a delivery the new checkpoint `ck`."""
        cq = ck.queue
        self._events.append(
            (ck.pop_time_ms, kind, cq.group_id, cq.topic_id, cq.queue_id, ck.offsets,
             ck.attempt, ck.deadline_ms, 0, 0, ck.client_id)
        )  # fmt: skip

    def copied(
        self,
        time_ms: int,
        kind: str,
        ck: Checkpoint,
        offset: int,
        attempt: int,
        to: tuple[int, int],
    ) -> None:
        """The delivery of `offset` (attempt `attempt`) expired: copied to (topic id, offset)
        of a retry or dead-letter topic, or (REDELIVER) delivered again in place."""
        cq = ck.queue
        self._events.append(
            (time_ms, kind, cq.group_id, cq.topic_id, cq.queue_id, (offset,), attempt, 0,
             to[0], to[1], ck.client_id)
        )  # fmt: skip

    async def find(
        self, topic_id: int, queue_id: int, offset: int, group_id: int | None = None
    ) -> list[tuple[Event, int, int]]:
        """The events of the message stored at (topic_id, queue_id, offset) and of its
        retry copies, oldest first, each with the offset it concerns and the attempt it
        is of; only `group_id`'s when given."""
        events = list(self._events)  # a C-speed copy: the ring may change while we yield
        # (topic id, queue id) -> offset -> the attempt a pop there delivers
        places: dict[tuple[int, int], dict[int, int]] = {(topic_id, queue_id): {offset: 1}}
        found: list[tuple[Event, int, int]] = []
        for start in range(0, len(events), SCAN_CHUNK):
            if start:
                await asyncio.sleep(0)
            for event in events[start : start + SCAN_CHUNK]:
                at = places.get((event[3], event[4]))
                if at is None or (group_id is not None and event[2] != group_id):
                    continue
                where = event[5]
                # Mostly one offset per place (a retry queue may get more). `places` changes
                # only right before the break, so iterating its keys stays valid.
                for off in at:
                    if off not in where:
                        continue
                    attempt = event[6] or at[off]
                    found.append((event, off, attempt))
                    if event[1] in (RETRY, DEAD_LETTER):
                        to = places.setdefault((event[8], 0), {})
                        to[event[9]] = attempt + 1 if event[1] == RETRY else 1
                    break
        return found
