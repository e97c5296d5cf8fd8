"""Deliveries by receipt handle: what a pop returned, looked up again without changing it.

A proxy that did not make a pop (a Spark lease replayed through another proxy after the
first one died, proxy/leases.py) asks the broker for the deliveries its handles name. Each
handle is resolved as an ack resolves it (Acks.resolve_handle: verified by the receipt
codec, then checked against the live checkpoint), so a forged, foreign, stale, superseded
or expired handle gets the error an ack of it would get, and an acknowledged one a
FailedPreconditionError. A live one gets the PoppedMessage its pop (or its last
ChangeInvisibleTime) returned: the user topic, queue id, offset, record (with the delivery
attempt the pop reported: a FIFO delivery's, not the stored first one), the same handle and
its deadline.

The same proxy may also ask for the newest handle of each delivery (`follow`): a lease's
handles that a ChangeInvisibleTime superseded without the lease recording the new ones (its
proxy died in between) lead to the handles that last ChangeInvisibleTime returned
(Acks.follow_handle). Ordinary clients never reach it: neither popmq.v1 nor
apache.rocketmq.v2 offers it, so their superseded handles stay refused.

Threading: on the event loop; one multi-get for the records (MAX_HANDLES bounds it).
"""

from __future__ import annotations

from collections.abc import Sequence

from popmq._gen.popmq.store.v1 import records_pb2
from popmq.broker_core import keys, validation
from popmq.broker_core.catalog import Catalog
from popmq.broker_core.clock import Clock
from popmq.broker_core.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PopMQError,
)
from popmq.broker_core.pop.ack import Acks
from popmq.broker_core.pop.checkpoint import Checkpoint
from popmq.broker_core.record import MessageRecord
from popmq.broker_core.store import Store
from popmq.broker_core.types import PoppedMessage


class Deliveries:
    """Looks in-flight deliveries up by receipt handle (read only)."""

    def __init__(self, *, store: Store, catalog: Catalog, acks: Acks, clock: Clock) -> None:
        self._store = store
        self._catalog = catalog
        self._acks = acks
        self._clock = clock

    async def get(self, group: str, handles: Sequence[str]) -> list[PoppedMessage | PopMQError]:
        """One result per handle, in order: the delivery, or why it is not in flight."""
        validation.check_name("group", group)
        if not handles:
            raise InvalidArgumentError("get_deliveries needs at least one receipt handle")
        validation.check_count("handles", len(handles), validation.MAX_HANDLES, "receipt handles")
        group_info = self._catalog.group(group)
        now = self._clock.now_ms()
        results: list[PoppedMessage | PopMQError | None] = []  # None: live, record not read yet
        live: list[tuple[int, Checkpoint, int]] = []  # (result index, checkpoint, its index)
        for text in handles:
            try:
                found = self._acks.resolve_handle(group_info, text, now)
            except PopMQError as exc:
                results.append(exc)
                continue
            if found is None:
                results.append(
                    FailedPreconditionError(
                        "the message was already acknowledged; it is no longer in flight"
                    )
                )
                continue
            live.append((len(results), *found))
            results.append(None)
        if not live:
            return [result for result in results if result is not None]
        values = self._store.multi_get(
            "messages",
            [
                keys.message_key(ck.queue.topic_id, ck.queue.queue_id, ck.offsets[index])
                for _, ck, index in live
            ],
        )
        for (at, ck, index), value in zip(live, values, strict=True):
            text = handles[at]
            if value is None:
                results[at] = NotFoundError(
                    "the message was deleted (retention or topic deletion); it is no longer "
                    "in flight"
                )
                continue
            record = records_pb2.StoredMessage.FromString(value)
            raw: bytes | None = value
            if ck.fifo_group and record.delivery_attempt != ck.attempt:
                record.delivery_attempt = ck.attempt  # as Fifo._delivery reported it
                raw = None
            cq = ck.queue
            results[at] = PoppedMessage(
                self._catalog.user_topic_name(cq.topic_id),
                cq.queue_id,
                ck.offsets[index],
                MessageRecord(record, raw),
                text,
                ck.deadline_ms,
            )
        done = [result for result in results if result is not None]
        assert len(done) == len(results)  # every live handle got its delivery or an error
        return done

    async def follow(
        self, group: str, handles: Sequence[str]
    ) -> list[tuple[str, int] | PopMQError]:
        """One result per handle, in order: (the newest handle of its delivery, that
        handle's deadline), or why it has none."""
        validation.check_name("group", group)
        if not handles:
            raise InvalidArgumentError("follow_handles needs at least one receipt handle")
        validation.check_count("handles", len(handles), validation.MAX_HANDLES, "receipt handles")
        group_info = self._catalog.group(group)
        now = self._clock.now_ms()
        results: list[tuple[str, int] | PopMQError] = []
        for text in handles:
            try:
                results.append(self._acks.follow_handle(group_info, text, now))
            except PopMQError as exc:
                results.append(exc)
        return results
